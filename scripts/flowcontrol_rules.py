"""Each available stack's and browser's flow-control rule, measured from traced runs, written to
datasets/flowcontrol/rules.csv (read back by replay.measured_rules).

A replay stack: one traced window-limited run (client firefox with initial_max_stream_data_bidi_local
131,072, 30 ms, windows pinned, 2 MB). A browser (its windows are its own): one traced run of its own set
at each of 10, 30, 50 and 200 ms, 50 MB, so that its 6-12 MB stream window is re-opened a dozen times and
any growth shows. Then replay.trace.flow_control_rule on the download stream's and the connection's window.

    .venv/bin/python scripts/flowcontrol_rules.py [--stack NAME ...] [--browsers-only] [--size BYTES]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys
import tempfile
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import sets
from replay.sets import own_set
from replay.link import LinkConfig
from replay.measured_rules import RULES_CSV
from replay.runner import Condition, Experiment, run_experiment
from replay.stacks import all_stacks, get_stack
from replay.stacks.base import RunOptions, default_timeout_s
from replay.trace import flow_control_rule

WINDOW = 131_072
DELAY_MS = 30.0
STACK_SIZE = 2_000_000
BROWSERS = ("chromium", "firefox")
BROWSER_DELAYS_MS = (10.0, 30.0, 50.0, 200.0)
BROWSER_SIZE = 50_000_000
COLUMNS = ("stack", "stack_version", "which", "delay_ms", "window", "rtt_ms", "n_updates", "fraction_median",
           "fraction_p10", "fraction_p90", "consumed_vs_sent_rtt_before", "updates_per_rtt", "window_median",
           "window_ceiling", "growth_factor", "rtts_to_ceiling", "autotune", "size_bytes", "date", "load_1min",
           "run_id")


def measure(stack, size: int, delay_ms: float, results: Path) -> list[dict]:
    if stack.own_parameters:
        client = own_set(stack)
    else:
        client = sets.with_overrides(sets.resolve_one("firefox"), [f"initial_max_stream_data_bidi_local={WINDOW}"])
    load = round(os.getloadavg()[0], 2)
    experiment = Experiment("single", stack, [Condition(client, None, LinkConfig(delay_down_ms=delay_ms))],
                            RunOptions(size=size, timeout_s=default_timeout_s(size), trace=True), reps=1,
                            link_backend="auto", tags={"purpose": "flowcontrol rules"})
    row = run_experiment(experiment, results)[0]
    con = duckdb.connect(str(results), read_only=True)
    try:
        traced = con.execute("SELECT initial_max_data, initial_max_stream_data_bidi_local FROM traces "
                             "WHERE run_id = ?", [row["run_id"]]).fetchall()
        if row["status"] != "ok" or not traced:
            print(f"{stack.name} at {delay_ms:g} ms: no trace ({row.get('error') or row['warnings']})", file=sys.stderr)
            return []
        points = con.sql(f"SELECT * FROM trace_points WHERE run_id = '{row['run_id']}' ORDER BY seq").pl().to_dicts()
    finally:
        con.close()
    out = []
    for which, window in (("stream", traced[0][1]), ("connection", traced[0][0])):
        rule = flow_control_rule(points, window, which)
        out.append({**{k: rule[k] for k in COLUMNS if k in rule}, "stack": stack.name,
                    "stack_version": row.get("browser_version") or stack.version(), "delay_ms": delay_ms,
                    "autotune": row["autotune"], "size_bytes": size, "date": datetime.date.today().isoformat(),
                    "load_1min": load, "run_id": row["run_id"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", help="only these stacks or browsers (default: every one usable "
                                                         "here)")
    parser.add_argument("--browsers-only", action="store_true", help="only the browsers")
    parser.add_argument("--size", type=int, help=f"download size (default {STACK_SIZE:,} for a stack, "
                                                 f"{BROWSER_SIZE:,} for a browser)")
    parser.add_argument("--out", type=Path, default=RULES_CSV)
    args = parser.parse_args()
    chosen = {**({} if args.browsers_only else all_stacks()), **{name: get_stack(name) for name in BROWSERS}}
    stacks = {name: s for name, s in chosen.items() if not args.stack or name in args.stack}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, stack in stacks.items():
            reason = stack.unavailable_reason()
            if reason:
                print(f"{name}: skipped ({reason})", file=sys.stderr)
                continue
            delays = BROWSER_DELAYS_MS if stack.own_parameters else (DELAY_MS,)
            size = args.size or (BROWSER_SIZE if stack.own_parameters else STACK_SIZE)
            for delay in delays:
                measured = measure(stack, size, delay, Path(scratch) / "rules.duckdb")
                for row in measured:
                    print(f"{name} {row['which']} at {delay:g} ms: {row['n_updates']} updates, median "
                          f"{row['fraction_median']}, growth {row['growth_factor']}")
                rows += measured
    kept = []
    if args.out.is_file():  # a stack not measured now (not named, or not usable here) keeps its earlier rows
        with open(args.out, newline="") as f:
            kept = [row for row in csv.DictReader(f) if row["stack"] not in {r["stack"] for r in rows}]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(sorted([*kept, *rows], key=lambda r: (r["stack"], r["which"], float(r["delay_ms"]))))


if __name__ == "__main__":
    main()
