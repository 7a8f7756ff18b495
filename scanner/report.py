"""Popularity of transport-parameter values and sets in a scan (the thesis's tables 5.1-5.7).

Each function takes a DuckDB connection to a scan file and returns a polars
DataFrame, so notebooks and `qscan report` share one computation.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from common.markdown import markdown_table
from tparams.errors import ToolError, first_line
from tparams.paramset import PERFORMANCE_PARAMETERS

from scanner.campaign_store import made_directory, scan_connection
from scanner.formats import FORMATS
from scanner.store import ScanStore

_TWELVE = ", ".join(PERFORMANCE_PARAMETERS)


def summary(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """One row: attempts, distinct targets, targets reached, distinct parameter sets."""
    return con.sql(
        """
        SELECT count(*) AS attempts,
               count(DISTINCT (ip, port, sni)) AS targets,
               count(DISTINCT (ip, port, sni)) FILTER (WHERE status = 'ok') AS reached,
               count(DISTINCT set_fingerprint) FILTER (WHERE status = 'ok') AS distinct_sets,
               count(DISTINCT order_fingerprint) FILTER (WHERE status = 'ok') AS distinct_orders
        FROM handshakes
        """
    ).pl()


def status_counts(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    return con.sql(
        """
        SELECT status, count(*) AS attempts, round(100.0 * count(*) / sum(count(*)) OVER (), 2) AS share_pct
        FROM handshakes GROUP BY status ORDER BY attempts DESC, status
        """
    ).pl()


def top_sets(con: duckdb.DuckDBPyConnection, top: int = 10) -> pl.DataFrame:
    """The most common sets of the twelve (as sent), with endpoints and share of completed handshakes."""
    return con.sql(
        f"""
        SELECT row_number() OVER (ORDER BY count(*) DESC, set_fingerprint) AS rank,
               set_fingerprint, count(*) AS endpoints,
               round(100.0 * count(*) / sum(count(*)) OVER (), 2) AS share_pct,
               {_TWELVE}
        FROM server_params
        GROUP BY set_fingerprint, {_TWELVE}
        ORDER BY rank LIMIT ?
        """,
        params=[top],
    ).pl()


def top_values(con: duckdb.DuckDBPyConnection, top: int = 5) -> pl.DataFrame:
    """Per parameter, its most common values as sent ('not sent' where absent), in the twelve's order."""
    casts = ", ".join(f"coalesce(CAST({name} AS VARCHAR), 'not sent') AS {name}" for name in PERFORMANCE_PARAMETERS)
    order = ", ".join(f"'{name}'" for name in PERFORMANCE_PARAMETERS)
    return con.sql(
        f"""
        WITH long AS (
            UNPIVOT (SELECT {casts} FROM server_params) ON {_TWELVE} INTO NAME parameter VALUE value
        ), counted AS (
            SELECT parameter, value, count(*) AS endpoints,
                   round(100.0 * count(*) / sum(count(*)) OVER (PARTITION BY parameter), 2) AS share_pct,
                   row_number() OVER (PARTITION BY parameter ORDER BY count(*) DESC, value) AS rank
            FROM long GROUP BY parameter, value
        )
        SELECT parameter, rank, value, endpoints, share_pct FROM counted
        WHERE rank <= ?
        ORDER BY list_position([{order}], parameter), rank
        """,
        params=[top],
    ).pl()


