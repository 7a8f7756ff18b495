"""The results page's opening table, each stack as last measured, from the stored datasets.

Upload and download on each stack beside TCP (datasets/knobs_workloads/updown.*: the runs exported by
scripts/knobs_workloads.py, the log of rounds with the machine's load) and each stack's flow-control rule
(datasets/flowcontrol/rules.csv, by scripts/flowcontrol_rules.py). docs_build/committed.py writes the table
into docs/results.md between its markers; a test fails while it is not what the datasets make now.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from common.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
PAGE = "results.md"
SECTION = "each stack now"
UPDOWN = ROOT / "datasets" / "knobs_workloads" / "updown.runs.csv"
UPDOWN_LOG = ROOT / "datasets" / "knobs_workloads" / "updown.log"
RULES = ROOT / "datasets" / "flowcontrol" / "rules.csv"
_LOAD = re.compile(r"^\S+ load (\d+(?:\.\d+)?) ")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def current_table() -> str:
    con = duckdb.connect()
    goodput = {(stack, delay, workload): (mean, n) for stack, delay, workload, mean, n in con.execute(
        "SELECT stack, delay_ms::INT, workload, avg(goodput_mbps) FILTER (status = 'ok'), "
        "count(*) FILTER (status = 'ok') FROM read_csv_auto(?) GROUP BY ALL", [str(UPDOWN)]).fetchall()}
    first, last = con.execute("SELECT min(started_at)::TIMESTAMP, max(started_at)::TIMESTAMP FROM read_csv_auto(?)",
                              [str(UPDOWN)]).fetchone()
    sizes = ", ".join(f"{low // 1_000_000}-{high // 1_000_000} MB at {delay} ms" for delay, low, high in con.execute(
        "SELECT delay_ms::INT, min(size_bytes), max(size_bytes) FROM read_csv_auto(?) GROUP BY ALL ORDER BY 1",
        [str(UPDOWN)]).fetchall())
    rules = {stack: (share, per_rtt, date) for stack, share, per_rtt, date in con.execute(
        "SELECT stack, fraction_median, updates_per_rtt, date FROM read_csv_auto(?) WHERE which = 'stream'",
        [str(RULES)]).fetchall()}
    loads = [float(m.group(1)) for line in UPDOWN_LOG.read_text().splitlines() if (m := _LOAD.match(line))]
    stacks = sorted({stack for stack, _, _ in goodput} | set(rules))
    rows = []
    for stack in stacks:
        cells = []
        for delay in (0, 30):
            for workload in ("download", "upload"):
                mean, n = goodput.get((stack, delay, workload), (None, 0))
                cells.append(f"{_fmt(mean)} ({n})" if mean is not None else "-")
        share, per_rtt, _ = rules.get(stack, (None, None, None))
        cells.append("-" if share is None else f"{share:.2f} ({per_rtt:.1f} a round trip)")
        rows.append([stack, *cells])
    rule_dates = sorted({str(date) for _, _, date in rules.values()})
    header = ["stack", "download 0 ms", "upload 0 ms", "download 30 ms", "upload 30 ms",
              "stream credit an update grants, share of the window"]
    return (f"Mbit/s, mean (runs); measured {first:%Y-%m-%d %H:%M}-{last:%H:%M} UTC, load "
            f"{min(loads):g}-{max(loads):g}, one GET or PUT of {sizes} (`{UPDOWN.relative_to(ROOT)}`; the "
            f"section on workloads below has the spread and CPU). Flow-control rule: one traced run a stack, "
            f"{', '.join(rule_dates)} (`{RULES.relative_to(ROOT)}`). tcp-h2 is Go's HTTP/2 over kernel TCP, "
            "the reference.\n\n" + markdown_table(header, rows) + "\n")
