"""`qreplay plot results.duckdb`: the thesis's figure types from a results file, as PNG plus one HTML page."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Annotated, Optional

import typer

from common.cliapp import output_dir
from tparams.errors import ToolError
from tparams.workloads import REQUESTS


def load_summary(results: Path):
    """Per-experiment, per-condition statistics (replay/statistics.py) as a polars DataFrame."""
    from replay import statistics, store
    import duckdb

    con = store.open_read_only(results)
    try:
        return statistics.summary(con)
    except duckdb.Error as exc:
        raise ToolError(f"{results} is not a qreplay results file: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()


def _caption(ax, frame, x: str) -> None:
    """The conditions every series shares, under the figure: what the figure holds fixed."""
    from replay import statistics
    ax.annotate(f"all: {statistics.shared(frame, exclude=(x,))}", (0, 0), (0, -34), xycoords="axes fraction",
                textcoords="offset points", fontsize="x-small", va="top", wrap=True)


def measured(frame) -> tuple[str, str, str]:
    """(mean column, standard deviation column, axis label) of what a figure's runs measure: requests per second
    where every run made many requests (tparams.workloads.REQUESTS), else goodput."""
    if "workload" in frame.columns and frame["workload"].eq_missing(REQUESTS.name).all():
        return "mean_requests_per_s", "stddev_requests_per_s", "requests per second"
    return "mean_mbps", "stddev_mbps", "goodput (Mbit/s)"


def plot_results(results: Path, out_dir: Path) -> list[Path]:
    """Write goodput-vs-delay, sweep and packet-count figures; returns the PNG paths plus the HTML page."""
    from replay import statistics
    from replay.figures import draw_band, legend_beside, pyplot, save_png
    import polars as pl

    plt = pyplot()

    summary = load_summary(results).filter(pl.col("n") > 0)
    if summary.is_empty():
        raise ToolError(f"{results} has no successful runs to plot")
    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, Path]] = []

    plain = summary.filter(pl.col("sweep_param").is_null())
    if not plain.is_empty():
        fig, ax = plt.subplots(figsize=(8, 5))
        mean, sd, ylabel = measured(plain)
        for label, points in statistics.series(plain, "delay_ms"):
            draw_band(ax, points["delay_ms"].to_list(), points[mean].to_list(), points[sd].to_list(), label)
        ax.set(xlabel="added one-way delay (ms)", ylabel=ylabel,
               title=f"{ylabel[0].upper()}{ylabel[1:]} vs delay (band: ±1 standard deviation)")
        legend_beside(ax, fontsize="small")
        _caption(ax, plain, "delay_ms")
        figures.append(("Goodput vs delay", save_png(fig, out_dir / "goodput_vs_delay.png")))

    swept = summary.filter(pl.col("sweep_param").is_not_null())
    for param in swept["sweep_param"].unique().sort().to_list():
        frame = swept.filter(pl.col("sweep_param") == param)
        series = statistics.series(frame, "sweep_value")
        fig, ax = plt.subplots(figsize=(8, 5))
        mean, sd, ylabel = measured(frame)
        for label, points in series:
            draw_band(ax, points["sweep_value"].to_list(), points[mean].to_list(), points[sd].to_list(), label)
        ax.set_xscale("log")
        unit = "streams" if param.startswith("initial_max_streams") else "bytes"
        ax.set(xlabel=f"{param} ({unit})", ylabel=ylabel, title=f"Sweep of {param}")
        legend_beside(ax, fontsize="small")
        _caption(ax, frame, "sweep_value")
        figures.append((f"Sweep of {param}", save_png(fig, out_dir / f"sweep_{param}.png")))

        fig, ax = plt.subplots(figsize=(8, 5))
        for label, points in series:
            drawn = ax.plot(points["sweep_value"], points["mean_client_tx_packets"], marker="o",
                            label=f"client sent, {label}")
            ax.plot(points["sweep_value"], points["mean_server_tx_packets"], marker="s", linestyle="--",
                    color=drawn[0].get_color(), label=f"server sent, {label}")
        ax.set_xscale("log")
        ax.set(xlabel=f"{param} (bytes)", ylabel="packets per download (mean)",
               title=f"Packets per download, sweep of {param}")
        legend_beside(ax, fontsize="small")
        _caption(ax, frame, "sweep_value")
        figures.append((f"Packet counts, {param}", save_png(fig, out_dir / f"packets_{param}.png")))

    held = load_limits(results).filter(pl.col("traced") > 0)
    if not held.is_empty():
        figures.append(("What held the runs back", limits_figure(held, out_dir / "limits.png")))

    page = out_dir / "report.html"
    page.write_text(_html(results, figures, summary))
    return [path for _, path in figures] + [page]


def load_limits(results: Path):
    """Per experiment and condition, what held the traced runs back (statistics.limits_summary)."""
    from replay import statistics, store
    con = store.open_read_only(results)
    try:
        return statistics.limits_summary(con)
    finally:
        con.close()


def limits_figure(frame, out: Path) -> Path:
    """One stacked bar per traced condition, the mean share of its transfer's time at each limit
    (replay/limits.py), with its mean goodput beside it on the right-hand axis."""
    from replay import statistics
    from replay.figures import legend_beside, pyplot, save_png
    from replay.limits import LIMITS

    plt = pyplot()
    differing = statistics.varying(frame)
    key = [f"{i}: {statistics.describe(row, differing)}" for i, row in enumerate(frame.iter_rows(named=True), 1)]
    fig, ax = plt.subplots(figsize=(max(7.0, 0.8 * frame.height + 4), 5 + 0.18 * len(key)))
    colours = dict(zip(LIMITS, plt.get_cmap("tab10").colors))
    bottoms = [0.0] * frame.height
    for name in LIMITS:
        heights = [row[name] or 0.0 for row in frame.iter_rows(named=True)]
        if any(heights):
            ax.bar(range(frame.height), heights, bottom=bottoms, color=colours[name], width=0.6, label=name)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
    goodput = ax.twinx()
    goodput.plot(range(frame.height), frame["mean_mbps"].to_list(), "kD", label="goodput")
    goodput.set_ylim(0, (frame["mean_mbps"].max() or 1) * 1.15)
    goodput.set_ylabel("goodput (Mbit/s, black diamonds)")
    # numbered bars and a key under the axes: a condition's words are too long for a tick
    ax.set_xticks(range(frame.height), [str(i) for i in range(1, frame.height + 1)])
    ax.set(ylim=(0, 1), ylabel="share of the transfer's time", title="What held the runs back, beside goodput")
    legend_beside(ax, fontsize="x-small", bbox_to_anchor=(1.1, 1.0))  # past the goodput axis's label
    ax.annotate("\n".join([*key, f"all: {statistics.shared(frame)}"]), (0, 0), (0, -24), xycoords="axes fraction",
                textcoords="offset points", fontsize="x-small", va="top", wrap=True)
    return save_png(fig, out)


def traced_runs(results: Path, run_id: str | None):
    """(run, its points) per traced run: ``run_id`` (a prefix will do), else the newest traced run of
    each stack."""
    from replay import store
    import duckdb

    con = store.open_read_only(results)
    try:
        runs = con.sql("SELECT r.run_id, r.stack, r.set_name, r.delay_ms, r.goodput_mbps, r.started_at, r.workload, "
                       "t.initial_max_data, t.initial_max_stream_data_bidi_local, t.undecrypted "
                       "FROM runs r JOIN traces t USING (run_id) "
                       "WHERE t.points > 0 ORDER BY r.started_at").pl()  # an upload traced before had no series
    except duckdb.Error as exc:
        raise ToolError(f"{results} holds no traces (run with --trace): {str(exc).splitlines()[0]}") from None
    if run_id:
        runs = runs.filter(runs["run_id"].str.starts_with(run_id))
        if runs.is_empty():
            raise ToolError(f"{results} has no traced run {run_id}")
    else:
        runs = runs.group_by("stack", maintain_order=True).last()
    if runs.is_empty():
        raise ToolError(f"{results} has no traced runs (run with --trace)")
    out = [(run, con.sql(f"SELECT * FROM trace_points WHERE run_id = '{run['run_id']}' ORDER BY seq").pl())
           for run in runs.iter_rows(named=True)]
    con.close()
    return out


def credit_axis(sent_kb: float, credits_kb: dict[str, float]) -> tuple[float, list[str]]:
    """(the top of a credit-vs-sent axis, a note for each credit line above it). The axis takes the credit
    lines up to three downloads high; a connection window far above the download would flatten the rest,
    so such a line is named at the axis's top edge instead of vanishing above it."""
    sent_kb = max(sent_kb, 1e-3)
    top = max([sent_kb, *(c for c in credits_kb.values() if c <= 3 * sent_kb)]) * 1.15
    return top, [f"{name} reaches {credit:,.0f} kB, above the axis" for name, credit in credits_kb.items()
                 if credit > top]


