"""`qreplay plot`: figures from a real results file."""

from __future__ import annotations

import datetime

import pytest

from replay import store
from replay.commands.plot import plot_results
from tparams.errors import ToolError


def _row(i, **kw):
    base = {"experiment_id": "e", "run_id": f"r{i}", "started_at": datetime.datetime.now(), "set_name": "s",
            "stack": "ngtcp2", "delay_ms": 0.0, "delay_up_ms": 0.0, "jitter_ms": 0.0, "loss_pct": 0.0, "rep": i,
            "status": "ok", "size_bytes": 1, "bytes": 1, "goodput_mbps": 100.0 + i, "autotune": False, "cc": "cubic",
            "client_tx_packets": 10, "server_tx_packets": 100}
    return {**base, **kw}


def test_plot_writes_pngs_and_one_html_page(tmp_path):
    results = tmp_path / "r.duckdb"
    con = store.connect(results)
    rows = [_row(i, delay_ms=float(d)) for i, d in enumerate((0, 0, 30, 30))]
    rows += [_row(10 + i, sweep_param="initial_max_data", sweep_value=v, delay_ms=30.0)
             for i, v in enumerate((196608, 196608, 15728640, 15728640))]
    store.insert(con, "runs", rows)
    con.close()
    written = plot_results(results, tmp_path / "plots")
    names = sorted(p.name for p in written)
    assert names == ["goodput_vs_delay.png", "packets_initial_max_data.png", "report.html",
                     "sweep_initial_max_data.png"]
    assert all(p.stat().st_size > 1000 for p in written)
    assert (tmp_path / "plots" / "report.html").read_text().count("data:image/png;base64") == 3


def test_plot_refuses_a_file_without_results(tmp_path):
    with pytest.raises(ToolError):
        plot_results(tmp_path / "missing.duckdb", tmp_path)
    store.connect(tmp_path / "empty.duckdb").close()
    with pytest.raises(ToolError):
        plot_results(tmp_path / "empty.duckdb", tmp_path)
