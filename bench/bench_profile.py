"""What profiling costs: a profiled run's goodput against the same run unprofiled (goal: at least 0.9x).

Each stack downloads --size at 0 ms (the CPU-bound case, where sampling costs the most) over one veth
testbed, profiled (`qreplay --profile`: perf, or py-spy for aioquic) and unprofiled runs alternating,
--repeats of each; printed per stack: the median goodput of each kind with its range, their ratio, and
the profiled runs' samples and the time their post-processing took (after the transfer, outside the
timing). The machine is shared: the load average before and after is printed beside the date.

    .venv/bin/python bench/bench_profile.py [--stacks ngtcp2,quic-go,quinn] [--size 300MB] [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import sets  # noqa: E402
from replay.link import LinkConfig, parse_size  # noqa: E402
from replay.runner import Condition, open_path, run_once  # noqa: E402
from replay.stacks import get_stack  # noqa: E402
from replay.stacks.base import RunOptions, default_timeout_s  # noqa: E402


def measure(stack_name: str, size: int, repeats: int) -> dict:
    stack = get_stack(stack_name)
    reason = stack.unavailable_reason()
    if reason:
        raise SystemExit(f"bench_profile: {stack_name} is not usable here: {reason}")
    condition = Condition(sets.resolve_one("firefox"), None, LinkConfig())
    plain = RunOptions(size=size, timeout_s=default_timeout_s(size))
    profiled = RunOptions(size=size, timeout_s=default_timeout_s(size), profile=True)
    goodput: dict[bool, list[float]] = {False: [], True: []}
    samples, after_s = [], []
    with open_path("veth", condition.link) as path:
        for rep in range(1, repeats + 1):
            for options in (plain, profiled) if rep % 2 else (profiled, plain):  # who goes first alternates
                started = time.monotonic()
                row = run_once(stack, path, condition, options, rep, "bench-profile", "veth")
                if row["status"] != "ok":
                    raise SystemExit(f"bench_profile: {stack_name} run failed: {row.get('error')}")
                goodput[options.profile].append(row["goodput_mbps"])
                if options.profile:
                    profile = row.get("profile")
                    if not profile:
                        raise SystemExit(f"bench_profile: {stack_name}: no profile ({row['warnings']})")
                    samples.append(sum(p["samples"] for p in profile[0]))
                    after_s.append(time.monotonic() - started - row["wall_s"])
    median = {kind: statistics.median(values) for kind, values in goodput.items()}
    return {"stack": stack_name, "plain": goodput[False], "profiled": goodput[True], "median": median,
            "ratio": median[True] / median[False], "samples": statistics.median(samples),
            "after_s": statistics.median(after_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", default="ngtcp2,quic-go,quinn")
    parser.add_argument("--size", default="300MB")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    size = parse_size(args.size)
    load_before = os.getloadavg()[0]
    started = datetime.datetime.now()
    results = [measure(name.strip(), size, args.repeats) for name in args.stacks.split(",") if name.strip()]
    load_after = os.getloadavg()[0]
    print(f"bench_profile {started:%Y-%m-%d %H:%M}-{datetime.datetime.now():%H:%M}, load {load_before:.1f} "
          f"before, {load_after:.1f} after; {args.size} at 0 ms, {args.repeats} runs of each kind, alternating")
    for r in results:
        span = lambda v: f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})"  # noqa: E731
        print(f"  {r['stack']:10} unprofiled {span(r['plain'])} Mbit/s, profiled {span(r['profiled'])} Mbit/s: "
              f"ratio {r['ratio']:.2f} (goal >= 0.9: {'met' if r['ratio'] >= 0.9 else 'NOT met'}); "
              f"{r['samples']:.0f} samples, {r['after_s']:.1f} s after the transfer to fold and sort them")
    ratios = [r["ratio"] for r in results]
    print(f"ratio over the stacks: {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
