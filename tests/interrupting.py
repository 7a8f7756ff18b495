"""Ctrl-C as a terminal sends it, to a command's whole process group, once the command has got somewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path


# Starts a command with Ctrl-C and SIGQUIT at their default, whatever the test worker has them at: a command
# inherits an ignored signal, and a Python program keeps it ignored. Fresh clones' suites twice had commands end
# 0 after their Ctrl-C (2026-11-29 01:50, 02:10), started with SIGINT and SIGQUIT ignored (SigIgn 0x81001006, by
# signal_state below) from a worker that had them so for a while: what in the worker did is not found (glibc's
# system() does exactly that while its child runs; no code of ours calls it; at every test's end of a watched
# suite no worker had them ignored).
_DEFAULTS = ("import os, signal, sys; [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGQUIT)]; "
             "os.execvp(sys.argv[1], sys.argv[1:])")


def interruptible(argv: Sequence[str]) -> list[str]:
    """``argv`` with SIGINT and SIGQUIT reset to their default before it runs (the same pid: the reset execs it)."""
    return [sys.executable, "-c", _DEFAULTS, *argv]


def signal_state(pid: int) -> str:
    """How ``pid`` takes signals as the kernel has it (the masks of /proc/PID/status: blocked, ignored, caught),
    for a test to show beside an exit that says a Ctrl-C went unheeded."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return f"pid {pid} gone"
    return "; ".join(line for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def ctrl_c_when(argv: Sequence[str], ready: Callable[[], bool], within: float) -> tuple[int, str]:
    """Start ``argv`` in its own session, wait until ``ready()`` holds (failing if the command ends first
    or ``within`` seconds pass), then SIGINT its group; returns the exit status and stderr."""
    process = subprocess.Popen(interruptible(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + within
        while not ready():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, f"{argv[0]} did not get there within {within} s"
            time.sleep(0.05)
        taking = signal_state(process.pid)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        if process.returncode == 0:
            stderr += f"\n(exited 0 after the Ctrl-C; its signals when sent: {taking})"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, stderr
