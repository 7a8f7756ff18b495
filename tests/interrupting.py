"""Ctrl-C as a terminal sends it, to a command's whole process group, once the command has got somewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def signal_state(pid: int) -> str:
    """How ``pid`` takes signals as the kernel has it (the masks of /proc/PID/status: blocked, ignored, caught),
    for a test to show beside an exit that says a Ctrl-C went unheeded: a fresh clone's suite had two commands end
    0 after their Ctrl-C (2026-11-29 01:50), cause not found; none of the suite's workers had SIGINT ignored or
    blocked at any test's end in the next run."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return f"pid {pid} gone"
    return "; ".join(line for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def ctrl_c_when(argv: Sequence[str], ready: Callable[[], bool], within: float) -> tuple[int, str]:
    """Start ``argv`` in its own session, wait until ``ready()`` holds (failing if the command ends first
    or ``within`` seconds pass), then SIGINT its group; returns the exit status and stderr."""
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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
