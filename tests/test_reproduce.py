"""`qreplay reproduce`: a tiny real campaign through the testbed, and the report beside the thesis's numbers."""

from __future__ import annotations

import os
import re
from pathlib import Path

import duckdb
import pytest

from replay.flowcontrol import UPDATE_RULES, window_bound
from replay.reproduce import FULL_CAMPAIGN_TIME, load_campaign, plan_campaign, read_headlines
from replay.stacks import get_stack
from tparams.errors import ToolError
from test_replay_cli import qreplay


def test_the_window_model_for_lsquic_at_30ms():
    """LSQUIC re-opens a window once half of it was read: 131,072 B at 30 ms allow 17.5-35.0 Mbit/s."""
    bound = window_bound(131072, 30, UPDATE_RULES["lsquic"])
    assert (round(bound.low_mbps, 2), round(bound.high_mbps, 2)) == (17.48, 34.95)
    charged = window_bound(131072, 30, UPDATE_RULES["lsquic"], size=1_000_000)
    assert charged.low_mbps < bound.low_mbps  # a short download pays its start
    assert window_bound(131072, 0, UPDATE_RULES["lsquic"]) is None  # no round trip, no window limit


def test_a_bound_reads_low_to_high_even_where_bursts_start_faster():
    """With a short download's start charged, the burst bound of a large window needs fewer slow-start
    round trips than a whole window does and comes out higher: the report still reads low to high."""
    bound = window_bound(12582912, 60, UPDATE_RULES["ngtcp2"], size=2_000_000)
    assert bound.low_mbps > bound.high_mbps
    low, high = bound.span
    assert bound.text() == f"{low:,.1f} to {high:,.1f}" and low < high and bound.contains(low) and bound.contains(high)


def test_the_help_and_the_manual_give_the_one_measured_time_of_the_full_campaign():
    # They once said a quarter of an hour and half an hour a stack; the measured figure lives in one place.
    shown = " ".join(qreplay("reproduce", "--help").stdout.replace("│", " ").split())
    page = " ".join((Path(__file__).parents[1] / "docs" / "reproduce.md").read_text().split())
    for text in (shown, page):
        assert FULL_CAMPAIGN_TIME in text
        assert not re.search(r"(half|quarter of) an hour", text)


def test_every_published_headline_has_its_conditions_in_the_full_campaign():
    plans = {p.figure: p for p in plan_campaign()}
    swept = {(p.conditions[0].sweep_param, c.sweep_value) for p in plans.values() if p.kind == "sweep"
             for c in p.conditions}
    for row in read_headlines():
        if row["experiment"] == "client_initial_max_data":
            assert ("initial_max_data", int(row["setting"].removeprefix("default_"))) in swept
        if row["experiment"] == "client_bidi_local":
            assert ("initial_max_stream_data_bidi_local", int(row["setting"])) in swept
    assert {"5.1a", "5.1b", "5.2a", "5.2b", "5.3a", "5.3b", "5.4", "5.6"} == set(plans)



def test_a_packet_figure_asked_for_runs_its_sweep():
    """Figures 5.5 and 5.7 count the packets of 5.4's and 5.6's runs: asking for them runs those sweeps."""
    assert [p.figure for p in plan_campaign(figures={"5.5"})] == ["5.4"]
    assert [p.figure for p in plan_campaign(figures={"5.7", "5.3a"})] == ["5.3a", "5.6"]
    with pytest.raises(ToolError, match="no figure 5.8"):
        plan_campaign(figures={"5.8"})

def _stacks() -> list[str]:
    usable = [name for name in ("ngtcp2", "quic-go", "lsquic") if get_stack(name).unavailable_reason() is None]
    return usable if len(usable) >= 2 else pytest.skip(f"fewer than two stacks usable here ({usable})")


@pytest.mark.lab
def test_reproduce_writes_a_report_beside_the_published_numbers(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    stacks = _stacks()
    result = qreplay("reproduce", *[arg for s in stacks for arg in ("--stack", s)], "--quick", "--figures",
                     "5.4,5.6", "--size", "2MB", "--reps", "1", "--link", "relay", "--out-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == [str(tmp_path / "report.md"), str(tmp_path / "report.html")]
    for stack in stacks:  # each table says which figure and stack it is, on stdout where it is printed
        assert f"figure 5.4 on {stack} (" in result.stdout and f"figure 5.6 on {stack} (" in result.stdout

    with duckdb.connect(str(tmp_path / "reproduce.duckdb"), read_only=True) as con:
        runs = con.execute("SELECT stack, sweep_value, status FROM runs ORDER BY ALL").fetchall()
    assert runs == sorted((s, v, "ok") for s in stacks for v in (131072, 196608, 12582912, 15728640)), result.stderr

    markdown = (tmp_path / "report.md").read_text()
    for number in ("31.93", "519.03", "16.81", "701.33"):  # the thesis's numbers of figures 5.4 and 5.6
        assert number in markdown
    campaign = load_campaign(tmp_path / "reproduce.duckdb")
    for stack in stacks:
        rows = [line for line in markdown.splitlines() if f"| {stack} |" in line]
        small = next(line for line in rows if "client_bidi_local 30ms 131072" in line)
        ratio = re.search(r"\| (\d+\.\d\d) \| (reproduced|higher|lower)", small)
        assert ratio, small
        # The smallest stream window is the limit, and the model says how much it allows.
        (window,) = campaign.find(stack, "5.6", sweep_value=131072)
        assert window.bound.contains(window.mean), (window.mean, window.bound)
        assert any("initial_max_stream_data_bidi_local 131,072" in line and "as the model predicts" in line
                   for line in rows)
    # The sweeps side by side, one column per stack, each cell with the stack's own model beside it.
    across = markdown[markdown.index("## Across implementations: figure 5.6"):]
    header = next(line for line in across.splitlines() if line.startswith("| initial_max_stream_data_bidi_local"))
    assert header.split("|")[3:-1] == [f" {s} " for s in sorted(stacks)], header
    assert re.search(r"\| 131,072 \| 16\.81 \|( \d+\.\d \(\d+\.\d to \d+\.\d\) \|){%d}" % len(stacks), across), across
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64") == 4  # figures 5.4-5.7, carried inside the page
    assert "<table>" in html and "16.81" in html
