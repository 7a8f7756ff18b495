"""The replay protocol (tparams.workloads) between qreplay's quic-go and aioquic programs, each client against
each server on loopback: a download, an upload and many requests on one connection, the client's JSON line
whole and sane; a server granting fewer streams than the client keeps open; the knobs a library cannot set
refused in one line before anything runs."""

from __future__ import annotations

import json
import subprocess

import pytest

from common.certs import write_certificate
from common.process import Process, wait_listening
from replay.stacks import get_stack
from replay.stacks.base import free_udp_port
from tparams import program_cli
from tparams.workloads import DOWNLOAD, REQUESTS, UPLOAD

STACKS = ("quic-go", "aioquic")
SIZE = 100_000


def program(stack: str, role: str) -> list[str]:
    found = get_stack(stack)
    reason = found.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return found.command(role)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cert")
    write_certificate(directory / "cert.pem", directory / "key.pem", ["localhost"], ["127.0.0.1"])
    return {"cert": str(directory / "cert.pem"), "key": str(directory / "key.pem")}


@pytest.fixture
def serving(certificate, tmp_path):
    """Start ``stack``'s server with ``options``; returns its address. Stopped at the test's end."""
    servers: list[Process] = []

    def start(stack: str, **options) -> str:
        port = free_udp_port()
        address = program_cli.address("127.0.0.1", port)
        argv = [*program(stack, "server"),
                *program_cli.arguments("replay-server", {"listen": address, **certificate, **options})]
        servers.append(Process(None, argv, tmp_path / f"server-{len(servers)}.usage"))
        wait_listening(None, port, "udp", 15, servers[-1])
        return address

    yield start
    for server in servers:
        server.stop()


def client(stack: str, address: str, **options) -> subprocess.CompletedProcess:
    argv = [*program(stack, "client"),
            *program_cli.arguments("replay-client", {"connect": address, "size": SIZE, "timeout_s": 20, **options})]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("workload", [DOWNLOAD, UPLOAD, REQUESTS], ids=lambda workload: workload.name)
@pytest.mark.parametrize("client_stack", STACKS)
@pytest.mark.parametrize("server_stack", STACKS)
def test_each_client_completes_each_workload_against_each_server(serving, server_stack, client_stack, workload):
    requests, concurrency = workload.asked(20, 4)
    done = client(client_stack, serving(server_stack), **workload.client_options(SIZE, 20, 4))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert workload.succeeded(result, SIZE, 20, 4), result
    assert result["requests"] == len(result["latencies_s"]) == requests
    assert 0 < result["ttfb_s"] <= max(result["latencies_s"]) <= result["duration_s"]
    assert result["handshake_s"] > 0
    # at most `concurrency` requests open at once: their latencies cannot add up to more
    assert sum(result["latencies_s"]) <= concurrency * result["duration_s"] + 1e-6
    if workload is UPLOAD:  # the first byte of an upload's answer comes after the whole body
        assert result["ttfb_s"] > result["duration_s"] / 2


@pytest.mark.parametrize("server_stack", ["quic-go", "aioquic"])
@pytest.mark.parametrize("client_stack", STACKS)
def test_the_client_waits_for_stream_credit_below_its_concurrency(serving, server_stack, client_stack):
    done = client(client_stack, serving(server_stack, initial_max_streams_bidi=2), requests=20, concurrency=8,
                  timeout_s=5)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["requests"] == 20


@pytest.mark.parametrize(("stack", "role", "knob", "why"), [
    ("quic-go", "client", {"cipher": "TLS_AES_128_GCM_SHA256"}, "crypto/tls chooses the TLS 1.3 suite"),
    ("quic-go", "server", {"cipher": "TLS_CHACHA20_POLY1305_SHA256"}, "crypto/tls chooses the TLS 1.3 suite"),
    ("aioquic", "client", {"gso": False}, "aioquic sends one datagram a system call"),
    ("aioquic", "server", {"gso": True}, "aioquic sends one datagram a system call"),
])
def test_a_knob_the_library_cannot_set_is_refused_in_one_line(certificate, stack, role, knob, why):
    values = ({"connect": "127.0.0.1:9", "size": 1} if role == "client"
              else {"listen": "127.0.0.1:0", **certificate})
    done = subprocess.run([*program(stack, role), *program_cli.arguments(f"replay-{role}", {**values, **knob})],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and why in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_an_aioquic_client_offers_only_the_cipher_suite_asked_for(serving):
    """A server accepting ChaCha20 alone: the client asked for AES-128 cannot connect, asked for ChaCha20 can."""
    address = serving("aioquic", cipher="TLS_CHACHA20_POLY1305_SHA256")
    assert client("aioquic", address, cipher="TLS_AES_128_GCM_SHA256", timeout_s=5).returncode == 1
    done = client("aioquic", address, cipher="TLS_CHACHA20_POLY1305_SHA256")
    assert done.returncode == 0, done.stderr
