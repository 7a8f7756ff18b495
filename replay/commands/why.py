"""`qreplay why results.duckdb`: per experiment and condition, what held the runs back (replay/limits.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


#: a limit's share below this is left out of a line (noise of the rules' one-MSS margins)
SHOWN_SHARE = 0.05
#: how far below its model's lower bound a goodput may fall before it is an anomaly (processing adds to the RTT)
SLACK = 0.1


def prediction(row: dict, rules) -> WindowBound | None:
    """What the limit a condition was held by allows, where a model of it exists: for a receive window, the
    window model (replay/flowcontrol.py) with the client stack's measured update rule, the download's start
    charged, at the link's round trip. None for other limits (not modelled yet)."""
    from replay.flowcontrol import client_window_bound
    if not (row["limited_by"] or "").startswith("receive_window") or not row["requested_client"]:
        return None
    return client_window_bound(json.loads(row["requested_client"]), row["delay_ms"] + (row.get("delay_up_ms") or 0),
                               row["stack"], row["size_bytes"], rules)


def why_lines(results: Path) -> list[str]:
    """The report as lines: the anomalies first (conditions whose mean goodput falls more than SLACK below what
    their limit's model allows), then each experiment headed by what its conditions share and one line per
    condition (those that differ): the limit most of its traced runs were held by, how many agree, the mean
    share of every limit above SHOWN_SHARE, the mean goodput and the model's prediction where there is one."""
    from replay import statistics, store
    from replay.limits import LIMITS
    from replay.measured_rules import load_update_rules
    con = store.open_read_only(results)
    try:
        summary = statistics.limits_summary(con)
    finally:
        con.close()
    rules = load_update_rules()
    lines: list[str] = []
    anomalies: list[str] = []
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
            bound = prediction(row, rules)
            predicted = f" (its window model: {bound.text()} Mbit/s)" if bound else ""
            lines.append(f"{head}{row['limited_by']} ({row['agreeing']} of {row['traced']} traced runs; "
                         f"{row['runs']} runs); time at each limit: {shares}; {goodput}{predicted}")
            if bound and row["mean_mbps"] is not None and row["mean_mbps"] < bound.span[0] * (1 - SLACK):
                anomalies.append(f"  experiment {experiment[:8]}, {statistics.describe(row, differing)}: "
                                 f"{goodput}, below what its {row['limited_by']} allows ({bound.text()} Mbit/s)")
    if anomalies:
        lines = ["anomalies (goodput short of its limit's model by more than "
                 f"{SLACK:.0%}):", *anomalies, *lines]
    return lines or [f"{results} holds no runs"]


def register(app: typer.Typer) -> None:
    @app.command("why", epilog="Example: qreplay why replay.duckdb")
    def why(results: Annotated[Path, typer.Argument(help="A qreplay results DuckDB file.")]) -> None:
        """What held the runs back, per experiment and condition: the limit each traced run (--trace) spent the
        most of its transfer at (receive window, link, congestion window, CPU, ...) and the shares of all."""
        for line in why_lines(results):
            typer.echo(line)
