"""A command line starts without importing what only some of its commands use: `qscan lab up`, `qscan
--help` and every manual step pay for its start, some hundreds of times a test run. Measured on
2026-11-28 (load 12): `qscan --help` 1.1 s of CPU when every command module imported its implementation at
the top, 0.6 s since (polars, pyroute2, dnspython, httpx, DuckDB imported where a command runs); `qreplay --help`
1.0 s, then 0.7 s while fidelity, reproduce and impact read their grids from modules importing DuckDB and polars,
0.25-0.3 s since the grids are modules of their own (replay/grids, 2026-11-28, load 9); `qscan --help` 0.37 ->
0.21 s once the scan engine (aioquic's TLS) and pyshark are imported where a scan or a capture runs (10:45, load 1)."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: packages only some commands need, each costing 0.1-0.2 s of CPU to import
DEFERRED = ("polars", "pyroute2", "dns", "httpx", "matplotlib", "duckdb", "pyarrow", "numpy", "pyshark")


@pytest.mark.parametrize("cli", ["scanner.cli", "replay.cli"])
def test_the_command_line_starts_without_what_its_commands_import_when_they_run(cli):
    done = subprocess.run([sys.executable, "-c", f"import sys, {cli}; print(' '.join(sorted(sys.modules)))"],
                          capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert [name for name in DEFERRED if name in loaded] == []
