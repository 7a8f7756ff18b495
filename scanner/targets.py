"""Target lists: one ``ip[,port[,sni]]`` a line, as `qscan targets` reads them.

A malformed line is a measurement-input problem, not a reason to lose the
rest of a million-line hitlist: it is reported with its line number and
skipped, unless the caller asks for strictness.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Hashable, TypeVar

from tparams.errors import ToolError

DEFAULT_PORT = 443
Item = TypeVar("Item", bound=Hashable)


@dataclass(frozen=True, order=True)
class Target:
    ip: str  # canonical text form (ipaddress), so that lookups by address match
    port: int = DEFAULT_PORT
    sni: str | None = None

    @property
    def family(self) -> int:
        return 6 if ":" in self.ip else 4


@dataclass(frozen=True)
class BadLine:
    line_number: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line_number}: {self.reason}: {self.text!r}"


def parse_target(text: str) -> Target:
    """One line without comment; raises ValueError with the reason."""
    fields = [field.strip() for field in text.split(",")]
    if len(fields) > 3:
        raise ValueError("more than three fields (ip,port,sni)")
    try:
        ip = str(ipaddress.ip_address(fields[0].strip("[]")))
    except ValueError:
        raise ValueError(f"not an IPv4 or IPv6 address: {fields[0]!r}") from None
    port = DEFAULT_PORT
    if len(fields) > 1 and fields[1]:
        if not fields[1].isdigit() or not 0 < int(fields[1]) < 65536:
            raise ValueError(f"port must be 1-65535, not {fields[1]!r}")
        port = int(fields[1])
    sni = fields[2] if len(fields) > 2 and fields[2] else None
    if sni is not None and (any(c.isspace() for c in sni) or len(sni) > 253):
        raise ValueError(f"not a server name: {sni!r}")
    return Target(ip, port, sni)


def parse_lines(lines: Iterable[str], parse: Callable[[str], Item]) -> tuple[list[Item], list[BadLine]]:
    """Items in file order (duplicates dropped: one attempt each) and the bad lines; ``parse`` takes a
    line without its ``#`` comment and raises ValueError with the reason."""
    items: dict[Item, None] = {}
    bad: list[BadLine] = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            items.setdefault(parse(text))
        except ValueError as exc:
            bad.append(BadLine(number, text, str(exc)))
    return list(items), bad


def read_lines(source: str, parse: Callable[[str], Item], what: str,
               strict: bool = False) -> tuple[list[Item], list[BadLine]]:
    """Read FILE (or ``-`` for stdin) with ``parse_lines``. With ``strict`` any bad line rejects the file.

    A last line without its newline is left out as a bad line: a file cut short (a copy or a download
    stopped) ends so, and a cut address or name may still parse, as another one (2001:db8::1234 cut to
    2001:db8::12); a file written whole ends its last line."""
    ending = _Ending()
    if source == "-":
        items, bad = parse_lines(ending.lines(sys.stdin), parse)
    else:
        try:
            with Path(source).open(encoding="utf-8", errors="replace") as handle:
                items, bad = parse_lines(ending.lines(handle), parse)
        except OSError as exc:
            raise ToolError(f"cannot read {what} {source}: {exc.strerror or exc}") from None
    if ending.unfinished:
        bad.append(BadLine(ending.number, ending.unfinished, "the file ends inside this line (no newline after it: "
                                                             "cut short?), left out"))
    if strict and bad:
        raise ToolError(f"{source}: {len(bad)} malformed line(s), first {bad[0]} (--strict)")
    return items, bad


class _Ending:
    """Passes a file's lines on but holds back a last one that has no newline (``unfinished``, its
    text without comment, and ``number``)."""

    def __init__(self) -> None:
        self.unfinished = ""
        self.number = 0

    def lines(self, stream: Iterable[str]) -> Iterator[str]:
        for self.number, line in enumerate(stream, start=1):
            if line.endswith("\n"):
                yield line
            else:
                self.unfinished = line.split("#", 1)[0].strip()
                yield ""  # the line's number still counts


def parse_targets(lines: Iterable[str]) -> tuple[list[Target], list[BadLine]]:
    return parse_lines(lines, parse_target)


def read_targets(source: str, strict: bool = False) -> tuple[list[Target], list[BadLine]]:
    return read_lines(source, parse_target, "targets file", strict)
