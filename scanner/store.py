"""The scan store: one DuckDB file per scan, versioned schema, batch appends.

Other writers (discovery, pcap/browser extraction) put their own tables into
the same file through the same few calls::

    store = ScanStore.open("scan.duckdb")            # creates or checks the schema
    store.apply_schema("discovery", 1, ddl_text)     # their own component, own version
    scan_id = store.begin_scan("ipv4", settings)
    store.append({"discovery": arrow_or_polars_table})   # one transaction
    store.finish_scan(scan_id)

Every append is one transaction over Arrow data, never row by row, so a
``kill -9`` loses at most the batch being written and DuckDB's WAL keeps the
file consistent. The schema contract is documented in schemas/README.md.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from tparams.codec import DecodedParameters, PreferredAddress, VersionInformation
from tparams.errors import ToolError
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet, order_fingerprint, order_signature

from scanner.engine import HandshakeRecord
from scanner.targets import Target

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas" / "duckdb"
SCAN_SCHEMA = ("scan", 1, SCHEMA_DIR / "scan_v1.sql")

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_CERTIFICATE = pa.struct(
    [
        ("sha256", pa.string()),
        ("subject", pa.string()),
        ("issuer", pa.string()),
        ("sans", pa.list_(pa.string())),
        ("not_before", _TIMESTAMP),
        ("not_after", _TIMESTAMP),
    ]
)
_FINDING = pa.struct([("kind", pa.string()), ("detail", pa.string()), ("position", pa.int32()), ("param_id", pa.int64())])
HANDSHAKE_SCHEMA = pa.schema(
    [
        ("scan_id", pa.int32()),
        ("handshake_id", pa.int64()),
        ("ip", pa.string()),
        ("port", pa.int32()),
        ("sni", pa.string()),
        ("started_at", _TIMESTAMP),
        ("finished_at", _TIMESTAMP),
        ("handshake_ms", pa.float64()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("error_code", pa.int64()),
        ("closed_by", pa.string()),
        ("offered_versions", pa.list_(pa.int64())),
        ("retry", pa.bool_()),
        ("datagrams_received", pa.int32()),
        ("quic_version", pa.int64()),
        ("alpn", pa.string()),
        ("tls_version", pa.string()),
        ("cipher_suite", pa.string()),
        ("key_exchange_group", pa.string()),
        ("certificates", pa.list_(_CERTIFICATE)),
        ("certificate_verified", pa.bool_()),
        ("certificate_error", pa.string()),
        ("transport_parameters_raw", pa.binary()),
        ("findings", pa.list_(_FINDING)),
        *[(name, pa.bool_() if name == "disable_active_migration" else pa.int64()) for name in PERFORMANCE_PARAMETERS],
        ("set_fingerprint", pa.string()),
        ("order_fingerprint", pa.string()),
        ("order_signature", pa.string()),
    ]
)
PARAMETER_SCHEMA = pa.schema(
    [
        ("handshake_id", pa.int64()),
        ("position", pa.int32()),
        ("param_id", pa.int64()),
        ("name", pa.string()),
        ("value", pa.int64()),
        ("value_text", pa.string()),
        ("raw", pa.binary()),
    ]
)
_RECORD_FIELDS = [
    "ip", "port", "sni", "started_at", "finished_at", "handshake_ms", "status", "error", "error_code",
    "closed_by", "offered_versions", "retry", "datagrams_received", "quic_version", "alpn", "tls_version",
    "cipher_suite", "key_exchange_group", "certificate_verified", "certificate_error", "transport_parameters_raw",
]  # fmt: skip


class ScanStore:
    def __init__(self, con: duckdb.DuckDBPyConnection, path: str):
        self.con = con
        self.path = path
        self._next_handshake_id = con.execute("SELECT coalesce(max(handshake_id), 0) + 1 FROM handshakes").fetchall()[0][0]

    @classmethod
    def open(cls, path: str | Path, read_only: bool = False) -> "ScanStore":
        """Open or create ``path``; a foreign or newer schema is a one-line ToolError."""
        path = str(path)
        if read_only and not Path(path).is_file():
            raise ToolError(f"no such scan file: {path}")
        try:
            con = duckdb.connect(path, read_only=read_only)
        except (duckdb.Error, OSError) as exc:
            raise ToolError(f"cannot open {path} as a DuckDB file: {_first_line(exc)}") from None
        try:
            _check_foreign(con, path)
            if read_only:
                if _component_version(con, "scan") is None:
                    raise ToolError(f"{path} holds no qscan results (no 'scan' schema component)")
            else:
                apply_schema(con, *SCAN_SCHEMA[:2], SCAN_SCHEMA[2].read_text())
        except BaseException:
            con.close()
            raise
        return cls(con, path)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "ScanStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def apply_schema(self, name: str, version: int, ddl: str) -> None:
        apply_schema(self.con, name, version, ddl)

    # -- scans ----------------------------------------------------------------

    def begin_scan(self, kind: str, settings: Mapping[str, Any], command_line: str | None = None, resume: bool = False) -> int:
        """A new scan_id, or with ``resume`` the latest scan of the same kind."""
        if resume:
            rows = self.con.execute(
                "SELECT scan_id FROM scans WHERE kind = ? ORDER BY scan_id DESC LIMIT 1", [kind]
            ).fetchall()
            if rows:
                self.con.execute("UPDATE scans SET finished_at = NULL WHERE scan_id = ?", [rows[0][0]])
                return int(rows[0][0])
        scan_id = self.con.execute("SELECT coalesce(max(scan_id), 0) + 1 FROM scans").fetchall()[0][0]
        self.con.execute(
            "INSERT INTO scans VALUES (?, ?, ?, NULL, ?, ?)",
            [scan_id, kind, dt.datetime.now(dt.timezone.utc), command_line, json.dumps(dict(settings), default=str)],
        )
        return int(scan_id)

    def finish_scan(self, scan_id: int) -> None:
        self.con.execute("UPDATE scans SET finished_at = ? WHERE scan_id = ?", [dt.datetime.now(dt.timezone.utc), scan_id])

    def handshake_count(self) -> int:
        return int(self.con.execute("SELECT count(*) FROM handshakes").fetchall()[0][0])

    def recorded_targets(self, scan_id: int | None = None) -> set[Target]:
        query = "SELECT DISTINCT ip, port, sni FROM handshakes" + (" WHERE scan_id = ?" if scan_id is not None else "")
        rows = self.con.execute(query, [] if scan_id is None else [scan_id]).fetchall()
        return {Target(ip, port, sni) for ip, port, sni in rows}

    # -- appends --------------------------------------------------------------

    def append(self, tables: Mapping[str, Any]) -> None:
        """Insert Arrow tables or polars DataFrames (columns by name) in ONE transaction."""
        self.con.begin()
        try:
            for table_name, data in tables.items():
                if not table_name.isidentifier():
                    raise ValueError(f"not a table name: {table_name!r}")
                self.con.register("_batch", data)
                try:
                    self.con.execute(f'INSERT INTO "{table_name}" BY NAME SELECT * FROM _batch')
                finally:
                    self.con.unregister("_batch")
            self.con.commit()
        except BaseException:
            self.con.rollback()
            raise

    def append_records(self, scan_id: int, records: Iterable[HandshakeRecord]) -> int:
        """Write handshake records and their parameters as one batch; returns how many."""
        records = list(records)
        if not records:
            return 0
        first_id = self._next_handshake_id
        handshakes, parameters = records_to_arrow(scan_id, first_id, records)
        self.append({"handshakes": handshakes, "handshake_parameters": parameters})
        self._next_handshake_id = first_id + len(records)
        return len(records)


def records_to_arrow(scan_id: int, first_id: int, records: list[HandshakeRecord]) -> tuple[pa.Table, pa.Table]:
    """Columnar conversion: one pass over the records, one pass over their parameters."""
    count = len(records)
    columns: dict[str, list] = {name: [getattr(r, name) for r in records] for name in _RECORD_FIELDS}
    columns["scan_id"] = [scan_id] * count
    handshake_ids = list(range(first_id, first_id + count))
    columns["handshake_id"] = handshake_ids
    columns["certificates"] = [[c.__dict__ for c in r.certificates] for r in records]
    columns["findings"] = [
        None if r.decoded is None else [f.__dict__ for f in r.decoded.findings] for r in records
    ]
    derived = [_derived(r.decoded) for r in records]
    for index, name in enumerate(PERFORMANCE_PARAMETERS):
        columns[name] = [None if d is None else d[0][index] for d in derived]
    columns["set_fingerprint"] = [None if d is None else d[1] for d in derived]
    columns["order_signature"] = [None if d is None else d[2] for d in derived]
    columns["order_fingerprint"] = [None if d is None else d[3] for d in derived]
    handshakes = pa.Table.from_pydict(columns, schema=HANDSHAKE_SCHEMA)

    rows = [
        (handshake_id, p.position, p.id, p.name, p.value if type(p.value) is int else None, _value_text(p.value), p.raw)
        for handshake_id, r in zip(handshake_ids, records)
        if r.decoded is not None
        for p in r.decoded.parameters
    ]
    parameter_columns = list(zip(*rows)) if rows else [[] for _ in PARAMETER_SCHEMA]
    parameters = pa.Table.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(parameter_columns, PARAMETER_SCHEMA)], schema=PARAMETER_SCHEMA
    )
    return handshakes, parameters


_PERFORMANCE = frozenset(PERFORMANCE_PARAMETERS)


def _derived(decoded: DecodedParameters | None) -> tuple[tuple, str, str, str] | None:
    """(the twelve as sent, set fingerprint, order signature, order fingerprint).

    Building a ParamSet costs ~0.25 ms; a scan has few distinct sets and orders
    among millions of records, so both are memoised on exactly what they read.
    """
    if decoded is None:
        return None
    twelve = tuple(p for p in decoded.parameters if p.name in _PERFORMANCE)
    params, fingerprint = _param_set(tuple((p.name, p.value) for p in twelve), twelve)
    signature, order = _order(decoded.ids)
    return params, fingerprint, signature, order


_SET_CACHE: dict[tuple, tuple[tuple, str]] = {}


def _param_set(key: tuple, twelve: tuple) -> tuple[tuple, str]:
    found = _SET_CACHE.get(key)
    if found is None:
        param_set = ParamSet.from_decoded(DecodedParameters(b"", twelve))
        found = _SET_CACHE[key] = (tuple(param_set.as_sent().values()), param_set.fingerprint())
    return found


@functools.lru_cache(maxsize=65536)
def _order(ids: tuple[int, ...]) -> tuple[str, str]:
    return order_signature(ids), order_fingerprint(ids)


def _value_text(value: object) -> str | None:
    if value is None or type(value) is int:
        return None
    if value is True:
        return "true"
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, VersionInformation):
        available = ",".join(f"0x{v:08x}" for v in value.available_versions)
        return f"chosen=0x{value.chosen_version:08x} available={available}"
    if isinstance(value, PreferredAddress):
        return (
            f"{value.ipv4_address}:{value.ipv4_port} [{value.ipv6_address}]:{value.ipv6_port} "
            f"cid={value.connection_id.hex()} token={value.stateless_reset_token.hex()}"
        )
    return str(value)


def apply_schema(con: duckdb.DuckDBPyConnection, name: str, version: int, ddl: str) -> None:
    """Create component ``name`` at ``version`` (idempotent); refuse a file holding another version."""
    found = _component_version(con, name)
    if found is not None and found != version:
        raise ToolError(f"file has schema {name} v{found}, this qscan writes v{version}; use a new --out")
    if found is None:
        con.execute(ddl)


def _component_version(con: duckdb.DuckDBPyConnection, name: str) -> int | None:
    if not _has_table(con, "schema_version"):
        return None
    rows = con.execute("SELECT version FROM schema_version WHERE name = ?", [name]).fetchall()
    return int(rows[0][0]) if rows else None


def _has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = 'main'", [table]
        ).fetchall()[0][0]
    )


def _check_foreign(con: duckdb.DuckDBPyConnection, path: str) -> None:
    tables = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main'").fetchall()[0][0]
    if tables and not _has_table(con, "schema_version"):
        raise ToolError(f"{path} is a DuckDB file of another schema (no schema_version table); use a new --out")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
