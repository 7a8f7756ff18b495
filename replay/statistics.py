"""Per-condition statistics of stored runs, defined once, in DuckDB.

A run's *condition* is every stored column that can differ between runs and
change what a download measures. Statistics group by all of them, so that no
table or figure averages over a condition it does not show (the fault that
drew a set's 0% and 0.1% loss results as one mean). A figure then names, in
its series, every condition that still differs among what it draws
(:func:`varying`).
"""

from __future__ import annotations

import math

import duckdb

from tparams.knobs import KNOBS

#: Every condition a run is stored under, as ran (requested values sit beside them in `runs`).
#: the conditions every run stores besides its knobs (tparams.knobs), in the order figures name them
BASE_CONDITIONS = ("stack", "server_stack", "set_name", "server_set_name", "link_backend", "delay_ms", "delay_up_ms",
                   "jitter_ms", "loss_pct", "rate_bps", "rate_up_bps", "queue", "sweep_param", "sweep_value",
                   "workload", "requests", "concurrency", "clients", "size_bytes", "udp_buffer_bytes")


def conditions() -> tuple[str, ...]:
    """Every condition a run stores: the base ones and what ran of each knob declared now."""
    return (*BASE_CONDITIONS, *KNOBS)


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then the normal 1.96).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def summary_sql(columns: list[str] | tuple[str, ...] | None = None) -> str:
    """SELECT of one row per condition over ``runs`` (``columns`` those present in the file): runs, failed,
    n, mean, sample standard deviation and the 95% confidence interval of the mean goodput over the
    successful runs (Student's t; its low end held at 0, as no goodput is negative), mean packets and the
    client's socket drop share, the request metrics' means. ``first_started`` orders conditions as they ran."""
    t_values = ", ".join(f"({df}, {t})" for df, t in enumerate(T975, start=1))
    keys = ", ".join(columns or conditions())
    ok = "FILTER (WHERE status = 'ok')"
    return f"""
WITH t975(df, t) AS (VALUES {t_values}),
per_condition AS (
  SELECT experiment_id, {keys}, min(started_at) AS first_started, count(*) AS runs,
         count(*) {ok} AS n, count(*) - count(*) {ok} AS failed,
         avg(goodput_mbps) {ok} AS mean_mbps, stddev_samp(goodput_mbps) {ok} AS stddev_mbps,
         avg(client_tx_packets) {ok} AS mean_client_tx_packets,
         avg(server_tx_packets) {ok} AS mean_server_tx_packets,
         -- the request metrics (tparams.workloads), means over the successful runs
         avg(requests_per_s) {ok} AS mean_requests_per_s, stddev_samp(requests_per_s) {ok} AS stddev_requests_per_s,
         avg(ttfb_ms) {ok} AS mean_ttfb_ms,
         avg(latency_p50_ms) {ok} AS mean_latency_p50_ms, avg(latency_p99_ms) {ok} AS mean_latency_p99_ms,
         -- many clients: Jain's index over their goodputs; the server's CPU and peak memory per client
         avg(fairness) {ok} AS mean_fairness, avg(server_cpu_s / clients) {ok} AS mean_server_cpu_s_per_client,
         avg(server_maxrss_kb / clients) {ok} AS mean_server_maxrss_kb_per_client,
         -- CPU seconds per second of the client's life, each end
         avg(client_cpu_s / nullif(wall_s, 0)) {ok} AS mean_client_cpu_share,
         avg(server_cpu_s / nullif(wall_s, 0)) {ok} AS mean_server_cpu_share,
         any_value(requested_client) AS requested_client,
         -- datagrams the client's full socket buffer dropped, per 100 reaching its UDP layer
         100.0 * sum(json_extract(counters, '$.client_udp_rcvbuf_errors')::BIGINT) {ok}
           / nullif(sum(json_extract(counters, '$.client_udp_rcvbuf_errors')::BIGINT
                        + json_extract(counters, '$.client_udp_in_datagrams')::BIGINT) {ok}, 0)
           AS client_socket_drop_pct
  FROM runs GROUP BY experiment_id, {keys}
)
SELECT p.*,
       CASE WHEN n > 1 THEN greatest(0, mean_mbps - coalesce(t.t, 1.96) * stddev_mbps / sqrt(n)) END AS ci95_low,
       CASE WHEN n > 1 THEN mean_mbps + coalesce(t.t, 1.96) * stddev_mbps / sqrt(n) END AS ci95_high
FROM per_condition p LEFT JOIN t975 t ON t.df = p.n - 1
ORDER BY first_started"""


