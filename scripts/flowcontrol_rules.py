"""Each available stack's flow-control rule, measured: one traced window-limited run per stack (client
firefox with initial_max_stream_data_bidi_local 131,072, 30 ms, windows pinned, 2 MB), then
replay.trace.flow_control_rule on its stream and connection windows, written to
datasets/flowcontrol/rules.csv (read back by replay.measured_rules).

    .venv/bin/python scripts/flowcontrol_rules.py [--stack NAME ...] [--size 2000000]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
import tempfile
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import sets
from replay.link import LinkConfig
from replay.measured_rules import RULES_CSV
from replay.runner import Condition, Experiment, run_experiment
from replay.stacks import all_stacks
from replay.stacks.base import RunOptions
from replay.trace import flow_control_rule

WINDOW = 131_072
DELAY_MS = 30.0
COLUMNS = ("stack", "stack_version", "which", "window", "rtt_ms", "n_updates", "fraction_median", "fraction_p10",
           "fraction_p90", "consumed_vs_sent_rtt_before", "updates_per_rtt", "date", "run_id")


def measure(stack, size: int, results: Path) -> list[dict]:
    client = sets.with_overrides(sets.resolve_one("firefox"), [f"initial_max_stream_data_bidi_local={WINDOW}"])
    experiment = Experiment("single", stack, [Condition(client, None, LinkConfig(delay_down_ms=DELAY_MS))],
                            RunOptions(size=size, timeout_s=60, trace=True), reps=1, link_backend="auto",
                            tags={"purpose": "flowcontrol rules"})
    row = run_experiment(experiment, results)[0]
    con = duckdb.connect(str(results), read_only=True)
    try:
        traced = con.execute("SELECT initial_max_data, initial_max_stream_data_bidi_local FROM traces "
                             "WHERE run_id = ?", [row["run_id"]]).fetchall()
        if row["status"] != "ok" or not traced:
            print(f"{stack.name}: no trace ({row.get('error') or row['warnings']})", file=sys.stderr)
            return []
        points = con.sql(f"SELECT * FROM trace_points WHERE run_id = '{row['run_id']}' ORDER BY seq").pl().to_dicts()
    finally:
        con.close()
    out = []
    for which, window in (("stream", traced[0][1]), ("connection", traced[0][0])):
        rule = flow_control_rule(points, window, which)
        out.append({**{k: rule[k] for k in COLUMNS if k in rule}, "stack": stack.name,
                    "stack_version": stack.version(), "date": datetime.date.today().isoformat(),
                    "run_id": row["run_id"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", help="only these stacks (default: every one usable here)")
    parser.add_argument("--size", type=int, default=2_000_000)
    parser.add_argument("--out", type=Path, default=RULES_CSV)
    args = parser.parse_args()
    stacks = {name: s for name, s in all_stacks().items() if not args.stack or name in args.stack}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, stack in stacks.items():
            reason = stack.unavailable_reason()
            if reason:
                print(f"{name}: skipped ({reason})", file=sys.stderr)
                continue
            measured = measure(stack, args.size, Path(scratch) / "rules.duckdb")
            for row in measured:
                print(f"{name} {row['which']}: {row['n_updates']} updates, median {row['fraction_median']}")
            rows += measured
    kept = []
    if args.out.is_file():  # a stack not measured now (not named, or not usable here) keeps its earlier rows
        with open(args.out, newline="") as f:
            kept = [row for row in csv.DictReader(f) if row["stack"] not in {r["stack"] for r in rows}]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(sorted([*kept, *rows], key=lambda r: (r["stack"], r["which"])))


if __name__ == "__main__":
    main()
