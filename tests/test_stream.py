"""QuicSand's streaming workload (tparams.workloads' stream): a GET that aioquic's, quic-go's, quinn's,
s2n-quic's, quiche's, tquic's or msquic's server paces at a bitrate, played back by tparams.workloads.Player in
our aioquic client, from the other clients' arrival times (tparams.workloads.played) and, mirrored in
JavaScript, in Chromium's and Firefox's page (served over h3 by aioquic, quinn, quiche or tquic). Through the
testbed's emulated link: no stall when the link carries the bitrate, stalls when its rate is below it; a stack
whose server cannot pace refuses the workload in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from replay.aioquic_endpoints.common import PACING_TICK_S
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, run_experiment
from replay.sets import own_set, resolve_one
from replay.stacks import every_stack, get_stack
from replay.stacks.base import ReplayProgram, RunOptions
from tparams.workloads import STARTUP_BUFFER_S, STREAM, Player, played

QREPLAY = str(Path(sys.executable).with_name("qreplay"))
BITRATE = 2_000_000
SIZE = 500_000  # 2 s at 2 Mbit/s
CARRIES, TOO_SLOW = 20_000_000, 1_000_000  # the link's rate: ten times the bitrate, half of it


def test_the_player_stalls_only_when_the_bytes_come_slower_than_it_plays():
    on_time, half_speed = Player(8000, 3000), Player(8000, 3000)  # 3 s of media at 1000 bytes/s
    for tick in range(1, 31):
        on_time.received(tick * 0.1, 100)
        half_speed.received(tick * 0.2, 100)
    assert on_time.result() == {"stalls": 0, "stall_s": 0.0, "startup_s": pytest.approx(STARTUP_BUFFER_S)}
    assert half_speed.result()["startup_s"] == pytest.approx(2 * STARTUP_BUFFER_S)
    assert half_speed.result()["stalls"] > 0
    # it plays 3 s after its start and finishes no earlier than the last byte: the rest is stalled
    assert half_speed.result()["stall_s"] >= 6 - 3 - half_speed.result()["startup_s"] - 1e-9


def test_a_client_that_records_arrivals_is_played_by_the_same_rule():
    """quic-go's stream client prints its reads' arrivals; the stack's parsing plays them (Player) in their place."""
    arrivals = [[tick * 0.2, 100] for tick in range(1, 31)]  # half speed, as above
    line = json.dumps({"bytes": 3000, "duration_s": 6.0, "requests": 1, "bitrate": 8000, "arrivals": arrivals})
    result = get_stack("quic-go").parse_client_output(f"{line}\n")
    player = Player(8000, 3000)
    for t, nbytes in arrivals:
        player.received(t, nbytes)
    assert played(8000, 3000, arrivals) == player.result() and player.result()["stalls"] > 0
    assert "arrivals" not in result.extra and {k: result.extra[k] for k in player.result()} == player.result()


def test_every_pacing_server_hands_over_on_aioquics_tick():
    """quic-go's and quinn's servers follow aioquic's rule (send_at_bitrate) with its tick, each in its language."""
    root = Path(__file__).resolve().parents[1]
    for path, pattern in (("replay/quicgo/bulk/bulk.go", r"const PacingTick = (\d+) \* time\.Millisecond"),
                          ("lab/servers/common/src/replay.rs",
                           r"pub const PACING_TICK: Duration = Duration::from_millis\((\d+)\);")):
        found = re.search(pattern, (root / path).read_text())
        assert found and int(found.group(1)) == round(PACING_TICK_S * 1000), path


def _stream(stack: str, server: str = "aioquic", queue: str | None = None) -> list[dict]:
    """The same stream over a link that carries it and one at half its bitrate (10 ms each way), each with the
    testbed's queue or ``queue``."""
    client = get_stack(stack)
    for needed in (client, get_stack(server)):
        if os.geteuid() != 0:
            pytest.skip("the testbed needs root (network namespaces)")
        if needed.unavailable_reason():
            pytest.skip(needed.unavailable_reason())
    named = own_set(client) if client.own_parameters else resolve_one("firefox")
    links = [LinkConfig(delay_down_ms=10, rate_bps=rate, queue=queue) for rate in (CARRIES, TOO_SLOW)]
    experiment = Experiment("test", client, [Condition(named, None, link) for link in links],
                            RunOptions(size=SIZE, workload=STREAM, bitrate=BITRATE, timeout_s=40), 1, "auto",
                            server_stack=get_stack(server))
    with tempfile.TemporaryDirectory() as out:
        rows = run_experiment(experiment, Path(out) / "r.duckdb")
    for row in rows:
        assert row["status"] == "ok", row.get("error")
        assert (row["workload"], row["bytes"], row["bitrate_bps"]) == ("stream", SIZE, BITRATE)
    return sorted(rows, key=lambda row: -row["rate_bps"])


def _check(carried: dict, starved: dict) -> None:
    # paced: it lasts the stream's length (less the start-up buffer the player waits for), however fast the link
    assert carried["duration_s"] >= SIZE * 8 / BITRATE - 0.1, carried["duration_s"]
    assert carried["goodput_mbps"] == pytest.approx(BITRATE / 1e6, rel=0.15)
    assert carried["stalls"] == 0 and carried["stall_ms"] == 0, carried
    # the server hands over a tick ahead of the clock (send_at_bitrate), the buffer's bytes by 20 ms before 0.5 s
    assert (STARTUP_BUFFER_S - PACING_TICK_S) * 1000 <= carried["startup_ms"] < STARTUP_BUFFER_S * 1000 + 400
    assert starved["stalls"] > 0 and starved["stall_ms"] > 500, starved
    assert starved["goodput_mbps"] < TOO_SLOW / 1e6