def profile_summary_sql(columns: list[str] | tuple[str, ...] | None = None) -> str:
    """SELECT of one row per experiment, condition, endpoint and component of the profiled runs
    (`qreplay --profile`): how many, the mean share of the endpoint's samples and the mean CPU seconds per
    GB of payload, with the mean goodput of those runs beside them."""
    keys = ", ".join(f"r.{c}" for c in columns or conditions())
    return f"""
SELECT r.experiment_id, {keys}, p.endpoint, p.library, p.component, count(*) AS runs,
       avg(p.share) AS mean_share, avg(p.cpu_s_per_gb) AS mean_cpu_s_per_gb, avg(p.samples) AS mean_samples,
       avg(r.goodput_mbps) AS mean_mbps, min(r.started_at) AS first_started
FROM profiles p JOIN runs r USING (run_id)
GROUP BY r.experiment_id, {keys}, p.endpoint, p.library, p.component
ORDER BY first_started, p.endpoint, p.component"""


#: the system call each sampled kernel stack was in (its outermost entry frame, __x64_sys_epoll_wait_[k] or,
#: where that one is folded into the next, __sys_sendmsg_[k] or ksys_write_[k]), samples summed per run and
#: endpoint
PROFILE_SYSCALLS_SQL = r"""
SELECT run_id, endpoint, regexp_extract(folded, '(?:^|;)(?:__x64_sys_|__sys_|ksys_)([a-z0-9_]+?)_\[k\]', 1) AS syscall,
       sum(samples) AS samples
FROM profile_stacks
WHERE regexp_matches(folded, '(?:^|;)(?:__x64_sys_|__sys_|ksys_)[a-z0-9_]+?_\[k\]')
GROUP BY ALL"""


