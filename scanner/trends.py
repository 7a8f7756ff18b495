"""Campaigns over time: a population followed through N dated campaigns, as DuckDB views.

``open_trends(DIR)`` reads every campaign directory and scan file directly
inside ``DIR`` (each one campaign, named by its entry, dated by its first
scan's start) into one in-memory DuckDB connection, without copying:

    trend_campaigns       campaign, started_at, position (1 = earliest)
    trend_endpoints       one row per endpoint and campaign (scanner.diff.endpoint_state)
    trend_value_shares    per campaign, parameter and value: endpoints, share_pct (completed handshakes)
    trend_set_shares      per campaign and set of the twelve: endpoints, share_pct
    trend_library_shares  per campaign and identified library: endpoints, share_pct
    trend_set_churn       per campaign after the first: endpoints in both it and the one before,
                          how many kept / changed their set, appeared, disappeared, sets new and gone

The functions below return polars frames over them, the top values and sets
chosen over all campaigns so a line per value can be drawn across time. A
directory entry that is not a readable campaign (a broken _schema.json, a
half-done export, a file that is no scan) is left out with one line in
``skipped``; the others are read as they are, nothing of theirs lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from tparams.errors import ToolError, first_line
from tparams.paramset import PERFORMANCE_PARAMETERS

from scanner.analysis import PUBLISHED_SCANS, reference
from scanner.campaign_store import closed_on_error
from scanner.diff import attach, endpoint_state

_KEY_JOIN = "o.ip = n.ip AND o.port = n.port AND o.sni IS NOT DISTINCT FROM n.sni"


@dataclass
class Trends:
    con: duckdb.DuckDBPyConnection
    campaigns: list[str]
    skipped: list[str] = field(default_factory=list)  # one line per entry left out, saying why

    def close(self) -> None:
        self.con.close()


def open_trends(directory: str | Path) -> Trends:
    """The views over every campaign in ``directory`` (see the module docstring)."""
    root = Path(directory)
    if not root.is_dir():
        raise ToolError(f"{root} is not a directory of campaigns")
    con = duckdb.connect()
    sources, skipped = [], []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or not (entry.is_dir() or entry.suffix == ".duckdb"):
            continue
        try:
            source = attach(con, entry, f"campaign_{len(sources)}")
            started = con.execute(f"SELECT min(started_at) FROM {source.scans}").fetchone()[0]
        except ToolError as exc:
            skipped.append(f"{entry.name}: {exc}")
            continue
        except duckdb.Error as exc:
            skipped.append(f"{entry.name}: cannot read it: {first_line(exc)}")
            continue
        sources.append((entry.stem if entry.is_file() else entry.name, started, source))
    if not sources:
        con.close()
        raise ToolError(f"no readable campaign in {root}" + (f" ({len(skipped)} skipped: {skipped[0]})" if skipped else ""))
    sources.sort(key=lambda item: (item[1] is None, item[1], item[0]))
    con.execute("CREATE TABLE trend_campaigns (campaign VARCHAR, started_at TIMESTAMPTZ, position INTEGER)")
    con.executemany("INSERT INTO trend_campaigns VALUES (?, ?, ?)",
                    [(label, started, position) for position, (label, started, _) in enumerate(sources, 1)])
    union = " UNION ALL ".join(f"SELECT '{_sql(label)}' AS campaign, * FROM ({endpoint_state(source)})"
                               for label, _, source in sources)
    with closed_on_error(con, f"cannot read the campaigns of {root}"):
        con.execute(f"CREATE VIEW trend_endpoints AS {union}")
        for name, sql in _views().items():
            con.execute(f"CREATE VIEW {name} AS {sql}")
    return Trends(con, [label for label, _, _ in sources], skipped)


def _views() -> dict[str, str]:
    twelve = ", ".join(PERFORMANCE_PARAMETERS)
    texts = ", ".join(f"coalesce(CAST({name} AS VARCHAR), 'not sent') AS {name}" for name in PERFORMANCE_PARAMETERS)
    campaign = "c.position, c.campaign, c.started_at"

    def shares(source: str, columns: str, partition: str = "") -> str:
        return (f"SELECT {campaign}, {columns}, count(*) AS endpoints, round(100.0 * count(*) / "
                f"sum(count(*)) OVER (PARTITION BY c.campaign{partition}), 2) AS share_pct "
                f"FROM {source} JOIN trend_campaigns c USING (campaign) GROUP BY {campaign}, {columns}")

    reached = "(SELECT * FROM trend_endpoints WHERE status = 'ok')"
    numbered = f"(SELECT c.position, e.ip, e.port, e.sni, e.set_fingerprint FROM {reached} e JOIN trend_campaigns c USING (campaign))"
    return {
        "trend_value_shares": shares(
            f"(UNPIVOT (SELECT campaign, {texts} FROM {reached}) ON {twelve} INTO NAME parameter VALUE value)",
            "parameter, value", ", parameter"),
        "trend_set_shares": shares(reached, f"set_fingerprint, {twelve}"),
        "trend_library_shares": shares(f"(SELECT campaign, coalesce(library, 'not identified') AS library FROM {reached})",
                                       "library"),
        # Each campaign's endpoints meet those of the campaign before (pair = the later one's position).
        "trend_set_churn": (
            f"WITH o AS (SELECT position + 1 AS pair, * EXCLUDE (position) FROM {numbered}), "
            f"n AS (SELECT position AS pair, * EXCLUDE (position) FROM {numbered}), "
            f"j AS (SELECT coalesce(n.pair, o.pair) AS pair, o.set_fingerprint AS old_set, n.set_fingerprint AS new_set "
            f"FROM o FULL JOIN n ON o.pair = n.pair AND {_KEY_JOIN}), "
            f"sets AS (SELECT position, list(DISTINCT set_fingerprint) AS sets FROM {numbered} GROUP BY position) "
            f"SELECT c.campaign, p.campaign AS previous, c.started_at, "
            f"count(*) FILTER (WHERE old_set IS NOT NULL AND new_set IS NOT NULL) AS in_both, "
            f"count(*) FILTER (WHERE old_set = new_set) AS kept_set, "
            f"count(*) FILTER (WHERE old_set <> new_set) AS changed_set, "
            f"count(*) FILTER (WHERE old_set IS NULL) AS appeared, count(*) FILTER (WHERE new_set IS NULL) AS disappeared, "
            f"round(100.0 * count(*) FILTER (WHERE old_set <> new_set) / "
            f"greatest(count(*) FILTER (WHERE old_set IS NOT NULL AND new_set IS NOT NULL), 1), 2) AS churn_pct, "
            f"any_value(len(list_filter(cs.sets, lambda s: NOT list_contains(ps.sets, s)))) AS sets_new, "
            f"any_value(len(list_filter(ps.sets, lambda s: NOT list_contains(cs.sets, s)))) AS sets_gone "
            f"FROM j JOIN trend_campaigns c ON c.position = j.pair JOIN trend_campaigns p ON p.position = j.pair - 1 "
            f"JOIN sets cs ON cs.position = c.position JOIN sets ps ON ps.position = p.position "
            f"GROUP BY c.position, c.campaign, p.campaign, c.started_at ORDER BY c.position"
        ),
    }


def campaigns(trends: Trends) -> pl.DataFrame:
    """The campaigns in time order, with their endpoints and completed handshakes."""
    return trends.con.sql(
        "SELECT c.position, c.campaign, c.started_at, count(e.ip) AS endpoints, "
        "count(*) FILTER (WHERE e.status = 'ok') AS reached, count(DISTINCT e.set_fingerprint) AS distinct_sets "
        "FROM trend_campaigns c LEFT JOIN trend_endpoints e USING (campaign) GROUP BY ALL ORDER BY c.position"
    ).pl()


def _top_over_time(trends: Trends, view: str, keys: list[str], top: int, partition: list[str] = ()) -> pl.DataFrame:
    """The ``top`` rows of ``view`` by endpoints over all campaigns (per ``partition``), in every
    campaign (0 where one has none), ordered by campaign and rank."""
    keyed = ", ".join(keys)
    by = f"PARTITION BY {', '.join(partition)} " if partition else ""
    return trends.con.sql(
        f"WITH totals AS (SELECT {keyed}, row_number() OVER ({by}ORDER BY sum(endpoints) DESC, {keyed}) AS rank "
        f"FROM {view} GROUP BY {keyed} QUALIFY rank <= {int(top)}) "
        f"SELECT c.position, c.campaign, c.started_at, t.*, coalesce(v.endpoints, 0) AS endpoints, "
        f"coalesce(v.share_pct, 0.0) AS share_pct FROM trend_campaigns c CROSS JOIN totals t "
        f"LEFT JOIN {view} v ON v.campaign = c.campaign AND " + " AND ".join(f"v.{k} IS NOT DISTINCT FROM t.{k}" for k in keys)
        + f" ORDER BY {', '.join(f't.{p}' for p in partition) + ', ' if partition else ''}t.rank, c.position"
    ).pl()


def value_shares(trends: Trends, top: int = 5) -> pl.DataFrame:
    """Per parameter, its ``top`` values over all campaigns and their share in each (percent of endpoints)."""
    frame = _top_over_time(trends, "trend_value_shares", ["parameter", "value"], top, ["parameter"])
    order = {name: i for i, name in enumerate(PERFORMANCE_PARAMETERS)}
    return frame.sort(pl.col("parameter").replace_strict(order, return_dtype=pl.Int32), "rank", "position")


def set_shares(trends: Trends, top: int = 10) -> pl.DataFrame:
    """The ``top`` sets of the twelve over all campaigns and their share in each."""
    return _top_over_time(trends, "trend_set_shares", ["set_fingerprint"], top)


def library_shares(trends: Trends) -> pl.DataFrame:
    """Every identified library (and 'not identified') and its share of endpoints in each campaign."""
    return _top_over_time(trends, "trend_library_shares", ["library"], 1_000)


def set_churn(trends: Trends) -> pl.DataFrame:
    return trends.con.sql("SELECT * FROM trend_set_churn").pl()


def published_value_shares(top: int = 5) -> pl.DataFrame:
    """The thesis's two scans (2022-01-27, 2022-10-13) in ``value_shares``'s shape: its published top
    values (tables 5.2-5.7) as shares of the targets each scan reached. Only published values are listed."""
    published = reference("scan_top_values").with_columns(pl.col("rank", "endpoints").cast(pl.Int64))
    reached = pl.DataFrame({"campaign": list(PUBLISHED_SCANS), "reached": [r for r, _ in PUBLISHED_SCANS.values()],
                            "position": list(range(1, len(PUBLISHED_SCANS) + 1))})
    return (
        published.filter(pl.col("rank") <= top).rename({"scan": "campaign"}).join(reached, on="campaign")
        .with_columns((100.0 * pl.col("endpoints") / pl.col("reached")).round(2).alias("share_pct"),
                      pl.col("campaign").str.to_date().alias("started_at"))
        .select("position", "campaign", "started_at", "parameter", "value", "rank", "endpoints", "share_pct")
    )


def _sql(text: str) -> str:
    return text.replace("'", "''")
