"""LSQUIC, the thesis's stack, end to end: real downloads over the testbed, what it sent read back
from the wire, and the ways a run on it can go wrong.

Runs where QREPLAY_LSQUIC_CLIENT and QREPLAY_LSQUIC_SERVER name LSQUIC's http_client and
http_server, a build of the user's own; skips with the reason otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

from capturing import assert_applied_is_on_the_wire, captured_handshakes
from replay.flowcontrol import UPDATE_RULES, window_bound
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, open_path, run_experiment, run_once
from replay.sets import NamedSet, resolve_one, with_overrides
from replay.stacks import get_stack
from replay.stacks.base import RunOptions
from replay.stacks.lsquic import STACK as LSQUIC
from tparams.paramset import ParamSet

pytestmark = pytest.mark.timing  # (tests/conftest.py: runs while the other worker waits)

# Both sides ask for values no stack sends by default, so a value on the wire can only have come
# from the setting. Each side also asks for one value LSQUIC fixes in code at something else
# (reported not applied) and one it fixes at the asked value (applied).
CLIENT_ASKS = ["max_idle_timeout=45000", "max_udp_payload_size=1452", "initial_max_data=5000000",
               "initial_max_stream_data_bidi_local=3000001", "initial_max_stream_data_bidi_remote=70000",
               "initial_max_stream_data_uni=80000", "initial_max_streams_bidi=17", "initial_max_streams_uni=16",
               "disable_active_migration=true", "max_ack_delay=20", "active_connection_id_limit=8"]
SERVER_ASKS = ["max_idle_timeout=20000", "max_udp_payload_size=1400", "initial_max_data=4000000",
               "initial_max_stream_data_bidi_local=90000", "initial_max_stream_data_bidi_remote=2000000",
               "initial_max_stream_data_uni=60000", "initial_max_streams_bidi=50", "initial_max_streams_uni=7",
               "disable_active_migration=true", "ack_delay_exponent=4", "active_connection_id_limit=8"]


@pytest.fixture
def lsquic():
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    stack = get_stack("lsquic")
    reason = stack.unavailable_reason()
    if reason:
        pytest.skip(f"LSQUIC is not available here: {reason}")
    return stack


def _wrapper(tmp_path: Path, name: str, body: str) -> Path:
    """A shell script standing in for one of LSQUIC's programs (what a user's odd build might do)."""
    script = tmp_path / name
    script.write_text(f"#!/bin/bash\n{body}\n")
    script.chmod(0o755)
    return script


@pytest.mark.lab
def test_every_applied_setting_is_what_went_on_the_wire(lsquic, tmp_path, monkeypatch):
    """A download through the emulated link; then the ClientHello's transport parameters (Initial
    keys) and the server's EncryptedExtensions (the client's key log, -G) must hold exactly the
    values the run stored as applied, and differ where it stored not applied."""
    keys = tmp_path / "keys"
    keys.mkdir()
    # -G writes the TLS secrets; it also switches LSQUIC's loss bits off, which ql_bits=2 undoes, so
    # the parameters sent are a plain run's.
    client = _wrapper(tmp_path, "http_client",
                      f'exec {os.environ["QREPLAY_LSQUIC_CLIENT"]} -G {keys} -o ql_bits=2 "$@"')
    monkeypatch.setenv("QREPLAY_LSQUIC_CLIENT", str(client))
    condition = Condition(with_overrides(resolve_one("firefox-109"), CLIENT_ASKS),
                          with_overrides(NamedSet("stack-default", ParamSet(), ""), SERVER_ASKS),
                          LinkConfig(delay_down_ms=10))
    pcap = tmp_path / "handshake.pcapng"
    with open_path("auto", condition.link) as path, captured_handshakes(path.client_ns, pcap, tmp_path / "tshark.log"):
        row = run_once(lsquic, path, condition, RunOptions(size=3_000_000, timeout_s=60), 1, "wire", "auto")
    assert row["status"] == "ok" and row["bytes"] == 3_000_000, row.get("error")

    (keylog,) = keys.glob("*.keys")
    assert_applied_is_on_the_wire(row, pcap, keylog, {"client": CLIENT_ASKS, "server": SERVER_ASKS})
    assert json.loads(row["not_applied_client"]) == {"initial_max_streams_uni": 16, "max_ack_delay": 20}
    assert json.loads(row["not_applied_server"]) == {"ack_delay_exponent": 4}


@pytest.mark.lab
def test_window_limited_goodput_is_what_the_window_allows(lsquic, tmp_path):
    """Figure 5.6's point in miniature: the client's bidi_local window, pinned, sets the goodput.

    LSQUIC's receiver moves the limit to read_off + window once less than half the window is left
    (lsquic_sfcw.c); a half-window arrives in one burst, so the limit moves by half a window per RTT
    (seen on the wire: MAX_STREAM_DATA +65.6 kB every 30.5 ms at 131,072 B and 30 ms). Goodput is
    half a window per RTT, the start (handshake, request, slow start) added; a window twice or half as large, or the
    textbook window-per-RTT, lands outside the tolerance. With --autotune LSQUIC's own growth lifts
    that limit.
    """
    window, rtt_s, size = 131_072, 0.030, 3_000_000
    base = with_overrides(resolve_one("lsquic-client-default"), [f"initial_max_stream_data_bidi_local={window}"])
    link = LinkConfig(delay_down_ms=rtt_s * 1000)
    pinned = run_experiment(Experiment("test", lsquic, [Condition(base, None, link)],
                                       RunOptions(size=size, timeout_s=60), 2), tmp_path / "r.duckdb")
    grown = run_experiment(Experiment("test", lsquic, [Condition(base, None, link)],
                                      RunOptions(size=size, timeout_s=60, knobs={"autotune": True}), 1), tmp_path / "r.duckdb")
    assert [r["status"] for r in pinned + grown] == ["ok"] * 3, [r.get("error") for r in pinned + grown]
    # The burst bound of the report's window model: half a window per RTT, the download's start charged.
    predicted_mbps = window_bound(window, rtt_s * 1000, UPDATE_RULES["lsquic"], size).low_mbps  # 16.6 Mbit/s
    # The window caps every run; a busy machine (the relay is a userspace process) only slows one
    # down, so the better run is the one held to the prediction.
    measured = [row["goodput_mbps"] for row in pinned]
    assert all(m < 1.1 * predicted_mbps for m in measured), (measured, predicted_mbps)
    assert max(measured) > 0.85 * predicted_mbps, (measured, predicted_mbps)
    assert grown[0]["goodput_mbps"] > 2 * predicted_mbps, grown[0]["goodput_mbps"]


@pytest.mark.lab
def test_a_build_that_refuses_a_setting_fails_those_runs_and_the_experiment_goes_on(lsquic, tmp_path, monkeypatch):
    """A build without allow_migration (as an older LSQUIC) exits 1 without a word: the run that
    needs it fails with one line saying why, the next condition runs."""
    real = os.environ["QREPLAY_LSQUIC_CLIENT"]
    older = _wrapper(tmp_path, "http_client", f'exec {real} "${{@/allow_migration=/not_in_this_build=}}"')
    monkeypatch.setenv("QREPLAY_LSQUIC_CLIENT", str(older))
    conditions = [Condition(resolve_one(name), None, LinkConfig()) for name in ("firefox-109", "chrome-109")]
    rows = run_experiment(Experiment("test", lsquic, conditions, RunOptions(size=1_000_000, timeout_s=30), 1),
                          tmp_path / "r.duckdb")
    refused, fine = rows
    assert refused["status"] == "failed" and fine["status"] == "ok", fine.get("error")
    assert refused["error"].startswith("client exited with status 1: http_client exited 1 without a word, which "
                                       "LSQUIC does for an -o setting this build does not know")
    assert "\n" not in refused["error"] and refused["goodput_mbps"] is None
    stored = duckdb.connect(str(tmp_path / "r.duckdb")).execute("SELECT set_name, status FROM runs ORDER BY started_at")
    assert stored.fetchall() == [("firefox-109", "failed"), ("chrome-109", "ok")]


@pytest.mark.lab
def test_a_server_killed_mid_run_fails_the_run_at_once(lsquic, tmp_path, monkeypatch):
    """The server dies 1 s into each download: each run fails with one line naming the signal, long
    before the client's 30 s idle timeout, is stored, and the next repetition still runs."""
    real = os.environ["QREPLAY_LSQUIC_SERVER"]
    # The shell's pid becomes the server's at exec; -h (the stack's check of the program) is left alone.
    dying = _wrapper(tmp_path, "http_server", f'[[ " $* " == *" -h "* ]] || (sleep 1; kill -KILL $$) &\n'
                                              f'exec {real} "$@"')
    monkeypatch.setenv("QREPLAY_LSQUIC_SERVER", str(dying))
    slow = with_overrides(resolve_one("lsquic-client-default"), ["initial_max_stream_data_bidi_local=131072"])
    rows = run_experiment(Experiment("test", lsquic, [Condition(slow, None, LinkConfig(delay_down_ms=30))],
                                     RunOptions(size=10_000_000, timeout_s=60), 2), tmp_path / "r.duckdb")
    assert [r["status"] for r in rows] == ["failed", "failed"]
    for row in rows:
        assert row["error"].startswith("server was killed by SIGKILL: no output ("), row["error"]
        assert "of 10000000 bytes" in row["error"] and row["wall_s"] < 5
    assert duckdb.connect(str(tmp_path / "r.duckdb")).execute("SELECT count(*) FROM runs").fetchone() == (2,)