def plot_traces(results: Path, out_dir: Path, run_id: str | None = None) -> list[Path]:
    """Per traced run one figure: (a) credit vs bytes sent (a window stall is the sent line on the credit
    line), BLOCKED frames marked; (b) bytes acknowledged; (c) bytes in flight (+ cwnd where known);
    (d) RTT samples. Returns the PNGs and the HTML page."""
    from replay.figures import legend_beside, pyplot, save_png
    import polars as pl

    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, Path]] = []
    for run, points in traced_runs(results, run_id):
        # the data's direction: an upload's sender is the client (its points as the server's capture tells them)
        down = points.filter(pl.col("direction") == ("up" if run.get("workload") == "upload" else "down"))
        fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
        ax = axes[0]
        ax.step(points["t_s"], points["stream_credit"] / 1e3, where="post", linewidth=3, alpha=0.5,
                label="stream credit (MAX_STREAM_DATA)")
        ax.step(points["t_s"], points["conn_credit"] / 1e3, where="post", label="connection credit (MAX_DATA)")
        ax.plot(down["t_s"], down["sent_max"] / 1e3, label="sent (highest offset)")
        for column, marker, label in (("stream_data_blocked", "v", "STREAM_DATA_BLOCKED"),
                                      ("data_blocked", "x", "DATA_BLOCKED")):
            blocked = down.filter(pl.col(column).is_not_null())
            if not blocked.is_empty():
                ax.scatter(blocked["t_s"], blocked[column] / 1e3, marker=marker, color="red", label=label, zorder=3)
        top, above = credit_axis((down["sent_max"].max() or 0) / 1e3,
                                 {name: (points[column].max() or 0) / 1e3 for name, column in
                                  (("stream credit", "stream_credit"), ("connection credit", "conn_credit"))})
        ax.set_ylim(0, top)
        for offset, text in enumerate(above):
            ax.annotate(text, (1, 1), xycoords="axes fraction", xytext=(-4, -12 - 11 * offset),
                        textcoords="offset points", ha="right", fontsize="small")
        ax.set(ylabel="kB", title=f"{run['stack']}, {run['set_name']}, {run['delay_ms']:g} ms: credit vs sent")
        legend_beside(ax, fontsize="small")
        axes[1].plot(points["t_s"], points["acked"] / 1e3, color="green")
        axes[1].set(ylabel="kB acknowledged", title="bytes acknowledged")
        axes[2].plot(points["t_s"], points["in_flight"] / 1e3, label="in flight")
        if points["cwnd"].drop_nulls().len():
            axes[2].plot(points["t_s"], points["cwnd"] / 1e3, label="cwnd (qlog)")
        axes[2].set(ylabel="kB", title="bytes in flight")
        legend_beside(axes[2], fontsize="small")
        rtt = points.filter(pl.col("rtt_ms").is_not_null())
        axes[3].scatter(rtt["t_s"], rtt["rtt_ms"], s=6)
        axes[3].set(ylabel="ms", xlabel="time since the request reached the server (s)", title="RTT samples")
        for ax in axes:
            ax.grid(alpha=0.3)
        title = f"Trace {run['run_id'][:12]} ({run['stack']})"
        figures.append((title, save_png(fig, out_dir / f"trace_{run['run_id'][:12]}.png")))
    page = out_dir / "report.html"
    page.write_text(_html(results, figures, load_summary(results)))
    return [path for _, path in figures] + [page]


