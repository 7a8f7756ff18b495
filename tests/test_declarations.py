"""A knob and a workload are one declaration each (issue 27): this file declares a toy knob and a toy workload,
no other file of the tree names them, and the runner runs both on two stacks, the store keeps their columns,
the command line offers the knob, and a stack not declared is refused in one line before any run."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from replay import store
from replay.commands.run import run_options
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, run_experiment
from replay.sets import resolve_one
from replay.stacks import get_stack
from replay.stacks.base import RunOptions
from tparams.errors import ToolError
from tparams.knobs import KNOBS, Knob, Rendering
from tparams.workloads import Workload

STACKS = ("quinn", "s2n-quic")
SIZE = 50_000


@pytest.fixture
def key_log(tmp_path, monkeypatch):
    """The toy knob: the client writes its TLS secrets to a file of the test's, through the programs' own
    --keylog option; declared for the two stacks alone."""
    secrets = tmp_path / "secrets"
    rendering = Rendering(options=lambda value, role: {"keylog": secrets} if role == "client" else {})
    knob = Knob("key_log", "write the client's TLS secrets", kind="switch", default=False, decided_by="client",
                stacks={name: rendering for name in STACKS}, cannot={"aioquic": "not declared for it"})
    monkeypatch.setitem(KNOBS, knob.name, knob)
    return knob, secrets


# The toy workload: two uploads at once on one connection.
TWO_UPLOADS = Workload("two-uploads", "two PUTs of --size bytes, both open at once", direction="up", requests=2,
                       concurrency=2, metrics=("requests_per_s", "latency_p99_ms"))


def run(tmp_path, stack: str, **options) -> dict:
    experiment = Experiment("test", get_stack(stack), [Condition(resolve_one("firefox"), None, LinkConfig())],
                            RunOptions(size=SIZE, timeout_s=30, **options), 1, "loopback")
    return run_experiment(experiment, tmp_path / "r.duckdb")[0]


@pytest.mark.parametrize("stack", STACKS)
def test_the_toy_knob_and_workload_run_on_a_stack(tmp_path, key_log, stack):
    knob, secrets = key_log
    row = run(tmp_path, stack, knobs={"key_log": True}, workload=TWO_UPLOADS)
    assert row["status"] == "ok", row.get("error")
    assert "CLIENT_TRAFFIC_SECRET_0" in secrets.read_text()  # the knob reached the client
    client_argv = json.loads(row["client_argv"])
    assert "--direction=up" in client_argv and "--requests=2" in client_argv and "--concurrency=2" in client_argv
    con = store.connect(tmp_path / "r.duckdb")
    stored = con.execute("SELECT key_log, key_log_requested, workload, requests, concurrency, bytes, "
                         "requests_per_s > 0, latency_p99_ms > 0 FROM runs").fetchall()
    assert stored == [(True, True, "two-uploads", 2, 2, 2 * SIZE, True, True)]
    assert con.execute("SELECT key_log, workload FROM run_summary").fetchall() == [(True, "two-uploads")]


def test_a_stack_not_declared_is_refused_in_one_line(tmp_path, key_log):
    with pytest.raises(ToolError, match=r"^aioquic cannot set --key-log: not declared for it$"):
        run(tmp_path, "aioquic", knobs={"key_log": True})
    with pytest.raises(ToolError, match="ngtcp2's client speaks only the download workload, not two-uploads"):
        run(tmp_path, "ngtcp2", workload=TWO_UPLOADS)
    assert not (tmp_path / "r.duckdb").exists()  # refused before anything ran or was stored


def test_the_command_line_offers_the_toy_knob(key_log):
    app = typer.Typer()

    @app.command()
    @run_options(size="1MB")
    def experiment(options: RunOptions = None) -> None:
        typer.echo(json.dumps({"key_log": options.knob("key_log"), "size": options.size}))

    assert "--key-log" in CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    done = CliRunner().invoke(app, ["--key-log"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output) == {"key_log": True, "size": 1_000_000}
