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

import concurrent.futures
import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from tparams.errors import ToolError, first_line
from tparams.registry import REGISTRY, spec_for

from scanner.columns import HandshakeColumns, grease_mask, handshake_columns
from scanner.targets import Target

if TYPE_CHECKING:  # the scan engine (aioquic, cryptography) only where a scan runs, not to read a store
    from scanner.engine import HandshakeRecord

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas" / "duckdb"
SCAN_SCHEMA = ("scan", 3, SCHEMA_DIR / "scan_v3.sql")
# Columns scan v3 gained after files were written with it (schemas/README.md: additions old
# readers ignore). scan_v3.sql creates them; an older v3 file gains them when opened for writing.
SCAN_V3_ADDED_COLUMNS = (("handshakes", "hello_retry_request", "BOOLEAN"),)
CHECKPOINT_THRESHOLD = "512MB"

PARAMETER_NAMES_SCHEMA = pa.schema([("param_id", pa.int64()), ("name", pa.string())])


class ScanStore:
    def __init__(self, con: duckdb.DuckDBPyConnection, path: str):
        self._con = con
        self.path = path
        self._pending: concurrent.futures.Future | None = None
        self._next_handshake_id = con.execute("SELECT coalesce(max(handshake_id), 0) + 1 FROM handshakes").fetchall()[0][0]
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="scanstore")
        # A read-only open of a v1 file has no parameter_names, and writes none.
        named = con.execute("SELECT param_id FROM parameter_names").fetchall() if _has_table(con, "parameter_names") else []
        self._named_ids = {param_id for (param_id,) in named}

    @classmethod
    def open(cls, path: str | Path, read_only: bool = False) -> "ScanStore":
        """Open or create ``path``; a foreign or newer schema is a one-line ToolError."""
        path = str(path)
        if read_only and not Path(path).is_file():
            raise ToolError(f"no such scan file: {path}")
        try:
            con = duckdb.connect(path, read_only=read_only)
        except (duckdb.Error, OSError) as exc:
            raise ToolError(f"cannot open {path} as a DuckDB file: {first_line(exc)}") from None
        try:
            _check_foreign(con, path)
            if read_only:
                if _component_version(con, "scan") is None:
                    raise ToolError(f"{path} holds no qscan results (no 'scan' schema component)")
            else:
                apply_schema(con, *SCAN_SCHEMA[:2], SCAN_SCHEMA[2].read_text())
                for table, column, kind in SCAN_V3_ADDED_COLUMNS:
                    con.execute(f'ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS {column} {kind}')
                _name_registered(con)
                # DuckDB checkpoints whenever the WAL passes 16 MB, i.e. every batch or
                # two at speed, tripling write time. A kill -9 replays the WAL on the
                # next open, so a larger one costs only replay time, never data.
                con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
        except BaseException:
            con.close()
            raise
        return cls(con, path)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, once the batch being written in the background is committed."""
        self._drain()
        return self._con

    def _drain(self) -> None:
        """Wait for the background batch; its failure is raised here."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def close(self) -> None:
        try:
            self._drain()
        finally:
            self._writer.shutdown()
            self._con.close()

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
        self._drain()
        self._write(tables)

    def _write(self, tables: Mapping[str, Any]) -> None:
        con = self._con
        con.begin()
        try:
            for table_name, data in tables.items():
                if not table_name.isidentifier():
                    raise ValueError(f"not a table name: {table_name!r}")
                con.register("_batch", data)
                try:
                    con.execute(f'INSERT INTO "{table_name}" BY NAME SELECT * FROM _batch')
                finally:
                    con.unregister("_batch")
            con.commit()
        except BaseException:
            con.rollback()
            raise

    def _write_combined(self, tables: Mapping[str, pa.Table]) -> None:
        # DuckDB inserts a table of one chunk a third faster than the same rows in the
        # workers' 1,000-record chunks (measured); the copy costs far less.
        self._write({name: table.combine_chunks() for name, table in tables.items()})

    def parameter_names(self, param_ids: pa.ChunkedArray) -> pa.Table:
        """Rows for ``parameter_names``: the ids among ``param_ids`` the file does not name yet.

        Append them with the parameters that use them. GREASE ids
        (``tparams.registry.is_grease``) are the ones left unlisted, which is how
        the views name them, so a million connections' random ids are never listed.
        """
        ids = pc.unique(param_ids).to_numpy()
        new = [i for i in ids[~grease_mask(ids)].tolist() if i not in self._named_ids]
        self._named_ids.update(new)
        return pa.Table.from_arrays(
            [pa.array(new, pa.int64()), pa.array([spec_for(i).name for i in new], pa.string())], schema=PARAMETER_NAMES_SCHEMA
        )

    def append_records(self, scan_id: int, records: Iterable[HandshakeRecord]) -> int:
        """Queue handshake records and their parameters as one transaction; returns how many."""
        return self.append_columns(scan_id, [handshake_columns(records)])

    def append_columns(self, scan_id: int, batches: Sequence[HandshakeColumns]) -> int:
        """Queue batches of handshake columns (what scan workers send) as one transaction; returns how many.

        The rows get their handshake ids here and are committed on a writer
        thread while the caller goes on (DuckDB releases the GIL), so the
        caller's next batches arrive while this one is inserted. One
        transaction at most is in flight: the next call, ``con``, ``close``
        and every read wait for it and raise its error. A kill -9 loses at
        most that transaction; DuckDB's WAL keeps the file consistent.
        """
        first_id = self._next_handshake_id
        handshakes, parameters = [], []
        for batch in batches:
            numbered = batch.numbered(scan_id, first_id)
            handshakes.append(numbered[0])
            parameters.append(numbered[1])
            first_id += len(batch)
        count = first_id - self._next_handshake_id
        if not count:
            return 0
        tables = {"handshakes": pa.concat_tables(handshakes), "handshake_parameters": pa.concat_tables(parameters)}
        self.append_queued(tables, "handshake_parameters")
        self._next_handshake_id = first_id
        return count

    def append_queued(self, tables: Mapping[str, pa.Table], parameters: str) -> None:
        """Insert Arrow tables in one transaction on the writer thread (see ``append_columns``), with the
        ``parameter_names`` rows the param_id column of table ``parameters`` needs."""
        self._drain()
        tables = dict(tables)
        names = self.parameter_names(tables[parameters].column("param_id"))
        if names.num_rows:
            tables["parameter_names"] = names
        self._pending = self._writer.submit(self._write_combined, tables)


def apply_schema(con: duckdb.DuckDBPyConnection, name: str, version: int, ddl: str) -> None:
    """Create component ``name`` at ``version`` (idempotent); refuse a file holding another version."""
    found = _component_version(con, name)
    if found is not None and found != version:
        raise ToolError(f"file has schema {name} v{found}, this qscan writes v{version}; use a new --out")
    if found is None:
        con.execute(ddl)


def _name_registered(con: duckdb.DuckDBPyConnection) -> None:
    """List the registry in ``parameter_names``: what the views name a registered id by,
    whether or not it has the GREASE form. Ids a newer registry adds are listed on the
    next open for writing; names already in the file stay as they were written."""
    names = pa.Table.from_arrays(
        [pa.array(list(REGISTRY), pa.int64()), pa.array([spec.name for spec in REGISTRY.values()], pa.string())],
        schema=PARAMETER_NAMES_SCHEMA,
    )
    con.register("_registry", names)
    try:
        con.execute("INSERT OR IGNORE INTO parameter_names SELECT * FROM _registry")
    finally:
        con.unregister("_registry")


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
