"""IPv6 against IPv4 in the dual-stack lab, in the same run: discovery probes/s and handshakes/s.

- Probes/s: what each family's discovery sends with the 1,200-byte VN probe to addresses
  no server holds (each probe costs the core one ICMP error, as on the Internet): `qscan
  ipv6`'s prober (scanner/discovery/prober6.py, ours: ZMap 2.1.1 has no IPv6) against
  2001:2:0:9::/112, against `qscan ipv4`'s ZMap on 198.19.0.0/16, both asked for --rate.
- Handshakes/s: the engine (one process, rate unlimited) with the same lab servers over
  IPv6 and over IPv4, each server named by several SNIs so that the targets are distinct.

    .venv/bin/python bench/bench_ipv6.py [--probes 65536] [--rate 200000] [--handshakes 1200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import ipaddress
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_discovery import zmap_rate  # noqa: E402

from lab import Lab, Topology, default_topology  # noqa: E402
from scanner.discovery import prober6  # noqa: E402
from scanner.discovery.zmap import ZMapFiles  # noqa: E402
from scanner.engine import ScanSettings, scan_targets  # noqa: E402
from scanner.targets import Target  # noqa: E402
from tparams.probe import make_probe  # noqa: E402

INSTANCE = "qv6bench"  # not "qlab*": a concurrent test session's leak sweep must not take it
SERVERS = ("ngtcp2-alpha", "quinn", "quiche", "s2n-quic")
COOLDOWN = 1.0


def prober_rate(lab: Lab, work: Path, probes: int, rate: int) -> tuple[int, float]:
    """Probes sent and probes/s of one run of our IPv6 prober (send phase only)."""
    network = ipaddress.IPv6Network(f"2001:2:0:9::/{128 - (probes.bit_length() - 1)}")
    addresses = [str(network.network_address + i) for i in range(probes)]
    started = time.monotonic()
    with lab.in_client():
        metadata = prober6.probe(addresses, make_probe().payload, 443, rate, COOLDOWN, ZMapFiles(work / "prober6"))
    return metadata["total_sent"], metadata["total_sent"] / (time.monotonic() - started - COOLDOWN)


def handshake_rate(lab: Lab, family: int, count: int) -> tuple[int, float]:
    """Handshakes completed and handshakes/s over one family."""
    servers = [lab.server(name) for name in SERVERS]
    targets = [Target(server.ip6 if family == 6 else server.ip, server.port, f"h{i}.{server.sni}")
               for i in range(count // len(servers)) for server in servers]
    records: list = []
    started = time.monotonic()
    with lab.in_client():
        scan_targets(targets, ScanSettings(timeout=5, rate=0, concurrency=200, workers=1), records.extend)
    seconds = time.monotonic() - started
    ok = sum(record.status == "ok" for record in records)
    return ok, ok / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=65536, help="addresses probed a family (a power of 2)")
    parser.add_argument("--rate", type=int, default=200000, help="probe rate asked for (probes/s)")
    parser.add_argument("--handshakes", type=int, default=1200, help="handshakes a family and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of handshakes, each family once a round")
    args = parser.parse_args()
    topology = Topology(servers=tuple(s for s in default_topology().servers if s.name in SERVERS))
    with Lab.up(topology, instance=INSTANCE) as lab, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prefix = 32 - (args.probes.bit_length() - 1)
        sent4, rate4 = zmap_rate(lab, work, make_probe().payload, f"198.19.0.0/{prefix}", args.rate)
        sent6, rate6 = prober_rate(lab, work, args.probes, args.rate)
        print(f"probes/s at --rate {args.rate}: IPv6 (our prober) {rate6:,.0f} ({sent6} sent); "
              f"IPv4 (ZMap) {rate4:,.0f} ({sent4} sent); ratio {rate6 / rate4:.2f}")
        # Rounds in alternating order, so drift of a shared machine's load favours neither family.
        ratios = []
        for round_ in range(args.rounds):
            rates = {}
            for family in ((4, 6) if round_ % 2 == 0 else (6, 4)):
                rates[family] = handshake_rate(lab, family, args.handshakes)
            (ok4, hs4), (ok6, hs6) = rates[4], rates[6]
            ratios.append(hs6 / hs4)
            print(f"handshakes/s, {len(SERVERS)} lab servers, one process, round {round_ + 1}: IPv6 {hs6:,.0f} "
                  f"({ok6} ok); IPv4 {hs4:,.0f} ({ok4} ok); ratio {hs6 / hs4:.2f}")
        print(f"handshakes/s ratio IPv6/IPv4, median of {args.rounds} rounds: {statistics.median(ratios):.2f}")

if __name__ == "__main__":
    main()
