"""`qreplay plot`: figures from a real results file."""

from __future__ import annotations

import datetime
from pathlib import Path

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


def legends_over_data(monkeypatch) -> list[str]:
    """Filled, as each figure is saved, with the titles of axes whose legend overlaps the axes' area (where
    the data are); a legend beside the axes leaves it empty."""
    from replay import figures
    save_png, over = figures.save_png, []

    def checked(fig, path):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None and legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)):
                over.append(f"{path.name}: {ax.get_title()}")
        return save_png(fig, path)
    monkeypatch.setattr(figures, "save_png", checked)
    return over


def test_plot_writes_pngs_and_one_html_page(tmp_path, monkeypatch):
    over = legends_over_data(monkeypatch)
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
    assert over == []  # legends beside the data, not over it (issue 33)


def test_every_figure_draws_its_legend_through_legend_beside():
    """The figures too costly to draw here (fidelity, impact, traces, profiles) place legends the same way:
    the only legend call in replay/ is legend_beside's."""
    root = Path(__file__).resolve().parent.parent / "replay"
    calls = [f"{path.relative_to(root)}:{number}" for path in sorted(root.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if ".legend(" in line]
    assert len(calls) == 1 and calls[0].startswith("figures.py:"), calls


def test_a_sweep_of_many_requests_is_drawn_in_requests_per_second(tmp_path):
    """A stream-limit sweep of the requests workload: its goodput is the responses' bytes over time, not what
    the sweep moves, so the figure draws the runs' requests per second (with their spread)."""
    from replay.commands.plot import load_summary, measured

    results = tmp_path / "r.duckdb"
    con = store.connect(results)
    store.insert(con, "runs", [_row(i, sweep_param="initial_max_streams_bidi", sweep_value=v, delay_ms=30.0,
                                    workload="requests", requests=400, concurrency=100, requests_per_s=rate)
                               for i, (v, rate) in enumerate(((4, 65.0), (4, 67.0), (256, 1750.0), (256, 1760.0)))])
    store.insert(con, "runs", [_row(10, experiment_id="d")])
    con.close()
    summary = load_summary(results)
    swept = summary.filter(summary["sweep_param"].is_not_null())
    mean, sd, label = measured(swept)
    assert (mean, label) == ("mean_requests_per_s", "requests per second")
    assert swept.sort("sweep_value")[mean].to_list() == [66.0, 1755.0] and swept[sd].min() > 0
    assert measured(summary)[0] == "mean_mbps"  # a download among them: goodput is what they share
    assert (tmp_path / "plots" / "sweep_initial_max_streams_bidi.png") in plot_results(results, tmp_path / "plots")


def test_plot_refuses_a_file_without_results(tmp_path):
    with pytest.raises(ToolError):
        plot_results(tmp_path / "missing.duckdb", tmp_path)
    store.connect(tmp_path / "empty.duckdb").close()
    with pytest.raises(ToolError):
        plot_results(tmp_path / "empty.duckdb", tmp_path)


def test_a_figure_draws_every_condition_that_differs_as_its_own_series(tmp_path):
    """One set at one delay under 0% and 0.1% loss is two points, never their mean; the same sweep run
    twice is two series, never duplicate bars; the statistics table names the loss."""
    from replay.commands.plot import load_summary
    from replay.statistics import series

    results = tmp_path / "r.duckdb"
    con = store.connect(results)
    rows = [_row(i, set_name="chromium", delay_ms=10.0, loss_pct=loss, goodput_mbps=mean)
            for i, (loss, mean) in enumerate(((0.0, 250.0), (0.0, 250.0), (0.1, 142.0), (0.1, 142.0)))]
    rows += [_row(10 + i, experiment_id=experiment, sweep_param="initial_max_data", sweep_value=v, delay_ms=30.0)
             for i, (experiment, v) in enumerate((("a", 196608), ("a", 15728640), ("b", 196608), ("b", 15728640)))]
    store.insert(con, "runs", rows)
    con.close()
    summary = load_summary(results)
    plain = summary.filter(summary["sweep_param"].is_null())
    drawn = {label: points["mean_mbps"].to_list() for label, points in series(plain, "delay_ms")}
    assert drawn == {"loss 0%": [250.0], "loss 0.1%": [142.0]}
    swept = summary.filter(summary["sweep_param"].is_not_null())
    assert [label for label, _ in series(swept, "sweep_value")] == ["experiment a", "experiment b"]
    page = plot_results(results, tmp_path / "plots")[-1].read_text()
    assert "<th>loss_pct</th>" in page and "<td>142.0</td>" in page and "<td>196.0</td>" not in page


def test_a_credit_line_above_the_trace_axis_is_named_not_lost():
    from replay.commands.plot import credit_axis

    top, above = credit_axis(2000.0, {"stream credit": 2500.0, "connection credit": 15728.6})
    assert 2500.0 < top < 15728.6  # the stream credit is drawn, the far connection window named
    assert above == ["connection credit reaches 15,729 kB, above the axis"]
    assert credit_axis(2000.0, {"stream credit": 1000.0})[1] == []


def test_a_caption_names_only_what_every_row_shares():
    """Each stack against its own server: the series name the stack alone, and the caption names no server."""
    import polars as pl

    from replay.statistics import series, shared

    frame = pl.DataFrame({"stack": ["ngtcp2", "quic-go"], "server_stack": ["ngtcp2", "quic-go"],
                          "set_name": ["s", "s"], "delay_ms": [0.0, 0.0], "mean_mbps": [1.0, 2.0]})
    assert [label for label, _ in series(frame, "delay_ms")] == ["ngtcp2", "quic-go"]
    assert shared(frame, exclude=("delay_ms",)) == "s"
