"""The results page's "what held it back" tables: per condition of the traced runs behind a section (the
fidelity campaign's conditions, the 0 ms pairs, the window sweep), the limit replay/limits.py finds, from
datasets/limits.

datasets/limits/NAME.runs.csv holds a traced qreplay results file's runs, each with its breakdown as
replay/limits.py computes it from the run's stored trace points (:func:`export`, ``python -m docs_build.limits
RESULTS.duckdb NAME``; the trace points, megabytes a run, stay out of git like every results file).
:func:`table` reads them back through replay.statistics.limits_summary, the summary ``qreplay why`` prints,
with its models' predictions (replay/commands/why.py), the conditions short of theirs first; docs_build/
committed.py writes each table into docs/results.md between its markers, and a test fails while one is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from common.markdown import markdown_table
from tparams.errors import ToolError

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "datasets" / "limits"
PAGE = "results.md"
#: each dataset's section of the page, by the dataset's name
SECTIONS = {"fidelity": "what held the fidelity conditions back", "pairs": "what held the traced pairs back",
            "sweep": "what held the traced window sweep back"}
#: what an export keeps of a run besides its conditions (replay.statistics.present_conditions)
KEPT = ("run_id", "experiment_id", "started_at", "status", "goodput_mbps", "bytes", "wall_s", "server_cpu_s",
        "client_cpu_s", "requested_client")


def export(results: Path, name: str, directory: Path = DATASETS) -> Path:
    """``results``' runs into DIRECTORY/NAME.runs.csv (datasets/limits), each traced run's breakdown computed
    now from its trace points (an untraced run keeps what it stored)."""
    import polars as pl

    from replay import statistics, store
    from replay.limits import as_columns

    con = store.open_read_only(results)
    try:
        found = pl.DataFrame([{"run_id": run["run_id"], **as_columns(breakdown)}
                              for run, breakdown in statistics.traced_breakdowns(con)],
                             schema={"run_id": pl.String, "limited_by": pl.String, "limits": pl.String})
        con.register("recomputed", found)
        keys = ", ".join(f"r.{k}" for k in (*KEPT[:2], *statistics.present_conditions(con), *KEPT[2:]))
        out = directory / f"{name}.runs.csv"
        out.parent.mkdir(parents=True, exist_ok=True)
        con.execute(f"""COPY (SELECT {keys},
                                CASE WHEN n.run_id IS NULL THEN r.limited_by ELSE n.limited_by END AS limited_by,
                                CASE WHEN n.run_id IS NULL THEN r.limits ELSE n.limits END AS limits
                              FROM runs r LEFT JOIN recomputed n USING (run_id) ORDER BY r.started_at)
                        TO '{out}' (HEADER)""")
    finally:
        con.close()
    return out


def _source(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection whose ``runs`` are the dataset's; its breakdowns are stored, so no trace is read."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW runs AS SELECT * FROM read_csv_auto('{path}', header = true)")
    con.execute("CREATE VIEW traces AS SELECT NULL::VARCHAR AS run_id WHERE false")
    return con


def table(name: str, directory: Path = DATASETS) -> str:
    """DIRECTORY/NAME.runs.csv's conditions, what held each back, as a dated Markdown table (anomalies first)."""
    from replay import statistics
    from replay.commands.why import SHOWN_SHARE, differed, prediction
    from replay.limits import LIMITS
    from replay.measured_rules import load_update_rules

    path = directory / f"{name}.runs.csv"
    con = _source(path)
    summary = statistics.limits_summary(con)
    first, last, runs = con.execute("SELECT min(started_at), max(started_at), count(*) FROM runs").fetchone()
    con.close()
    rules = load_update_rules()
    differing = statistics.varying(summary)
    rows = []
    for row in summary.iter_rows(named=True):
        bound = prediction(row, rules) if row["traced"] else None
        short = bool(bound and bound.short_of(row["mean_mbps"]))
        shares = ", ".join(f"{limit.replace('_', ' ')} {row[limit]:.0%}" for limit in
                           sorted(LIMITS, key=lambda n: -(row[n] or 0)) if (row[limit] or 0) >= SHOWN_SHARE)
        rows.append((not short, [
            statistics.describe(row, differing),
            f"`{row['limited_by']}` ({row['agreeing']} of {row['traced']})" if row["traced"] else "not traced",
            shares or "-", "-" if row["mean_mbps"] is None else f"{row['mean_mbps']:,.0f}",
            f"{bound.text()}: {bound.basis}" if bound else "-",
            f"**short**: {differed(row)}" if short else ""]))
    header = ["condition", "held back by (runs)", "time at each limit", "Mbit/s", "its limit allows", "anomaly"]
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return (f"Generated by `docs_build/limits.py` from `{shown}`: "
            f"{runs} runs, {first:%Y-%m-%d %H:%M}-{last:%H:%M} UTC, each run's breakdown computed by replay/limits.py "
            f"from its trace. All: {statistics.shared(summary)}. Per condition the limit most of its runs were held "
            f"by, the mean share of the transfer's time at each limit of {SHOWN_SHARE:.0%} or more, the mean goodput "
            "and what the limit's model allows (`qreplay why`); a condition well short of it (an anomaly) first.\n\n"
            + markdown_table(header, [cells for _, cells in sorted(rows, key=lambda r: r[0])]) + "\n")


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: python -m docs_build.limits RESULTS.duckdb NAME (writes datasets/limits/NAME.runs.csv)")
    try:
        out = export(Path(sys.argv[1]), sys.argv[2])
    except ToolError as exc:
        sys.exit(str(exc))
    print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
