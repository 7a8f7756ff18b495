"""The replay protocol across languages (tparams/workloads.py): every client of ours against every server of
ours, Rust (quinn, s2n-quic), Go (quic-go) and Python (aioquic), through the runner; each workload on TCP's
reference (tcp-h2) too; and many clients against one server. Loopback, small sizes."""

from __future__ import annotations

import json

import pytest

from replay.link import LinkConfig
from replay.runner import Condition, Experiment, run_experiment
from replay.sets import own_set, resolve_one
from replay.stacks import get_stack
from replay.stacks.base import RunOptions, answering_servers, workload_needs
from tparams.errors import ToolError
from tparams.workloads import REQUESTS, UPLOAD, WORKLOADS

LANGUAGES = {"quinn": "Rust", "quic-go": "Go", "aioquic": "Python"}
SERVERS = {"s2n-quic": "Rust", "quic-go": "Go", "aioquic": "Python"}
SIZE = 40_000


def run(tmp_path, client: str, server: str | None = None, **options) -> dict:
    stack = get_stack(client)
    named = own_set(stack) if stack.own_parameters else resolve_one("firefox")
    experiment = Experiment("test", stack, [Condition(named, None, LinkConfig())],
                            RunOptions(size=SIZE, timeout_s=30, **options), 1, "loopback",
                            server_stack=get_stack(server) if server else None)
    return run_experiment(experiment, tmp_path / "r.duckdb")[0]


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("client", LANGUAGES)
def test_every_client_speaks_to_every_server(tmp_path, client, server):
    """An upload, then 12 requests 3 at once, between two programs of ours (in two languages, or one)."""
    upload = run(tmp_path, client, server, workload=UPLOAD)
    assert upload["status"] == "ok", upload.get("error")
    assert upload["bytes"] == SIZE and "--direction=up" in json.loads(upload["client_argv"])
    many = run(tmp_path, client, server, workload=REQUESTS, requests=12, concurrency=3)
    assert many["status"] == "ok", many.get("error")
    assert many["bytes"] == 12 * SIZE
    assert 0 < many["ttfb_ms"] <= many["latency_p99_ms"] <= many["duration_s"] * 1000
    assert many["latency_p50_ms"] <= many["latency_p90_ms"] <= many["latency_p99_ms"]
    assert many["requests_per_s"] == pytest.approx(12 / many["duration_s"])


@pytest.mark.parametrize("workload", [name for name, w in WORKLOADS.items() if not w.paced])  # a stream: test_stream
def test_every_workload_runs_on_tcp(tmp_path, workload):
    row = run(tmp_path, "tcp-h2", workload=WORKLOADS[workload], requests=8, concurrency=4, knobs={"cc": "cubic"})
    assert row["status"] == "ok", row.get("error")
    assert (row["workload"], row["cc"], row["protocol_seen"]) == (workload, "cubic", "h2")
    assert row["bytes"] == SIZE * (8 if workload == "requests" else 1)


def test_many_clients_share_one_server(tmp_path):
    row = run(tmp_path, "quic-go", clients=3, workload=REQUESTS, requests=4, concurrency=2)
    assert row["status"] == "ok", row.get("error")
    assert row["clients"] == 3 and row["bytes"] == 3 * 4 * SIZE
    goodputs = json.loads(row["client_goodputs_mbps"])
    assert len(goodputs) == 3 and row["goodput_mbps"] == pytest.approx(sum(goodputs) / 3)
    assert 1 / 3 <= row["fairness"] <= 1  # Jain's index of three shares
    assert row["client_cpu_s"] is not None and row["server_maxrss_kb"] > 0


def test_what_a_stack_cannot_run_is_refused_in_one_line(tmp_path):
    with pytest.raises(ToolError, match="quiche's client does not speak the upload workload"):
        run(tmp_path, "quiche", workload=UPLOAD)
    with pytest.raises(ToolError, match="curl's client speaks only the download workload"):
        run(tmp_path, "curl", workload=REQUESTS, requests=4)
    with pytest.raises(ToolError, match="quiche's server cannot answer quic-go's upload workload: quiche is not"):
        run(tmp_path, "quic-go", "quiche", workload=UPLOAD)
    with pytest.raises(ToolError, match="ngtcp2's client runs one at a time here"):
        run(tmp_path, "ngtcp2", clients=2)
    assert not (tmp_path / "r.duckdb").exists()


@pytest.mark.parametrize("client, server, workload, said", [
    ("quic-go", "quiche", "requests", None),  # quiche's server answers many requests, though its client makes one
    ("quic-go", "quiche", "upload", "quiche is not known to answer an upload"),  # its hq-interop server takes no PUT
    ("chromium", "quiche", "upload", None),  # its h3 layer counts an upload
    ("chromium", "ngtcp2", "upload", "gtlsserver 0.12 answers a PUT as a GET"),
    ("aioquic", "quinn", "stream", None),  # its hq-interop server paces
    ("aioquic", "tquic", "stream", None),  # its loop wakes at each paced stream's tick
    ("aioquic", "msquic", "stream", None),  # a thread of its own sends each tick's bytes
    ("firefox", "lsquic", "stream", "lsquic cannot pace a stream at a bitrate"),
    ("chromium", "quiche", "stream", None),  # its h3 server paces as its hq-interop server does
    ("chromium", "caddy", "stream", "caddy cannot pace a stream at a bitrate"),
])
def test_a_server_refuses_what_it_does_not_answer_its_client_in_one_line(client, server, workload, said):
    """A workload's primitives (tparams.workloads) held against what the server answers that client
    (Stack.answers: its program's replay protocol, or its HTTP server's): one line naming each missing one and
    the servers that would answer it all."""
    client, server = get_stack(client), get_stack(server)
    options = RunOptions(1, workload=WORKLOADS[workload], requests=4, concurrency=2)
    refusal = server.server_refusal(client, options)
    if said is None:
        assert refusal is None
        return
    assert refusal.startswith(f"{server.name}'s server cannot answer {client.name}'s {workload} workload: ")
    assert said in refusal and "\n" not in refusal
    answering = answering_servers(client, workload_needs(options))
    assert answering and server not in answering and all(f"{s.name}'s" in refusal for s in answering)
