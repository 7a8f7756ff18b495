"""qreplay fidelity: a real browser beside its own set replayed on a real stack, small; and the ratio's spread."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from replay import statistics
from replay.stacks import get_stack
from tparams.paramset import ParamSet

QREPLAY = str(Path(sys.executable).with_name("qreplay"))


def test_the_ratio_of_means_carries_both_means_spread():
    replayed = {"mean_mbps": 100.0, "stddev_mbps": 10.0, "n": 4}
    real = {"mean_mbps": 50.0, "stddev_mbps": 5.0, "n": 4}
    ratio = statistics.ratio_of_means(replayed, real)
    # se = 2 x sqrt(10^2 / (4 x 100^2) + 5^2 / (4 x 50^2)) = 2 x sqrt(0.005); t(3) = 3.182
    assert ratio["ratio"] == 2.0 and ratio["ratio_se"] == pytest.approx(0.14142, abs=1e-5)
    assert ratio["ratio_ci95_low"] == pytest.approx(2 - 3.182 * 0.14142, abs=1e-4)
    assert statistics.ratio_of_means({**replayed, "n": 1}, real)["ratio_ci95_low"] is None
    assert statistics.difference_of_means(replayed, real)["difference"] == 50.0


# docs/qreplay.md's two fidelity commands as its page test would run them (the first with its `tested with`
# options): the page names this file as the one that runs them, and its test checks that they are here, word
# for word, so that they run once, here, where their outcome is checked, not a second time in the page's run.
PAGE_COMMANDS = (
    "qreplay fidelity --out-dir fidelity --browsers firefox --stacks ngtcp2 --delays 10 --loss 0 --size 2MB --reps 1",
    "qreplay fidelity --out-dir fidelity --report-only")


@pytest.mark.lab
def test_fidelity_runs_a_browser_beside_its_own_set_and_reports_the_ratio(tmp_path):
    """The manual's fidelity commands, as a reader runs them from a directory of their own: one page load
    records Firefox's set, Firefox and that set on ngtcp2 pinned and growing, the report; then the report
    rewritten from the stored runs alone."""
    for name in ("firefox", "ngtcp2"):
        if get_stack(name).unavailable_reason():
            pytest.skip(get_stack(name).unavailable_reason())
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    out_dir = tmp_path / "fidelity"
    written = [str(Path("fidelity") / name) for name in ("fidelity.md", "fidelity.html", "fidelity.png")]
    done = subprocess.run([QREPLAY, *shlex.split(PAGE_COMMANDS[0])[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:] == written
    con = duckdb.connect(str(out_dir / "fidelity.duckdb"), read_only=True)
    runs = con.execute("SELECT stack, set_name, autotune_requested, status, size_bytes, client_sent, set_fingerprint "
                       "FROM runs ORDER BY started_at").fetchall()
    con.close()
    # One page load records Firefox's set; then Firefox and that set on ngtcp2, pinned and growing, every run
    # a row. The replays ran exactly what the browser's ClientHello carried.
    capture, *compared = runs
    assert capture[:2] == ("firefox", "firefox-own") and capture[4] == 1_000_000
    assert all(r[3] == "ok" for r in runs), runs
    sent = ParamSet.from_mapping(json.loads(capture[5]))
    replays = [r for r in compared if r[0] == "ngtcp2"]
    assert sorted(r[2] for r in replays) == [False, True] and len(compared) == 3
    assert all(r[1].startswith("firefox-") and r[1].endswith("-sent") and r[6] == sent.fingerprint() for r in replays)
    report = (out_dir / "fidelity.md").read_text()
    assert "| ngtcp2 | pinned |" in report and "| ngtcp2 | autotune |" in report and "Closest: **ngtcp2" in report
    assert "every run of the comparison sent this set" in report
    assert (out_dir / "fidelity.png").stat().st_size > 20_000

    # --report-only runs nothing and writes the same report again from the stored runs
    for path in written:
        (tmp_path / path).unlink()
    again = subprocess.run([QREPLAY, *shlex.split(PAGE_COMMANDS[1])[1:]], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == written
    assert (out_dir / "fidelity.md").read_text() == report
    with duckdb.connect(str(out_dir / "fidelity.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == len(runs)
