"""Every command that writes, pointed at a place it cannot write, says so in one line and stops
before it measures anything (issue 26). The cases come from the typer apps themselves: an option
declared with common.cliapp's output_file/output_dir callback is tested here without being named,
and any other path a command takes must be listed below as one it only reads."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main

from common import cliapp
from replay.cli import app as qreplay_app
from scanner.cli import app as qscan_app

APPS = {"qscan": qscan_app, "qreplay": qreplay_app}
OUTPUT_CALLBACKS = (cliapp.output_file, cliapp.output_dir)

# Paths the commands only read: (program, command, option or argument name).
INPUTS = {
    ("qscan", "report", "scan"), ("qscan", "report", "--compare"), ("qscan", "export", "scan"),
    ("qscan", "pcap", "capture"), ("qscan", "pcap", "--keylog"), ("qscan", "ipv4", "--blocklist"),
    ("qscan", "ipv4", "--allowlist"), ("qscan", "merge", "inputs"), ("qscan", "domains", "file"),
    ("qscan", "campaign shard", "--allowlist"), ("qscan", "campaign plan", "--measured"),
    ("qscan", "diff", "old"), ("qscan", "diff", "new"), ("qscan", "trends", "directory"),
    ("qscan", "ipv6", "--aliased"), ("qscan", "ipv6", "--blocklist"),
    ("qreplay", "sets", "--scan"), ("qreplay", "plot", "results"), ("qreplay", "impact", "scan"),
    ("qreplay", "why", "results"), ("qreplay", "campaign plan", "file"), ("qreplay", "campaign plan", "--measured"),
    ("qreplay", "campaign run", "file"), ("qreplay", "campaign merge", "directory"),
}


def commands(command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    """Every command of a click tree with its path; a group's own options belong to path ()."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, (*path, name))


def path_params() -> Iterator[tuple[str, tuple[str, ...], object]]:
    for prog, app in APPS.items():
        for path, command in commands(typer.main.get_command(app)):
            for param in command.params:
                annotation = str(param.type_descriptor.annotation)
                if "pathlib.Path" in annotation or annotation == str(Path):
                    yield prog, path, param


def is_output(param) -> bool:
    return param.type_descriptor.parameter_info.callback in OUTPUT_CALLBACKS


def name(param) -> str:
    return param.opts[0]


OUTPUTS = [(prog, path, name(param), param.type_descriptor.parameter_info.callback is cliapp.output_dir)
           for prog, path, param in path_params() if is_output(param)]


def test_every_path_a_command_takes_is_declared_written_or_read():
    undeclared = [f"{prog} {' '.join(path)} {name(param)}" for prog, path, param in path_params()
                  if not is_output(param) and (prog, " ".join(path), name(param)) not in INPUTS]
    assert not undeclared, (f"{undeclared}: declare what a command writes with callback=output_file/output_dir "
                            "(common.cliapp), or list what it only reads in INPUTS")
    assert len(OUTPUTS) >= 20  # the apps were really walked


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[str]:
    """``directory`` read-only for the block: bind-mounted read-only onto itself, which root cannot write
    either, or without root by its permission bits. Yields what refuses a write there."""
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "--bind", "-o", "ro", str(directory), str(directory)],
                                                   capture_output=True).returncode == 0
    if not mounted:
        directory.chmod(0o555)
    try:
        yield "Read-only file system" if mounted else "Permission denied"
    finally:
        if mounted:
            subprocess.run(["umount", str(directory)], check=True)
        else:
            directory.chmod(0o755)


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> Iterator[dict[str, Path]]:
    """Directories nothing may be created in, also by root (who ignores permission bits)."""
    base = tmp_path_factory.mktemp("unwritable")
    (base / "file").write_text("a regular file\n")
    (base / "read-only").mkdir()
    with read_only(base / "read-only"):
        yield {"read-only mount": base / "read-only", "through a file": base / "file", "/proc": Path("/proc")}


@pytest.mark.parametrize("place", ["read-only mount", "through a file", "/proc"])
@pytest.mark.parametrize("prog, path, option, directory", OUTPUTS,
                         ids=[f"{p} {' '.join(c) or '(callback)'} {o}" for p, c, o, _ in OUTPUTS])
def test_unwritable_output_is_one_line_before_anything_runs(prog, path, option, directory, place, places,
                                                              monkeypatch, capsys):
    target = places[place] / "qtp-out" / ("plots" if directory else "out.duckdb")
    # The output first on the command line: it is read first, so nothing else the command needs
    # (arguments, a lab, a stack) matters; a command that accepted it would fail otherwise.
    monkeypatch.setattr(sys, "argv", [prog, *path, option, str(target)])
    with pytest.raises(SystemExit) as exited:
        cliapp.run(APPS[prog], prog)
    err = capsys.readouterr().err
    assert exited.value.code not in (0, None), err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"{prog}: error: cannot write {target}"), err
    assert not target.exists()


def test_a_derived_output_that_cannot_be_written_is_one_line_too(tmp_path, monkeypatch, capsys):
    """What no option names (plot's default directory beside its results) is caught where written."""
    import datetime

    from replay import store

    results = tmp_path / "held" / "r.duckdb"
    results.parent.mkdir()
    con = store.connect(results)
    store.insert(con, "runs", [{"experiment_id": "e", "run_id": "r", "started_at": datetime.datetime.now(),
                                "set_name": "s", "stack": "ngtcp2", "delay_ms": 0.0, "delay_up_ms": 0.0,
                                "jitter_ms": 0.0, "loss_pct": 0.0, "rep": 0, "status": "ok", "size_bytes": 1,
                                "bytes": 1, "goodput_mbps": 100.0, "autotune": False, "cc": "cubic"}])
    con.close()
    monkeypatch.setattr(sys, "argv", ["qreplay", "plot", str(results)])
    with read_only(results.parent) as refusal, pytest.raises(SystemExit) as exited:
        cliapp.run(qreplay_app, "qreplay")
    err = capsys.readouterr().err
    assert exited.value.code not in (0, None), err
    assert err == f"qreplay: error: cannot use {tmp_path / 'held' / 'r-plots'}: {refusal}\n", err
