"""`qscan merge`: several scan files (e.g. the shards of one scan) into one.

Generic over schema components: every table of every input is copied (its
DDL from the input, so components this module does not know survive), with
``scan_id`` and ``handshake_id`` renumbered so that ids never collide. The
shards of one ZMap scan (same seed, targets, port and shard count in
``discovery_runs``) become ONE scan in the output, so a merged sharded scan
looks like the unsharded one.

An input may also be a campaign directory (scanner.campaign_store): each of
its shards is merged as if it were the shard's scan file. A target recorded
by two shards of one campaign, or by two shards of one ZMap scan, is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

from tparams.errors import ToolError

from scanner import campaign_store

_SKIPPED = {"schema_version"}


@dataclass(frozen=True)
class MergeResult:
    inputs: int
    scans: int
    rows: dict[str, int]


@dataclass(frozen=True)
class _Input:
    """One scan file, or one shard of a campaign: a catalog holding its DDL and where its rows are."""

    label: str
    alias: str
    relation: Callable[[str], str]


def merge_scans(inputs: Sequence[str | Path], out: str | Path) -> MergeResult:
    if not inputs:
        raise ToolError("merge needs at least one input file")
    if Path(out).exists():
        raise ToolError(f"{out} exists; merge writes a new file")
    if len({Path(p).resolve() for p in inputs}) != len(inputs):
        raise ToolError("the same file is given twice; its rows would be counted twice")
    for path in inputs:
        if not Path(path).is_file() and not campaign_store.is_campaign(path):
            raise ToolError(f"no such scan file or campaign directory: {path}")
    con = duckdb.connect(str(out))
    with campaign_store.merging_into(out, con, f"cannot merge into {out}"):
        scan_keys: dict[str, int] = {}
        next_scan = 1
        for source in _inputs(con, inputs):
            try:
                _copy_components(con, source.alias, source.label)
                mapping, shared = {}, set()
                for old in _scan_ids(con, source):
                    key = _shard_group(con, source, old) or f"{source.label}#{old}"
                    if key in scan_keys:
                        shared.add(scan_keys[key])
                    else:
                        scan_keys[key] = next_scan
                        next_scan += 1
                    mapping[old] = scan_keys[key]
                _copy_rows(con, source, mapping, shared)
            finally:
                con.execute(f"DETACH {source.alias}")
        rows = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in _tables(con, _main(con))}
        return MergeResult(len(inputs), len(set(scan_keys.values())), rows)


def _inputs(con: duckdb.DuckDBPyConnection, inputs: Sequence[str | Path]) -> Iterator[_Input]:
    """Each input attached in turn (the caller detaches it): a scan file as itself, a campaign shard by shard."""
    number = 0
    for path in inputs:
        if not campaign_store.is_campaign(path):
            alias = f"in{number}"
            con.execute(f"ATTACH '{_quote(path)}' AS {alias} (READ_ONLY)")
            yield _Input(str(path), alias, lambda table, alias=alias: f'{alias}."{table}"')
            number += 1
            continue
        schema, shards = campaign_store.campaign_shards(con, path)
        for labels, files in sorted(shards.items()):
            alias = f"in{number}"
            relations = campaign_store.attach_shard(con, alias, schema, files)
            yield _Input(f"{path} shard {'/'.join(labels)}", alias, relations.__getitem__)
            number += 1


def _copy_components(con: duckdb.DuckDBPyConnection, alias: str, path: str | Path) -> None:
    if "schema_version" not in _tables(con, alias):
        raise ToolError(f"{path} is not a qscan file (no schema_version table)")
    have = dict(con.execute("SELECT name, version FROM main.schema_version").fetchall()) \
        if "schema_version" in _tables(con, _main(con)) else {}
    for name, version in con.execute(f"SELECT name, version FROM {alias}.schema_version").fetchall():
        if name in have and have[name] != version:
            raise ToolError(f"{path} has schema {name} v{version}, earlier inputs v{have[name]}; cannot merge")
    existing = set(_tables(con, _main(con)))
    for table, sql in con.execute(
        "SELECT table_name, sql FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'", [alias]
    ).fetchall():
        if table not in existing:
            con.execute(sql)
    # Views call the components' macros, so those come before the views.
    for name, parameters, definition in con.execute(
        "SELECT function_name, parameters, macro_definition FROM duckdb_functions() "
        "WHERE database_name = ? AND schema_name = 'main' AND function_type = 'macro' AND NOT internal",
        [alias],
    ).fetchall():
        con.execute(f"CREATE MACRO IF NOT EXISTS main.{name}({', '.join(parameters)}) AS {definition}")
    if "schema_version" in existing or "schema_version" in _tables(con, _main(con)):
        con.execute(f"INSERT OR IGNORE INTO main.schema_version SELECT * FROM {alias}.schema_version")
    for view, sql in con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE database_name = ? AND schema_name = 'main' AND NOT internal",
        [alias],
    ).fetchall():
        if view not in _views(con):
            con.execute(sql)


def _copy_rows(con: duckdb.DuckDBPyConnection, source: _Input, mapping: dict[int, int], shared: set[int]) -> None:
    con.execute("CREATE OR REPLACE TEMP TABLE scan_map (old INTEGER, new INTEGER)")
    con.executemany("INSERT INTO scan_map VALUES (?, ?)", list(mapping.items()))
    handshake_offset = 0
    if "handshakes" in _tables(con, _main(con)):
        handshake_offset = con.execute("SELECT coalesce(max(handshake_id), 0) FROM main.handshakes").fetchone()[0]
        if shared and "handshakes" in _tables(con, source.alias):
            _refuse_overlap(con, source, shared)
    for table in _tables(con, source.alias):
        if table in _SKIPPED:
            continue
        columns = _columns(con, source.alias, table)
        replace = []
        if "scan_id" in columns:
            replace.append("(SELECT new FROM scan_map WHERE old = t.scan_id) AS scan_id")
        if "handshake_id" in columns:
            replace.append(f"t.handshake_id + {handshake_offset} AS handshake_id")
        select = f"SELECT * REPLACE ({', '.join(replace)}) FROM {source.relation(table)} t" if replace \
            else f"SELECT * FROM {source.relation(table)} t"
        if table == "scans":
            # One row per merged scan: the shards' rows collapse into the first, spanning all of them.
            con.execute(f"INSERT INTO main.scans BY NAME SELECT * FROM ({select}) s "
                        "WHERE s.scan_id NOT IN (SELECT scan_id FROM main.scans)")
            con.execute(f"UPDATE main.scans m SET started_at = least(m.started_at, s.started_at), "
                        f"finished_at = CASE WHEN m.finished_at IS NULL OR s.finished_at IS NULL THEN NULL "
                        f"ELSE greatest(m.finished_at, s.finished_at) END FROM ({select}) s "
                        "WHERE m.scan_id = s.scan_id")
        else:
            # A version may gain columns (schemas/README.md): an input written later than the
            # first may hold some the output lacks.
            have = set(_columns(con, _main(con), table))
            for column, kind, *_ in con.execute(f"DESCRIBE {select}").fetchall():
                if column not in have:
                    con.execute(f'ALTER TABLE main."{table}" ADD COLUMN "{column}" {kind}')
            # Lookup tables with a primary key (parameter_names) hold the same rows in every shard.
            ignore = " OR IGNORE" if _has_primary_key(con, source.alias, table) else ""
            con.execute(f'INSERT{ignore} INTO main."{table}" BY NAME {select}')


def _refuse_overlap(con: duckdb.DuckDBPyConnection, source: _Input, shared: set[int]) -> None:
    """A shard of a scan that earlier inputs hold shards of must bring targets of its own."""
    row = con.execute(
        f"SELECT t.ip, t.port, t.sni FROM {source.relation('handshakes')} t JOIN scan_map ON scan_map.old = t.scan_id "
        "JOIN main.handshakes m ON m.scan_id = scan_map.new AND m.ip = t.ip AND m.port = t.port "
        f"AND m.sni IS NOT DISTINCT FROM t.sni WHERE scan_map.new IN ({', '.join(map(str, shared))}) LIMIT 1"
    ).fetchone()
    if row is not None:
        raise ToolError(f"{source.label} overlaps an earlier shard of the same scan: {campaign_store.endpoint(row)} "
                        "is in both; shards must not overlap")


def _shard_group(con: duckdb.DuckDBPyConnection, source: _Input, scan_id: int) -> str | None:
    if "discovery_runs" not in _tables(con, source.alias):
        return None
    row = con.execute(
        f"SELECT seed, targets, port, shards, probe_hex FROM {source.relation('discovery_runs')} WHERE scan_id = ? LIMIT 1",
        [scan_id],
    ).fetchone()
    if row is None or row[3] <= 1:
        return None
    seed, targets, port, shards, _ = row
    return json.dumps({"seed": seed, "targets": targets, "port": port, "shards": shards})


def _has_primary_key(con: duckdb.DuckDBPyConnection, database: str, table: str) -> bool:
    return bool(con.execute(
        "SELECT count(*) FROM duckdb_constraints() WHERE database_name = ? AND table_name = ? "
        "AND constraint_type = 'PRIMARY KEY'", [database, table]
    ).fetchone()[0])


def _scan_ids(con: duckdb.DuckDBPyConnection, source: _Input) -> list[int]:
    ids: set[int] = set()
    for table in _tables(con, source.alias):
        if "scan_id" in _columns(con, source.alias, table):
            ids |= {r[0] for r in con.execute(f"SELECT DISTINCT scan_id FROM {source.relation(table)}").fetchall()}
    return sorted(ids)


def _tables(con: duckdb.DuckDBPyConnection, database: str) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' ORDER BY table_name",
        [database],
    ).fetchall()]


def _views(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE database_name = current_database() AND NOT internal").fetchall()}


def _columns(con: duckdb.DuckDBPyConnection, database: str, table: str) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND table_name = ?", [database, table]
    ).fetchall()]


def _main(con: duckdb.DuckDBPyConnection) -> str:
    """The output file's own catalog (DuckDB names it after the file, not "main")."""
    return con.execute("SELECT current_database()").fetchone()[0]


def _quote(path: str | Path) -> str:
    return str(path).replace("'", "''")
