"""Every benchmark under bench/ still starts: its imports resolve against today's modules and it reads its
command line (a refactor once broke bench_handshakes unseen, as no test ran the benchmarks; running them
whole belongs to `make bench`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("bench", sorted(p.name for p in BENCH.glob("bench_*.py")))
def test_the_benchmark_starts(bench):
    done = subprocess.run([sys.executable, str(BENCH / bench), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=BENCH.parent)
    assert done.returncode == 0, done.stderr[-800:]
    assert "usage:" in done.stdout
