"""The qreplay results file: DuckDB, schema schemas/duckdb/replay_v1.sql, written in batches."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import duckdb
import pyarrow as pa

from replay import statistics
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
    _store_what_ran(con)
    create_views(con)
    return con


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """The views of a results file that are made from replay/statistics.py, not from the schema's DDL."""
    con.execute(f"CREATE OR REPLACE VIEW run_summary AS {statistics.summary_sql()}")
    con.execute(f"CREATE OR REPLACE VIEW profile_summary AS {statistics.profile_summary_sql()}")
    con.execute(f"CREATE OR REPLACE VIEW profile_syscalls AS {statistics.PROFILE_SYSCALLS_SQL}")


# Until 2026-11-25 runs stored the requested --cc, --autotune and --queue as their conditions. What ran
# instead: aioquic's endpoints never named a congestion control, so aioquic ran its default, Reno; quic-go
# has only CUBIC; quinn and s2n-quic cannot grow their windows; a rate limit without --queue held the larger
# of 1000 packets and one bandwidth-delay product of 1500-byte packets.
_RAN_BEFORE_REQUESTED_WAS_STORED = """
UPDATE runs SET cc_requested = cc, autotune_requested = autotune, queue_requested = queue,
    cc = CASE coalesce(server_stack, stack) WHEN 'aioquic' THEN 'reno' WHEN 'quic-go' THEN 'cubic' ELSE cc END,
    autotune = autotune AND stack NOT IN ('quinn', 's2n-quic'),
    queue = CASE WHEN queue IS NULL AND rate_bps IS NOT NULL AND link_backend IN ('relay', 'netem')
                 THEN greatest(1000, ceil(rate_bps / 8 * greatest(delay_ms + delay_up_ms, 1) / 1000 / 1500))::BIGINT
                      || 'p'
                 ELSE queue END
WHERE cc_requested IS NULL;
UPDATE runs SET udp_buffer_bytes = json_extract(e.config, '$.udp_buffer_bytes')::BIGINT
FROM experiments e
WHERE runs.experiment_id = e.experiment_id AND runs.udp_buffer_bytes IS NULL AND runs.link_backend != 'loopback';
"""


def _store_what_ran(con: duckdb.DuckDBPyConnection) -> None:
    """Give the runs of a file written before runs stored what ran their conditions as ran (once)."""
    if con.execute("SELECT count(*) FROM runs WHERE cc_requested IS NULL").fetchone()[0]:
        con.execute(_RAN_BEFORE_REQUESTED_WAS_STORED)


def open_read_only(path: str | Path) -> duckdb.DuckDBPyConnection:
    """An existing results file for reading; ToolError (one line) when it is missing or no database."""
    if not Path(path).exists():
        raise ToolError(f"results file {path} does not exist")
    try:
        return duckdb.connect(str(path), read_only=True)
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
        con.execute(f"INSERT {'OR IGNORE ' if skip_stored else ''}INTO {table} ({', '.join(used)}) "
                    f"SELECT {', '.join(used)} FROM _batch")
    finally:
        con.unregister("_batch")
    return len(rows)


def upsert_experiment(con: duckdb.DuckDBPyConnection, experiment: Mapping) -> None:
    con.execute("DELETE FROM experiments WHERE experiment_id = ?", [experiment["experiment_id"]])
    insert(con, "experiments", [experiment])
