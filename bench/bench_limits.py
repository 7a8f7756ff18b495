"""What a run's limit breakdown costs (issue 35): replay.limits.breakdown over a real traced run's stored points,
timed against the run's own duration, and `qreplay why` over a results file of 1,000 runs.

One traced ngtcp2 download (--size, at --delay, window-limited by a 128 KiB stream window so that every kind of
point occurs) is run on the testbed and its stored points broken down --repeat times (best of them). The results
file is then grown to --runs runs by copying that run (new run ids, the conditions spread over --conditions
delays), and `qreplay why` is timed as the CLI runs it (a new process, imports included) and in this process.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import duckdb  # noqa: E402

from replay import limits, sets  # noqa: E402
from replay.commands.why import why_lines  # noqa: E402
from replay.link import LinkConfig  # noqa: E402
from replay.runner import Condition, Experiment, run_experiment  # noqa: E402
from replay.stacks import get_stack  # noqa: E402
from replay.stacks.base import RunOptions  # noqa: E402

QREPLAY = str(Path(sys.executable).with_name("qreplay"))


def traced_run(results: Path, size: int, delay_ms: float) -> dict:
    client = sets.with_overrides(sets.resolve_one("firefox"), ["initial_max_stream_data_bidi_local=131072"])
    condition = Condition(client, None, LinkConfig(delay_down_ms=delay_ms))
    experiment = Experiment("single", get_stack("ngtcp2"), [condition], RunOptions(size=size, timeout_s=600, trace=True),
                            reps=1)
    row = run_experiment(experiment, results)[0]
    if row["status"] != "ok" or row.get("limits") is None:
        sys.exit(f"bench_limits: the traced run gave no breakdown: {row.get('error') or row.get('warnings')}")
    return row


def grow(results: Path, run_id: str, runs: int, conditions: int) -> None:
    """Copies of the run (new ids; delay_ms spread over ``conditions`` values) until the file holds ``runs``."""
    with duckdb.connect(str(results)) as con:
        con.execute(f"""INSERT INTO runs BY NAME
            SELECT runs.* REPLACE (run_id || '-' || i::VARCHAR AS run_id, (i % {conditions})::DOUBLE AS delay_ms, i AS rep)
            FROM runs, range(1, {runs}) r(i) WHERE run_id = '{run_id}'""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000_000,
                        help="bytes of the traced download (default 20 MB)")
    parser.add_argument("--delay", type=float, default=10.0, help="one-way delay, ms (default 10)")
    parser.add_argument("--repeat", type=int, default=5, help="breakdowns timed, the best kept (default 5)")
    parser.add_argument("--runs", type=int, default=1000, help="runs in the file `qreplay why` reads (default 1,000)")
    parser.add_argument("--conditions", type=int, default=50, help="conditions they are spread over (default 50)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp:
        results = Path(tmp) / "r.duckdb"
        row = traced_run(results, args.size, args.delay)
        with duckdb.connect(str(results), read_only=True) as con:
            points = con.sql(f"SELECT * FROM trace_points WHERE run_id = '{row['run_id']}'").pl().to_dicts()
        facts = limits.RunFacts.from_run(row)
        best = min(_timed(lambda: limits.breakdown(points, facts)) for _ in range(args.repeat))
        print(f"{datetime.datetime.now():%Y-%m-%d %H:%M} load {os.getloadavg()[0]:.1f}")
        print(f"breakdown of one run: {best * 1000:.1f} ms for {len(points):,} points, against the run's "
              f"{row['duration_s']:.2f} s ({best / row['duration_s']:.2%}); {row['limited_by']}")
        grow(results, row["run_id"], args.runs, args.conditions)
        in_process = min(_timed(lambda: why_lines(results)) for _ in range(2))
        cli = min(_timed(lambda: subprocess.run([QREPLAY, "why", str(results)], check=True, capture_output=True))
                  for _ in range(2))
        print(f"qreplay why over {args.runs:,} runs in {args.conditions} conditions: {in_process * 1000:.0f} ms in "
              f"this process, {cli * 1000:.0f} ms as the CLI (a new process)")


def _timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