def profiled_runs(results: Path, run_id: str | None):
    """(the profiled runs to draw: ``run_id``, a prefix will do, else the newest of each condition; their
    folded stacks by (run, endpoint); the file's profile_summary)."""
    from replay import statistics, store
    import duckdb

    con = store.open_read_only(results)
    try:
        conditions = statistics.present_conditions(con)
        runs = con.sql(f"SELECT run_id, goodput_mbps, started_at, experiment_id, {', '.join(conditions)} "
                       "FROM runs WHERE run_id IN (SELECT run_id FROM profiles) ORDER BY started_at").pl()
        if run_id:
            runs = runs.filter(runs["run_id"].str.starts_with(run_id))
        if runs.is_empty():
            raise ToolError(f"{results} has no profiled run{' ' + run_id if run_id else 's (run with --profile)'}")
        if not run_id:
            runs = runs.group_by(conditions, maintain_order=True).last()
        stacks = {(run["run_id"], endpoint): dict(con.execute(
            "SELECT folded, samples FROM profile_stacks WHERE run_id = ? AND endpoint = ?",
            [run["run_id"], endpoint]).fetchall()) for run in runs.iter_rows(named=True)
            for endpoint in ("client", "server")}
        summary = con.sql(statistics.profile_summary_sql(conditions)).pl()
    except duckdb.Error as exc:
        raise ToolError(f"{results} holds no profiles (run with --profile): {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    return runs, stacks, summary


def components_figure(summary, out: Path, title: str) -> Path:
    """Stacked bars of CPU seconds per GB by component, a client and a server bar per stack pair, one panel
    per delay (the Kempf thesis's figure 5.1, in CPU time per byte rather than shares)."""
    from replay.figures import legend_beside, pyplot, save_png
    import polars as pl

    from replay.profile import COMPONENTS, UNMAPPED

    plt = pyplot()
    delays = summary["delay_ms"].unique().sort().to_list()
    fig, axes = plt.subplots(len(delays), 1, figsize=(11, 4.2 * len(delays)), squeeze=False)
    colours = dict(zip((*COMPONENTS, UNMAPPED), plt.get_cmap("tab10").colors))
    for ax, delay in zip(axes[:, 0], delays):
        at = summary.filter(pl.col("delay_ms") == delay)
        bars = at.select("stack", "server_stack", "endpoint").unique().sort("stack", "server_stack", "endpoint")
        bottoms = [0.0] * bars.height
        for component in (*COMPONENTS, UNMAPPED):
            cells = bars.join(at.filter(pl.col("component") == component).group_by(
                "stack", "server_stack", "endpoint").agg(pl.col("mean_cpu_s_per_gb").mean()),
                on=["stack", "server_stack", "endpoint"], how="left", maintain_order="left")
            heights = cells["mean_cpu_s_per_gb"].fill_null(0.0).to_list()
            ax.bar(range(bars.height), heights, bottom=bottoms, color=colours[component], label=component)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        # a bar far above the rest (a Python endpoint) is cut at the axis's top, its total written there
        usual = sorted(bottoms)[len(bottoms) // 2] * 5 or 1.0
        top = max([b for b in bottoms if b <= usual] or [usual]) * 1.15
        ax.set_ylim(0, top)
        for x, total in enumerate(bottoms):
            if total > top:
                ax.annotate(f"{total:,.0f}", (x, top), xytext=(0, -12), textcoords="offset points", ha="center",
                            fontsize="small", color="white", fontweight="bold")
        labels = [f"{b['stack'] if b['endpoint'] == 'client' else b['server_stack']}\n{b['endpoint']}"
                  + ("" if b["stack"] == b["server_stack"] else f"\n({b['stack']}-{b['server_stack']})")
                  for b in bars.iter_rows(named=True)]
        ax.set_xticks(range(bars.height), labels, fontsize="small")
        ax.set(ylabel="CPU seconds per GB", title=f"{title}, {delay:g} ms")
        ax.grid(axis="y", alpha=0.3)
    legend_beside(axes[0, 0], fontsize="small")
    return save_png(fig, out)


def plot_profiles(results: Path, out_dir: Path, run_id: str | None = None) -> list[Path]:
    """A flame graph (SVG, drawn by inferno) of each endpoint of the newest profiled run of every condition
    (or of ``run_id``), and one figure of CPU seconds per GB by component over every profiled condition.
    Returns the PNG, the SVGs and the HTML page."""
    from replay.profile import flame_graph

    runs, stacks, summary = profiled_runs(results, run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = [("Where the cycles go", components_figure(summary, out_dir / "profile_components.png",
                                                         "CPU per GB of payload by component"))]
    graphs = []
    for run in runs.iter_rows(named=True):
        for endpoint in ("client", "server"):
            library = run["stack"] if endpoint == "client" else run["server_stack"]
            if stacks[(run["run_id"], endpoint)]:
                title = (f"{library} {endpoint}, {run['delay_ms']:g} ms, run {run['run_id'][:12]} "
                         f"({run['goodput_mbps'] or 0:.0f} Mbit/s)")
                graphs.append(flame_graph(stacks[(run["run_id"], endpoint)],
                                          out_dir / f"flame_{run['run_id'][:12]}_{endpoint}.svg", title))
    page = out_dir / "report.html"
    links = "".join(f"<li><a href='{g.name}'>{html.escape(g.name)}</a></li>" for g in graphs)
    page.write_text(_html(results, figures, load_summary(results)) + f"<h2>Flame graphs</h2><ul>{links}</ul>")
    return [path for _, path in figures] + graphs + [page]


def _html(results: Path, figures: list[tuple[str, Path]], summary) -> str:
    """One self-contained page: the figures inline, then the statistics table with every condition that
    differs among its rows."""
    from replay import statistics
    from replay.figures import embedded_img
    parts = [f"<!doctype html><meta charset=utf-8><title>qreplay: {html.escape(results.name)}</title>",
             f"<h1>qreplay results: {html.escape(str(results))}</h1>"]
    for title, path in figures:
        parts.append(f"<h2>{html.escape(title)}</h2>{embedded_img(title, path)}")
    columns = [*(statistics.varying(summary) or ["set_name"]), "runs", "n", "mean_mbps", "stddev_mbps", "ci95",
               "client_socket_drop_pct"]
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(row, c))}</td>" for c in columns) + "</tr>"
                   for row in summary.iter_rows(named=True))
    parts.append("<h2>Statistics (successful runs)</h2><table border=1 cellpadding=3><tr>"
                 + "".join(f"<th>{c}</th>" for c in columns) + f"</tr>{rows}</table>")
    return "\n".join(parts)


