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
DEFERRED = ("polars", "pyroute2", "dns", "httpx", "matplotlib", "duckdb", "pyarrow", "numpy", "pyshark",
            "cryptography")


@pytest.mark.parametrize("cli", ["scanner.cli", "replay.cli"])
def test_the_command_line_starts_without_what_its_commands_import_when_they_run(cli):
    done = subprocess.run([sys.executable, "-c", f"import sys, {cli}; print(' '.join(sorted(sys.modules)))"],
                          capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert [name for name in DEFERRED if name in loaded] == []


def test_a_scan_of_targets_imports_neither_polars_nor_pyroute2():
    """`qscan targets` (every lab test's and manual page's scan) imported identification's polars and the route
    lookup's pyroute2 without --identify or --netns: 0.95 -> 0.66 s of user CPU a scan of four lab servers
    (2026-11-29, load 9). The command imports identification where --identify asks for it; the scan's modules
    import neither."""
    done = subprocess.run([sys.executable, "-c", "import sys, scanner.scan, scanner.engine, scanner.targets; "
                           "print(' '.join(sorted(sys.modules)))"], capture_output=True, text=True, check=True)
    assert {"polars", "pyroute2"} & set(done.stdout.split()) == set()


def test_a_qreplay_subcommand_does_not_pay_for_the_single_experiments_imports():
    """qreplay's own options (a single experiment) are read by a callback that runs before every subcommand: it
    imported the runner (DuckDB, pyarrow, numpy) before it saw that a subcommand was called, 0.3 s of CPU of each
    `qreplay sets`, `plot`, `why` (2026-11-29)."""
    program = ("import sys; sys.argv = ['qreplay', 'sets']\nfrom replay.cli import main\ntry:\n    main()\n"
               "except SystemExit as exit:\n    assert not exit.code, exit.code\n"
               "print(' '.join(sorted(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    loaded = set(done.stderr.splitlines()[-1].split())
    assert [name for name in DEFERRED if name in loaded] == []

