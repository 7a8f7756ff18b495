"""The TCP reference: Debian's curl downloading over HTTP/2 on TLS 1.3 from caddy on kernel TCP through the
real testbed, with the sender's congestion control as the kernel ran it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from replay.sets import own_set
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, run_experiment
from replay.stacks import get_stack
from replay.stacks.base import RunOptions
from replay.stacks.caddy import kernel_tcp_congestion_control
from tparams.knobs import KNOBS, Knob, Rendering

pytestmark = pytest.mark.lab
QREPLAY = str(Path(sys.executable).with_name("qreplay"))


@pytest.fixture
def curl():
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    stack = get_stack("curl")
    for needed in (stack, get_stack("caddy")):
        if needed.unavailable_reason():
            pytest.skip(needed.unavailable_reason())
    return stack


@pytest.mark.parametrize("cc", ["cubic", "bbr"])
def test_curl_downloads_over_h2_from_caddy_and_stores_the_congestion_control_the_kernel_ran(curl, cc, tmp_path):
    default, allowed = kernel_tcp_congestion_control()
    size = 3_000_000
    rows = run_experiment(Experiment("single", curl, [Condition(own_set(curl), None,
                                                                LinkConfig(delay_down_ms=10, rate_bps=100_000_000))],
                                     RunOptions(size=size, timeout_s=60, knobs={"cc": cc}), 1), tmp_path / "r.duckdb")
    assert [r["status"] for r in rows] == ["ok"], rows[0].get("error")
    with duckdb.connect(str(tmp_path / "r.duckdb"), read_only=True) as con:
        stored = con.execute("SELECT stack, server_stack, cc, cc_requested, autotune, bytes, goodput_mbps, "
                             "handshake_s, protocol_seen, warnings FROM runs").fetchone()
    ran = cc if cc in allowed else default
    assert stored[:5] == ("curl", "caddy", ran, cc, True)
    # The namespace's sysctl is set before caddy starts, or the server exits: an ok run ran ``ran``. TLS 1.3 takes
    # one round trip (10 ms) after TCP's.
    assert stored[5] == size and 0 < stored[6] < 100 and 0.0095 < stored[7] < 0.1 and stored[8] == "h2"
    assert ("kernel TCP runs" in stored[9]) == (ran != cc)


def test_a_set_for_curl_is_refused_in_one_line(curl, tmp_path):
    done = subprocess.run([QREPLAY, "--stack", "curl", "--set", "firefox", "--size", "1MB",
                           "--out", str(tmp_path / "r.duckdb")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "curl speaks TCP: it has no QUIC transport parameters to set" in done.stderr
    assert not (tmp_path / "r.duckdb").exists()


def test_curl_offers_the_one_cipher_suite_asked(curl, tmp_path):
    """--cipher reaches curl as its own --tls13-ciphers (curl 7.88 takes the value as the next word: the
    '=' form made it exit at once)."""
    rows = run_experiment(Experiment("single", curl, [Condition(own_set(curl), None, LinkConfig(delay_down_ms=1))],
                                     RunOptions(size=1_000_000, timeout_s=30,
                                                knobs={"cipher": "TLS_CHACHA20_POLY1305_SHA256"}), 1),
                          tmp_path / "r.duckdb")
    assert rows[0]["status"] == "ok", rows[0].get("error")
    argv = json.loads(rows[0]["client_argv"])
    assert argv[argv.index("--tls13-ciphers") + 1] == "TLS_CHACHA20_POLY1305_SHA256"


def test_a_client_that_prints_nothing_is_a_failed_run(curl, tmp_path, monkeypatch):
    """A knob rendered as curl does not take it: curl exits at once, printing no result; the run is stored
    failed with curl's own words, and the experiment goes on."""
    knob = Knob("bad_option", "curl refuses it", kind="switch", default=False, decided_by="client",
                stacks={"curl": Rendering(argv=lambda value, role: ["--tls13-ciphers=x"] if role == "client" else [])})
    monkeypatch.setitem(KNOBS, knob.name, knob)
    rows = run_experiment(Experiment("single", curl, [Condition(own_set(curl), None, LinkConfig())],
                                     RunOptions(size=1_000_000, timeout_s=30, knobs={"bad_option": True}), 2),
                          tmp_path / "r.duckdb")
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert "client exited with status" in rows[0]["error"]
