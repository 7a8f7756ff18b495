"""`qreplay why results.duckdb`: per experiment and condition, what held the runs back (replay/limits.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer


#: a limit's share below this is left out of a line (noise of the rules' one-MSS margins)
SHOWN_SHARE = 0.05
#: how far below its model's lower bound a goodput may fall before it is an anomaly (processing adds to the RTT)
SLACK = 0.1
#: ... below a bound that is a ceiling (the link's rate, a core's worth of the end's CPU per GB), which a run's
#: start, its headers and its other limits keep it under
CEILING_SLACK = 0.25
#: the components shown beside a CPU label (of the busier end's profile)
SHOWN_COMPONENTS = 3
#: the end whose CPU a CPU label names
CPU_ENDS = {"sender_cpu": "server", "receiver_cpu_socket": "client"}


@dataclass(frozen=True)
class Bound:
    """What a condition's limit allows, Mbit/s, and what says so."""

    low: float
    high: float
    basis: str  # e.g. "its window model", "the link's rate"
    slack: float  # how far below ``low`` an anomaly begins

    def text(self) -> str:
        return f"{self.low:,.1f}" if self.low == self.high else f"{self.low:,.1f} to {self.high:,.1f}"

    def short_of(self, mbps: float | None) -> bool:
        return mbps is not None and mbps < self.low * (1 - self.slack)


def profile_components(con) -> tuple[list[str], dict[tuple, dict[str, list[tuple[str, float, float]]]]]:
    """The profiled runs' components per experiment and condition (the profile_summary view), by endpoint:
    [(component, mean share, mean CPU seconds per GB)], largest share first; keyed by the experiment and the
    conditions returned beside (those both the runs and the view hold)."""
    from replay import statistics
    view = {row[0] for row in con.execute("DESCRIBE profile_summary").fetchall()}
    shared = [k for k in statistics.present_conditions(con) if k in view]
    found: dict[tuple, dict[str, list]] = {}
    for row in con.sql(f"SELECT experiment_id, {', '.join(shared)}, endpoint, component, mean_share, "
                       "mean_cpu_s_per_gb FROM profile_summary ORDER BY mean_share DESC").fetchall():
        found.setdefault(row[:1 + len(shared)], {}).setdefault(row[-4], []).append(tuple(row[-3:]))
    return shared, found


def prediction(row: dict, rules, components: dict[str, list] | None = None) -> Bound | None:
    """What the limit a condition was held by allows, where a model of it exists: for a receive window, the
    window model (replay/flowcontrol.py) with the client stack's measured update rule, the download's start
    charged, at the link's round trip (an upload's: the server's windows and its stack's rule, the client's start); for the link, its configured rate; for an end's CPU, a core's worth of
    that end's CPU per GB (8 / (CPU seconds per 10^9 bytes) Gbit/s), from its profile where the condition was
    profiled, else from the run's own CPU seconds. Of several clients (a run's goodput their mean), a client's
    share of what the link and the server's core allow. None for other limits (not modelled)."""
    from replay.flowcontrol import client_window_bound, receiver_window_bound
    from replay.impact import UPLOAD_PARAMETERS
    label = row["limited_by"] or ""
    if label.startswith("receive_window") and row.get("workload") == "upload":
        # the receiver is the server: its windows and its stack's rule, the client's start as the sender's
        rule, sender = rules.get(row.get("server_stack") or row["stack"]), rules.get(row["stack"])
        if rule is None or not row.get("requested_server"):
            return None
        window = receiver_window_bound(json.loads(row["requested_server"]),
                                       row["delay_ms"] + (row.get("delay_up_ms") or 0),
                                       replace(rule, initial_cwnd=sender.initial_cwnd) if sender else rule,
                                       UPLOAD_PARAMETERS, row["size_bytes"])
        return Bound(*window.span, "its window model", SLACK) if window else None
    if label.startswith("receive_window") and row["requested_client"]:
        window = client_window_bound(json.loads(row["requested_client"]),
                                     row["delay_ms"] + (row.get("delay_up_ms") or 0), row["stack"], row["size_bytes"],
                                     rules)
        return Bound(*window.span, "its window model", SLACK) if window else None
    rate = row.get("rate_up_bps" if row.get("workload") == "upload" else "rate_bps")  # the data's direction's
    if label == "link" and rate:
        # a run's goodput is its clients' mean: each client's fair share of the one link
        clients = row.get("clients") or 1
        share = rate / 1e6 / clients
        return Bound(share, share, "the link's rate" + (f" shared by {clients} clients" if clients > 1 else ""),
                     CEILING_SLACK)
    if label in CPU_ENDS:
        end = CPU_ENDS[label]
        profiled = sum(cpu or 0 for _, _, cpu in (components or {}).get(end, []))
        per_gb = profiled or row.get(f"{end}_cpu_s_per_gb")
        if per_gb:
            source = "its profile" if profiled else "its CPU seconds"
            # the server's core serves every client: a client's share of it, as of the link (the clients' CPU seconds
            # and bytes are each summed, so that a client's own core allows the whole of 8000 / per_gb)
            clients = (row.get("clients") or 1) if end == "server" else 1
            share = 8000 / per_gb / clients
            return Bound(share, share, f"a core at the {end}'s {per_gb:.2f} CPU s/GB ({source})"
                         + (f" shared by {clients} clients" if clients > 1 else ""), CEILING_SLACK)
    return None


