"""`qreplay impact`'s edges: the distinct server sets of a scan file or campaign directory read, the prediction
(replay/impact.py) run over them, and its tables (DuckDB, Parquet), report (Markdown, HTML) and figures written.

    result = run_impact("scan.duckdb", "out/impact", ImpactOptions())
    result.predictions            # one row per set x browser x round-trip time
    spot_check_candidates(result.predictions)
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from common.markdown import markdown_table
from replay import impact, impact_check
from replay.figures import legend_beside, markdown_page, pyplot, save_png
from replay.flowcontrol import UpdateRule
from replay.measured_rules import load_update_rules, load_upload_receiver_rules
from replay.impact_check import CheckOptions, Execute, mark_checked, run_checks
from replay.sets import resolve_one
from tparams.errors import ToolError, first_line
from tparams.libraries import LIBRARIES
from tparams.paramset import PERFORMANCE_PARAMETERS

# The scan components this reads, at the versions it knows (scanner/store.py, scanner/identify.py).
SCAN_VERSION = 3
LIBRARY_VERSION = 2
BROWSERS = ("chromium", "firefox")
# One colour a parameter in both figures.
COLOURS = {"initial_max_stream_data_bidi_remote": "tab:blue", "initial_max_data": "tab:orange",
           "initial_max_streams_bidi": "tab:green"}


@dataclass(frozen=True)
class ImpactOptions:
    delays_ms: tuple[float, ...] = impact.DELAYS_MS
    rate_mbps: float = impact.RATE_MBPS
    upload_bytes: int = impact.UPLOAD_BYTES
    objects: int = impact.PAGE_OBJECTS
    object_bytes: int = impact.OBJECT_BYTES
    request_bytes: int = impact.REQUEST_BYTES
    concurrency: int | None = None
    assumed_fraction: float = impact.ASSUMED_FRACTION
    top: int = 3
    worst: int = 3
    check: CheckOptions | None = None  # None: predict only; else run the candidates with the browsers


@dataclass
class ImpactResult:
    scan: str
    endpoints: int
    sets: int
    predictions: pl.DataFrame
    checks: pl.DataFrame | None = None
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        """A few lines for the terminal: per browser, the share of endpoints whose upload is capped below the
        link and whose page load a server parameter slows, at each round-trip time."""
        upload = self.tables["upload_shares"]
        page = self.tables["page_shares"]
        capped = (upload.filter(pl.col("upload_binding") != impact.LINK).group_by("browser", "rtt_ms")
                  .agg(pl.col("share_pct").sum()))
        slowed = (page.filter(pl.col("page_binding") != impact.NONE).group_by("browser", "rtt_ms")
                  .agg(pl.col("share_pct").sum()))
        assumed = (self.tables["rules"].filter(pl.col("rule_assumed") & (pl.col("browser") == BROWSERS[0]))
                   ["endpoints"].sum())
        lines = [f"impact: {self.sets:,} distinct sets x library of {self.endpoints:,} endpoints in {self.scan}; "
                 f"receiver rule assumed for {assumed:,} endpoints ({100 * assumed / self.endpoints:.1f}%)"]
        rtts = sorted(self.predictions["rtt_ms"].unique())
        for browser in BROWSERS:
            def text(frame: pl.DataFrame) -> str:
                shares = dict(frame.filter(pl.col("browser") == browser).select("rtt_ms", "share_pct").iter_rows())
                return ", ".join(f"{rtt:g} ms {shares.get(rtt, 0.0):.1f}%" for rtt in rtts)
            lines.append(f"{browser}: upload capped below the link: {text(capped)}; "
                         f"page load slowed by the server's set: {text(slowed)}")
        lines.append(self.check_line())
        return lines

    def check_line(self) -> str:
        """One line on the spot checks: how many cases were measured, how many of the window-bound ones came
        within the tolerance, how many sets could not be checked."""
        if self.checks is None:
            return "not checked with real browsers (checked = false); candidates: qreplay impact's spot_checks table"
        unchecked = self.checks.filter(~pl.col("checked"))["set_fingerprint"].n_unique()
        return (f"{self.measured()} with real browsers; {self.bound_within()}; {unchecked} sets with a case not "
                "checked (why: spot_check_results)")

    def measured(self) -> str:
        """How many of the spot checks' cases were measured, in words (the demo's headline says it too)."""
        return f"spot checks: {self.checks.filter(pl.col('checked')).height} of {self.checks.height} cases measured"

    def bound_within(self) -> str:
        """How many of the measured window-bound cases came within the tolerance of predicted, in words (a
        small download's cases may have none: their start bounds them, not a window)."""
        bound = self.checks.filter(pl.col("checked") & pl.col("window_bound"))
        if not bound.height:
            return "none window-bound as measured, so none to hold against the window model"
        return (f"window-bound {bound['within_tolerance'].sum()} of {bound.height} within "
                f"{impact_check.TOLERANCE:.0%} of predicted")


def read_sets(path: str | Path) -> tuple[pl.DataFrame, int]:
    """The distinct sets of a scan file or campaign directory, one row per set and identified library, each
    endpoint counted once (its latest handshake, its latest verdict); and the endpoints. Bad scans: ToolError."""
    from scanner.campaign_store import connect_scan  # the scanner's reader: files and campaigns alike

    con = connect_scan(path)
    try:
        _check_scan(con, str(path))
        frame = con.sql(f"""
            WITH latest AS (
                SELECT DISTINCT ON (ip, port, sni) ip, port, set_fingerprint, {', '.join(PERFORMANCE_PARAMETERS)}
                FROM server_params ORDER BY ip, port, sni, handshake_id DESC
            ), verdicts AS (
                SELECT DISTINCT ON (ip, port) ip, port, library FROM server_library ORDER BY ip, port, identified_at DESC
            )
            SELECT set_fingerprint, v.library, count(*) AS endpoints,
                   {', '.join(f'any_value({c}) AS {c}' for c in PERFORMANCE_PARAMETERS)}
            FROM latest LEFT JOIN verdicts v USING (ip, port)
            GROUP BY set_fingerprint, v.library
            ORDER BY endpoints DESC, set_fingerprint, v.library
        """).pl()
    except duckdb.Error as exc:
        raise ToolError(f"cannot read {path}: {first_line(exc)}") from None
    finally:
        con.close()
    return frame, int(frame["endpoints"].sum())


def _check_scan(con: duckdb.DuckDBPyConnection, path: str) -> None:
    versions = dict(con.execute("SELECT name, version FROM schema_version").fetchall())
    for name, known in (("scan", SCAN_VERSION), ("library", LIBRARY_VERSION)):
        if versions.get(name) is not None and versions[name] != known:
            raise ToolError(f"{path} has schema {name} v{versions[name]}; this qreplay reads v{known}")
    relations = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "server_params" not in relations:
        raise ToolError(f"{path} has no server_params: not a qscan handshake scan")
    if not con.execute("SELECT count(*) FROM server_params").fetchall()[0][0]:
        raise ToolError(f"{path} has no completed handshake (server_params is empty): no server set to predict for")
    if "server_library" not in relations or not con.execute("SELECT count(*) FROM server_library").fetchall()[0][0]:
        raise ToolError(f"{path} has no library identified (no server_library rows): scan with "
                        "`qscan targets --identify`, whose verdicts say whose window rule applies")


def browser_clients(concurrency: int | None = None) -> list[impact.BrowserClient]:
    """Chromium and Firefox as the prediction sees them: their newest captured sets' connection windows, their
    measured update rules (rules.csv), their congestion windows from their sources."""
    rules = load_update_rules()
    clients = []
    for name in BROWSERS:
        window = resolve_one(name).params.as_sent().get("initial_max_data")
        if window is None or name not in rules:
            raise ToolError(f"no captured set or measured rule of {name} (datasets/sets, datasets/flowcontrol)")
        clients.append(impact.BrowserClient(name, *impact.BROWSER_CWND[name], window, rules[name].consumed_fraction,
                                            concurrency))
    return clients


def rule_keys() -> dict[str, str]:
    """Identification's library name -> its replay stack's (tparams.libraries; the first stack of a name)."""
    keys: dict[str, str] = {}
    for library in LIBRARIES:
        keys.setdefault(library.identified_as, library.name)
    return keys


def h3_servers() -> dict[str, str]:
    """Identification's library name -> the stack whose h3 server serves a browser's page (the spot check's)."""
    from replay.stacks import every_stack

    servers: dict[str, str] = {}
    for stack in every_stack().values():
        if stack.serves_page and stack.serves("h3") and stack.library is not None:
            servers.setdefault(stack.library.identified_as, stack.name)
    return servers


def predict_sent(sent: Mapping[str, int | None], library: str, server: str, browser: str, delay_ms: float,
                 rate_mbps: float, *, upload_bytes: int = impact.UPLOAD_BYTES, objects: int = impact.PAGE_OBJECTS,
                 object_bytes: int = impact.OBJECT_BYTES, rules: Mapping[str, UpdateRule] | None = None) -> dict:
    """The prediction row for one run: what its server (stack ``server``, library ``library``) sent, its browser,
    delay and sizes, each h3 server's measured upload rule where there is one (a script holding traced runs
    against the model, scripts/page_load_senders.py, scripts/upload_window_growth.py); ``rules``: the stacks'
    rules (default: load_update_rules())."""
    sets = pl.DataFrame({"set_fingerprint": ["run"], "library": [library], "endpoints": [1],
                         **{name: [sent.get(name)] for name in impact.SET_COLUMNS}},
                        schema_overrides={name: pl.Int64 for name in impact.SET_COLUMNS})
    return impact.predict(sets, [b for b in browser_clients() if b.name == browser],
                          load_update_rules() if rules is None else rules, rule_keys(), {library: server},
                          delays_ms=(delay_ms,), rate_mbps=rate_mbps, upload_bytes=upload_bytes, objects=objects,
                          object_bytes=object_bytes, upload_rules=load_upload_receiver_rules()).row(0, named=True)


def run_impact(scan: str | Path, out_dir: str | Path | None, options: ImpactOptions = ImpactOptions(),
               execute: Execute | None = None) -> ImpactResult:
    """Predict for every set of ``scan``; with ``options.check``, run the spot checks (their runs into
    ``out_dir``/spot_checks.duckdb, or ``execute``'s way); with ``out_dir``, write the tables, report and
    figures there."""
    sets, endpoints = read_sets(scan)
    rules, keys, servers = load_update_rules(), rule_keys(), h3_servers()
    upload_rules = load_upload_receiver_rules()
    predictions = impact.predict(
        sets, browser_clients(options.concurrency), rules, keys, servers,
        delays_ms=options.delays_ms, rate_mbps=options.rate_mbps, upload_bytes=options.upload_bytes,
        objects=options.objects, object_bytes=options.object_bytes, request_bytes=options.request_bytes,
        assumed_fraction=options.assumed_fraction, upload_rules=upload_rules)
    candidates = impact.spot_check_candidates(predictions, options.top, options.worst)
    checks = None
    if options.check is not None:
        if out_dir is None:
            raise ToolError("the spot checks store their runs: give an output directory")
        check = options.check
        chosen = sets.join(candidates.select("set_fingerprint", "library"), on=["set_fingerprint", "library"],
                           nulls_equal=True)
        # the prediction again, for the check's own sizes and round-trip times: measured beside predicted alike
        at_check = impact.predict(
            chosen, browser_clients(check.objects), rules, keys, servers, delays_ms=check.delays_ms,
            rate_mbps=options.rate_mbps, upload_bytes=check.upload_bytes, objects=check.objects,
            object_bytes=check.object_bytes, request_bytes=options.request_bytes,
            assumed_fraction=options.assumed_fraction, upload_rules=upload_rules)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        checks = run_checks(str(scan), sets, candidates, at_check, check, options.rate_mbps,
                            Path(out_dir) / "spot_checks.duckdb", execute)
        predictions = mark_checked(predictions, checks)
    result = ImpactResult(str(scan), endpoints, sets.height, predictions, checks, {
        "predictions": predictions,
        "upload_shares": impact.endpoint_shares(predictions, "upload_binding"),
        "page_shares": impact.endpoint_shares(predictions, "page_binding"),
        "lifting_values": impact.lifting_values(predictions),
        "rules": impact.rule_table(predictions),
        "spot_checks": candidates,
        **({} if checks is None else {"spot_check_results": checks}),
    })
    if out_dir is not None:
        result.files = write_outputs(result, Path(out_dir), options)
    return result


def write_outputs(result: ImpactResult, out_dir: Path, options: ImpactOptions) -> list[Path]:
    """impact.duckdb (every table), one Parquet file a table, report.md, report.html and the figures. The
    DuckDB file is written beside its place and renamed into it: a failed run leaves the last one whole."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    staging = out_dir / f".impact-{os.getpid()}.duckdb"
    staging.unlink(missing_ok=True)
    try:
        with duckdb.connect(str(staging)) as con:
            for name, frame in result.tables.items():
                con.register("_frame", frame.to_arrow())
                con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM _frame')
                con.unregister("_frame")
        shutil.move(staging, out_dir / "impact.duckdb")
    finally:
        staging.unlink(missing_ok=True)
    written.append(out_dir / "impact.duckdb")
    for name, frame in result.tables.items():
        frame.write_parquet(out_dir / f"{name}.parquet")
        written.append(out_dir / f"{name}.parquet")
    figures = _figures(result, out_dir)
    markdown = _markdown(result, options, figures)
    (out_dir / "report.md").write_text(markdown)
    (out_dir / "report.html").write_text(markdown_page("qreplay impact", markdown, figures))
    return [*written, out_dir / "report.md", out_dir / "report.html", *(path for _, path in figures)]


def _figures(result: ImpactResult, out_dir: Path) -> list[tuple[str, Path]]:
    """Per browser, stacked bars of the endpoints' share by what binds, at each round-trip time."""
    plt = pyplot()
    drawn = []
    for table, column, free, what in (("upload_shares", "upload_binding", impact.LINK, "upload capped below the link"),
                                      ("page_shares", "page_binding", impact.NONE, "page load slowed")):
        frame = result.tables[table].filter(pl.col(column) != free)
        fig, axes = plt.subplots(1, len(BROWSERS), figsize=(10, 4), sharey=True, squeeze=False)
        rtts = [float(d) for d in sorted(result.predictions["rtt_ms"].unique())]
        causes = sorted(frame[column].unique().to_list())
        for ax, browser in zip(axes[0], BROWSERS):
            bottom = [0.0] * len(rtts)
            for cause in causes:
                shares = dict(frame.filter((pl.col("browser") == browser) & (pl.col(column) == cause))
                              .select("rtt_ms", "share_pct").iter_rows())
                heights = [shares.get(rtt, 0.0) for rtt in rtts]
                ax.bar([f"{rtt:g}" for rtt in rtts], heights, bottom=bottom, label=cause, color=COLOURS.get(cause))
                bottom = [b + h for b, h in zip(bottom, heights)]
            ax.set_title(browser)
            ax.set_xlabel("round-trip time (ms)")
            ax.set_ylim(0, 100)
        axes[0][0].set_ylabel(f"endpoints, % ({what})")
        if causes:
            legend_beside(axes[0][-1], title="binding parameter", fontsize="small")
        # (no apostrophe: the HTML page finds the image to embed by its alt text, escaped)
        title = f"Share of endpoints whose set leaves the {what}, per browser and binding parameter"
        fig.suptitle(title, fontsize="medium")
        drawn.append((title, save_png(fig, out_dir / f"{table}.png")))
    return drawn


def _markdown(result: ImpactResult, options: ImpactOptions, figures: list[tuple[str, Path]]) -> str:
    t = result.tables
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "# What the scanned server sets do to browsers (predicted)",
        f"Scan `{result.scan}`: {result.endpoints:,} endpoints, {result.sets:,} distinct sets x identified "
        f"library; predicted {when} (load {os.getloadavg()[0]:.1f}) by `qreplay impact` with: "
        + ", ".join(f"{k} {v}" for k, v in asdict(options).items()) + ".",
        "These are the window model's and the stream-credit model's predictions (replay/flowcontrol.py, "
        "replay/impact.py); `checked` is true only where a spot check measured the set with a real browser (the "
        "last section). A parameter not sent counts as RFC 9000's default, 0.",
        "## Uploads",
        f"The browser sends; the server's `initial_max_stream_data_bidi_remote` and `initial_max_data` bound its "
        f"flight at what the server re-opens a round trip (its library's update rule, the burst bound). A set "
        f"caps the upload when that is below the link's {options.rate_mbps:g} Mbit/s; the lifting value is the "
        f"window that would carry the link (the bandwidth-delay product over the rule's share).",
        _table(_pivot(t["upload_shares"], "upload_binding")),
        f"![{figures[0][0]}]({figures[0][1].name})",
        "Lifting values (endpoints whose upload the parameter caps, the median value they send, the value "
        "that lifts the cap; a range where the libraries' rules differ):",
        _table(t["lifting_values"]),
        "## Page loads",
        f"{options.objects} objects of {options.object_bytes:,} bytes, one request stream each "
        f"({impact.BROWSER_CONCURRENCY}); requests of {options.request_bytes} bytes (assumed). The stream limit "
        "`initial_max_streams_bidi` adds round trips when it holds requests back (stream_rounds), the server's "
        "windows when the requests' own bytes exceed them; the objects' bytes need slow start and the link.",
        _table(_pivot(t["page_shares"], "page_binding")),
        f"![{figures[1][0]}]({figures[1][1].name})",
        "## Receiver rules used, per identified library and browser",
        _table(t["rules"]),
        "Browsers as senders: " + "; ".join(f"{name}: {source}" for name, (_, source) in impact.BROWSER_CWND.items())
        + ".",
        "## Spot-check candidates",
        "The sets covering most endpoints (among as many, those whose library has an h3 server here first) and "
        "the worst ones, checked with real browsers through their own library's h3 server by `--check` (a set "
        "whose library has no h3 server here is predicted only):",
        _table(t["spot_checks"].select("why", "set_fingerprint", "library", "endpoints", *impact.SET_COLUMNS,
                                       "worst_upload_share", "worst_page_slowdown", "check_note")),
        *_check_section(result, options),
    ]
    return "\n\n".join(parts) + "\n"


