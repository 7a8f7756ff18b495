"""What an IPv4 scan will do, before it does it: ranges, blocklist, size, time.

Pure apart from reading the blocklist/allowlist files. The plan is printed
before every scan; a scan of the whole IPv4 space (no range given) sends to
the Internet, so it additionally needs an interactive yes or ``--yes``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tparams.errors import ToolError

DEFAULT_BLOCKLIST = Path(__file__).resolve().parents[2] / "datasets" / "blocklist" / "default.conf"
# RFC 2544's benchmarking range: the only range this project's lab uses.
LAB_RANGE = ipaddress.ip_network("198.18.0.0/15")
WHOLE_SPACE = ipaddress.ip_network("0.0.0.0/0")

Network = ipaddress.IPv4Network


def parse_cidr(text: str) -> Network:
    """An IPv4 CIDR or single address; a one-line ToolError otherwise."""
    try:
        return ipaddress.IPv4Network(text.strip(), strict=True)
    except ipaddress.NetmaskValueError:
        raise ToolError(f"bad CIDR {text!r}: not a valid IPv4 prefix length") from None
    except ValueError as exc:
        raise ToolError(f"bad CIDR {text!r}: {exc}") from None


def read_cidr_file(path: Path) -> list[Network]:
    """ZMap's list format: one CIDR a line, ``#`` comments, blank lines."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None
    networks = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if text:
            try:
                networks.append(parse_cidr(text))
            except ToolError as exc:
                raise ToolError(f"{path}:{number}: {exc}") from None
    return networks


def address_count(networks: Iterable[Network]) -> int:
    return sum(n.num_addresses for n in ipaddress.collapse_addresses(networks))


def subtract(networks: Iterable[Network], removed: Iterable[Network]) -> list[Network]:
    """``networks`` minus ``removed``, collapsed."""
    remaining = list(ipaddress.collapse_addresses(networks))
    for cut in ipaddress.collapse_addresses(removed):
        next_remaining = []
        for net in remaining:
            if net.subnet_of(cut):
                continue
            if cut.subnet_of(net):
                next_remaining.extend(net.address_exclude(cut))
            else:
                next_remaining.append(net)
        remaining = next_remaining
    return list(ipaddress.collapse_addresses(remaining))


@dataclass(frozen=True, kw_only=True)
class Pacing:
    """How a plan of either family (IPv4 ranges, IPv6 hitlist) probes: the blocklist it applies, its
    port, pace and this host's shard, over ``addresses`` probed by all shards together."""

    blocklist: tuple[Network, ...] | tuple[ipaddress.IPv6Network, ...]  # as applied (after the lab exemption)
    blocklist_source: str
    lifted: tuple[Network, ...] | tuple[ipaddress.IPv6Network, ...]  # blocklist entries lifted for a lab scan
    port: int
    rate: int
    cooldown: int
    shard: int = 0
    shards: int = 1

    @property
    def addresses(self) -> int:
        """Addresses probed by all shards together, as each family counts them."""
        raise NotImplementedError

    @property
    def lifted_note(self) -> str:
        return f" (lifted for this lab scan: {', '.join(map(str, self.lifted))})" if self.lifted else ""

    @property
    def shard_addresses(self) -> int:
        # ZMap deals the permutation out round-robin, so shards differ by at most one.
        return -(-self.addresses // self.shards)

    @property
    def estimated_seconds(self) -> float:
        return self.shard_addresses / self.rate + self.cooldown

    def pacing_lines(self, addresses: str) -> list[str]:
        """The plan's last lines: ``addresses`` (how many, as the plan counts them), port, shard, rate, duration."""
        return [
            f"addresses:  {addresses} on UDP port {self.port}"
            + (f"; shard {self.shard}/{self.shards} probes about {self.shard_addresses:,}" if self.shards > 1 else ""),
            f"rate:       {self.rate:,} probes/s, cooldown {self.cooldown} s",
            f"duration:   about {duration(self.estimated_seconds)}",
        ]


def check_pacing(port: int, rate: int, shard: int, shards: int) -> None:
    """A one-line ToolError for a port, rate or shard no plan can probe with."""
    if not 0 < port < 65536:
        raise ToolError(f"port must be 1-65535, not {port}")
    if rate <= 0:
        raise ToolError(f"rate must be a positive number of probes per second, not {rate}")
    if not 0 <= shard < shards:
        raise ToolError(f"shard must be I/N with 0 <= I < N, not {shard}/{shards}")


@dataclass(frozen=True)
class Plan(Pacing):
    targets: tuple[Network, ...]  # empty = the whole IPv4 space

    @property
    def whole_space(self) -> bool:
        return not self.targets

    @property
    def addresses(self) -> int:
        """Addresses probed by all shards together."""
        return address_count(subtract(self.targets or [WHOLE_SPACE], self.blocklist))

    def lines(self) -> list[str]:
        ranges = "the whole IPv4 space (0.0.0.0/0)" if self.whole_space else ", ".join(map(str, self.targets))
        return [
            f"ranges:     {ranges}",
            f"blocklist:  {self.blocklist_source}, {len(self.blocklist)} ranges, "
            f"{address_count(self.blocklist):,} addresses{self.lifted_note}",
            *self.pacing_lines(f"{self.addresses:,} to probe"),
        ]


def make_plan(
    cidrs: Sequence[str],
    port: int,
    rate: int,
    cooldown: int,
    blocklist: Path | None = None,
    allowlist: Path | None = None,
    shard: int = 0,
    shards: int = 1,
) -> Plan:
    """Validate every input (one-line ToolError on the first bad one) and
    work out what will be probed."""
    check_pacing(port, rate, shard, shards)
    targets = [parse_cidr(c) for c in cidrs]
    if allowlist is not None:
        targets += read_cidr_file(allowlist)
        if not targets:
            raise ToolError(f"allowlist {allowlist} lists no range")
    source = blocklist or DEFAULT_BLOCKLIST
    entries = read_cidr_file(source)
    lifted: list[Network] = []
    if targets and all(t.subnet_of(LAB_RANGE) for t in targets):
        lifted = [e for e in entries if e == LAB_RANGE]
        entries = [e for e in entries if e != LAB_RANGE]
    plan = Plan(tuple(ipaddress.collapse_addresses(targets)), blocklist=tuple(entries), blocklist_source=str(source),
                lifted=tuple(lifted), port=port, rate=rate, cooldown=cooldown, shard=shard, shards=shards)
    if targets and plan.addresses == 0:
        raise ToolError(f"every target range lies inside the blocklist {source}; "
                        "nothing to probe (use --blocklist FILE)")
    return plan


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` (0-based I, as ZMap numbers shards)."""
    try:
        index, total = (int(part) for part in text.split("/"))
    except ValueError:
        raise ToolError(f"--shard must look like I/N (e.g. 0/2), not {text!r}") from None
    if not 0 <= index < total:
        raise ToolError(f"--shard I/N needs 0 <= I < N, not {text!r}")
    return index, total


def duration(seconds: float) -> str:
    """A span as people read it: ``2 h 7 min 46 s``."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
    return " ".join(f"{value} {unit}" for value, unit in parts if value) or "0 s"
