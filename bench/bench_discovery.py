"""Discovery benchmark in the lab: ZMap probe throughput, and discovery -> stored handshake for 1,024 targets.

One range server (ngtcp2 on 0.0.0.0) answers on 198.18.4.0/22, so 1,024
addresses are QUIC servers. Figures, each against a baseline measured in the
same run:

- ZMap throughput (probes/s) with the 1,200-byte VN probe, against the same
  ZMap run with an 8-byte UDP payload (what the probe's size costs);
- `qscan ipv4` on the range (ZMap discovery + handshakes stored in DuckDB),
  against `qscan targets` on the same 1,024 addresses (handshakes alone).

    .venv/bin/python bench/bench_discovery.py [--probes 65536] [--rate 200000]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import tempfile
import time
from pathlib import Path

from scanner.discovery.netinfo import detect_route
from lab import default_topology, up
from lab.discovery_lab import RANGE_SERVER_RANGE, range_server, route_range

QSCAN = str(Path(sys.executable).parent / "qscan")
INSTANCE = "qdbench"  # not "qlab*": a concurrent test session's leak sweep must not take it


def zmap_rate(lab, workdir: Path, payload: bytes, cidr: str, rate: int) -> tuple[int, float]:
    """Probes sent and probes/s of one ZMap run (send phase only)."""
    probe = workdir / f"payload{len(payload)}.bin"
    probe.write_bytes(payload)
    blocklist = workdir / "empty.conf"
    blocklist.write_text("# nothing\n")
    route = detect_route(cidr.split("/")[0], lab.client_ns)
    metadata = workdir / f"meta{len(payload)}.json"
    argv = ["zmap", "--probe-module=udp", f"--probe-args=file:{probe}", "--target-port=443",
            f"--interface={route.interface}", f"--source-ip={route.source_ip}", f"--gateway-mac={route.gateway_mac}",
            f"--blacklist-file={blocklist}", f"--rate={rate}", "--cooldown-time=1", "--output-module=csv",
            "--output-fields=saddr", f"--output-file={workdir / 'out.csv'}", f"--metadata-file={metadata}",
            "--disable-syslog", "--quiet", cidr]
    started = time.monotonic()
    lab.run_in_client(argv, timeout=600, check=True)
    seconds = time.monotonic() - started - 1.0  # minus the cooldown
    sent = json.loads(metadata.read_text())["total_sent"]
    return sent, sent / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=65536, help="addresses in the throughput run (a power of 2)")
    parser.add_argument("--rate", type=int, default=200000, help="ZMap rate asked for (probes/s)")
    parser.add_argument("--discovery-rate", type=int, default=2000,
                        help="ZMap rate of the 1,024-target run; one gtlsserver drops VN answers well below 10,000/s")
    args = parser.parse_args()
    prefix = 32 - (args.probes.bit_length() - 1)
    # Addresses the core has no route for: each probe costs the core one ICMP error, as on the Internet.
    throughput_range = str(ipaddress.ip_network(f"198.19.0.0/{prefix}"))
    spec = range_server()
    lab = up(default_topology().with_servers(spec), instance=INSTANCE)
    try:
        route_range(lab, spec)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            from tparams.probe import make_probe

            sent, vn_rate = zmap_rate(lab, work, make_probe().payload, throughput_range, args.rate)
            _, small_rate = zmap_rate(lab, work, b"\x00" * 8, throughput_range, args.rate)
            print(f"ZMap throughput, {sent} probes asked at {args.rate}/s: VN probe (1200 B) {vn_rate:,.0f} probes/s; "
                  f"baseline 8-byte UDP payload {small_rate:,.0f} probes/s; ratio {vn_rate / small_rate:.2f}")

            out = work / "ipv4.duckdb"
            started = time.monotonic()
            done = lab.run_in_client([QSCAN, "ipv4", RANGE_SERVER_RANGE, "--out", str(out), "--rate", str(args.discovery_rate),
                                      "--cooldown", "1", "--handshake-rate", "0", "--timeout", "5", "--quiet",
                                      "--json"], timeout=900, check=True)
            total = time.monotonic() - started
            summary = json.loads(done.stdout)
            targets = work / "targets.txt"
            targets.write_text("".join(f"{ip}\n" for ip in ipaddress.ip_network(RANGE_SERVER_RANGE)))
            started = time.monotonic()
            done = lab.run_in_client([QSCAN, "targets", str(targets), "--out", str(work / "targets.duckdb"),
                                      "--rate", "0", "--timeout", "5", "--quiet", "--json"], timeout=900, check=True)
            baseline = time.monotonic() - started
            print(f"qscan ipv4 {RANGE_SERVER_RANGE} at {args.discovery_rate}/s: {summary['quic_servers']}/1024 found, "
                  f"{summary['handshakes_ok']}/{summary['handshakes']} handshakes stored ok; "
                  f"discovery {summary['seconds_discovery']:.2f} s (incl. 1 s cooldown), "
                  f"handshakes {summary['seconds_handshakes']:.2f} s, discovery->stored handshakes "
                  f"{total:.2f} s wall; baseline qscan targets on the same 1,024 addresses {baseline:.2f} s; "
                  f"ratio {total / baseline:.2f}")
    finally:
        lab.down()


if __name__ == "__main__":
    main()
