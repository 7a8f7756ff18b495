"""What an IPv6 hitlist scan will probe: the IPv6 Hitlist service's files, its aliased
prefixes and the IPv6 blocklist, before anything is sent.

Pure apart from reading the files. The service publishes responsive addresses one a
line (compressed or full form) and a list of aliased prefixes (a prefix where every
address answers, one host behind it): an aliased prefix is probed once, through the
first hitlist address inside it, and that target is recorded with its prefix; the
other addresses inside it are folded into it and counted. A line that is not an IPv6
address (an IPv4 one included: one family a scan) is a bad line: one warning each,
counted, never silently dropped.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tparams.errors import ToolError

from scanner.discovery.plan import Pacing, check_pacing, subtract
from scanner.targets import BadLine, read_lines

DEFAULT_BLOCKLIST6 = Path(__file__).resolve().parents[2] / "datasets" / "blocklist" / "ipv6-default.conf"
# RFC 5180's benchmarking range: the only IPv6 range this project's lab uses.
LAB_RANGE6 = ipaddress.IPv6Network("2001:2::/48")


def parse_ipv6(text: str) -> str:
    """One hitlist line as the canonical (compressed) address; ValueError with the reason."""
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        pass
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        raise ValueError("not an IPv6 address") from None
    raise ValueError("an IPv4 address in an IPv6 hitlist (one family a scan: `qscan ipv4` or `qscan targets`)")


def parse_prefix6(text: str) -> ipaddress.IPv6Network:
    try:
        return ipaddress.IPv6Network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"not an IPv6 prefix ({exc})") from None


@dataclass(frozen=True)
class HitlistTarget:
    ip: str
    aliased_prefix: str | None = None  # the aliased prefix this address stands for, if any


@dataclass(frozen=True)
class HitlistPlan(Pacing):
    hitlist: str
    targets: tuple[HitlistTarget, ...]  # what is probed (all shards), in file order
    bad_lines: tuple[BadLine, ...]
    aliased: tuple[ipaddress.IPv6Network, ...]
    folded: int  # hitlist addresses an earlier address of their aliased prefix stands for
    blocked: int  # hitlist addresses inside the blocklist

    @property
    def outside_lab(self) -> list[str]:
        return [t.ip for t in self.targets if ipaddress.IPv6Address(t.ip) not in LAB_RANGE6]

    @property
    def addresses(self) -> int:
        return len(self.targets)

    def lines(self) -> list[str]:
        aliased = sum(t.aliased_prefix is not None for t in self.targets)
        return [
            f"hitlist:    {self.hitlist}: {len(self.targets):,} addresses to probe, {len(self.bad_lines)} bad lines, "
            f"{self.blocked:,} blocklisted, {aliased:,} aliased prefixes probed once ({self.folded:,} addresses folded)",
            f"blocklist:  {self.blocklist_source}, {len(self.blocklist)} ranges{self.lifted_note}",
            *self.pacing_lines(f"{len(self.targets):,}"),
        ]


def _longest_aliased(address: ipaddress.IPv6Address, by_length: Sequence[tuple[int, set[int]]]) -> tuple[int, int] | None:
    value = int(address)
    for length, prefixes in by_length:  # longest first
        network = value >> (128 - length) << (128 - length)
        if network in prefixes:
            return network, length
    return None


def make_hitlist_plan(
    hitlist: str,
    port: int,
    rate: int,
    cooldown: int,
    aliased: Path | None = None,
    blocklist: Path | None = None,
    shard: int = 0,
    shards: int = 1,
    strict: bool = False,
) -> HitlistPlan:
    """Read and validate every input (one-line ToolError on a bad option or file) and work out what
    will be probed."""
    check_pacing(port, rate, shard, shards)
    addresses, bad = read_lines(hitlist, parse_ipv6, "hitlist", strict)
    prefixes = read_lines(str(aliased), parse_prefix6, "aliased-prefix list", strict=True)[0] if aliased else []
    source = blocklist or DEFAULT_BLOCKLIST6
    entries = read_lines(str(source), parse_prefix6, "blocklist", strict=True)[0]
    lifted: tuple[ipaddress.IPv6Network, ...] = ()
    if addresses and all(ipaddress.IPv6Address(a) in LAB_RANGE6 for a in addresses):
        kept = subtract(entries, [LAB_RANGE6])
        if kept != list(ipaddress.collapse_addresses(entries)):
            lifted, entries = (LAB_RANGE6,), kept
    by_length = sorted(((length, {int(p.network_address) for p in prefixes if p.prefixlen == length})
                        for length in {p.prefixlen for p in prefixes}), reverse=True)
    targets: list[HitlistTarget] = []
    seen_prefixes: set[tuple[int, int]] = set()
    folded = blocked = 0
    for text in addresses:
        address = ipaddress.IPv6Address(text)
        if any(address in network for network in entries):
            blocked += 1
            continue
        prefix = _longest_aliased(address, by_length)
        if prefix is None:
            targets.append(HitlistTarget(text))
        elif prefix in seen_prefixes:
            folded += 1
        else:
            seen_prefixes.add(prefix)
            network = ipaddress.IPv6Network((prefix[0], prefix[1]))
            targets.append(HitlistTarget(text, str(network)))
    if not targets:
        raise ToolError(f"{hitlist}: nothing to probe ({len(addresses)} addresses, {blocked} blocklisted, "
                        f"{len(bad)} bad lines)")
    return HitlistPlan(hitlist, tuple(targets), tuple(bad), tuple(prefixes), folded, blocked,
                       blocklist=tuple(entries), blocklist_source=str(source), lifted=lifted, port=port, rate=rate,
                       cooldown=cooldown, shard=shard, shards=shards)
