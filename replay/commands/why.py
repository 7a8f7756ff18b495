"""`qreplay why results.duckdb`: per experiment and condition, what held the runs back (replay/limits.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replay import statistics, store
from replay.limits import LIMITS

#: a limit's share below this is left out of a line (noise of the rules' one-MSS margins)
SHOWN_SHARE = 0.05


def why_lines(results: Path) -> list[str]:
    """The report as lines: each experiment headed by what its conditions share, then one line per condition
    (those that differ): the limit most of its traced runs were held by, how many agree, the mean share of
    every limit above SHOWN_SHARE and the mean goodput."""
    con = store.open_read_only(results)
    try:
        summary = statistics.limits_summary(con)
    finally:
        con.close()
    lines: list[str] = []
    for (experiment,), frame in summary.group_by("experiment_id", maintain_order=True):
        lines.append(f"experiment {experiment[:8]}: {statistics.shared(frame)}")
        differing = statistics.varying(frame)
        for row in frame.iter_rows(named=True):
            goodput = f"{row['mean_mbps']:,.1f} Mbit/s" if row["mean_mbps"] is not None else "no successful run"
            head = f"  {statistics.describe(row, differing)}: "
            if not row["traced"]:
                lines.append(f"{head}{row['runs']} runs, none traced (qreplay --trace stores what held a run "
                             f"back); {goodput}")
                continue
            shares = ", ".join(f"{name} {row[name]:.0%}" for name in sorted(LIMITS, key=lambda n: -(row[n] or 0))
                               if (row[name] or 0) >= SHOWN_SHARE)
            lines.append(f"{head}{row['limited_by']} ({row['agreeing']} of {row['traced']} traced runs; "
                         f"{row['runs']} runs); time at each limit: {shares}; {goodput}")
    return lines or [f"{results} holds no runs"]


def register(app: typer.Typer) -> None:
    @app.command("why", epilog="Example: qreplay why replay.duckdb")
    def why(results: Annotated[Path, typer.Argument(help="A qreplay results DuckDB file.")]) -> None:
        """What held the runs back, per experiment and condition: the limit each traced run (--trace) spent the
        most of its transfer at (receive window, link, congestion window, CPU, ...) and the shares of all."""
        for line in why_lines(results):
            typer.echo(line)
