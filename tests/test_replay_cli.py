"""The qreplay command line: the contract form, and one-line errors for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from replay.sets import resolve_alias

QREPLAY = str(Path(sys.executable).with_name("qreplay"))


def qreplay(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([QREPLAY, *args], capture_output=True, text=True, timeout=180, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.mark.parametrize("args, expected", [
    (["--set", "nonexistent", "--reps", "1"], "known sets: alpha"),
    (["--set", "firefox", "--delay", "30 parsecs"], "malformed --delay"),
    (["--set", "firefox", "--loss", "lots"], "malformed --loss"),
    (["--set", "firefox", "--loss", "150%"], "between 0 and 100"),
    (["--set", "firefox", "--rate", "fast"], "malformed rate"),
    (["--set", "firefox", "--size", "big"], "--size"),
    (["--set", "firefox", "--stack", "picoquic"], "unknown stack 'picoquic'"),
    (["--set", "firefox", "--client-param", "initial_max_data=lots"], "initial_max_data takes an integer"),
    (["sweep", "--param", "nope", "--values", "1"], "not one of"),
])
def test_bad_input_is_one_line_exit_2(args, expected):
    result = qreplay(*args)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_missing_lsquic_says_how_to_get_it():
    if os.environ.get("QREPLAY_LSQUIC_CLIENT"):
        pytest.skip("an LSQUIC build is configured here")
    result = qreplay("--set", "firefox", "--stack", "lsquic", "--reps", "1")
    assert result.returncode == 2 and "QREPLAY_LSQUIC_CLIENT" in result.stderr


def test_sets_lists_builtins_and_aliases():
    result = qreplay("sets", "--json")
    assert result.returncode == 0
    assert '"name": "firefox-109"' in result.stdout and '"name": "chromium"' in result.stdout


@pytest.mark.lab
def test_contract_form_runs_and_names_the_concrete_set(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    result = qreplay("--set", "firefox", "--delay", "30ms", "--size", "2MB", "--reps", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    concrete = resolve_alias("firefox")  # newest captured Firefox set, else firefox-109
    assert f"set: {concrete} " in result.stderr
    rows = duckdb.connect(str(tmp_path / "qreplay-results.duckdb")).execute(
        "SELECT set_name, delay_ms, status, bytes FROM runs ORDER BY rep").fetchall()
    assert rows == [(concrete, 30.0, "ok", 2_000_000)] * 2


def test_a_piped_summary_keeps_whole_set_names(tmp_path):
    """Redirected to a file or a pipe, rich would assume 80 columns and print "fire…"."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = subprocess.run([QREPLAY, "--set", "firefox", "--link", "loopback", "--size", "1MB", "--reps", "1",
                             "--out", str(tmp_path / "r.duckdb")], capture_output=True, text=True, timeout=120,
                            env=env)
    assert result.returncode == 0, result.stderr
    assert f"│ {resolve_alias('firefox')} " in result.stdout, result.stdout
