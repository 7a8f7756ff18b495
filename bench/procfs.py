"""CPU time of running processes from /proc, for the benchmarks that count what each party spent."""

from __future__ import annotations

import os
from pathlib import Path


def process_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of running processes, all their threads included (not yet reaped, so
    getrusage cannot see them)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of proc(5))
    return total / os.sysconf("SC_CLK_TCK")
