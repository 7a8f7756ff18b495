"""Ctrl-C as a terminal sends it, to a command's whole process group, once the command has got somewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence


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
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, stderr