@pytest.mark.timing  # the pacing and the player are on the clock: a starved Python server would stall them
def test_aioquics_client_plays_a_paced_stream_without_stalls_only_when_the_link_carries_it():
    """aioquic's client against aioquic's server over hq-interop: GET /<size>?bitrate=<bits/s>."""
    carried, starved = _stream("aioquic")
    assert "--bitrate=2000000" in json.loads(carried["client_argv"])
    _check(carried, starved)


@pytest.mark.timing
@pytest.mark.parametrize("client, server", [("quic-go", "quic-go"), ("aioquic", "quic-go"), ("quinn", "quinn"),
                                            ("s2n-quic", "s2n-quic"), ("quiche", "quiche"), ("tquic", "tquic"),
                                            ("msquic", "msquic"), ("aioquic", "msquic")])
def test_our_native_servers_pace_a_stream_that_plays_without_stalls_only_when_the_link_carries_it(client, server):
    """quic-go's server (qgserver), quinn's, s2n-quic's, quiche's, tquic's and msquic's (replay-<library>) pace
    by aioquic's rule; their stream clients (qgstream, replay-<library> stream-client) record arrivals, which
    qreplay plays; aioquic's client plays them itself."""
    carried, starved = _stream(client, server)
    assert "--bitrate=2000000" in json.loads(carried["client_argv"])
    _check(carried, starved)


@pytest.mark.lab
@pytest.mark.timing
@pytest.mark.parametrize("browser, server, queue", [("chromium", "aioquic", None), ("firefox", "aioquic", None),
                                                    ("chromium", "quinn", None), ("firefox", "quiche", None),
                                                    ("firefox", "tquic", None), ("chromium", "tquic", "20")])
def test_a_browsers_page_plays_a_stream_from_an_h3_server_and_stalls_when_the_link_is_slower(browser, server, queue):
    """aioquic's h3 server paces in Python (send_at_bitrate); quinn's, quiche's and tquic's h3 servers by the same
    schedule (lab_server_common::replay::Paced) through each library's own h3 layer.

    Chromium from tquic through a queue of 20 packets (240 ms at 1 Mbit/s): behind the testbed's 1,000 (12 s) the
    starved path's round trip grew from 20 ms to 300-400 ms in 0.9 s, Chromium moved to a new port (its port
    migration on a degrading path: PATH_CHALLENGE from a new socket, then RETIRE_CONNECTION_ID 0), and tquic 1.6,
    which never moves its server's active path (connection.rs: "TODO: try to do connection migration"), failed the
    next packet's header parse on that path's retired CID (Connection::scid) and closed with INTERNAL_ERROR, 4 runs
    of 4 (2026-11-29); through 20 packets Chromium stayed on its port and the stream played, 2 of 2."""
    carried, starved = _stream(browser, server, queue)
    assert carried["protocol_seen"] == "h3"
    _check(carried, starved)


@pytest.mark.parametrize("args, said", [
    (["--stack", "curl"], "curl's client speaks only the download workload"),
    (["--stack", "firefox", "--server-stack", "lsquic"],
     "lsquic's server cannot answer firefox's stream workload: lsquic cannot pace a stream at a bitrate"),
    (["--stack", "chromium"], "ngtcp2's server cannot answer chromium's stream workload: ngtcp2 cannot pace"),
    (["--stack", "chromium", "--server-stack", "caddy"], "caddy cannot pace a stream at a bitrate"),
])
def test_a_stack_that_cannot_pace_or_play_a_stream_refuses_it_in_one_line(args, said, tmp_path):
    done = subprocess.run([QREPLAY, *args, "--workload", "stream", "--bitrate", "2mbit", "--size", "500kB",
                           "--out", str(tmp_path / "r.duckdb")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert not (tmp_path / "r.duckdb").exists()


def test_a_stream_needs_its_bitrate_and_only_a_stream_takes_one(tmp_path):
    for args, said in ((["--workload", "stream"], "--workload stream needs --bitrate"),
                       (["--bitrate", "2mbit"], "--bitrate is for a stream (--workload stream), not download")):
        done = subprocess.run([QREPLAY, "--stack", "aioquic", *args, "--size", "500kB",
                               "--out", str(tmp_path / "r.duckdb")], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


@pytest.mark.parametrize("stack", [name for name, stack in every_stack().items()
                                   if isinstance(stack, ReplayProgram) and "paced" in stack.replay_protocol])
def test_a_stream_clients_bitrate_of_zero_is_refused_in_one_line(stack):
    """As every other bad input of ours: one line, status 2 (the Rust programs' clap errors cut to their first)."""
    program = get_stack(stack)
    if program.unavailable_reason():
        pytest.skip(program.unavailable_reason())
    done = subprocess.run([*program.command("stream-client"), "127.0.0.1:9", "--size=5", "--bitrate=0"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "bitrate" in done.stderr, done.stderr
