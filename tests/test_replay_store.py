"""The results file: versioned schema, batch inserts, summaries in SQL and Python."""

from __future__ import annotations

import datetime

import pytest

from replay import store
from replay.runner import summarize


def test_schema_version_and_batch_insert(tmp_path):
    con = store.connect(tmp_path / "r.duckdb")
    assert con.execute("SELECT version FROM schema_version WHERE name = 'replay'").fetchone() == (1,)
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


def test_summary_statistics():
    s = summarize([100.0, 110.0, 120.0])
    assert s["n"] == 3 and s["mean"] == pytest.approx(110.0) and s["stddev"] == pytest.approx(10.0)
    # t(0.975, 2) = 4.303: half-width 4.303 * 10 / sqrt(3)
    assert s["ci95_high"] - s["mean"] == pytest.approx(4.303 * 10 / 3 ** 0.5)
    assert summarize([])["mean"] is None and summarize([5.0])["stddev"] is None
