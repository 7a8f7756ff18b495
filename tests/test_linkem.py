"""linkem: its pure parts (Go tests) and its timing through real namespaces."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from replay.link import LINKEM, LinkConfig, RelayBackend
from replay.testbed import Testbed, measure_rtt

REPO = LINKEM.parents[2]


def test_go_unit_tests_pass():
    """Queue, loss models, rate shaper, path model, histogram."""
    if shutil.which("go") is None:
        pytest.skip("Go toolchain not installed (scripts/setup.sh needs it for linkem)")
    done = subprocess.run(["go", "test", "./replay/linkem/..."], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_bad_flags_are_one_line_errors():
    if not LINKEM.exists():
        pytest.skip("build/bin/linkem missing (scripts/setup.sh builds it)")
    done = subprocess.run([str(LINKEM), "relay", "--client-netns", "x", "--client-dev", "y", "--server-netns", "x",
                           "--server-dev", "y", "--down-gilbert", "1,2"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["linkem: --down-gilbert wants P,R,LOSS_BAD,LOSS_GOOD"]


needs_relay = pytest.mark.skipif(os.geteuid() != 0 or not RelayBackend.availability().ok,
                                 reason="needs root and build/bin/linkem")


@pytest.mark.lab
@needs_relay
def test_delay_error_is_sub_millisecond_and_counters_add_up():
    with Testbed(link=LinkConfig(delay_down_ms=10, delay_up_ms=5), backend="relay") as tb:
        rtt = measure_rtt(tb, count=500, interval_ms=1.0)
        stats = tb.link_counters()
    assert rtt["received"] == 500
    assert abs(rtt["rtt_p50_ms"] - 15.0) < 1.0, rtt
    for direction in ("down", "up"):
        c = stats[direction]
        assert c["packets_in"] >= 500 and c["packets_out"] == c["packets_in"], c
        assert c["dropped_loss"] == c["dropped_queue"] == c["dropped_overflow"] == 0
        assert c["delay_error_p50_us"] < 200, c


@pytest.mark.lab
@needs_relay
def test_reconfigure_changes_the_delay_in_place():
    with Testbed(link=LinkConfig(delay_down_ms=2), backend="relay") as tb:
        before = measure_rtt(tb, count=100, interval_ms=2.0)["rtt_p50_ms"]
        tb.reconfigure(LinkConfig(delay_down_ms=12))
        after = measure_rtt(tb, count=100, interval_ms=2.0)["rtt_p50_ms"]
    assert 1.8 < before < 3.0 and 11.8 < after < 13.0, (before, after)
