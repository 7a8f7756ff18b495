"""Implementation pairs: every client downloads from every server that speaks its protocol, stored and drawn."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from replay.link import LinkConfig
from replay.pairs import pairs_of, read_pairs
from replay.runner import Condition, Experiment
from replay.sets import resolve_one
from replay.stacks import get_stack
from replay.stacks.base import RunOptions
from tparams.errors import ToolError

QREPLAY = str(Path(sys.executable).parent / "qreplay")


def test_only_stacks_of_one_protocol_pair():
    h3, hq = get_stack("ngtcp2"), get_stack("quic-go")
    assert [(c.name, s.name) for c, s in pairs_of([h3, hq])] == [("ngtcp2", "ngtcp2"), ("quic-go", "quic-go")]
    with pytest.raises(ToolError, match="no download between them"):
        Experiment("pairs", hq, [Condition(resolve_one("firefox"), None, LinkConfig())], RunOptions(size=1),
                   server_stack=h3)


@pytest.mark.lab
def test_pairs_downloads_across_libraries_and_draws_the_heat_map(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    stacks = [name for name in ("quic-go", "aioquic", "quinn") if not get_stack(name).unavailable_reason()]
    if len(stacks) < 2:
        pytest.skip(f"fewer than two hq-interop stacks built here ({stacks})")
    done = subprocess.run([QREPLAY, "pairs", "--stacks", ",".join(stacks), "--delays", "0", "--size", "500KB",
                           "--reps", "1", "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    _, cells = read_pairs(tmp_path / "pairs.duckdb")
    assert {(c.client, c.server) for c in cells} == {(a, b) for a in stacks for b in stacks}
    assert all(c.ok == c.runs == 1 and c.mean_mbps > 0 for c in cells), [c for c in cells if c.ok != 1]
    # The server that answered is the one the row names: its own command line ran in the server namespace.
    con = duckdb.connect(str(tmp_path / "pairs.duckdb"), read_only=True)
    for client, server, argv in con.execute("SELECT stack, server_stack, server_argv FROM runs").fetchall():
        assert ("qgserver" if server == "quic-go" else "aioquic_endpoints.server" if server == "aioquic"
                else f"replay-{server}") in argv, (client, server, argv)
    # One matrix, clients as rows and servers as columns, not one unlabelled table per pair.
    assert done.stdout.count("goodput (Mbit/s) at 0 ms") == 1 and "failed runs excluded" not in done.stdout
    header = next(line for line in done.stdout.splitlines() if "client \\ server" in line)
    assert all(stack in header for stack in stacks), done.stdout
    png = tmp_path / "pairs_0ms.png"
    assert png.stat().st_size > 10_000 and "| client \\ server |" in (tmp_path / "pairs.md").read_text()
