"""Request-response against TCP's: each stack's requests per second over the same link as tcp-h2's
(Go's net/http, HTTP/2 on TLS 1.3 over kernel TCP), measured in the same run.

Each stack makes --requests GETs of --size bytes on one connection, --concurrency at once (`qreplay
--workload requests`), over one testbed per delay; the stacks' runs go round-robin, tcp-h2 among them, so
drift on the shared machine falls on all alike. Printed per stack and delay: the median requests/s with its
range, its ratio against tcp-h2's median, and the median time to first byte and p99 latency. The load
average before and after is printed beside the date.

    .venv/bin/python bench/bench_requests.py [--stacks quinn,s2n-quic,quic-go,aioquic] [--delays 0,30]
        [--requests 1000] [--concurrency 16] [--size 1KB] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import sets  # noqa: E402
from replay.link import LinkConfig, parse_size  # noqa: E402
from replay.runner import Condition, open_path, run_once  # noqa: E402
from replay.stacks import get_stack  # noqa: E402
from replay.stacks.base import RunOptions, default_timeout_s  # noqa: E402
from tparams.workloads import REQUESTS  # noqa: E402

TCP = "tcp-h2"


def measure(stack_names: list[str], delay_ms: float, options: RunOptions, repeats: int) -> dict[str, list[dict]]:
    """Each stack's runs at one delay, the stacks round-robin within each repeat."""
    stacks = [get_stack(name) for name in stack_names]
    for stack in stacks:
        reason = stack.unavailable_reason()
        if reason:
            raise SystemExit(f"bench_requests: {stack.name} is not usable here: {reason}")
    condition = Condition(sets.resolve_one("firefox"), None, LinkConfig(delay_down_ms=delay_ms))
    rows: dict[str, list[dict]] = {name: [] for name in stack_names}
    with open_path("auto", condition.link) as path:
        for rep in range(1, repeats + 1):
            for stack in stacks:
                row = run_once(stack, path, condition, options, rep, "bench-requests", "auto")
                if row["status"] != "ok":
                    raise SystemExit(f"bench_requests: {stack.name} at {delay_ms:g} ms failed: {row.get('error')}")
                rows[stack.name].append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", default="quinn,s2n-quic,quic-go,aioquic")
    parser.add_argument("--delays", default="0,30", help="one-way delays server->client, ms")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--size", default="1KB")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    size = parse_size(args.size)
    names = [n.strip() for n in args.stacks.split(",") if n.strip() and n.strip() != TCP] + [TCP]
    options = RunOptions(size=size, workload=REQUESTS, requests=args.requests, concurrency=args.concurrency,
                         timeout_s=default_timeout_s(size * args.requests) + 60)
    load_before = os.getloadavg()[0]
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {float(d): measure(names, float(d), options, args.repeats) for d in args.delays.split(",")}
    load_after = os.getloadavg()[0]
    print(f"bench_requests {started:%Y-%m-%d %H:%M}-{datetime.datetime.now(datetime.timezone.utc):%H:%M} UTC, "
          f"load {load_before:.1f} before, {load_after:.1f} after; {args.requests} requests of {args.size}, "
          f"{args.concurrency} at once, one connection; {args.repeats} runs a stack, round-robin with {TCP}")
    for delay, rows in results.items():
        tcp = statistics.median(r["requests_per_s"] for r in rows[TCP])
        print(f"{delay:g} ms: {TCP} {tcp:,.0f} requests/s")
        for name, runs in rows.items():
            rate = [r["requests_per_s"] for r in runs]
            median = statistics.median(rate)
            print(f"  {name:9} {median:8,.0f} requests/s ({min(rate):,.0f}-{max(rate):,.0f}): "
                  f"ratio {median / tcp:.2f} against {TCP}; TTFB {statistics.median(r['ttfb_ms'] for r in runs):.2f} ms, "
                  f"p99 latency {statistics.median(r['latency_p99_ms'] for r in runs):.2f} ms")


if __name__ == "__main__":
    main()
