"""Campaign directories (Hive-partitioned Parquet) from real lab scans: DuckDB and polars read
the same rows as the scan files, the report and merge equal the merged file's, and every
step refuses mixed schema versions and overlapping shards in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from conftest import SPARK_TEST_JVM_OPTIONS
from lab import Lab
from scanner.campaign_store import PARTITION_KEYS, export_shard, open_campaign
from scanner.engine import ScanSettings
from scanner.merge import merge_scans
from scanner.scan import scan_into
from scanner.store import ScanStore
from scanner.targets import Target
from test_store import ALPHA, record
from tparams.errors import ToolError

QSCAN = str(Path(sys.executable).with_name("qscan"))
HIVE_SCHEMA = dict.fromkeys(PARTITION_KEYS, pl.String)


@pytest.fixture(scope="module")
def shards(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The lab's servers scanned as two shards (half the targets each), one scan file per shard."""
    directory = tmp_path_factory.mktemp("shards")
    targets = [Target(s.ip, s.port, s.sni) for s in lab.servers]
    paths = [directory / "s0.duckdb", directory / "s1.duckdb"]
    with lab.in_client():
        for number, path in enumerate(paths):
            scan_into(path, targets[number::2], ScanSettings(timeout=2.0))
    return paths


@pytest.fixture(scope="module")
def campaign(shards: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("campaign") / "census"
    for number, path in enumerate(shards):
        result = subprocess.run([QSCAN, "export", str(path), "--parquet", str(root), "--campaign", "w48",
                                 "--vantage", "lab", "--shard", f"s{number}"], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    return root


@pytest.fixture(scope="module")
def merged(shards: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("merged") / "merged.duckdb"
    merge_scans(shards, out)
    return out


def _rows(con: duckdb.DuckDBPyConnection, query: str) -> pl.DataFrame:
    return con.sql(f"SELECT * FROM ({query}) ORDER BY ALL").pl()


def _objects(con: duckdb.DuckDBPyConnection) -> list[str]:
    names = con.execute("SELECT table_name FROM duckdb_tables() UNION ALL "
                        "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    return sorted(name for (name,) in names if name not in ("campaign_shards",))


def test_campaign_views_equal_the_merged_file(campaign: Path, merged: Path):
    """Every table and view of one scan file, over the campaign, row for row (ids included)."""
    file = duckdb.connect(str(merged), read_only=True)
    con = open_campaign(campaign)
    assert _objects(con) == _objects(file)
    assert file.execute("SELECT count(*) FROM handshakes").fetchone()[0] >= 6
    for name in _objects(file):
        exclude = " EXCLUDE (campaign, vantage, campaign_shard)" if "campaign" in _columns(con, name) else ""
        assert _rows(con, f'SELECT *{exclude} FROM "{name}"').equals(_rows(file, f'SELECT * FROM "{name}"')), name


def test_duckdb_and_polars_read_each_shard_as_its_file(campaign: Path, shards: list[Path]):
    """Hive partitioning as the engines do it, without qscan: each shard's rows are its file's."""
    for number, path in enumerate(shards):
        file = duckdb.connect(str(path), read_only=True)
        for table in ("handshakes", "handshake_parameters", "scans"):
            expected = _rows(file, f"SELECT * FROM {table}")
            hive = _rows(duckdb.connect(), f"SELECT * EXCLUDE (campaign, vantage, campaign_shard) FROM read_parquet("
                         f"'{campaign}/{table}/**/*.parquet', hive_partitioning = true) WHERE campaign_shard = 's{number}'")
            polars = (pl.scan_parquet(campaign / table, hive_partitioning=True, hive_schema=HIVE_SCHEMA)
                      .filter(pl.col("campaign_shard") == f"s{number}").drop(*PARTITION_KEYS).collect())
            # Ordered as the file's rows (DuckDB orders nested columns; polars does not sort by them).
            reader = duckdb.connect()
            reader.register("polars_read", polars)
            polars = _rows(reader, "SELECT * FROM polars_read")
            assert hive.equals(expected), (table, number)
            assert polars.equals(expected), (table, number)


def test_report_on_the_campaign_equals_report_on_the_merged_file(campaign: Path, merged: Path, tmp_path: Path):
    reports = [subprocess.run([QSCAN, "report", str(p), "--format", "csv"], capture_output=True, text=True)
               for p in (campaign, merged)]
    assert all(r.returncode == 0 for r in reports), [r.stderr for r in reports]
    assert reports[0].stdout == reports[1].stdout and "initial_max_data" in reports[0].stdout
    out = tmp_path / "from_campaign.duckdb"
    result = subprocess.run([QSCAN, "merge", str(campaign), "--out", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    again = subprocess.run([QSCAN, "report", str(out), "--format", "csv"], capture_output=True, text=True)
    assert again.stdout == reports[1].stdout


def test_popularity_notebook_on_the_campaign_shows_what_it_shows_on_the_merged_file(campaign: Path, merged: Path):
    from scanner.analysis import execute_notebook

    def texts(path: Path) -> list[str]:
        notebook = execute_notebook("parameter_popularity", {"QTP_SCAN_DB": str(path)})  # raises on a failing cell
        return [output.get("data", {}).get("text/plain", output.get("text", ""))
                for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]

    shown = texts(campaign)
    assert shown == texts(merged) and any("initial_max_data" in text for text in shown)


def test_reexport_replaces_the_shard(campaign: Path, shards: list[Path], tmp_path: Path):
    copy = tmp_path / "census"
    shutil.copytree(campaign, copy)
    before = open_campaign(copy).execute("SELECT count(*) FROM handshakes").fetchone()[0]
    export_shard(shards[0], copy, campaign="w48", vantage="lab", shard="s0")
    assert open_campaign(copy).execute("SELECT count(*) FROM handshakes").fetchone()[0] == before


def test_interrupted_export_is_refused_until_exported_again(campaign: Path, shards: list[Path], tmp_path: Path):
    copy = tmp_path / "census"
    shutil.copytree(campaign, copy)
    old = copy / "handshakes/campaign=w48/vantage=lab/campaign_shard=s0/data.parquet"
    kept = old.read_bytes()
    export_shard(shards[0], copy, campaign="w48", vantage="lab", shard="s0")
    old.write_bytes(kept)  # as if killed between the renames of two tables
    with pytest.raises(ToolError, match="different exports"):
        open_campaign(copy)
    export_shard(shards[0], copy, campaign="w48", vantage="lab", shard="s0")
    assert open_campaign(copy).execute("SELECT count(*) FROM handshakes").fetchone()[0] > 0


# -- other engines, and object storage: the campaign directory as it is -------------------------


def _tables(campaign: Path) -> list[str]:
    return sorted(p.name for p in campaign.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def _duckdb_reads(campaign: Path, table: str) -> pl.DataFrame:
    return _rows(duckdb.connect(), f"SELECT * FROM read_parquet('{campaign}/{table}/**/*.parquet', hive_partitioning = true)")


def _as_duckdb_reads(read: object, columns: list[str]) -> pl.DataFrame:
    """Another engine's rows (Arrow or polars) in DuckDB's column order and row order, for .equals."""
    reader = duckdb.connect()
    reader.register("other_read", read)
    return _rows(reader, "SELECT " + ", ".join(f'"{c}"' for c in columns) + " FROM other_read")


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is not installed (scripts/setup.sh installs it)")
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (Spark 4 needs Java 17+)")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[1]").appName("campaign-test")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.memory", "512m").config("spark.sql.shuffle.partitions", "1")
               .config("spark.driver.extraJavaOptions", SPARK_TEST_JVM_OPTIONS)
               .config("spark.sql.session.timeZone", "UTC")
               # As docs/scale.md tells readers: shard labels stay text ('003' is not 3).
               .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
               .getOrCreate())
    gateway = session.sparkContext._gateway
    try:
        yield session
    finally:
        session.stop()
        # stop() leaves the JVM running for a next session; it exits when its stdin closes.
        gateway.shutdown()
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=60)


def test_spark_reads_every_table_as_duckdb_does(campaign: Path, spark):
    """spark.read.parquet discovers the three partition keys; every table's rows equal DuckDB's hive read."""
    for table in _tables(campaign):
        expected = _duckdb_reads(campaign, table)
        frame = spark.read.option("mergeSchema", "true").parquet(str(campaign / table))
        assert frame.columns[-3:] == list(PARTITION_KEYS), table
        assert frame.count() == expected.height, table
        assert _as_duckdb_reads(frame.toArrow(), expected.columns).equals(expected), table
    # The types Spark maps differently (each read back above as DuckDB's own type).
    types = dict(spark.read.parquet(str(campaign / "handshakes")).dtypes)
    assert types["started_at"] == "timestamp" and types["transport_parameters_raw"] == "binary"
    assert types["offered_versions"] == "array<bigint>" and types["findings"].startswith("array<struct<kind:string")
    assert types["campaign_shard"] == "string"


@pytest.fixture(scope="module")
def s3_campaign(campaign: Path):
    """The campaign uploaded to an S3 server on 127.0.0.1 (moto): its URL and the storage options to reach it."""
    moto_server = pytest.importorskip("moto.server", reason="moto[s3] is not installed (scripts/setup.sh installs it)")
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"aws_endpoint_url": f"http://{host}:{port}", "aws_access_key_id": "test",
                   "aws_secret_access_key": "test", "aws_region": "us-east-1", "aws_allow_http": "true"}
        client = boto3.client("s3", endpoint_url=options["aws_endpoint_url"], region_name=options["aws_region"],
                              aws_access_key_id="test", aws_secret_access_key="test")
        client.create_bucket(Bucket="campaigns")
        for path in campaign.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                client.upload_file(str(path), "campaigns", f"census/{path.relative_to(campaign)}")
        yield "s3://campaigns/census", options
    finally:
        server.stop()


def test_polars_reads_every_table_from_object_storage(campaign: Path, s3_campaign):
    url, options = s3_campaign
    for table in _tables(campaign):
        expected = _duckdb_reads(campaign, table)
        remote = pl.scan_parquet(f"{url}/{table}/**/*.parquet", hive_partitioning=True, hive_schema=HIVE_SCHEMA,
                                 storage_options=options).collect()
        assert _as_duckdb_reads(remote, expected.columns).equals(expected), table


# -- refusals: one line, non-zero exit, nothing written -----------------------------------------


def _scan_file(path: Path, ips: list[str], scan_version: int | None = None) -> Path:
    with ScanStore.open(path) as store:
        store.append_records(store.begin_scan("targets", {}), [record(ip, ALPHA) for ip in ips])
    if scan_version is not None:
        con = duckdb.connect(str(path))
        con.execute("UPDATE schema_version SET version = ? WHERE name = 'scan'", [scan_version])
        con.close()
    return path


def _qscan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([QSCAN, *map(str, args)], capture_output=True, text=True)


def _one_line_refusal(result: subprocess.CompletedProcess, words: str) -> None:
    assert result.returncode != 0 and result.stderr.count("\n") == 1 and words in result.stderr, result.stderr


def _export(path: Path, root: Path, shard: str, vantage: str = "v") -> subprocess.CompletedProcess:
    return _qscan("export", path, "--parquet", root, "--campaign", "c", "--vantage", vantage, "--shard", shard)


def test_mixed_schema_versions_refused_by_export_and_merge(tmp_path: Path):
    root = tmp_path / "campaign"
    assert _export(_scan_file(tmp_path / "a.duckdb", ["192.0.2.1"]), root, "a").returncode == 0
    older = _scan_file(tmp_path / "b.duckdb", ["192.0.2.2"], scan_version=2)
    _one_line_refusal(_export(older, root, "b"), "mixed schema versions")
    assert not (root / "handshakes/campaign=c/vantage=v/campaign_shard=b").exists()
    # A shard of another version copied in by hand: merge and report refuse it.
    _export(older, tmp_path / "other", "b")
    shutil.copytree(tmp_path / "other/handshakes/campaign=c/vantage=v/campaign_shard=b",
                    root / "handshakes/campaign=c/vantage=v/campaign_shard=b")
    _one_line_refusal(_qscan("merge", root, "--out", tmp_path / "m.duckdb"), "mixed schema versions")
    assert not (tmp_path / "m.duckdb").exists()
    _one_line_refusal(_qscan("report", root), "mixed schema versions")


def test_overlapping_shards_refused_by_export_and_merge(tmp_path: Path):
    root = tmp_path / "campaign"
    assert _export(_scan_file(tmp_path / "a.duckdb", ["192.0.2.1", "192.0.2.2"]), root, "a").returncode == 0
    overlapping = _scan_file(tmp_path / "b.duckdb", ["192.0.2.2", "192.0.2.3"])
    _one_line_refusal(_export(overlapping, root, "b"), "192.0.2.2:443")
    # Another vantage point scans the same population: not an overlap.
    assert _export(overlapping, root, "b", vantage="w").returncode == 0
    # The same shard copied in by hand under another label: merge refuses.
    shutil.copytree(root / "handshakes/campaign=c/vantage=v/campaign_shard=a",
                    root / "handshakes/campaign=c/vantage=v/campaign_shard=z")
    shutil.copytree(root / "scans/campaign=c/vantage=v/campaign_shard=a", root / "scans/campaign=c/vantage=v/campaign_shard=z")
    _one_line_refusal(_qscan("merge", root, "--out", tmp_path / "m.duckdb"), "shards a, z of campaign c vantage v overlap")


def test_overlapping_zmap_shard_files_refused_by_merge(tmp_path: Path):
    """Scan files of one sharded ZMap scan (same seed and shard count) holding the same target."""
    from scanner.discovery.ipv4 import DISCOVERY_SCHEMA

    files = []
    for shard, ips in enumerate((["192.0.2.1", "192.0.2.2"], ["192.0.2.2"])):
        path = _scan_file(tmp_path / f"z{shard}.duckdb", ips)
        with ScanStore.open(path) as store:
            store.apply_schema(DISCOVERY_SCHEMA[0], DISCOVERY_SCHEMA[1], DISCOVERY_SCHEMA[2].read_text())
            store.con.execute("INSERT INTO discovery_runs VALUES (1, ?, 2, 7, ['192.0.2.0/24'], [], 443, 10, 1, '00', 1, "
                              "MAP {}, now(), now(), 'zmap')", [shard])
        files.append(path)
    _one_line_refusal(_qscan("merge", *files, "--out", tmp_path / "m.duckdb"), "192.0.2.2:443")


def _columns(con: duckdb.DuckDBPyConnection, name: str) -> list[str]:
    return [row[0] for row in con.execute(f'DESCRIBE "{name}"').fetchall()]


def test_a_cut_parquet_file_leaves_out_its_shard_and_names_it(tmp_path: Path, capfd):
    """A partition cut short (a copy or an upload stopped) loses its footer: the campaign is read without
    that shard, with one warning naming the file; the other shards' rows are all there."""
    root = tmp_path / "campaign"
    for shard, ips in (("a", ["192.0.2.1"]), ("b", ["192.0.2.2", "192.0.2.3"]), ("c", ["192.0.2.4"])):
        export_shard(_scan_file(tmp_path / f"{shard}.duckdb", ips), root, campaign="c", vantage="v", shard=shard)
    damaged = next((root / "handshakes/campaign=c/vantage=v/campaign_shard=b").glob("*.parquet"))
    whole = damaged.read_bytes()
    for cut in (3, len(whole) // 2, len(whole) - 1):
        damaged.write_bytes(whole[:cut])
        con = open_campaign(root)
        assert sorted(ip for (ip,) in con.execute("SELECT ip FROM handshakes").fetchall()) == ["192.0.2.1", "192.0.2.4"]
        con.close()
        warnings = capfd.readouterr().err.splitlines()
        assert len(warnings) == 1 and str(damaged) in warnings[0] and "shard c/v/b left out, 2 other shard(s) read" in warnings[0], warnings
    merged = _qscan("merge", root, "--out", tmp_path / "m.duckdb")
    assert merged.returncode == 0 and merged.stderr.count("is damaged") == 1, merged.stderr
    with duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM handshakes").fetchone()[0] == 2