def _check_section(result: ImpactResult, options: ImpactOptions) -> list[str]:
    if result.checks is None:
        return ["**Not spot-checked** (run with `--check`): `checked` is false in every row."]
    check = options.check
    return [
        "## Spot checks: measured beside predicted",
        f"Each case run {check.reps} time(s) with the real browser through the h3 server of the set's identified "
        f"library, in the testbed at {', '.join(f'{d:g}' for d in check.delays_ms)} ms (all of the delay on the "
        f"server-to-client direction, its rate {options.rate_mbps:g} Mbit/s; the upload's direction is not rate "
        f"limited): an upload of {check.upload_bytes:,} bytes (Mbit/s, the page's own clock to the server's "
        f"count) and a page of {check.objects} objects of {check.object_bytes:,} bytes requested at once (ms from "
        "the first request to the last body byte; the page's load opened the connection, so the predicted time "
        "leaves the handshake's round trip out). The prediction is the same model at the check's sizes. A run "
        "counts only where the server sent the set's values of the parameters the model uses (the browser's "
        f"capture). {result.check_line()}. The runs: `spot_checks.duckdb` (`qreplay plot`, `qreplay why`).",
        _table(result.checks.select("workload", "browser", "rtt_ms", "library", "set_fingerprint", "server_stack",
                                    "binding", "predicted", "measured", "ratio", "unit", "note")),
    ]


def _pivot(shares: pl.DataFrame, column: str) -> pl.DataFrame:
    """Shares as one row per browser and binding, one column per round-trip time."""
    wide = shares.with_columns(pl.format("{} ms", pl.col("rtt_ms").cast(pl.Int64)).alias("rtt")).pivot(
        on="rtt", index=["browser", column], values="share_pct", aggregate_function="sum").fill_null(0.0)
    return wide.sort("browser", column)


def _table(frame: pl.DataFrame) -> str:
    def cell(value: object) -> object:
        if isinstance(value, float):
            return f"{value:,.0f}" if value.is_integer() or abs(value) >= 1000 else f"{value:.3g}"
        return value
    return markdown_table(frame.columns, ([cell(v) for v in row] for row in frame.iter_rows()))
