"""Holding the CPUs out of deep idle while the testbed measures."""

from __future__ import annotations

import os
import struct
from pathlib import Path

CPU_LATENCY_QOS = Path("/dev/cpu_dma_latency")


class ShallowIdle:
    """Keeps every CPU in its shallowest idle state while held.

    A CPU waking from deep idle is late by up to milliseconds, and so is a
    virtual machine's halted vCPU, which waits for the host to run it again.
    On the project's 2-vCPU KVM guest, a real-time thread's 1 ms sleeps woke
    p99 5.7-10.7 ms late; held, p99 0.04-0.43 ms (`qreplay calibrate`).
    linkem's delays and the stacks' timers are such sleeps: in 30 ms ngtcp2
    downloads, linkem's delay error p99 fell from 1.4-6.1 ms to 0.09-0.13 ms,
    and goodput rose by a fifth. The kernel's PM QoS request (as cyclictest and
    tuned's latency profiles make it) lasts while the file stays open, so a
    crash never leaves the machine held."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self.state = "not held"

    def __enter__(self) -> "ShallowIdle":
        try:
            fd = os.open(CPU_LATENCY_QOS, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            self.state = f"unavailable: {CPU_LATENCY_QOS}: {exc.strerror}"
            return self
        os.write(fd, struct.pack("i", 0))  # microseconds of wake-up latency the CPUs may take
        self._fd, self.state = fd, "held"
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self.state = None, "released"


def availability() -> tuple[bool, str]:
    """(whether the testbed can hold the CPUs out of deep idle here, what it finds)."""
    try:
        with open(CPU_LATENCY_QOS, "rb") as qos:
            (limit_us,) = struct.unpack("i", qos.read(4))
        os.close(os.open(CPU_LATENCY_QOS, os.O_WRONLY | os.O_CLOEXEC))
    except OSError as exc:
        return False, f"{CPU_LATENCY_QOS}: {exc.strerror}; CPUs may wake late from deep idle during runs"
    allowed = "any idle state" if limit_us >= 1_000_000 else f"{limit_us} us wake-up latency"
    return True, f"PM QoS via {CPU_LATENCY_QOS} (now: {allowed}); runs hold it at 0 us unless --deep-idle"
