"""A command line starts without importing what only some of its commands use: `qscan lab up`, `qscan
--help` and every manual step pay for its start, some hundreds of times a test run. Measured on
2026-11-28 (load 12): `qscan --help` 1.1 s of CPU when every command module imported its implementation at
the top, 0.6 s since (polars, pyroute2, dnspython, httpx, DuckDB imported where a command runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: packages only some commands need, each costing 0.1-0.2 s of CPU to import
DEFERRED = ("polars", "pyroute2", "dns", "httpx", "matplotlib", "duckdb", "pyarrow")


@pytest.mark.parametrize("cli, deferred", [("scanner.cli", DEFERRED),
                                           # fidelity, reproduce and impact still read their grids from modules
                                           # that import DuckDB and polars
                                           ("replay.cli", ("pyroute2", "dns", "httpx", "matplotlib"))])
def test_the_command_line_starts_without_what_its_commands_import_when_they_run(cli, deferred):
    done = subprocess.run([sys.executable, "-c", f"import sys, {cli}; print(' '.join(sorted(sys.modules)))"],
                          capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert [name for name in deferred if name in loaded] == []