@pytest.mark.lab
@pytest.mark.parametrize("cc, other", [("cubic", "bbr"), ("bbr", "cubic")])
def test_cc_reaches_the_sender(lsquic, tmp_path, monkeypatch, cc, other):
    """The server sends the download, so --cc must reach it; its own debug log names the controller."""
    log = tmp_path / "server.log"
    real = os.environ["QREPLAY_LSQUIC_SERVER"]
    # Only the runs' server logs (they serve a document root), not the version probe's.
    logging = _wrapper(tmp_path, "http_server", f'[[ " $* " != *" -r "* ]] || exec {real} "$@" '
                                                f'-l cubic=debug,bbr=debug,adaptive-cc=debug 2>>{log}\n'
                                                f'exec {real} "$@"')
    monkeypatch.setenv("QREPLAY_LSQUIC_SERVER", str(logging))
    rows = run_experiment(Experiment("test", lsquic, [Condition(resolve_one("firefox-109"), None, LinkConfig())],
                                     RunOptions(size=1_000_000, timeout_s=30, knobs={"cc": cc}), 1), tmp_path / "r.duckdb")
    assert rows[0]["status"] == "ok", rows[0].get("error")
    text = log.read_text(errors="replace")
    assert f"] {cc}: " in text and f"] {other}: " not in text and "adaptive-cc" not in text


