"""The results file: versioned schema, batch inserts, summaries in SQL and Python."""

from __future__ import annotations

import datetime
import json

import duckdb
import pytest

from replay import store
from replay import statistics
from replay.stacks.base import REPO_ROOT
from tparams.errors import ToolError


def test_schema_version_and_batch_insert(tmp_path):
    con = store.connect(tmp_path / "r.duckdb")
    assert con.execute("SELECT version FROM schema_version WHERE name = 'replay'").fetchone() == (3,)
    now = datetime.datetime.now()
    rows = [{"experiment_id": "e", "run_id": f"r{i}", "started_at": now, "set_name": "firefox-109",
             "stack": "ngtcp2", "delay_ms": 30.0, "delay_up_ms": 0.0, "jitter_ms": 0.0, "loss_pct": 0.0,
             "rep": i, "status": "ok" if i < 3 else "timeout", "size_bytes": 10, "bytes": 10,
             "goodput_mbps": [100.0, 110.0, 120.0, None][i], "duration_s": 1.0, "autotune": False, "cc": "cubic"}
            for i in range(4)]
    assert store.insert(con, "runs", rows) == 4
    summary = con.execute("SELECT runs, n, mean_mbps, stddev_mbps FROM run_summary").fetchone()
    assert summary == (4, 3, pytest.approx(110.0), pytest.approx(10.0))
    with pytest.raises(ValueError):
        store.insert(con, "runs", [{"no_such_column": 1}])
    con.close()
    store.connect(tmp_path / "r.duckdb").close()  # reopening keeps the data and the version


def test_summary_statistics(tmp_path):
    con = store.connect(tmp_path / "r.duckdb")
    now = datetime.datetime.now()
    goodputs = {"three": [100.0, 110.0, 120.0], "two": [10.0, 1000.0], "one": [5.0], "none": [None]}
    store.insert(con, "runs", [
        {"experiment_id": "e", "run_id": f"{name}{i}", "started_at": now, "set_name": name, "stack": "ngtcp2",
         "delay_ms": 0.0, "delay_up_ms": 0.0, "jitter_ms": 0.0, "loss_pct": 0.0, "rep": i,
         "status": "failed" if value is None else "ok", "size_bytes": 10, "goodput_mbps": value, "autotune": False,
         "cc": "cubic"} for name, values in goodputs.items() for i, value in enumerate(values)])
    s = {row["set_name"]: row for row in statistics.summary(con).iter_rows(named=True)}
    assert s["three"]["n"] == 3 and s["three"]["mean_mbps"] == pytest.approx(110.0)
    assert s["three"]["stddev_mbps"] == pytest.approx(10.0)
    # t(0.975, 2) = 4.303: half-width 4.303 * 10 / sqrt(3)
    assert s["three"]["ci95_high"] - 110.0 == pytest.approx(4.303 * 10 / 3 ** 0.5)
    assert s["none"]["mean_mbps"] is None and s["none"]["failed"] == 1
    assert s["one"]["stddev_mbps"] is None and s["one"]["ci95_low"] is None
    # At n=2 the t interval (12.706 * sd / sqrt 2) would reach below zero: no goodput is negative.
    assert s["two"]["ci95_low"] == 0.0 and s["two"]["ci95_high"] > 1000


def version_1_file(path, monkeypatch):
    """A results file as qreplay wrote it before knobs and workloads (schema version 1): tests/data/replay_v1 is
    such a file exported with DuckDB's EXPORT DATABASE (a loopback download by ngtcp2, and a matrix of aioquic and
    quic-go asked for --cc bbr --autotune at 5 ms, 2026-11-26)."""

    monkeypatch.chdir(REPO_ROOT)  # its load.sql names its CSV files from the checkout
    con = duckdb.connect(str(path))
    con.execute("IMPORT DATABASE 'tests/data/replay_v1'")
    return con