def _cell(row: dict, column: str) -> str:
    if column == "ci95":
        return "" if row["ci95_low"] is None else f"{row['ci95_low']:.1f} to {row['ci95_high']:.1f}"
    value = row[column]
    return f"{value:.1f}" if isinstance(value, float) else "" if value is None else str(value)


def register(app: typer.Typer) -> None:
    @app.command("plot", epilog="Example: qreplay plot replay.duckdb --out-dir plots")
    def plot(
        results: Annotated[Path, typer.Argument(help="A qreplay results DuckDB file.")],
        run_id: Annotated[str | None, typer.Argument(help="With --trace or --profile: the run to draw (an id "
                                                        "prefix); default: the newest traced run of each stack, the "
                                                        "newest profiled run of each condition.")] = None,
        out_dir: Annotated[Optional[Path], typer.Option("--out-dir", callback=output_dir, help="Where to write the "
                                                        "PNGs and report.html (default: <results>-plots).")] = None,
        trace: Annotated[bool, typer.Option("--trace", help="Draw traced runs (qreplay --trace): credit vs sent, "
                                                            "acknowledged, in flight, RTT over time.")] = False,
        profile: Annotated[bool, typer.Option("--profile", help="Draw profiled runs (qreplay --profile): a flame "
                                              "graph (SVG) of each endpoint, CPU per GB by component.")] = False,
    ) -> None:
        """Goodput vs delay per set with deviation bands, sweep curves and packet counts, and for traced runs what
        held them back beside their goodput (PNG + HTML)."""
        out_dir = out_dir or results.with_name(results.stem + "-plots")
        if run_id and not (trace or profile):
            raise ToolError("a RUN_ID is for --trace or --profile")
        if trace and profile:
            raise ToolError("--trace and --profile draw different pages: give one")
        written = (plot_traces(results, out_dir, run_id) if trace else plot_profiles(results, out_dir, run_id)
                   if profile else plot_results(results, out_dir))
        for path in written:
            typer.echo(str(path))
