"""common/process.py against real processes and sockets on loopback (no namespace needed)."""

from __future__ import annotations

import signal
import socket
import subprocess
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


# Starts a program and hands it to its owner (``held``, which the finally stops) with a SIGTERM or Ctrl-C landing
# between the two, as a two-host run's server did when CI's SIGTERM came in the middle of its start (2026-11-28).
HANDED_OVER = """
import os, signal, sys
from pathlib import Path
from common import netns
from common.process import Process, signals_deferred
held = []
with netns.teardown_on_signals():
    try:
        with signals_deferred():
            os.kill(os.getpid(), getattr(signal, sys.argv[2]))
            held.append(Process(None, ["sleep", "60"], Path(sys.argv[1])))
            print(held[0].program_pid(), flush=True)
        print("went on past the signal", flush=True)
    finally:
        for process in held:
            process.stop()
"""


# SystemExit(143) from teardown_on_signals; an uncaught KeyboardInterrupt ends Python by SIGINT itself
@pytest.mark.parametrize(("sent", "exit_code"), [("SIGTERM", 143), ("SIGINT", -signal.SIGINT)])
def test_a_signal_between_a_start_and_its_owner_waits_until_the_owner_holds_it(tmp_path, sent, exit_code):
    done = subprocess.run([sys.executable, "-c", HANDED_OVER, str(tmp_path / "p.usage"), sent],
                          capture_output=True, text=True, timeout=STARVED_S)
    lines = done.stdout.split()
    assert done.returncode == exit_code and lines and "went on" not in done.stdout, (done.stdout, done.stderr)
    assert not pid_alive(int(lines[0]))