def present_conditions(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The conditions a results file stores (a file of an older qreplay may lack the newest)."""
    columns = {row[0] for row in con.execute("DESCRIBE runs").fetchall()}
    return [c for c in conditions() if c in columns]


def summary(con: duckdb.DuckDBPyConnection, experiment_id: str | None = None):
    """:func:`summary_sql` as a polars DataFrame, of one experiment or of the whole file. An experiment is
    a group of its own: two experiments of the same conditions are two rows (two sweeps, not one)."""
    relation = con.sql(summary_sql(present_conditions(con)))
    if experiment_id is not None:  # DuckDB pushes the filter below the grouping: one experiment is read
        relation = relation.filter(duckdb.ColumnExpression("experiment_id") == duckdb.ConstantExpression(experiment_id))
    return relation.pl()


def varying(frame, exclude: tuple[str, ...] = ()) -> list[str]:
    """The conditions that take more than one value in ``frame`` (apart from ``exclude``, e.g. the x axis):
    a figure that draws ``frame`` must tell them apart. Where one condition was run by several experiments
    (the same sweep twice), the experiment is one of them: what this file does not store (a stack's
    version, the machine's load) may differ between them, so they are drawn apart, never pooled."""
    stored = [c for c in conditions() if c in frame.columns]
    found = [c for c in stored if c not in exclude and frame[c].n_unique() > 1]
    if "server_stack" in found and (frame["server_stack"] == frame["stack"]).all():
        found.remove("server_stack")  # each stack's own server: the stack names both
    if "experiment_id" in frame.columns and frame.select(stored).is_duplicated().any():
        found.append("experiment_id")
    return found


def series(frame, x: str) -> list[tuple[str, object]]:
    """(label, points sorted by ``x``) per series of a figure: one series for every combination of the
    conditions that differ among ``frame``'s rows apart from ``x``, so that a figure never averages over a
    condition it does not show."""
    keys = varying(frame, exclude=(x,))
    groups = frame.group_by(keys, maintain_order=True) if keys else [((), frame)]
    return [(describe(group.row(0, named=True), keys), group.sort(x)) for _, group in groups]


def shared(frame, exclude: tuple[str, ...] = ()) -> str:
    """The conditions every row of ``frame`` shares (those stored), in words: what a table or figure holds
    fixed."""
    fixed = [c for c in conditions() if c in frame.columns and c not in exclude and frame[c].n_unique() == 1
             and frame[c].null_count() < frame.height]
    return describe(frame.row(0, named=True), fixed) if frame.height else ""


def describe(row: dict, columns: list[str]) -> str:
    """A condition in words, e.g. ``firefox, ngtcp2, loss 0.1%``, naming only ``columns``."""
    return ", ".join(_word(column, row[column]) for column in columns) or "all runs"


def _word(column: str, value) -> str:
    if value is None:
        return f"{column} -"
    if column in ("stack", "set_name", "link_backend", "queue", "sweep_param", "workload", "cipher"):
        return str(value)
    units = {"requests": ("", " requests"), "concurrency": ("", " at once"), "clients": ("", " clients"),
             "delay_ms": ("delay ", " ms"), "delay_up_ms": ("delay up ", " ms"), "jitter_ms": ("jitter ", " ms"),
             "loss_pct": ("loss ", "%"), "size_bytes": ("", " B"), "rate_bps": ("rate ", " bit/s"),
             "rate_up_bps": ("rate up ", " bit/s"),
             "udp_buffer_bytes": ("UDP buffer ", " B")}
    if column in units:
        before, after = units[column]
        return f"{before}{value:g}{after}" if isinstance(value, float) else f"{before}{value}{after}"
    if column == "experiment_id":
        return f"experiment {value[:8]}"
    if column == "autotune":
        return "autotune" if value else "pinned"
    if isinstance(value, bool):
        return f"{column} {'on' if value else 'off'}"
    if column == "server_stack":
        return f"server {value}"
    if column == "server_set_name":
        return f"server set {value}"
    return f"{column} {value}"


# --- two conditions against each other (from summary rows) --------------------------------------------

def _t975(df: int) -> float:
    return T975[df - 1] if 1 <= df <= len(T975) else 1.96


def ratio_of_means(numerator: dict, denominator: dict) -> dict:
    """The ratio of two conditions' mean goodputs (summary rows: ``mean_mbps``, ``stddev_mbps``, ``n``) with
    its spread by the delta method: each mean's standard error propagated, se(r) = r x sqrt(sd1^2 / (n1 m1^2)
    + sd2^2 / (n2 m2^2)), and a 95% interval r +- t x se(r), Student's t of the smaller sample's degrees of
    freedom (its low end held at 0). No interval where either side has fewer than two runs."""
    m1, m2 = numerator.get("mean_mbps"), denominator.get("mean_mbps")
    n1, n2 = numerator.get("n") or 0, denominator.get("n") or 0
    s1, s2 = numerator.get("stddev_mbps"), denominator.get("stddev_mbps")
    if not m1 or not m2:
        return {"ratio": None, "ratio_se": None, "ratio_ci95_low": None, "ratio_ci95_high": None}
    ratio = m1 / m2
    if n1 < 2 or n2 < 2 or s1 is None or s2 is None:
        return {"ratio": ratio, "ratio_se": None, "ratio_ci95_low": None, "ratio_ci95_high": None}
    se = ratio * math.sqrt(s1 ** 2 / (n1 * m1 ** 2) + s2 ** 2 / (n2 * m2 ** 2))
    half = _t975(min(n1, n2) - 1) * se
    return {"ratio": ratio, "ratio_se": se, "ratio_ci95_low": max(0.0, ratio - half), "ratio_ci95_high": ratio + half}


def difference_of_means(first: dict, second: dict) -> dict:
    """first - second of two conditions' mean goodputs (summary rows), with Welch's standard error and a 95%
    interval (Student's t of the smaller sample's degrees of freedom); no interval below two runs a side."""
    m1, m2 = first.get("mean_mbps"), second.get("mean_mbps")
    n1, n2 = first.get("n") or 0, second.get("n") or 0
    s1, s2 = first.get("stddev_mbps"), second.get("stddev_mbps")
    if m1 is None or m2 is None:
        return {"difference": None, "difference_ci95_low": None, "difference_ci95_high": None}
    if n1 < 2 or n2 < 2 or s1 is None or s2 is None:
        return {"difference": m1 - m2, "difference_ci95_low": None, "difference_ci95_high": None}
    half = _t975(min(n1, n2) - 1) * math.sqrt(s1 ** 2 / n1 + s2 ** 2 / n2)
    return {"difference": m1 - m2, "difference_ci95_low": m1 - m2 - half, "difference_ci95_high": m1 - m2 + half}


def limits_summary(con: duckdb.DuckDBPyConnection):
    """Per experiment and condition, what held its runs back (runs.limited_by and runs.limits, replay/limits.py):
    runs, traced (those with a breakdown), ``limited_by`` (the label most of them carry, ties by the larger mean
    share), ``agreeing`` (how many carry it), the mean share of each limit of replay.limits.LIMITS over the
    traced runs, the mean goodput of the successful ones and the client's and server's parameters asked (one run's), and over the
    successful runs the mean smallest RTT the breakdowns measured and each end's CPU (seconds over the client's
    lifetime, seconds per 10^9 bytes moved); ``traced_runs``: each successful traced run's id, goodput, label and
    CPU per GB (a run can fall short of its own limit's model where the condition's mean does not); polars, in the
    order the conditions first ran; ``no_breakdown``: why its runs have none where tracing could not give one
    (runs.no_breakdown: several clients, two hosts; one run's), else None.
    Traced runs stored without a breakdown (before replay schema version 3) get theirs from their trace points."""
    import polars as pl

    from replay.limits import LIMITS

    keys = present_conditions(con)
    shares = ", ".join(f"json_extract(limits, '$.fractions.{name}')::DOUBLE AS {name}" for name in LIMITS)
    stored = {row[0] for row in con.execute("DESCRIBE runs").fetchall()}
    # columns a file or an export may lack (the results page's CSV exports hold no server parameters)
    optional = ", ".join(name if name in stored else f"NULL::VARCHAR AS {name}"
                         for name in ("requested_server", "no_breakdown"))
    frame = con.sql(f"SELECT run_id, experiment_id, {', '.join(keys)}, started_at, status, goodput_mbps, limited_by, "
                    f"{optional}, "
                    f"requested_client, {shares}, json_extract(limits, '$.basis.min_rtt_ms')::DOUBLE AS min_rtt_ms, "
                    "server_cpu_s / wall_s AS server_cpu_share, client_cpu_s / wall_s AS client_cpu_share, "
                    "server_cpu_s * 1e9 / bytes AS server_cpu_s_per_gb, "
                    "client_cpu_s * 1e9 / bytes AS client_cpu_s_per_gb "
                    "FROM runs").pl()
    frame = frame.update(_unstored_limits(con), on="run_id")
    group = ["experiment_id", *keys]
    summary = frame.group_by(group, maintain_order=True).agg(
        pl.len().alias("runs"), pl.col("limited_by").count().alias("traced"),
        pl.col("started_at").min().alias("first_started"), pl.col("requested_client").first(),
        pl.col("requested_server").first(),
        pl.col("no_breakdown").drop_nulls().first(),
        pl.col("goodput_mbps").filter(pl.col("status") == "ok").mean().alias("mean_mbps"),
        *(pl.col(name).mean().alias(name) for name in LIMITS),
        *(pl.col(name).filter(pl.col("status") == "ok").mean() for name in (
            "min_rtt_ms", "server_cpu_share", "client_cpu_share", "server_cpu_s_per_gb", "client_cpu_s_per_gb")),
        pl.struct("run_id", "goodput_mbps", "limited_by", "server_cpu_s_per_gb", "client_cpu_s_per_gb")
        .filter((pl.col("status") == "ok") & pl.col("limited_by").is_not_null()).alias("traced_runs"))
    labels = (frame.filter(pl.col("limited_by").is_not_null()).group_by([*group, "limited_by"])
              .agg(pl.len().alias("agreeing")))
    summary = summary.join(labels, on=group, how="left", nulls_equal=True)
    share = pl.coalesce(*(pl.when(pl.col("limited_by") == name).then(pl.col(name)) for name in LIMITS))
    return (summary.with_columns(share.alias("_share")).sort(["agreeing", "_share"], descending=True, nulls_last=True)
            .unique(group, keep="first", maintain_order=True).drop("_share").sort("first_started"))


def _unstored_limits(con: duckdb.DuckDBPyConnection):
    """The breakdowns of traced runs stored without one (files older than replay schema version 3), computed from
    their stored trace points: run_id, limited_by and each limit's share."""
    import polars as pl

    from replay.limits import LIMITS

    rows = [{"run_id": run["run_id"], "limited_by": found.limited_by, **found.fractions}
            for run, found in traced_breakdowns(con, "limited_by IS NULL") if found is not None]
    return pl.DataFrame(rows, schema={"run_id": pl.String, "limited_by": pl.String,
                                      **dict.fromkeys(LIMITS, pl.Float64)})


def traced_breakdowns(con: duckdb.DuckDBPyConnection, where: str = "true"):
    """(runs row, replay.limits.breakdown of its stored trace points: None where they hold no transfer) for each
    traced run matching ``where`` (SQL over the runs columns), as the code computes it now."""
    from replay.limits import RunFacts, breakdown

    runs = con.sql(f"SELECT r.* FROM runs r SEMI JOIN traces t USING (run_id) WHERE {where} ORDER BY started_at").pl()
    for run in runs.iter_rows(named=True):
        yield run, breakdown(trace_points(con, run["run_id"]), RunFacts.from_run(run))


def trace_points(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict]:
    """A traced run's stored points (trace_points rows), in order."""
    points = con.execute("SELECT * FROM trace_points WHERE run_id = ? ORDER BY seq", [run_id])
    columns = [d[0] for d in points.description]
    return [dict(zip(columns, p)) for p in points.fetchall()]