def test_values_lsquic_cannot_carry_are_sent_as_near_as_it_can_and_reported_not_applied():
    """No program runs here: what the command line carries for values outside LSQUIC's settings."""
    asked = ParamSet.from_mapping({"max_idle_timeout": 1500, "max_udp_payload_size": 100_000,
                                   "initial_max_data": 2**40, "initial_max_stream_data_bidi_local": 2**32 - 1,
                                   "initial_max_streams_uni": 3, "max_ack_delay": 25, "disable_active_migration": True})
    client = LSQUIC._settings(asked, RunOptions(size=1), "client")
    assert client.applied == {"initial_max_stream_data_bidi_local": 2**32 - 1, "initial_max_streams_uni": 3,
                              "max_ack_delay": 25, "disable_active_migration": True}
    assert client.not_applied == {"max_idle_timeout": 1500, "max_udp_payload_size": 100_000, "initial_max_data": 2**40}
    assert client.flags[::2] == ["-o"] * (len(client.flags) // 2)
    assert set(client.flags[1::2]) == {"idle_timeout=2", "max_udp_payload_size_rx=65535", "init_max_data=4294967295",
                                       "init_max_stream_data_bidi_local=4294967295", "allow_migration=0",
                                       "max_cfcw=0", "max_sfcw=0", "cc_algo=1"}
    server = LSQUIC._settings(ParamSet.from_mapping({"initial_max_streams_uni": 7}), RunOptions(size=1, knobs={
        "cc": "bbr", "autotune": True}), "server")
    assert server.applied == {"initial_max_streams_uni": 7}
    assert server.flags[1::2] == ["init_max_streams_uni=7", f"max_cfcw={24 << 20}", f"max_sfcw={16 << 20}", "cc_algo=2"]


@pytest.mark.lab
def test_a_traced_run_decrypts_and_says_the_stream_window_held_it(lsquic, tmp_path):
    """LSQUIC reads no SSLKEYLOGFILE; its client writes a key log a connection into a -G directory, which
    the run gathers for the trace. Decrypted, the capture gives the breakdown its credits: a 128 KiB
    stream window at 30 ms is what holds the download back (without the keys the run has no breakdown)."""
    condition = Condition(with_overrides(resolve_one("firefox"), ["initial_max_stream_data_bidi_local=131072"]),
                          None, LinkConfig(delay_down_ms=30))
    (row,) = run_experiment(Experiment("test", lsquic, [condition], RunOptions(size=2_000_000, timeout_s=60,
                                                                              trace=True), 1), tmp_path / "r.duckdb")
    assert row["status"] == "ok", row.get("error")
    assert row["limited_by"] == "receive_window_stream", (row["limits"], row["warnings"])
    assert json.loads(row["limits"])["fractions"]["receive_window_stream"] > 0.5
