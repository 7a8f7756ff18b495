"""Campaign directories: the tables of many scan files as Hive-partitioned Parquet.

A campaign is many shards (hosts, vantage points) of one census. Each shard's
DuckDB scan file is exported, table by table, to::

    CAMPAIGN/_schema.json                       component versions and the DDL
    CAMPAIGN/<table>/campaign=<c>/vantage=<v>/campaign_shard=<s>/data.parquet

which DuckDB, polars and Spark read as they are (``hive_partitioning``). The
partition key is ``campaign_shard``, not ``shard``: the discovery tables have a
``shard`` column (ZMap's shard index), and a partition key of a column's name
replaces that column's values in DuckDB, polars and Spark.

Versioning rule: a campaign holds ONE version of each schema component
(``_schema.json``; every Parquet file also carries its shard's versions in its
key-value metadata). A shard of another version is refused; a shard bringing
a new component adds it. Ids that are numbered per scan file (``scan_id``,
``handshake_id``, ``hello_id``) are unique within a shard only: join on them
together with the three partition keys, or read through :func:`open_campaign`,
whose views add a per-shard offset so the schema's own views join as in one file.

Each table's file is written beside the campaign and renamed into place, so a
killed export leaves either the old file or the new one, never half of one;
files of one export share an ``export_id``, and :func:`open_campaign` refuses
a shard whose tables come from different exports (an export killed between
two renames) until it is exported again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import re
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import duckdb

from tparams.errors import ToolError, first_line

from scanner.store import ScanStore

SCHEMA_FILE = "_schema.json"
MANIFEST = "_campaign.json"  # what every shard of a campaign must agree on
WORK = "_work"  # each shard's own DuckDB file; leading underscore: Hive readers (DuckDB's globs, Spark) skip it
FORMAT = "qscan-campaign/1"
PARTITION_KEYS = ("campaign", "vantage", "campaign_shard")
# Numbered from 1 in every scan file: colliding across shards.
FILE_LOCAL_IDS = ("scan_id", "handshake_id", "hello_id")
# schema_version is _schema.json's "components" (and each file's metadata).
_NOT_EXPORTED = {"schema_version"}
_META_SCHEMA, _META_SHARD = "qscan_schema", "qscan_shard"
# Shards of one campaign and vantage must not share a target (handshakes), an address (discovery) or a
# planned replay run (runs, keyed by its plan id: qreplay campaigns).
_OVERLAP_KEYS = (("handshakes", ("ip", "port", "sni")), ("discovery", ("ip", "port")), ("runs", ("run_id",)))
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_FILE = re.compile(r"/([^/]+)/campaign=([^/]+)/vantage=([^/]+)/campaign_shard=([^/]+)/[^/]+\.parquet$")


def export_shard(store_path: str | Path, campaign_dir: str | Path, *, campaign: str, vantage: str, shard: str | int,
                 open_file: Callable[[str | Path], contextlib.AbstractContextManager] | None = None) -> dict[str, int]:
    """Write every table of the scan file ``store_path`` as this shard's partition of ``campaign_dir``.

    Returns rows written per table. Re-exporting a shard replaces it. Refused
    (ToolError, nothing written): a label that is not a plain name, a schema
    component at another version than the campaign's, and a target
    (ip, port, sni) or discovered address that another shard of the same
    campaign and vantage already holds. ``open_file`` opens the shard's file read-only as a context
    manager giving a DuckDB connection (default: a qscan scan file; qreplay passes its results file's).
    """
    labels = {"campaign": campaign, "vantage": vantage, "campaign_shard": str(shard) if isinstance(shard, int) else shard}
    for key, value in labels.items():
        if not isinstance(value, str) or not _LABEL.fullmatch(value):
            raise ToolError(f"{key} label {value!r} is not a plain name (letters, digits, . _ -; not starting with . _ -)")
    root = Path(campaign_dir)
    with (open_file or _scan_file)(store_path) as con, made_directory(root):
        ddl = catalog_ddl(con, _current(con))
        components = dict(con.execute("SELECT name, version FROM schema_version ORDER BY name").fetchall())
        tables = [t for t in ddl["tables"] if t not in _NOT_EXPORTED]
        max_ids = {
            column: max((_max(con, table, column) for table in tables if column in ddl["columns"][table]), default=0)
            for column in FILE_LOCAL_IDS
        }
        staging = root / f".staging-{uuid.uuid4().hex}"
        try:
            with _locked(root):
                _refuse_overlap(con, root, labels, store_path)
                _merge_schema(root, components, ddl, store_path)
            shard_meta = json.dumps({"export_id": staging.name[len(".staging-"):], "max_ids": max_ids,
                                     **labels, "source": Path(store_path).name})
            meta = {_META_SCHEMA: json.dumps(components), _META_SHARD: shard_meta}
            rows = {}
            for table in tables:
                target = staging / table / "data.parquet"
                target.parent.mkdir(parents=True)
                con.execute(
                    f"COPY (SELECT * FROM \"{table}\") TO '{_sql(target)}' "
                    f"(FORMAT parquet, COMPRESSION zstd, KV_METADATA {_kv(meta)})"
                )
                rows[table] = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            for table in tables:
                _replace(staging / table, root / table / _partition(labels))
        except duckdb.Error as exc:
            raise ToolError(f"cannot export {store_path} to {root}: {first_line(exc)}") from None
        except OSError as exc:
            raise ToolError(f"cannot export {store_path} to {root}: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return rows


@contextlib.contextmanager
def _scan_file(path: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    with ScanStore.open(path, read_only=True) as store:
        yield store.con


def work_file(directory: str | Path, vantage: str, shard: int) -> Path:
    return Path(directory) / WORK / vantage / f"shard-{shard}.duckdb"


def agree(root: Path, wanted: dict) -> None:
    """Record ``wanted`` as the campaign's manifest, or refuse it if the campaign is another one."""
    path = root / MANIFEST
    with contextlib.suppress(FileExistsError):
        with open(path, "x") as handle:  # the first shard to arrive writes it
            handle.write(json.dumps(wanted, indent=1) + "\n")
    held = json.loads(path.read_text())
    differs = [f"{key} {held.get(key)} (this shard: {value})" for key, value in wanted.items() if held.get(key) != value]
    if differs:
        raise ToolError(f"{root} holds campaign {held.get('name')} with {', '.join(differs)}; "
                        "shards of different campaigns would overlap: refusing")


@contextlib.contextmanager
def only_runner(lock: Path, label: str) -> Iterator[None]:
    """Held while one process runs a shard: a second one is refused in one line."""
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ToolError(f"{label} is being run by another process; refusing to run it twice") from None
        yield


@contextlib.contextmanager
def made_directory(path: Path) -> Iterator[None]:
    """``path`` (with any missing parents) made for an export in the block; if the block fails, what was
    made here is removed again, so a failed export leaves no empty directories behind."""
    first_new = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolError(f"cannot create {path}: {exc.strerror or exc}") from None
    try:
        yield
    except BaseException:
        if first_new is not None:
            shutil.rmtree(first_new, ignore_errors=True)
        raise


def open_campaign(campaign_dir: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection whose views are the scan file's tables and views over the campaign.

    Tables get the three partition columns after their own, and per-shard
    offsets on the file-local ids (the ``campaign_shards`` table lists them);
    the schema's views, macros and ``schema_version`` are as in one scan file,
    so ``qscan report``, scanner.analysis and the notebooks read it unchanged.
    ``campaign_dir`` may be an object-store URL (s3://...) DuckDB's httpfs
    extension reads; the checks below read only the Parquet footers.
    """
    root = str(campaign_dir).rstrip("/")
    con = duckdb.connect()
    with closed_on_error(con, f"cannot read campaign {root}"):
        schema = read_schema(con, root)
        shards = _shard_files(con, root, schema)
        con.execute("CREATE TABLE schema_version (name VARCHAR PRIMARY KEY, version INTEGER NOT NULL)")
        con.executemany("INSERT INTO schema_version VALUES (?, ?)", list(schema["components"].items()))
        _create_offsets(con, shards)
        present = {table for files in shards.values() for table in files}
        for table, sql in schema["tables"].items():
            if table in _NOT_EXPORTED:
                continue
            if table not in present:
                con.execute(sql)  # in the schema, in no shard: empty, as in a file that never wrote it
                continue
            paths = [shard[table]["file"] for shard in shards.values() if table in shard]
            con.execute(f'CREATE VIEW "{table}" AS {_table_view(con, paths, schema["lookup_keys"].get(table))}')
        for sql in schema["macros"]:
            con.execute(sql)
        for sql in schema["views"]:
            con.execute(sql)
    return con


@contextlib.contextmanager
def closed_on_error(con: duckdb.DuckDBPyConnection, what: str) -> Iterator[None]:
    """A block that builds on a new connection: any failure closes it, and a DuckDB error is one line (``what: ...``)."""
    try:
        yield
    except duckdb.Error as exc:
        con.close()
        raise ToolError(f"{what}: {first_line(exc)}") from None
    except BaseException:
        con.close()
        raise


@contextlib.contextmanager
def merging_into(out: str | Path, con: duckdb.DuckDBPyConnection, what: str) -> Iterator[None]:
    """A merge's block, writing the new file ``out`` through ``con``: ``con`` is closed however it ends, and on
    any failure the half-written ``out`` is removed, a DuckDB error said in one line (``what: ...``). Both
    merges (qscan merge, qreplay campaign merge) end so."""
    try:
        yield
    except BaseException as exc:
        con.close()
        Path(out).unlink(missing_ok=True)
        if isinstance(exc, duckdb.Error):
            raise ToolError(f"{what}: {first_line(exc)}") from None
        raise
    finally:
        con.close()


def is_campaign(path: str | Path) -> bool:
    """A campaign directory (or object-store URL, taken on trust) rather than a DuckDB file."""
    text = str(path)
    return "://" in text or (Path(text) / SCHEMA_FILE).is_file()


def connect_scan(path: str | Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a scan file or a campaign directory (notebooks; the caller closes it)."""
    if is_campaign(path):
        return open_campaign(path)
    ScanStore.open(path, read_only=True).close()  # its one-line refusals: missing, foreign, no scan component
    return duckdb.connect(str(path), read_only=True)


@contextlib.contextmanager
def scan_connection(path: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """``connect_scan`` for a ``with`` block: analysis code that takes either a file or a campaign."""
    con = connect_scan(path)
    try:
        yield con
    finally:
        con.close()


def catalog_ddl(con: duckdb.DuckDBPyConnection, database: str) -> dict:
    """The DDL a scan file holds, in an order that replays: tables, their lookup keys, macros, views."""
    tables = dict(con.execute(
        "SELECT table_name, sql FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' ORDER BY table_oid",
        [database],
    ).fetchall())
    macros = [
        f"CREATE MACRO IF NOT EXISTS {name}({', '.join(parameters)}) AS {definition}"
        for name, parameters, definition in con.execute(
            "SELECT function_name, parameters, macro_definition FROM duckdb_functions() WHERE database_name = ? "
            "AND schema_name = 'main' AND function_type = 'macro' AND NOT internal ORDER BY function_oid",
            [database],
        ).fetchall()
    ]
    views = [sql for (sql,) in con.execute(
        "SELECT sql FROM duckdb_views() WHERE database_name = ? AND schema_name = 'main' AND NOT internal ORDER BY view_oid",
        [database],
    ).fetchall()]
    # A primary key on no file-local id marks a lookup table (parameter_names): the same rows in
    # every shard, read once.
    lookup_keys = {
        table: columns
        for table, columns in con.execute(
            "SELECT table_name, constraint_column_names FROM duckdb_constraints() WHERE database_name = ? "
            "AND constraint_type = 'PRIMARY KEY'", [database]
        ).fetchall()
        if not set(columns) & set(FILE_LOCAL_IDS)
    }
    columns = {table: [c for (c,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND table_name = ? ORDER BY column_index",
        [database, table]).fetchall()] for table in tables}
    return {"tables": tables, "columns": columns, "lookup_keys": lookup_keys, "macros": macros, "views": views}


def read_schema(con: duckdb.DuckDBPyConnection, root: str) -> dict:
    """The campaign's _schema.json (through DuckDB, so object-store URLs work too)."""
    try:
        text = con.execute("SELECT content FROM read_text(?)", [f"{root}/{SCHEMA_FILE}"]).fetchone()[0]
    except duckdb.Error as exc:
        raise ToolError(f"{root} is not a campaign directory (no readable {SCHEMA_FILE}): {first_line(exc)}") from None
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError(f"{root}/{SCHEMA_FILE} is damaged (not JSON: {exc.msg} at byte {exc.pos})") from None
    if not isinstance(schema, dict) or schema.get("format") != FORMAT:
        found = schema.get("format") if isinstance(schema, dict) else type(schema).__name__
        raise ToolError(f"{root}/{SCHEMA_FILE} is format {found!r}; this qscan reads {FORMAT}")
    missing = [key for key in ("components", "tables", "lookup_keys", "macros", "views") if key not in schema]
    if missing:
        raise ToolError(f"{root}/{SCHEMA_FILE} is damaged: it lacks {', '.join(missing)}")
    return schema


def _shard_files(con: duckdb.DuckDBPyConnection, root: str, schema: dict) -> dict[tuple[str, str, str], dict[str, dict]]:
    """Per shard (campaign, vantage, campaign_shard), per table, its file's shard metadata (with
    ``file`` and ``components``); mixed versions and half-done exports refused here, before any view exists."""
    pattern = f"{root}/*/campaign=*/vantage=*/campaign_shard=*/*.parquet"
    metadata: dict[str, dict[str, str]] = {name: {} for (name,) in con.execute("SELECT file FROM glob(?)", [pattern]).fetchall()}
    damaged: dict[str, str] = {}
    try:
        rows = con.execute("SELECT file_name, key, value FROM parquet_kv_metadata(?)", [pattern]).fetchall()
    except duckdb.Error:  # a damaged or cut file somewhere: read the footers one by one to find it
        rows = []
        for name in sorted(metadata):
            try:
                rows += con.execute("SELECT file_name, key, value FROM parquet_kv_metadata(?)", [name]).fetchall()
            except duckdb.Error as exc:
                damaged[name] = first_line(exc)
    for name, key, value in rows:
        metadata.setdefault(name, {})[key.decode()] = value.decode()
    shards: dict[tuple[str, str, str], dict[str, dict]] = {}
    for name in sorted(set(metadata) - set(damaged)):
        match = _FILE.search(name)
        meta = metadata[name]
        if match is None or _META_SCHEMA not in meta:
            raise ToolError(f"{name} was not written by qscan export (no {_META_SCHEMA} metadata)")
        versions = json.loads(meta[_META_SCHEMA])
        for component, version in versions.items():
            if schema["components"].get(component) != version:
                raise ToolError(f"{name} has schema {component} v{version}, campaign {root} has "
                                f"v{schema['components'].get(component)}; mixed schema versions")
        table, *labels = match.groups()
        shards.setdefault(tuple(labels), {})[table] = json.loads(meta[_META_SHARD]) | {"file": name, "components": versions}
    left_out: dict[tuple[str, ...], list[str]] = {}
    for name in sorted(damaged):
        match = _FILE.search(name)
        left_out.setdefault(tuple(match.groups()[1:]) if match else (), []).append(name)
    for labels in left_out:
        # The whole shard is left out (its other tables without this one would not add up); the others are read.
        shards.pop(labels, None)  # type: ignore[arg-type]
    if damaged and not shards:  # one line: the error names the damage the warnings would have
        first = min(damaged)
        raise ToolError(f"campaign {root}: no readable shard (every one has a damaged file, first {first}: "
                        f"{damaged[first]})")
    for labels, names in left_out.items():
        problems = "; ".join(f"{name} is damaged ({damaged[name]})" for name in names)
        print(f"qscan: warning: {problems}; shard {'/'.join(labels)} left out, {len(shards)} other shard(s) read",
              file=sys.stderr)
    for labels, files in shards.items():
        if len({meta["export_id"] for meta in files.values()}) > 1:
            raise ToolError(f"shard {'/'.join(labels)} of {root} holds tables of different exports "
                            "(an export was interrupted); export it again")
    return shards


def campaign_shards(con: duckdb.DuckDBPyConnection, campaign_dir: str | Path) -> tuple[dict, dict[tuple[str, str, str], dict[str, dict]]]:
    """The campaign's schema and its shards (as ``_shard_files``), after refusing mixed schema
    versions, half-done exports and overlapping shards: what ``qscan merge`` checks before copying."""
    root = str(campaign_dir).rstrip("/")
    schema = read_schema(con, root)
    shards = _shard_files(con, root, schema)
    for table, key in _OVERLAP_KEYS:
        files = [files[table]["file"] for files in shards.values() if table in files]
        if not files:
            continue
        columns = ", ".join(key)
        row = con.execute(
            f"SELECT campaign, vantage, {columns}, list(DISTINCT campaign_shard ORDER BY campaign_shard) "
            f"FROM read_parquet(?, hive_partitioning = true, hive_types = {_hive_types()}, union_by_name = true) "
            f"GROUP BY ALL HAVING count(DISTINCT campaign_shard) > 1 LIMIT 1", [files]
        ).fetchone()
        if row is not None:
            raise ToolError(f"shards {', '.join(row[-1])} of campaign {row[0]} vantage {row[1]} overlap: "
                            f"{endpoint(row[2:-1])} is in each ({table}); shards must not overlap")
    return schema, shards


def attach_shard(con: duckdb.DuckDBPyConnection, alias: str, schema: dict, files: Mapping[str, dict]) -> dict[str, str]:
    """Attach an in-memory catalog ``alias`` holding the shard's DDL (its tables empty) and schema_version;
    returns each table's rows as a relation (``read_parquet`` of its file)."""
    con.execute(f"ATTACH ':memory:' AS {alias}")
    previous = con.execute("SELECT current_database()").fetchone()[0]
    con.execute(f"USE {alias}")
    try:
        con.execute("CREATE TABLE schema_version (name VARCHAR PRIMARY KEY, version INTEGER NOT NULL)")
        components = next(iter(files.values()))["components"]
        con.executemany("INSERT INTO schema_version VALUES (?, ?)", list(components.items()))
        for table in files:
            con.execute(schema["tables"][table])
        for sql in schema["macros"]:
            con.execute(sql)
        for sql in schema["views"]:
            with contextlib.suppress(duckdb.CatalogException):  # a view over tables this shard has not
                con.execute(sql)
    finally:
        con.execute(f"USE {previous}")
    return {table: f"read_parquet('{_sql(meta['file'])}', hive_partitioning = false)" for table, meta in files.items()}


def _create_offsets(con: duckdb.DuckDBPyConnection, shards: Mapping[tuple[str, str, str], dict[str, dict]]) -> None:
    columns = ", ".join(f"{c}_offset BIGINT" for c in FILE_LOCAL_IDS)
    con.execute(f"CREATE TABLE campaign_shards (campaign VARCHAR, vantage VARCHAR, campaign_shard VARCHAR, {columns})")
    offsets = dict.fromkeys(FILE_LOCAL_IDS, 0)
    rows = []
    for labels in sorted(shards):
        rows.append([*labels, *(offsets[c] for c in FILE_LOCAL_IDS)])
        max_ids = next(iter(shards[labels].values()))["max_ids"]
        for column in FILE_LOCAL_IDS:
            offsets[column] += max_ids.get(column, 0)
    if rows:
        con.executemany(f"INSERT INTO campaign_shards VALUES ({', '.join('?' * (3 + len(FILE_LOCAL_IDS)))})", rows)


def _table_view(con: duckdb.DuckDBPyConnection, files: list[str], lookup_key: list[str] | None) -> str:
    """A table's view over its files: each shard's, listed (a damaged shard's are left out)."""
    listed = ", ".join(f"'{_sql(name)}'" for name in files)
    source = (f"read_parquet([{listed}], "
              f"hive_partitioning = true, hive_types = {_hive_types()}, union_by_name = true)")
    if lookup_key:
        keys = ", ".join(f'"{c}"' for c in lookup_key)
        return f"SELECT DISTINCT ON ({keys}) * EXCLUDE ({', '.join(PARTITION_KEYS)}) FROM {source} ORDER BY {keys}"
    types = {row[0]: row[1] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    ids = [c for c in FILE_LOCAL_IDS if c in types]
    if not ids:
        return f"SELECT * FROM {source}"
    replaced = ", ".join(f"CAST(t.{c} + s.{c}_offset AS {types[c]}) AS {c}" for c in ids)
    return f"SELECT t.* REPLACE ({replaced}) FROM {source} t JOIN campaign_shards s USING ({', '.join(PARTITION_KEYS)})"


def _merge_schema(root: Path, components: dict[str, int], ddl: dict, store_path: str | Path) -> None:
    """Check the shard's component versions against the campaign's; add what it brings that is new."""
    path = root / SCHEMA_FILE
    schema = json.loads(path.read_text()) if path.is_file() else {
        "format": FORMAT, "partition_keys": list(PARTITION_KEYS), "components": {},
        "tables": {}, "columns": {}, "lookup_keys": {}, "macros": [], "views": [],
    }
    for name, version in components.items():
        have = schema["components"].get(name)
        if have is not None and have != version:
            raise ToolError(f"{store_path} has schema {name} v{version}, campaign {root} has v{have}; "
                            "mixed schema versions (export it into a campaign of its own)")
    # Columns added within a version (scanner.store.SCAN_V3_ADDED_COLUMNS): the table's widest DDL is kept.
    wider = {t for t, columns in ddl["columns"].items() if not set(columns) <= set(schema["columns"].get(t, ()))}
    if all(name in schema["components"] for name in components) and not wider:
        return
    schema["components"] = dict(sorted((schema["components"] | components).items()))
    schema["tables"] = schema["tables"] | {t: ddl["tables"][t] for t in wider}
    schema["columns"] = schema["columns"] | {t: ddl["columns"][t] for t in wider}
    schema["lookup_keys"] = ddl["lookup_keys"] | schema["lookup_keys"]
    schema["macros"] += [sql for sql in ddl["macros"] if sql not in schema["macros"]]
    schema["views"] += [sql for sql in ddl["views"] if sql not in schema["views"]]
    temporary = root / f".{SCHEMA_FILE}.{uuid.uuid4().hex}"
    temporary.write_text(json.dumps(schema, indent=1) + "\n")
    temporary.replace(path)


def _refuse_overlap(con: duckdb.DuckDBPyConnection, root: Path, labels: dict[str, str], store_path: str | Path) -> None:
    """A target handshaked (or an address discovered) by another shard of the same campaign and vantage."""
    for table, key in _OVERLAP_KEYS:
        others = root / table / f"campaign={labels['campaign']}" / f"vantage={labels['vantage']}"
        files = [str(p) for p in sorted(others.glob("campaign_shard=*/*.parquet"))
                 if p.parent.name != f"campaign_shard={labels['campaign_shard']}"]
        if not files or table not in _tables(con):
            continue
        columns = ", ".join(key)
        row = con.execute(
            f"SELECT {columns}, filename FROM read_parquet(?, filename = true) "
            f"WHERE ({columns}) IN (SELECT ({columns}) FROM \"{table}\") LIMIT 1", [files]
        ).fetchone()
        if row is not None:
            address = endpoint(row[:-1])
            shard = Path(row[-1]).parent.name.split("=", 1)[1]
            raise ToolError(f"{store_path} overlaps shard {shard} of campaign {labels['campaign']} vantage "
                            f"{labels['vantage']}: {address} is in both ({table}); shards must not overlap")


def _replace(new: Path, final: Path) -> None:
    """Put ``new`` (a directory holding the table's file) at ``final``, an old partition moved aside first."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old = final.with_name(f".old-{final.name}-{uuid.uuid4().hex}")
    if final.exists():
        final.rename(old)
    new.rename(final)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Shards exported at once on one machine (or one NFS mount) update _schema.json one at a time."""
    with open(root / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def endpoint(key: tuple) -> str:
    """(ip, port[, sni]) as a refusal names it: ``198.18.1.10:443 (sni alpha.lab.test)``."""
    if len(key) == 1:  # a plan id (runs)
        return str(key[0])
    return f"{key[0]}:{key[1]}" + (f" (sni {key[2]})" if len(key) > 2 and key[2] else "")


def _hive_types() -> str:
    return "{" + ", ".join(f"'{key}': VARCHAR" for key in PARTITION_KEYS) + "}"


def _partition(labels: Mapping[str, str]) -> str:
    return "/".join(f"{key}={labels[key]}" for key in PARTITION_KEYS)


def _kv(meta: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{key}: '{_sql(value)}'" for key, value in meta.items()) + "}"


def _max(con: duckdb.DuckDBPyConnection, table: str, column: str) -> int:
    return int(con.execute(f'SELECT coalesce(max("{column}"), 0) FROM "{table}"').fetchone()[0])


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()}


def _current(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute("SELECT current_database()").fetchone()[0]


def _sql(text: object) -> str:
    return str(text).replace("'", "''")