def test_a_version_1_file_is_migrated_whole(tmp_path, monkeypatch):
    path = tmp_path / "v1.duckdb"
    con = version_1_file(path, monkeypatch)
    tables = ("experiments", "runs", "traces", "trace_points", "profiles", "profile_stacks")
    before = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    asked = dict(con.execute("SELECT experiment_id, (cc, autotune)::VARCHAR FROM experiments").fetchall())
    ran = con.execute("SELECT run_id, cc, autotune, cc_requested, autotune_requested, goodput_mbps FROM runs "
                      "ORDER BY run_id").fetchall()
    con.close()
    con = store.connect(path)
    assert store.version(con) == 3
    assert {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables} == before
    assert before["runs"] == 4
    knobs = {e: json.loads(k) for e, k in con.execute("SELECT experiment_id, knobs FROM experiments").fetchall()}
    assert {e: str((k["cc"], k["autotune"])).replace("'", "").replace("True", "true").replace("False", "false")
            for e, k in knobs.items()} == asked
    assert con.execute("SELECT run_id, cc, autotune, cc_requested, autotune_requested, goodput_mbps FROM runs "
                       "ORDER BY run_id").fetchall() == ran
    assert con.execute("SELECT DISTINCT workload, requests, concurrency, cipher, gso FROM runs").fetchall() == [
        ("download", 1, 1, None, None)]
    # version 3: no run of a version 1 or 2 file has a limit breakdown stored, traced or not
    assert con.execute("SELECT DISTINCT limited_by, limits FROM runs").fetchall() == [(None, None)]
    assert sorted(con.execute("SELECT stack, n FROM run_summary").fetchall()) == [("aioquic", 1), ("ngtcp2", 2),
                                                                                  ("quic-go", 1)]
    con.close()
    store.connect(path).close()  # once migrated, opening changes nothing
    con = duckdb.connect(str(path))
    con.execute("UPDATE schema_version SET version = 4")
    con.close()
    with pytest.raises(ToolError, match="version 4, newer than this qreplay's 3"):
        store.connect(path)


def test_a_file_of_requested_conditions_is_given_what_ran(tmp_path, monkeypatch):
    """Runs stored before 2026-11-25 held the requested --cc and --autotune as their conditions: migrated,
    each gets what its stacks ran, with the request beside it."""

    path = tmp_path / "old.duckdb"
    con = version_1_file(path, monkeypatch)
    con.execute("DELETE FROM runs")
    for column in ("autotune_requested", "cc_requested", "udp_buffer_bytes", "queue_requested"):
        con.execute(f"ALTER TABLE runs DROP COLUMN {column}")  # as such a file was written
    now = datetime.datetime.now()
    asked = {"quic-go": ("bbr", False), "aioquic": ("cubic", False), "quinn": ("cubic", True),
             "ngtcp2": ("bbr", True)}
    for i, (stack, (cc, autotune)) in enumerate(asked.items()):
        con.execute("INSERT INTO runs (experiment_id, run_id, started_at, set_name, stack, server_stack, "
                    "link_backend, delay_ms, delay_up_ms, jitter_ms, loss_pct, rate_bps, rep, status, size_bytes, "
                    "autotune, cc) VALUES ('e', ?, ?, 's', ?, ?, 'relay', 30, 0, 0, 0, 1000000000, 1, 'ok', 1, ?, ?)",
                    [f"r{i}", now, stack, stack, autotune, cc])
    con.close()
    store.connect(path).close()
    ran = {stack: (cc, autotune, cc_requested, autotune_requested)
           for stack, cc, autotune, cc_requested, autotune_requested in duckdb.connect(str(path)).execute(
               "SELECT stack, cc, autotune, cc_requested, autotune_requested FROM runs").fetchall()}
    assert ran == {"quic-go": ("cubic", False, "bbr", False), "aioquic": ("reno", False, "cubic", False),
                   "quinn": ("cubic", False, "cubic", True), "ngtcp2": ("bbr", True, "bbr", True)}
    # 1 Gbit/s x 30 ms is 3.75 MB, 2500 packets of 1500 bytes: more than netem's 1000
    assert duckdb.connect(str(path)).execute("SELECT DISTINCT queue, queue_requested FROM runs").fetchall() == [
        ("2500p", None)]


def test_reading_a_version_1_file_migrates_it(tmp_path, monkeypatch):
    """`qreplay plot` and the notebooks read results files: one of version 1 is read as version 3."""
    path = tmp_path / "v1.duckdb"
    version_1_file(path, monkeypatch).close()
    con = store.open_read_only(path)
    assert store.version(con) == 3
    assert statistics.summary(con)["workload"].to_list() == ["download"] * 3