def libraries(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Targets per QUIC library, each target's latest verdict (`qscan targets --identify`); no rows without one."""
    views = con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'libraries' AND NOT internal")
    if not views.fetchall()[0][0]:
        return pl.DataFrame(schema={"library": pl.String, "targets": pl.Int64, "share_pct": pl.Float64})
    return con.sql("SELECT library, targets, share_pct FROM libraries").pl()


# The family of a handshakes row, from its address (targets are canonical: an IPv6 one has a colon).
FAMILY_SQL = "CASE WHEN contains(ip, ':') THEN 'IPv6' ELSE 'IPv4' END"


def families(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The summary per address family (ip_family IPv4 / IPv6), one row each family present."""
    return con.sql(
        f"""
        SELECT {FAMILY_SQL} AS ip_family, count(*) AS attempts,
               count(DISTINCT (ip, port, sni)) AS targets,
               count(DISTINCT (ip, port, sni)) FILTER (WHERE status = 'ok') AS reached,
               count(DISTINCT set_fingerprint) FILTER (WHERE status = 'ok') AS distinct_sets
        FROM handshakes GROUP BY ip_family ORDER BY ip_family
        """
    ).pl()


@dataclass
class Report:
    summary: pl.DataFrame
    statuses: pl.DataFrame
    sets: pl.DataFrame
    values: pl.DataFrame
    libraries: pl.DataFrame
    families: pl.DataFrame

    def as_dict(self) -> dict:
        return {
            "summary": self.summary.to_dicts()[0],
            "statuses": self.statuses.to_dicts(),
            "top_sets": self.sets.to_dicts(),
            "top_values": self.values.to_dicts(),
            "libraries": self.libraries.to_dicts(),
            "families": self.families.to_dicts(),
        }

    def long_rows(self) -> list[dict]:
        """Every figure as one tidy table (section, rank, set_fingerprint, parameter, value, count, share_pct)."""
        rows = [
            {"section": "summary", "parameter": key, "value": value, "count": value}
            for key, value in self.summary.to_dicts()[0].items()
        ]
        rows += [
            {"section": "status", "value": r["status"], "count": r["attempts"], "share_pct": r["share_pct"]}
            for r in self.statuses.to_dicts()
        ]
        for r in self.sets.to_dicts():
            for name in PERFORMANCE_PARAMETERS:
                rows.append(
                    {
                        "section": "set", "rank": r["rank"], "set_fingerprint": r["set_fingerprint"],
                        "parameter": name, "value": _cell(r[name]), "count": r["endpoints"], "share_pct": r["share_pct"],
                    }
                )  # fmt: skip
        rows += [
            {"section": "value", "rank": r["rank"], "parameter": r["parameter"], "value": r["value"],
             "count": r["endpoints"], "share_pct": r["share_pct"]}
            for r in self.values.to_dicts()
        ]  # fmt: skip
        rows += [{"section": "library", "value": r["library"], "count": r["targets"], "share_pct": r["share_pct"]}
                 for r in self.libraries.to_dicts()]
        rows += [{"section": "family", "parameter": key, "value": r["ip_family"], "count": r[key]}
                 for r in self.families.to_dicts() for key in ("attempts", "targets", "reached", "distinct_sets")]
        return rows


def build_report(path: str | Path, top: int = 10) -> Report:
    if top < 1:
        raise ToolError("--top must be >= 1")
    with scan_connection(path) as con:
        return Report(summary(con), status_counts(con), top_sets(con, top), top_values(con, top), libraries(con),
                      families(con))


def _cell(value: object) -> str:
    if value is None:
        return "not sent"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render(report: Report, fmt: str) -> str:
    """The report as text in one of FORMATS (table = rich console tables)."""
    if fmt == "json":
        return json.dumps(report.as_dict(), indent=2, default=str)
    if fmt == "csv":
        out = io.StringIO()
        fields = ["section", "rank", "set_fingerprint", "parameter", "value", "count", "share_pct"]
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(report.long_rows())
        return out.getvalue()
    if fmt == "markdown":
        return "\n\n".join(_markdown(title, frame) for title, frame in _sections(report))
    if fmt == "table":
        return _rich_tables(report)
    raise ToolError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")


def _sections(report: Report) -> list[tuple[str, pl.DataFrame]]:
    # Sets are shown transposed (one column per set) as the thesis's tables do: twelve rows read better.
    sections = [
        ("Summary", report.summary),
        ("Outcomes", report.statuses),
        ("Most common parameter sets", _sets_transposed(report.sets)),
        ("Most common values per parameter", report.values),
    ]
    if report.families.height > 1:  # split by family only where both are present
        sections.insert(1, ("By address family", report.families))
    if report.libraries.height:  # only scans run with --identify have verdicts
        sections.append(("QUIC libraries (qscan targets --identify)", report.libraries))
    return sections


def _sets_transposed(sets: pl.DataFrame) -> pl.DataFrame:
    rows = [{"parameter": name} for name in ("endpoints", "share_pct", *PERFORMANCE_PARAMETERS)]
    for record in sets.to_dicts():
        column = f"#{record['rank']} {record['set_fingerprint']}"
        for row in rows:
            row[column] = _cell(record[row["parameter"]])
    return pl.DataFrame(rows) if sets.height else pl.DataFrame({"parameter": []})


def _markdown(title: str, frame: pl.DataFrame) -> str:
    rows = ([_cell(v) for v in row] for row in frame.iter_rows())
    return f"### {title}\n\n" + markdown_table(frame.columns, rows)


def _rich_tables(report: Report) -> str:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), record=True, width=200)
    for title, frame in _sections(report):
        table = Table(title=title, title_justify="left")
        for column in frame.columns:
            table.add_column(column, justify="left" if column in {"parameter", "status", "value", "library"} else "right")
        for row in frame.iter_rows():
            table.add_row(*(_cell(v) for v in row))
        console.print(table)
    return console.export_text()


def export_parquet(path: str | Path, directory: str | Path) -> list[Path]:
    """Every table and view of the scan file as DIR/<name>.parquet (for sharing; DuckDB/polars read it).

    The tables of many scans as one campaign: scanner.campaign_store.export_shard."""
    directory = Path(directory)
    written = []
    with ScanStore.open(path, read_only=True) as store, made_directory(directory):
        names = [
            row[0]
            for row in store.con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY table_name"
            ).fetchall()
        ]
        for name in names:
            target = directory / f"{name}.parquet"
            try:
                store.con.execute(f"COPY (SELECT * FROM \"{name}\") TO '{_sql_string(str(target))}' (FORMAT parquet)")
            except duckdb.Error as exc:
                raise ToolError(f"cannot export {path} to {directory}: {first_line(exc)}") from None
            written.append(target)
    return written


def _sql_string(text: str) -> str:
    return text.replace("'", "''")
