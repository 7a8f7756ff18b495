"""common/process.py against real processes and sockets on loopback (no namespace needed)."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from common.process import STARVED_S, ExitedEarly, NotListening, Process, pid_alive, process_groups, wait_listening


def test_readiness_tells_a_tcp_listener_from_a_udp_one():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        port = tcp.getsockname()[1]
        wait_listening(None, port, "tcp", timeout_s=2)
        with pytest.raises(NotListening, match=f"UDP port {port}"):
            wait_listening(None, port, "udp", timeout_s=0.3)


def test_readiness_stops_waiting_when_the_process_exits(tmp_path):
    process = Process(None, ["sh", "-c", "echo bad flag >&2; exit 3"], tmp_path / "server.usage")
    try:
        with pytest.raises(ExitedEarly):
            wait_listening(None, 9, "udp", timeout_s=STARVED_S, process=process)
    finally:
        process.stop()
    assert process.status == 3 and process.stderr_tail() == "bad flag"
    cpu_s, maxrss_kb = process.usage()
    assert cpu_s is not None and maxrss_kb > 0


def test_stop_ends_the_program_and_what_it_started(tmp_path):
    # The program ignores SIGTERM and has a child: only the group's SIGKILL ends both.
    process = Process(None, ["sh", "-c", "trap '' TERM; sleep 60 & wait"], tmp_path / "p.usage")
    program = process.program_pid()
    process.stop(grace_s=0.3)
    assert process.wait(0)
    # Killed with the group, but it exits only once scheduled, which at SCHED_IDLE on a loaded machine can come after
    # GNU time's exit was collected
    deadline = time.monotonic() + STARVED_S
    while pid_alive(program) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not pid_alive(program)


def test_process_groups_end_every_group_on_an_exception(tmp_path):
    with pytest.raises(KeyboardInterrupt), process_groups() as start:
        sleepers = [start([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / f"{n}.log")
                    for n in range(2)]
        raise KeyboardInterrupt
    assert all(sleeper.poll() is not None for sleeper in sleepers)
