"""`qscan diff OLD NEW`: what changed, endpoint by endpoint, between two scans of one population.

Each input is a scan file or a campaign directory (scanner.campaign_store). An
endpoint is (ip, port, sni); its state in an input is its latest handshake, a
completed one first, with its QUIC library where the input identified it
(``qscan targets --identify``). Between the two states:

    appeared      completed in NEW, not in OLD (absent or failed there)
    disappeared   completed in OLD, not in NEW
    parameters    one row per parameter of the twelve whose value changed (or was sent or dropped)
    library       the identified library (both identified)
    version       the negotiated QUIC version
    alpn          the negotiated ALPN
    certificate   the leaf certificate (its SHA-256)

Every change is one row of ``changes`` (kind, ip, port, sni, field, old_value,
new_value), a DuckDB relation; the counts per kind and per parameter and the
most common transitions are polars frames over it. Both inputs are read in
one in-memory DuckDB connection (a scan file attached read-only, a campaign's
Parquet read in place), so a diff of two 1M-record campaigns is a few joins.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from tparams.errors import ToolError, first_line
from tparams.paramset import PERFORMANCE_PARAMETERS

from scanner import campaign_store
from scanner.store import ScanStore

KINDS = ("appeared", "disappeared", "parameters", "library", "version", "alpn", "certificate")
# Transitions worth counting: a certificate's is unique to its endpoint, appearing says it already.
_TRANSITION_KINDS = ("parameters", "library", "version", "alpn")
# What an endpoint's state holds besides its key (ip, port, sni): endpoint_state's columns.
STATE_COLUMNS = ("status", "quic_version", "alpn", "certificate", "set_fingerprint", *PERFORMANCE_PARAMETERS, "library")
# One field per kind whose value is compared as text (the twelve are unpivoted instead).
_FIELDS = {"library": "library", "version": "quic_version", "alpn": "alpn",
           "certificate": "certificate"}


@dataclass(frozen=True)
class Source:
    """One input attached to a connection: where its handshakes and verdicts are, as SQL relations."""

    path: str
    handshakes: str
    scans: str
    server_library: str | None  # None: the input identified no library
    order: str  # ties among one endpoint's handshakes broken by this, latest first


def attach(con: duckdb.DuckDBPyConnection, path: str | Path, alias: str) -> Source:
    """Make ``path`` (scan file or campaign directory) readable in ``con``; a bad input is a one-line ToolError."""
    text = str(path)
    if campaign_store.is_campaign(text):
        campaign_store.open_campaign(text).close()  # its one-line refusals: schema, mixed versions, half exports
        root = text.rstrip("/")

        def relation(table: str) -> str | None:
            pattern = f"{root}/{table}/campaign=*/vantage=*/campaign_shard=*/*.parquet"
            if not con.execute("SELECT count(*) FROM glob(?)", [pattern]).fetchone()[0]:
                return None
            return (f"read_parquet('{_sql(pattern)}', hive_partitioning = true, union_by_name = true, "
                    f"hive_types = {{'campaign': VARCHAR, 'vantage': VARCHAR, 'campaign_shard': VARCHAR}})")

        handshakes, scans = relation("handshakes"), relation("scans")
        if handshakes is None or scans is None:
            raise ToolError(f"campaign {root} holds no handshakes")
        return Source(text, handshakes, scans, relation("server_library"),
                      "campaign DESC, vantage DESC, campaign_shard DESC, handshake_id DESC")
    if Path(text).is_dir():
        raise ToolError(f"{text} is not a campaign directory (no {campaign_store.SCHEMA_FILE})")
    if not Path(text).is_file():
        raise ToolError(f"no such scan file or campaign directory: {text}")
    ScanStore.open(text, read_only=True).close()  # its one-line refusals: not DuckDB, no scan component
    try:
        con.execute(f"ATTACH '{_sql(text)}' AS {alias} (READ_ONLY)")
    except duckdb.Error as exc:
        raise ToolError(f"cannot read {text}: {first_line(exc)}") from None
    tables = {name for (name,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [alias]).fetchall()}
    library = f"{alias}.server_library" if "server_library" in tables else None
    return Source(text, f"{alias}.handshakes", f"{alias}.scans", library, "handshake_id DESC")


def endpoint_state(source: Source) -> str:
    """SQL of one row per endpoint: its latest handshake (a completed one first) and library verdict."""
    columns = (f"ip, port, sni, status, quic_version, alpn, certificates[1].sha256 AS certificate, set_fingerprint, "
               f"{', '.join(PERFORMANCE_PARAMETERS)}")
    latest = _latest(source.handshakes, columns, f"status = 'ok' DESC, {source.order}")
    if source.server_library is None:
        return f"SELECT *, CAST(NULL AS VARCHAR) AS library FROM ({latest})"
    verdicts = _latest(source.server_library, "ip, port, sni, library", "identified_at DESC")
    return (f"SELECT h.*, v.library FROM ({latest}) h LEFT JOIN ({verdicts}) v "
            f"ON h.ip = v.ip AND h.port = v.port AND h.sni IS NOT DISTINCT FROM v.sni")


def _latest(relation: str, columns: str, order: str) -> str:
    """``columns`` of the first row per endpoint of ``relation`` in ``order``. Nearly every endpoint has
    one row (campaign shards do not overlap; a scan records a target once unless resumed): those are
    taken as they are, and only the others are sorted, which makes a 1M-row input about 3x faster."""
    key = "r.ip = d.ip AND r.port = d.port AND r.sni IS NOT DISTINCT FROM d.sni"
    return (
        f"WITH d AS (SELECT ip, port, sni FROM {relation} GROUP BY ip, port, sni HAVING count(*) > 1) "
        f"SELECT {columns} FROM {relation} r ANTI JOIN d ON {key} "
        f"UNION ALL SELECT * FROM (SELECT {columns} FROM {relation} r SEMI JOIN d ON {key} "
        f"QUALIFY row_number() OVER (PARTITION BY ip, port, sni ORDER BY {order}) = 1)"
    )


def changes_sql(old: str, new: str) -> str:
    """SQL of every change between two endpoint-state relations, one row each (see the module docstring)."""
    sides = ", ".join(f"{side[0]}.{column} AS {side}_{column}" for side in ("old", "new") for column in STATE_COLUMNS)
    pair = (f"SELECT coalesce(n.ip, o.ip) AS ip, coalesce(n.port, o.port) AS port, coalesce(n.sni, o.sni) AS sni, {sides} "
            f"FROM ({old}) o FULL JOIN ({new}) n ON o.ip = n.ip AND o.port = n.port AND o.sni IS NOT DISTINCT FROM n.sni")
    key = "ip, port, sni"
    both = "old_status = 'ok' AND new_status = 'ok'"
    names = ", ".join(f"'{name}'" for name in PERFORMANCE_PARAMETERS)

    def values(side: str) -> str:
        return ", ".join(f"coalesce(CAST({side}_{name} AS VARCHAR), 'not sent')" for name in PERFORMANCE_PARAMETERS)

    twelve_old = ", ".join(f"old_{name}" for name in PERFORMANCE_PARAMETERS)
    twelve_new = ", ".join(f"new_{name}" for name in PERFORMANCE_PARAMETERS)
    parts = [
        f"SELECT 'appeared' AS kind, {key}, 'status' AS field, old_status AS old_value, new_status AS new_value "
        f"FROM pairs WHERE new_status = 'ok' AND old_status IS DISTINCT FROM 'ok'",
        f"SELECT 'disappeared', {key}, 'status', old_status, new_status "
        f"FROM pairs WHERE old_status = 'ok' AND new_status IS DISTINCT FROM 'ok'",
        f"SELECT 'parameters', {key}, field, old_value, new_value FROM ("
        f"SELECT {key}, unnest([{names}]) AS field, unnest([{values('old')}]) AS old_value, "
        f"unnest([{values('new')}]) AS new_value FROM pairs WHERE {both} AND ({twelve_old}) IS DISTINCT FROM ({twelve_new})"
        f") WHERE old_value <> new_value",
    ]
    for kind, field in _FIELDS.items():
        old_value, new_value = (f"printf('0x%08x', {side}_{field})" if field == "quic_version" else f"{side}_{field}"
                                for side in ("old", "new"))
        # A library verdict is compared only where both inputs have one: unidentified is not a change.
        known = f" AND old_{field} IS NOT NULL AND new_{field} IS NOT NULL" if kind == "library" else ""
        parts.append(f"SELECT '{kind}', {key}, '{field}', {old_value}, {new_value} FROM pairs "
                     f"WHERE {both}{known} AND old_{field} IS DISTINCT FROM new_{field}")
    return f"WITH pairs AS ({pair}) " + " UNION ALL ".join(parts)


@dataclass
class Diff:
    """The changes between two inputs, in the connection that read them (``close()`` when done)."""

    old: str
    new: str
    con: duckdb.DuckDBPyConnection

    @property
    def changes(self) -> duckdb.DuckDBPyRelation:
        return self.con.table("changes")

    def endpoints(self) -> pl.DataFrame:
        """Endpoints completed in OLD, in NEW, and in both."""
        return self.con.sql(
            "SELECT count(*) FILTER (WHERE o.status = 'ok') AS old, count(*) FILTER (WHERE n.status = 'ok') AS new, "
            "count(*) FILTER (WHERE o.status = 'ok' AND n.status = 'ok') AS both "
            "FROM old_endpoints o FULL JOIN new_endpoints n "
            "ON o.ip = n.ip AND o.port = n.port AND o.sni IS NOT DISTINCT FROM n.sni"
        ).pl()

    def counts(self) -> pl.DataFrame:
        """Endpoints per kind of change, every kind listed (0 where none)."""
        counted = dict(self.con.execute(
            "SELECT kind, count(DISTINCT (ip, port, sni)) FROM changes GROUP BY kind").fetchall())
        return pl.DataFrame({"kind": list(KINDS), "endpoints": [counted.get(kind, 0) for kind in KINDS]})

    def parameters(self) -> pl.DataFrame:
        """Endpoints per parameter whose value changed, in the twelve's order."""
        counted = dict(self.con.execute(
            "SELECT field, count(*) FROM changes WHERE kind = 'parameters' GROUP BY field").fetchall())
        names = [name for name in PERFORMANCE_PARAMETERS if name in counted]
        return pl.DataFrame({"parameter": names, "endpoints": [counted[name] for name in names]},
                            schema={"parameter": pl.String, "endpoints": pl.Int64})

    def transitions(self, top: int = 10) -> pl.DataFrame:
        """The most common changes from a value to another (certificates left out: each is its own)."""
        kinds = ", ".join(f"'{kind}'" for kind in _TRANSITION_KINDS)
        return self.con.sql(
            f"SELECT kind, field, old_value, new_value, count(*) AS endpoints FROM changes "
            f"WHERE kind IN ({kinds}) GROUP BY ALL ORDER BY endpoints DESC, kind, field, old_value, new_value LIMIT {int(top)}"
        ).pl()

    def write(self, directory: str | Path) -> list[Path]:
        """changes.parquet (every row) and counts.parquet into ``directory``; each file whole or not at all."""
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ToolError(f"cannot create {directory}: {exc.strerror or exc}") from None
        written = []
        for name, query in (("changes", "SELECT * FROM changes ORDER BY kind, ip, port, sni, field"),
                            ("counts", "SELECT * FROM counts_frame")):
            if name == "counts":
                self.con.register("counts_frame", self.counts())
            target = directory / f"{name}.parquet"
            partial = directory / f".{name}.{uuid.uuid4().hex}.parquet"
            try:
                self.con.execute(f"COPY ({query}) TO '{_sql(partial)}' (FORMAT parquet, COMPRESSION zstd)")
                partial.replace(target)
            except (duckdb.Error, OSError) as exc:
                partial.unlink(missing_ok=True)
                raise ToolError(f"cannot write {target}: {first_line(exc) if isinstance(exc, duckdb.Error) else exc}") from None
            written.append(target)
        return written

    def as_dict(self, top: int = 10) -> dict:
        return {
            "old": self.old, "new": self.new,
            "endpoints": self.endpoints().to_dicts()[0],
            "counts": self.counts().to_dicts(),
            "parameters": self.parameters().to_dicts(),
            "transitions": self.transitions(top).to_dicts(),
            "changes": self.con.sql("SELECT * FROM changes ORDER BY kind, ip, port, sni, field").pl().to_dicts(),
        }

    def close(self) -> None:
        self.con.close()


def diff(old: str | Path, new: str | Path) -> Diff:
    """The changes from ``old`` to ``new`` (scan files or campaign directories)."""
    con = duckdb.connect()
    with campaign_store.closed_on_error(con, f"cannot diff {old} and {new}"):
        states = [endpoint_state(attach(con, path, alias)) for path, alias in ((old, "old_input"), (new, "new_input"))]
        con.execute(f"CREATE TEMP TABLE old_endpoints AS {states[0]}")
        con.execute(f"CREATE TEMP TABLE new_endpoints AS {states[1]}")
        con.execute(f"CREATE TEMP TABLE changes AS {changes_sql('SELECT * FROM old_endpoints', 'SELECT * FROM new_endpoints')}")
    return Diff(str(old), str(new), con)


def _sql(text: object) -> str:
    return str(text).replace("'", "''")
