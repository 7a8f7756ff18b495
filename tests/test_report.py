"""The popularity report over a real DuckDB scan file; every format parses."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from scanner.identify import LIBRARY_SCHEMA
from scanner.report import build_report, export_parquet, top_sets, top_values
from scanner.store import ScanStore
from test_store import ALPHA, record
from tparams.errors import ToolError
from tparams.paramset import ParamSet

QSCAN = str(Path(sys.executable).with_name("qscan"))
BETA = ParamSet(max_idle_timeout=120000, initial_max_data=196608)


@pytest.fixture
def scan(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    with ScanStore.open(path) as store:
        records = [record(f"192.0.2.{i}", ALPHA) for i in range(3)] + [record("198.51.100.1", BETA)]
        records.append(record("198.51.100.2", None, status="timeout"))
        store.append_records(store.begin_scan("targets", {}), records)
    return path


def test_sets_and_values_counted(scan: Path):
    report = build_report(scan, top=5)
    assert report.summary.to_dicts()[0] | {} == {"attempts": 5, "targets": 5, "reached": 4, "distinct_sets": 2, "distinct_orders": 2}
    sets = report.sets
    assert sets["set_fingerprint"].to_list() == [ALPHA.fingerprint(), BETA.fingerprint()]
    assert sets["endpoints"].to_list() == [3, 1] and sets["share_pct"].to_list() == [75.0, 25.0]
    values = report.values.filter(pl.col("parameter") == "initial_max_data")
    assert values.select("value", "endpoints").rows() == [("16777216", 3), ("196608", 1)]
    not_sent = report.values.filter(pl.col("parameter") == "max_ack_delay")
    assert not_sent.select("value", "endpoints").rows() == [("not sent", 4)]


def test_library_functions_return_polars(scan: Path):
    con = duckdb.connect(str(scan), read_only=True)
    assert isinstance(top_sets(con, 1), pl.DataFrame) and top_sets(con, 1).height == 1
    assert top_values(con, 1).height == 12


@pytest.mark.parametrize("fmt", ["json", "csv", "markdown", "table"])
def test_cli_formats_parse(scan: Path, fmt: str):
    result = subprocess.run([QSCAN, "report", str(scan), "--format", fmt, "--top", "3"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    if fmt == "json":
        data = json.loads(result.stdout)
        assert data["summary"]["reached"] == 4 and data["top_sets"][0]["endpoints"] == 3
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(result.stdout)))
        sets = [r for r in rows if r["section"] == "set" and r["parameter"] == "initial_max_data"]
        assert [(r["value"], r["count"]) for r in sets] == [("16777216", "3"), ("196608", "1")]
    else:
        assert ALPHA.fingerprint() in result.stdout and "initial_max_data" in result.stdout


def test_report_has_a_section_of_the_libraries_identified(scan: Path):
    with ScanStore.open(scan) as store:
        store.apply_schema(*LIBRARY_SCHEMA[:2], LIBRARY_SCHEMA[2].read_text())
        store.con.execute("INSERT INTO server_library (ip, port, identified_at, library, library_evidence) VALUES "
                          "('192.0.2.0', 443, now(), 'ngtcp2', 'e'), ('192.0.2.1', 443, now(), 'ngtcp2', 'e'), "
                          "('198.51.100.1', 443, now() - INTERVAL 1 DAY, 'quinn', 'e'), "
                          "('198.51.100.1', 443, now(), 'quiche', 'e')")  # the later verdict counts
    assert build_report(scan).as_dict()["libraries"] == [
        {"library": "ngtcp2", "targets": 2, "share_pct": 66.7}, {"library": "quiche", "targets": 1, "share_pct": 33.3}]
    markdown = subprocess.run([QSCAN, "report", str(scan), "--format", "markdown"], capture_output=True, text=True)
    assert "### QUIC libraries (qscan targets --identify)" in markdown.stdout, markdown.stderr
    assert "| ngtcp2 | 2 | 66.7 |" in markdown.stdout and "quinn" not in markdown.stdout


def test_compare_lists_only_values_whose_share_moved(scan: Path, tmp_path: Path):
    later = tmp_path / "later.duckdb"
    with ScanStore.open(later) as store:  # one ALPHA endpoint became BETA: three parameters moved
        records = [record(f"192.0.2.{i}", ALPHA) for i in range(2)] + [record(f"198.51.100.{i}", BETA) for i in (1, 3)]
        store.append_records(store.begin_scan("targets", {}), records)
    done = subprocess.run([QSCAN, "report", str(scan), "--compare", str(later), "--format", "markdown"],
                          capture_output=True, text=True)
    shifts = done.stdout.split("### largest value shifts")[1]
    assert done.returncode == 0 and shifts.startswith(" (6)"), done.stdout + done.stderr
    deltas = [float(row.split("|")[-2]) for row in shifts.splitlines()[3:] if row.startswith("|")]
    assert sorted(deltas) == [-25.0] * 3 + [25.0] * 3  # no 0.0 "shift" among them


def test_report_of_missing_file_is_one_line(tmp_path: Path):
    result = subprocess.run([QSCAN, "report", str(tmp_path / "none.duckdb")], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1


@pytest.mark.parametrize("campaign", [[], ["--campaign", "c", "--vantage", "v", "--shard", "0"]])
def test_a_failed_export_leaves_no_directory(tmp_path: Path, campaign: list[str]):
    target = tmp_path / "new" / "pq"
    done = subprocess.run([QSCAN, "export", str(tmp_path / "missing.duckdb"), "--parquet", str(target), *campaign],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("qscan: error: no such scan file"), done.stderr
    assert not (tmp_path / "new").exists()
    not_a_scan = tmp_path / "empty.duckdb"
    duckdb.connect(str(not_a_scan)).close()
    done = subprocess.run([QSCAN, "export", str(not_a_scan), "--parquet", str(target), *campaign],
                          capture_output=True, text=True)
    assert done.returncode == 2 and not (tmp_path / "new").exists(), done.stderr


def test_an_export_failing_midway_removes_the_directory_it_made(scan: Path, tmp_path: Path):
    with duckdb.connect(str(scan)) as con:
        con.execute('CREATE TABLE "z/elsewhere" AS SELECT 1 AS x')  # its file would go to a missing directory
    with pytest.raises(ToolError, match="cannot export"):
        export_parquet(scan, tmp_path / "new" / "pq")
    assert not (tmp_path / "new").exists()


def test_export_parquet_roundtrips(scan: Path, tmp_path: Path):
    written = export_parquet(scan, tmp_path / "pq")
    names = {p.stem for p in written}
    assert {"handshakes", "server_params", "transport_parameters"} <= names
    assert pl.read_parquet(tmp_path / "pq" / "server_params.parquet").height == 4
