"""Each stack's window-update rule as measured (datasets/flowcontrol/rules.csv, written by
scripts/flowcontrol_rules.py), for replay/flowcontrol.py's predictions; the hand-written UPDATE_RULES
stand for the stacks the file does not cover."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

from replay.flowcontrol import UPDATE_RULES, UpdateRule
from replay.stacks.base import REPO_ROOT

RULES_CSV = REPO_ROOT / "datasets" / "flowcontrol" / "rules.csv"


def load_update_rules(path: Path = RULES_CSV) -> dict[str, UpdateRule]:
    """UPDATE_RULES with each measured stack's stream-window share in place of the written one (the
    stream window is the one the thesis's bidi_local sweep binds), as measured at the thesis's 30 ms (a
    browser is measured at several delays)."""
    rules = dict(UPDATE_RULES)
    if not path.is_file():
        return rules
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["which"] != "stream" or not row["fraction_median"] or float(row["delay_ms"] or 30) != 30:
                continue
            source = (f"measured {row['date']}: median credit per MAX_STREAM_DATA {float(row['fraction_median']):.2f} "
                      f"of a {row['window']}-byte window at {float(row['rtt_ms']):.0f} ms (run {row['run_id'][:12]})")
            base = rules.get(row["stack"], UpdateRule(0.5, ""))
            rules[row["stack"]] = replace(base, consumed_fraction=float(row["fraction_median"]), source=source)
    return rules
