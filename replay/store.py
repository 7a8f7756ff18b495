"""The qreplay results file: DuckDB, schema schemas/duckdb/replay_v1.sql, written in batches."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import duckdb
import pyarrow as pa

from replay.stacks.base import REPO_ROOT
from tparams.errors import ToolError

SCHEMA_FILE = REPO_ROOT / "schemas" / "duckdb" / "replay_v1.sql"
SCHEMA_VERSION = 1
DEFAULT_RESULTS = Path("qreplay-results.duckdb")


def connect(path: str | Path) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) a results file with the current schema."""
    try:
        con = duckdb.connect(str(path))
    except duckdb.Error as exc:
        raise ToolError(f"cannot open results file {path}: {exc}") from None
    con.execute(SCHEMA_FILE.read_text())
    found = con.execute("SELECT version FROM schema_version WHERE name = 'replay'").fetchone()[0]
    if found != SCHEMA_VERSION:
        raise ToolError(f"{path} has replay schema version {found}, this qreplay writes {SCHEMA_VERSION}")
    return con


def open_read_only(path: str | Path) -> duckdb.DuckDBPyConnection:
    """An existing results file for reading; ToolError (one line) when it is missing or no database."""
    if not Path(path).exists():
        raise ToolError(f"results file {path} does not exist")
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise ToolError(f"cannot open {path}: {str(exc).splitlines()[0]}") from None


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [row[0] for row in con.execute(f"DESCRIBE {table}").fetchall()]


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: Iterable[Mapping]) -> int:
    """Append rows in one statement via Arrow; missing keys become NULL, unknown keys are an error."""
    rows = list(rows)
    if not rows:
        return 0
    columns = _columns(con, table)
    unknown = set().union(*rows) - set(columns)
    if unknown:
        raise ValueError(f"not columns of {table}: {sorted(unknown)}")
    used = [c for c in columns if any(c in r for r in rows)]
    batch = pa.Table.from_pylist([{c: r.get(c) for c in used} for r in rows])
    con.register("_batch", batch)
    try:
        con.execute(f"INSERT INTO {table} ({', '.join(used)}) SELECT {', '.join(used)} FROM _batch")
    finally:
        con.unregister("_batch")
    return len(rows)


def upsert_experiment(con: duckdb.DuckDBPyConnection, experiment: Mapping) -> None:
    con.execute("DELETE FROM experiments WHERE experiment_id = ?", [experiment["experiment_id"]])
    insert(con, "experiments", [experiment])