def short_runs(row: dict, rules, components: dict[str, list] | None = None) -> list[tuple[dict, Bound]]:
    """(run, the bound it fell short of) for each traced run of a condition whose goodput is well short of what its
    own limit allows (its own label and CPU per GB; the condition's link, parameters and profile): one slow run
    among fast ones, which the condition's mean hides."""
    found = []
    for run in row.get("traced_runs") or []:
        bound = prediction({**row, **run}, rules, components)
        if bound and bound.short_of(run["goodput_mbps"]):
            found.append((run, bound))
    return found


def shown_shares(row: dict) -> list[tuple[str, float]]:
    """(limit, share of the time) of a summary row's limits at SHOWN_SHARE or more, the largest first."""
    from replay.limits import LIMITS
    return [(name, row[name]) for name in sorted(LIMITS, key=lambda n: -(row[n] or 0))
            if (row[name] or 0) >= SHOWN_SHARE]


def differed(row: dict) -> str:
    """What an anomalous condition's runs show beside its limit's model: the share of their time at that limit
    and the largest others, the smallest RTT measured against the link's, the CPU an end was busy."""
    label = row["limited_by"]
    others = ", ".join(f"{name} {share:.0%}" for name, share in shown_shares(row) if name != label)
    parts = [f"{row[label]:.0%} of the time at {label}" + (f" (the rest: {others})" if others else "")]
    configured = row["delay_ms"] + (row.get("delay_up_ms") or 0)
    if row.get("min_rtt_ms") and configured and row["min_rtt_ms"] > configured * (1 + SLACK):
        parts.append(f"smallest RTT {row['min_rtt_ms']:.1f} ms against the link's {configured:g} ms")
    if label in CPU_ENDS and row.get(f"{CPU_ENDS[label]}_cpu_share") is not None:
        parts.append(f"the {CPU_ENDS[label]} busy {row[f'{CPU_ENDS[label]}_cpu_share']:.0%} of the run")
    return "; ".join(parts)


def why_lines(results: Path) -> list[str]:
    """The report as lines: the anomalies first (conditions whose mean goodput falls short of what their limit's
    model allows, and else any of their runs short of what its own limit allows: more than SLACK below a window
    model's lower bound, CEILING_SLACK below the link's rate or a core's worth of the busier end's CPU per GB; a
    condition with what differed), then each experiment headed by what its conditions share and one line per condition (those that differ): the limit most of its traced runs were held
    by, how many agree, the mean share of every limit above SHOWN_SHARE, the mean goodput, the model's
    prediction where there is one and, for a CPU limit, that end's profile's largest components."""
    from replay import statistics, store
    from replay.measured_rules import load_update_rules
    con = store.open_read_only(results)
    try:
        summary = statistics.limits_summary(con)
        shared, profiles = profile_components(con)
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
                lines.append(f"{head}{row['runs']} runs, no breakdown: {row['no_breakdown']}; {goodput}"
                             if row.get("no_breakdown") else
                             f"{head}{row['runs']} runs, none traced (qreplay --trace stores what held a run "
                             f"back); {goodput}")
                continue
            shares = ", ".join(f"{name} {share:.0%}" for name, share in shown_shares(row))
            components = profiles.get((experiment, *(row[k] for k in shared)))
            bound = prediction(row, rules, components)
            predicted = f" ({bound.basis}: {bound.text()} Mbit/s)" if bound else ""
            profiled = ""
            if row["limited_by"] in CPU_ENDS and components and (end := CPU_ENDS[row["limited_by"]]) in components:
                profiled = f"; {end} profile: " + ", ".join(
                    f"{name} {share:.0%}" for name, share, _ in components[end][:SHOWN_COMPONENTS])
            lines.append(f"{head}{row['limited_by']} ({row['agreeing']} of {row['traced']} traced runs; "
                         f"{row['runs']} runs); time at each limit: {shares}; {goodput}{predicted}{profiled}")
            if bound and bound.short_of(row["mean_mbps"]):
                anomalies.append(f"  experiment {experiment[:8]}, {statistics.describe(row, differing)}: "
                                 f"{goodput}, below what its {row['limited_by']} allows ({bound.basis}: "
                                 f"{bound.text()} Mbit/s); {differed(row)}")
                continue
            for run, run_bound in short_runs(row, rules, components):
                anomalies.append(f"  experiment {experiment[:8]}, {statistics.describe(row, differing)}, run "
                                 f"{run['run_id'][:8]}: {run['goodput_mbps']:,.1f} Mbit/s (its condition's mean "
                                 f"{goodput}), below what its {run['limited_by']} allows ({run_bound.basis}: "
                                 f"{run_bound.text()} Mbit/s)")
    if anomalies:
        lines = ["anomalies (goodput well short of its limit's model):", *anomalies, *lines]
    return lines or [f"{results} holds no runs"]


def register(app: typer.Typer) -> None:
    @app.command("why", epilog="Example: qreplay why replay.duckdb")
    def why(results: Annotated[Path, typer.Argument(help="A qreplay results DuckDB file.")]) -> None:
        """What held the runs back, per experiment and condition: the limit each traced run (--trace) spent the
        most of its transfer at (receive window, link, congestion window, CPU, ...) and the shares of all."""
        for line in why_lines(results):
            typer.echo(line)
