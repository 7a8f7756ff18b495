"""Issue 27's "what must hold", as numbers: the reproduce campaign's small windows and the pairs table before
and after issue 27's refactor (scripts/before_after.sh's two trees' results), per condition the mean and sd of
each side, the ratio after/before and its 95% confidence interval (percentile bootstrap over the runs of each
side, 20,000 resamples), written as a Markdown table and a CSV.

    .venv/bin/python scripts/before_after_compare.py OUTDIR [--csv datasets/before_after/before_after.csv]

The files are read with DuckDB directly, read-only: the before side's file is replay schema v1, and opening
it through today's store would migrate it.
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
from pathlib import Path

import duckdb

RESAMPLES = 20_000


def goodputs(path: Path, key_sql: str) -> dict[str, list[float]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.sql(f"SELECT {key_sql} AS condition, goodput_mbps FROM runs WHERE status = 'ok'").fetchall()
        failed = con.sql("SELECT count(*) FROM runs WHERE status <> 'ok'").fetchall()[0][0]
    finally:
        con.close()
    if failed:
        print(f"{path}: {failed} runs not ok (left out)")
    out: dict[str, list[float]] = {}
    for condition, mbps in rows:
        out.setdefault(condition, []).append(mbps)
    return out


def ratio_ci(before: list[float], after: list[float], rng: random.Random) -> tuple[float, float]:
    ratios = sorted(statistics.fmean(rng.choices(after, k=len(after))) /
                    statistics.fmean(rng.choices(before, k=len(before))) for _ in range(RESAMPLES))
    return ratios[int(0.025 * RESAMPLES)], ratios[int(0.975 * RESAMPLES) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    tables = {
        "reproduce": ("reproduce/reproduce.duckdb",
                      "regexp_extract(set_name, '\\+(.*)', 1) || ' at ' || delay_ms::int || ' ms'"),
        "pairs": ("pairs/pairs.duckdb", "stack || ' from ' || coalesce(server_stack, stack) || ' at ' || delay_ms::int || ' ms'"),
    }
    rng = random.Random(27)
    rows = []
    for table, (file, key_sql) in tables.items():
        if not (args.outdir / "before" / file).exists():
            continue  # a pairs-only comparison (REPRODUCE=0)
        before = goodputs(args.outdir / "before" / file, key_sql)
        after = goodputs(args.outdir / "after" / file, key_sql)
        for condition in sorted(before.keys() | after.keys()):
            b, a = before.get(condition, []), after.get(condition, [])
            if len(b) < 2 or len(a) < 2:
                print(f"{table} {condition}: too few runs (before {len(b)}, after {len(a)})")
                continue
            low, high = ratio_ci(b, a, rng)
            rows.append({"table": table, "condition": condition, "runs_before": len(b), "runs_after": len(a),
                         "mean_before": statistics.fmean(b), "sd_before": statistics.stdev(b),
                         "mean_after": statistics.fmean(a), "sd_after": statistics.stdev(a),
                         "ratio": statistics.fmean(a) / statistics.fmean(b), "ci_low": low, "ci_high": high})
    print("| table | condition | before Mbit/s mean (sd), n | after Mbit/s mean (sd), n | after/before [95% CI] |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['table']} | {r['condition']} | {r['mean_before']:.1f} ({r['sd_before']:.1f}), {r['runs_before']} "
              f"| {r['mean_after']:.1f} ({r['sd_after']:.1f}), {r['runs_after']} "
              f"| {r['ratio']:.3f} [{r['ci_low']:.3f}-{r['ci_high']:.3f}] |")
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in rows)


if __name__ == "__main__":
    main()
