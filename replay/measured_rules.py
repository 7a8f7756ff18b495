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


UPLOAD_RECEIVERS_CSV = REPO_ROOT / "datasets" / "flowcontrol" / "upload_receivers.csv"


def load_upload_receiver_rules(path: Path = UPLOAD_RECEIVERS_CSV) -> dict[tuple[str, str], UpdateRule]:
    """(h3 server's stack, browser) -> that server's stream-window rule as the receiver of that browser's upload,
    measured from a traced upload (scripts/upload_receivers.py). It is not always the library's rule under a
    download (rules.csv): quiche and tquic granted Firefox's uploads 0.62 and 0.60 of the window an update
    (2026-11-28, load 0.4-0.5) where they grant 0.55 and 0.53 under downloads, which the spot checks had missed by
    28-32%."""
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        return {(row["server"], row["browser"]): UpdateRule(
                    float(row["fraction_median"]),
                    f"measured {row['date']} receiving {row['browser']}'s upload: median credit per MAX_STREAM_DATA "
                    f"{float(row['fraction_median']):.2f} of a {row['window']}-byte window at "
                    f"{float(row['delay_ms']):.0f} ms ({row['n_updates']} updates, load {row['load_1min']})")
                for row in csv.DictReader(f) if row["which"] == "stream" and row["fraction_median"]}
