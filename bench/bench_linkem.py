"""linkem speed: packets per second relayed with 30 ms delay and the error of
that delay, and bulk throughput with 0 ms through linkem versus the same two
namespaces joined by a plain veth pair (the baseline, measured in this run).

Goals (issue 6): p99 delay error < 0.2 ms at 100,000 packets/s; 0 ms
throughput >= 80% of the veth baseline.

    .venv/bin/python bench/bench_linkem.py [--pps 100000] [--seconds 4]
"""

from __future__ import annotations

import argparse
import json

from replay.link import LinkConfig
from replay.testbed import IPERF_PORT, Testbed, _wait_udp_or_tcp_listening

SMALL_PAYLOAD = 64


def udp_download(tb: Testbed, payload: int, bps: int, seconds: float) -> dict:
    """iperf3 UDP server->client; client-side interface counters around it."""
    server = tb.start_server(["iperf3", "-s", "-1", "-B", tb.server_ip, "-p", str(IPERF_PORT)], "iperf3.log")
    _wait_udp_or_tcp_listening(tb, IPERF_PORT)
    before = tb.interface_counters()
    done = tb.run_client(["iperf3", "-c", tb.server_ip, "-p", str(IPERF_PORT), "-u", "-R", "-J", "-l",
                          str(payload), "-b", str(bps), "-t", str(seconds)], timeout=seconds + 30)
    after = tb.interface_counters()
    tb._stop(server)
    intervals = json.loads(done.stdout)["intervals"][1:]
    return {
        "sent": after["server"]["tx"]["packets"] - before["server"]["tx"]["packets"],
        "received": after["client"]["rx"]["packets"] - before["client"]["rx"]["packets"],
        "received_pps": sum(i["sum"]["packets"] for i in intervals) / sum(i["sum"]["seconds"] for i in intervals),
        "goodput_bps": sum(i["sum"]["bits_per_second"] for i in intervals) / len(intervals),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pps", type=int, default=100_000, help="offered packets per second (30 ms part)")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each transfer")
    args = parser.parse_args()

    with Testbed(link=LinkConfig(delay_down_ms=30), backend="relay") as tb:
        small = udp_download(tb, SMALL_PAYLOAD, args.pps * SMALL_PAYLOAD * 8, args.seconds)
        down = tb.link_counters()["down"]
    print(f"30 ms delay, {SMALL_PAYLOAD} B datagrams offered at {args.pps:,} packets/s:")
    print(f"  relayed {small['received_pps']:,.0f} packets/s = {small['received_pps'] / args.pps:.3f} x offered "
          f"({small['received']:,} of {small['sent']:,} packets arrived)")
    print(f"  added-delay error p50 {down['delay_error_p50_us'] / 1000:.3f} ms, p99 "
          f"{down['delay_error_p99_us'] / 1000:.3f} ms = {down['delay_error_p99_us'] / 200:.2f} x the 0.2 ms goal; "
          f"dropped overflow {down['dropped_overflow']}")

    with Testbed(backend="veth") as tb:
        baseline = udp_download(tb, 1400, 0, args.seconds)
    with Testbed(link=LinkConfig(), backend="relay") as tb:
        relayed = udp_download(tb, 1400, 0, args.seconds)
    ratio = relayed["goodput_bps"] / baseline["goodput_bps"]
    print("0 ms, UDP bulk download (1400 B, unlimited sender):")
    print(f"  plain veth {baseline['goodput_bps'] / 1e6:,.0f} Mbit/s, linkem {relayed['goodput_bps'] / 1e6:,.0f} "
          f"Mbit/s = {ratio:.2f} x baseline (goal >= 0.80)")


if __name__ == "__main__":
    main()
