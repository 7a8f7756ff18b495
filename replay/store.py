"""The qreplay results file: DuckDB, schema schemas/duckdb/replay_v3.sql, written in batches."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from common.signals import signals_deferred
from replay import statistics
from replay.stacks.base import REPO_ROOT
from tparams.errors import ToolError
from tparams.knobs import KNOBS

SCHEMA_FILE = REPO_ROOT / "schemas" / "duckdb" / "replay_v3.sql"
SCHEMA_VERSION = 3
#: what makes a file of each older version the next one (each in one transaction)
MIGRATIONS = {old: REPO_ROOT / "schemas" / "duckdb" / "migrations" / f"replay_{old}_to_{old + 1}.sql"
              for old in (1, 2)}


def connect(path: str | Path) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) a results file with the current schema; a file of an older version is
    migrated first (nothing it holds is lost), one of a newer version refused in one line."""
    try:
        con = duckdb.connect(str(path))
    except duckdb.Error as exc:
        raise ToolError(f"cannot open results file {path}: {exc}") from None
    found = version(con)
    if found is not None and found > SCHEMA_VERSION:
        con.close()
        raise ToolError(f"{path} has replay schema version {found}, newer than this qreplay's {SCHEMA_VERSION}: "
                        "open it with a newer qreplay")
    while found is not None and found < SCHEMA_VERSION:
        _migrate(con, path, found)
        found = version(con)
    con.execute(SCHEMA_FILE.read_text())
    add_knob_columns(con)
    create_views(con)
    return con


def version(con: duckdb.DuckDBPyConnection) -> int | None:
    """The file's replay schema version; None for a new file."""
    # fetchall: a result left unfinished would refuse the connection's next relation (con.sql)
    if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
                       ).fetchall()[0][0]:
        return None
    rows = con.execute("SELECT version FROM schema_version WHERE name = 'replay'").fetchall()
    return rows[0][0] if rows else None


def _migrate(con: duckdb.DuckDBPyConnection, path: str | Path, found: int) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(MIGRATIONS[found].read_text())
        con.execute("COMMIT")
    except duckdb.Error as exc:
        con.execute("ROLLBACK")
        con.close()
        raise ToolError(f"cannot migrate {path} from replay schema version {found}: {str(exc).splitlines()[0]} "
                        "(the file is as it was)") from None


def add_knob_columns(con: duckdb.DuckDBPyConnection) -> None:
    """Each knob's two runs columns (tparams.knobs: what ran, what was asked), where the file lacks them."""
    for knob in KNOBS.values():
        for column in knob.columns:
            con.execute(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {column} {knob.sql_type}")


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """The views of a results file that are made from replay/statistics.py, not from the schema's DDL."""
    con.execute(f"CREATE OR REPLACE VIEW run_summary AS {statistics.summary_sql()}")
    con.execute(f"CREATE OR REPLACE VIEW profile_summary AS {statistics.profile_summary_sql()}")
    con.execute(f"CREATE OR REPLACE VIEW profile_syscalls AS {statistics.PROFILE_SYSCALLS_SQL}")


def open_read_only(path: str | Path) -> duckdb.DuckDBPyConnection:
    """An existing results file for reading (one of an older schema version migrated first); ToolError (one
    line) when it is missing or no database."""
    if not Path(path).exists():
        raise ToolError(f"results file {path} does not exist")
    try:
        con = duckdb.connect(str(path), read_only=True)
        if (found := version(con)) is not None and found < SCHEMA_VERSION:
            con.close()  # a file of an older qreplay is migrated once, then read
            connect(path).close()
            con = duckdb.connect(str(path), read_only=True)
        return con
    except duckdb.Error as exc:
        raise ToolError(f"cannot open {path}: {str(exc).splitlines()[0]}") from None


def campaign_experiments(con: duckdb.DuckDBPyConnection, results: str | Path, tag: str, what: str,
                         campaign: str | None = None, where: str = "true") -> tuple[str, list[tuple]]:
    """(campaign id, its experiments as (experiment_id, stack, started_at, finished_at, config as a dict) in
    the order they started) of the newest campaign whose experiments carry ``tag`` in their config, or of
    ``campaign``; ``where`` narrows the experiments (SQL), ``what`` names the command in the one-line error."""
    rows = [(eid, stack, started, finished, json.loads(config)) for eid, stack, started, finished, config in con.execute(
        "SELECT experiment_id, stack, started_at, finished_at, config FROM experiments "
        f"WHERE json_extract_string(config, '$.{tag}') IS NOT NULL AND ({where}) ORDER BY started_at").fetchall()]
    if not rows:
        raise ToolError(f"{results} holds no `{what}` campaign")
    campaign = campaign or rows[-1][4][tag]
    chosen = [row for row in rows if row[4][tag] == campaign]
    if not chosen:
        raise ToolError(f"{results} has no {what} campaign {campaign!r}")
    return campaign, chosen


def upload_credit(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, dict]:
    """run id -> what the server granted in that traced upload (traces.upload_credit, replay/trace.py
    receiver_credit), for those of ``run_ids`` traced as uploads; {} from a file written before the column
    was added within v3 (a file opened read-only is not brought up to date)."""
    if not run_ids or "upload_credit" not in _columns(con, "traces"):
        return {}
    return {run_id: json.loads(credit) for run_id, credit in con.execute(
        "SELECT run_id, upload_credit FROM traces WHERE upload_credit IS NOT NULL AND run_id IN (SELECT unnest(?))",
        [run_ids]).fetchall()}


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [row[0] for row in con.execute(f"DESCRIBE {table}").fetchall()]


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: Iterable[Mapping], skip_stored: bool = False) -> int:
    """Append rows in one statement via Arrow; missing keys become NULL, unknown keys are an error.
    ``skip_stored``: rows whose key the table holds already are left out (a retry after an interrupt)."""
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
        with signals_deferred():  # a Ctrl-C keeps the rows: it lands after them, not as DuckDB's abandoned query
            con.execute(f"INSERT {'OR IGNORE ' if skip_stored else ''}INTO {table} ({', '.join(used)}) "
                        f"SELECT {', '.join(used)} FROM _batch")
    finally:
        con.unregister("_batch")
    return len(rows)


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """All the block's writes or none of them (a kill -9 inside it leaves none after the WAL's replay)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    with signals_deferred():
        con.execute("COMMIT")


def upsert_experiment(con: duckdb.DuckDBPyConnection, experiment: Mapping) -> None:
    with signals_deferred():  # never the old record deleted and the new one not yet written
        con.execute("DELETE FROM experiments WHERE experiment_id = ?", [experiment["experiment_id"]])
        insert(con, "experiments", [experiment])
