"""The lab: real servers in real namespaces, checked with real QUIC clients
(Debian's ngtcp2 gtlsclient and aioquic) from the client namespace only."""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted

from conftest import lab_instance, lab_unavailable
from common.process import ns_command, pid_alive
from common.aioquic_adapter import transport_parameters_received
from common import netns
from lab import (Lab, LabContext, LabServer, Launch, ServerKind, ServerSpec, Topology, default_topology,
                 register_kind, status, up)
from common.certs import write_certificate
from lab.kinds import kind_for, runnable
from tparams.codec import decode_transport_parameters
from tparams.errors import ToolError
from tparams.paramset import ParamSet
from tparams.probe import make_probe
from tparams.registry import id_for

pytestmark = pytest.mark.lab

QSCAN = str(Path(sys.executable).with_name("qscan"))
LSQUIC_UNAVAILABLE = kind_for("lsquic").unavailable_reason()
LSQUIC = pytest.param("lsquic", marks=pytest.mark.skipif(LSQUIC_UNAVAILABLE is not None,
                                                         reason=f"the lab has no LSQUIC server: {LSQUIC_UNAVAILABLE}"))
ALWAYS_THERE = ("ngtcp2-alpha", "ngtcp2-beta", "caddy", "aioquic", "quinn", "quiche", "s2n-quic", "tquic",
                "msquic", "qh3", "kwik", "netty")
GOOD_SERVERS = (*ALWAYS_THERE, LSQUIC)
# Our own servers of lab/servers, each a QUIC library started with its own defaults.
BUILT_SERVERS = ("quinn", "quiche", "s2n-quic", "tquic", "msquic")
# Debian's gtlsclient 0.12 and caddy 2.6.2 (quic-go) do not interoperate: caddy
# closes with CRYPTO_ERROR 0x150 (TLS internal_error), while aioquic completes.
# So caddy is checked with aioquic, the others with both clients.
GTLSCLIENT_SERVERS = ("ngtcp2-alpha", "ngtcp2-beta", "aioquic", "qh3")
# server -> (the parameter its mode damages, does ngtcp2 0.12 reject it?, does aioquic 1.7.2?)
# Seen here: neither checks for duplicates; aioquic takes a 15-byte reset token.
MALFORMED = {
    "broken-duplicate": ("initial_max_data", False, False),
    "broken-truncated": ("max_idle_timeout", True, True),
    "broken-short-token": ("stateless_reset_token", True, False),
}


@pytest.fixture(scope="module")
def needs_lab():
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)


def gtlsclient(lab: Lab, server: LabServer, *extra: str) -> subprocess.CompletedProcess:
    return lab.run_in_client(
        ["gtlsclient", "--no-quic-dump", "--no-http-dump", "--exit-on-all-streams-close", "--timeout=3s",
         f"--sni={server.sni}", *extra, server.ip, str(server.port), f"https://{server.sni}/"],
        timeout=20)


def qscan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([QSCAN, "lab", *args], capture_output=True, text=True, timeout=60)


class _RecordingConnection(QuicConnection):
    """aioquic's client, keeping the raw transport parameters the server sent."""

    completed = False

    @property
    def captured(self) -> bytes | None:
        return transport_parameters_received(self)


def aioquic_handshake(lab: Lab, server: LabServer, timeout: float = 3.0) -> _RecordingConnection:
    """A handshake with aioquic's sans-I/O client from the client namespace;
    the connection tells whether it completed and what parameters came."""
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=server.sni,
                               verify_mode=ssl.CERT_NONE)
    connection = _RecordingConnection(configuration=config)
    with lab.in_client():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.05)
    connection.connect((server.ip, server.port), now=time.monotonic())
    deadline = time.monotonic() + timeout
    try:
        while not connection.completed and time.monotonic() < deadline:
            for data, address in connection.datagrams_to_send(now=time.monotonic()):
                sock.sendto(data, address)
            try:
                data, address = sock.recvfrom(65535)
            except socket.timeout:
                timer = connection.get_timer()
                if timer is not None and timer <= time.monotonic():
                    connection.handle_timer(now=time.monotonic())
                continue
            connection.receive_datagram(data, address, now=time.monotonic())
            while event := connection.next_event():
                if isinstance(event, HandshakeCompleted):
                    connection.completed = True
                if isinstance(event, ConnectionTerminated):
                    return connection
    finally:
        sock.close()
    return connection


def logged_parameters(output: str) -> dict[str, int]:
    """gtlsclient's debug log of the server's parameters (defaults filled in)."""
    return {m[1]: int(m[2]) for m in re.finditer(r"remote transport_parameters (\w+)=(\d+)\n", output)}


@pytest.mark.parametrize("name", GOOD_SERVERS)
def test_good_servers_complete_an_aioquic_handshake(lab, name):
    assert aioquic_handshake(lab, lab.server(name)).completed


@pytest.mark.parametrize("name", GTLSCLIENT_SERVERS)
def test_good_servers_complete_a_gtlsclient_handshake(lab, name):
    server = lab.server(name)
    result = gtlsclient(lab, server)
    output = result.stdout + result.stderr
    assert "QUIC handshake has completed" in output, output[-2000:]
    if server.transport_parameters is not None:
        logged = logged_parameters(output)
        for parameter, value in server.transport_parameters.items():
            assert logged[parameter] == value, parameter


def sent_parameters(lab: Lab, server: LabServer) -> dict[str, int | bool]:
    """The performance parameters a server sent in an aioquic handshake, as sent."""
    raw = aioquic_handshake(lab, server).captured
    assert raw is not None, f"{server.name} sent no transport parameters"
    sent = ParamSet.from_decoded(decode_transport_parameters(raw, sender="server")).as_sent()
    return {k: v for k, v in sent.items() if v is not None}


@pytest.mark.parametrize("name", ["ngtcp2-alpha", "ngtcp2-beta", "aioquic", "qh3", "kwik", "netty", *BUILT_SERVERS, LSQUIC])
def test_recorded_parameters_are_exactly_what_the_server_sends(lab, name):
    server = lab.server(name)
    assert sent_parameters(lab, server) == server.transport_parameters


# Flow-control values none of the libraries has as its default. msquic takes
# only powers of two as stream windows; quinn has one window for every
# stream, so the three stream windows agree there.
OTHER_VALUES = {
    "max_idle_timeout": 12000,
    "initial_max_data": 3000000,
    "initial_max_stream_data_bidi_local": 262144,
    "initial_max_stream_data_bidi_remote": 131072,
    "initial_max_stream_data_uni": 32768,
    "initial_max_streams_bidi": 17,
    "initial_max_streams_uni": 7,
}
ONE_STREAM_WINDOW = {"quinn"}


@pytest.fixture(scope="module")
def other_values_lab(needs_lab):
    """The built servers again, each started with OTHER_VALUES."""
    specs = []
    for spec in runnable(default_topology()).servers:
        if spec.name in BUILT_SERVERS:
            values = dict(OTHER_VALUES)
            if spec.kind in ONE_STREAM_WINDOW:
                values.update(dict.fromkeys(("initial_max_stream_data_bidi_local",
                                             "initial_max_stream_data_bidi_remote"), values["initial_max_stream_data_uni"]))
            specs.append(replace(spec, options={"parameters": values}))
    with Lab.up(Topology(servers=tuple(specs)), instance=lab_instance("other")) as running:
        yield running


@pytest.mark.parametrize("name", BUILT_SERVERS)
def test_a_server_started_with_other_values_sends_them(other_values_lab, name):
    server = other_values_lab.server(name)
    sent = sent_parameters(other_values_lab, server)
    assert sent == server.transport_parameters
    assert {k: sent.get(k) for k in server.options["parameters"]} == server.options["parameters"]


# Flow control unlike every library's defaults. Each kind reports what its
# library makes of it (aioquic and qh3 have one window for all streams and fixed stream
# limits, kwik/flupke pin the uni window); these every library sends as asked.
CONFIGURED_FLOW_CONTROL = {
    "max_idle_timeout": 11000, "initial_max_data": 3000000, "initial_max_stream_data_bidi_local": 400000,
    "initial_max_stream_data_bidi_remote": 400000, "initial_max_stream_data_uni": 400000,
    "initial_max_streams_bidi": 17,
}
SENT_AS_ASKED_EVERYWHERE = ("max_idle_timeout", "initial_max_data", "initial_max_stream_data_bidi_local",
                            "initial_max_stream_data_bidi_remote")
CONFIGURED_KINDS = {"aioquic": "198.18.1.30", "kwik": "198.18.1.70", "netty": "198.18.1.71", "qh3": "198.18.1.72",
                   "lsquic": "198.18.1.73"}


@pytest.fixture(scope="module")
def configured_lab(needs_lab):
    servers = tuple(ServerSpec(f"{kind}-configured", kind, ip, options={"parameters": CONFIGURED_FLOW_CONTROL})
                    for kind, ip in CONFIGURED_KINDS.items() if kind_for(kind).unavailable_reason() is None)
    with Lab.up(Topology(servers=servers), instance=lab_instance("fc")) as running:
        yield running


@pytest.mark.parametrize("kind", ["aioquic", "kwik", "netty", "qh3", LSQUIC])
def test_a_server_started_with_other_flow_control_sends_it(configured_lab, kind):
    server = configured_lab.server(f"{kind}-configured")
    sent = sent_parameters(configured_lab, server)
    assert sent == server.transport_parameters
    assert {name: sent.get(name) for name in SENT_AS_ASKED_EVERYWHERE} == \
        {name: CONFIGURED_FLOW_CONTROL[name] for name in SENT_AS_ASKED_EVERYWHERE}


@pytest.mark.parametrize("name", BUILT_SERVERS)
def test_a_built_server_exits_at_once_and_cleanly_on_sigterm(needs_lab, tmp_path, name):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    ctx = LabContext(tmp_path, tmp_path / "cert.pem", tmp_path / "key.pem")
    write_certificate(ctx.cert, ctx.key, [f"{name}.lab.test"], ["127.0.0.1"])
    launch = kind_for(name).launch(ServerSpec(name, name, "127.0.0.1", port=port), ctx)
    server = subprocess.Popen(launch.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # loopback only
            probe.settimeout(0.2)
            for _ in range(50):  # a Version Negotiation answer: it is up
                probe.sendto(make_probe().payload, ("127.0.0.1", port))
                try:
                    probe.recv(65535)
                    break
                except socket.timeout:
                    assert server.poll() is None, server.stderr.read()
            else:
                pytest.fail(f"{name} did not answer on 127.0.0.1:{port}")
        server.terminate()
        assert server.wait(timeout=2) == 0
    finally:
        server.kill()
        server.wait()


def test_netty_answers_a_first_initial_with_a_retry_carrying_its_token(lab):
    server = lab.server("netty")
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=server.sni)
    client = QuicConnection(configuration=config)
    client.connect((server.ip, server.port), now=time.monotonic())
    with lab.in_client():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        sock.settimeout(3)
        for data, address in client.datagrams_to_send(now=time.monotonic()):
            sock.sendto(data, address)
        answer = sock.recv(65535)
    assert answer[0] & 0xF0 == 0xF0 and answer[1:5] == b"\0\0\0\1"  # long header, QUIC v1, type Retry
    dcid_end = 6 + answer[5]
    token = answer[dcid_end + 1 + answer[dcid_end]:-16]  # after the SCID, before the integrity tag
    assert token.startswith(b"netty")  # InsecureQuicTokenHandler's


def test_the_two_ngtcp2_servers_send_different_sets(lab):
    alpha, beta = lab.server("ngtcp2-alpha"), lab.server("ngtcp2-beta")
    assert alpha.transport_parameters["initial_max_data"] == 16777216
    assert beta.transport_parameters["initial_max_data"] == 196608
    assert alpha.transport_parameters != beta.transport_parameters


def test_garbage_server_answers_but_never_completes(lab):
    server = lab.server("broken-garbage")
    with lab.in_client():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        sock.settimeout(2)
        sock.sendto(b"\xc0" + bytes(1199), (server.ip, server.port))
        assert sock.recv(65535)  # it is there and talks, just not QUIC
    result = gtlsclient(lab, server, "--handshake-timeout=2s")
    assert "QUIC handshake has completed" not in result.stdout + result.stderr
    assert result.returncode >= 0  # exited by itself, not killed by a signal


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_parameter_servers_send_what_their_mode_says(lab, name):
    server = lab.server(name)
    damaged, ngtcp2_rejects, aioquic_rejects = MALFORMED[name]
    connection = aioquic_handshake(lab, server)
    assert connection.captured is not None and connection.completed != aioquic_rejects
    decoded = decode_transport_parameters(connection.captured, sender="server")
    assert id_for(damaged) in {f.param_id for f in decoded.findings}, decoded.findings
    result = gtlsclient(lab, server, "--handshake-timeout=2s")
    assert ("QUIC handshake has completed" not in result.stdout + result.stderr) == ngtcp2_rejects
    assert result.returncode >= 0  # exited by itself, not killed by a signal


def test_caddy_serves_https_over_tcp_with_alt_svc(lab):
    server = lab.server("caddy")
    with lab.in_client():
        response = httpx.get(f"https://{server.ip}:{server.port}/", verify=False, timeout=5)
    assert response.status_code == 200
    assert f'h3=":{server.port}"' in response.headers["alt-svc"]


def test_no_route_out_of_the_lab(lab):
    # Routing decisions only (`ip route get` sends nothing).
    routes = lab.run_in_client(["ip", "-4", "route", "show"]).stdout.splitlines()
    assert [r for r in routes if "scope link" not in r] == ["default via 198.18.0.1 dev eth0 proto static "] \
        or [r.strip() for r in routes if "scope link" not in r] == ["default via 198.18.0.1 dev eth0 proto static"]
    for namespace in [lab.core_ns, *(s.namespace for s in lab.servers)]:
        result = subprocess.run(ns_command(namespace, ["ip", "-4", "route", "get", "8.8.8.8"]),
                                capture_output=True, text=True)
        assert result.returncode != 0 and "unreachable" in result.stderr, (namespace, result)
        assert "default" not in subprocess.run(ns_command(namespace, ["ip", "-4", "route", "show"]),
                                               capture_output=True, text=True).stdout


def test_closed_host_refuses_and_silent_address_stays_silent(lab):
    with lab.in_client():
        closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with closed, silent:
        closed.settimeout(2)
        closed.connect((lab.addresses["closed_hosts"][0], 443))
        closed.send(b"hello")
        with pytest.raises(ConnectionRefusedError):  # ICMP port unreachable
            closed.recv(100)
        silent.settimeout(0.5)
        silent.connect(("198.18.1.241", 443))
        silent.send(b"hello")
        with pytest.raises(socket.timeout):
            silent.recv(100)


def test_status_and_a_second_up_is_refused(lab):
    state = status(lab.instance)
    assert state["up"] and {s["name"] for s in state["servers"]} >= set(ALWAYS_THERE)
    with pytest.raises(ToolError, match="already up"):
        up(instance=lab.instance)
    assert status(lab.instance)["up"]  # the refused attempt touched nothing


def test_cli_up_status_down(needs_lab):
    instance = lab_instance("cli")
    try:
        started = qscan("up", "--instance", instance)
        assert started.returncode == 0, started.stderr
        state = json.loads(qscan("status", "--instance", instance, "--json").stdout)
        assert state["up"] and all(s["alive"] for s in state["servers"])
        assert set(netns.list_namespaces(f"{instance}-")) == set(state["namespaces"])
        table = qscan("status", "--instance", instance).stdout
        assert "ngtcp2" in table and "alive" in table
        again = qscan("up", "--instance", instance)
        assert again.returncode == 2 and "already up" in again.stderr
        assert len(again.stderr.strip().splitlines()) == 1  # one line, no traceback
    finally:
        stopped = qscan("down", "--instance", instance)
    assert stopped.returncode == 0, stopped.stderr
    assert netns.list_namespaces(f"{instance}-") == []
    assert not any(pid_alive(s["pid"]) for s in state["servers"])
    assert json.loads(qscan("status", "--instance", instance, "--json").stdout) is None
    assert qscan("down", "--instance", instance).returncode == 0  # idempotent


SMALL = Topology(servers=(ServerSpec("aioquic", "aioquic", "198.18.1.30"),))


def test_teardown_after_an_exception_inside_the_context(needs_lab):
    with pytest.raises(RuntimeError, match="boom"):
        with Lab.up(SMALL, instance=lab_instance("exc")) as lab:
            namespaces, pids = lab.namespaces, [s.pid for s in lab.servers]
            assert pid_alive(pids[0])
            raise RuntimeError("boom")
    assert netns.list_namespaces(f"{lab_instance('exc')}-") == []
    assert not pid_alive(pids[0]) and namespaces


@register_kind
class _ExitsAtOnce(ServerKind):
    """A kind whose server dies on start: bring-up must fail cleanly."""

    name = "test-exits"
    library = "none"

    def launch(self, spec, ctx):
        return Launch(["sh", "-c", "echo cannot bind, giving up; exit 3"])


def test_a_server_that_does_not_start_fails_up_clearly_and_leaves_nothing(needs_lab):
    topology = SMALL.with_servers(ServerSpec("dies", "test-exits", "198.18.1.99"))
    instance = lab_instance("fail")
    with pytest.raises(ToolError, match=r"dies exited with status 3: cannot bind, giving up"):
        up(topology, instance=instance)
    assert netns.list_namespaces(f"{instance}-") == []
    assert status(instance) is None


def test_discovery_lab_addresses_stay_clear_of_the_default_servers():
    # bench_discovery adds a range server to the default lab (which has the resolver); a new default
    # kind once took the range server's address and the benchmark stopped at `lab up`.
    from lab.discovery_lab import range_server

    topology = default_topology().with_servers(range_server())
    addresses = [spec.ip for spec in topology.servers] + [topology.resolver]
    assert len(addresses) > 10 and len(set(addresses)) == len(addresses)


def test_the_lab_leaves_out_an_optional_server_whose_library_is_not_here(monkeypatch):
    """LSQUIC is the user's build: without QREPLAY_LSQUIC_SERVER the default lab runs without it, while a
    server that is not optional and cannot run stops the lab with its reason (lab.core's check)."""
    monkeypatch.delenv("QREPLAY_LSQUIC_SERVER", raising=False)
    topology = default_topology()
    assert next(spec for spec in topology.servers if spec.kind == "lsquic").optional
    kept = {spec.kind for spec in runnable(topology).servers}
    assert "lsquic" not in kept and {"ngtcp2", "caddy", "broken"} <= kept
    assert kind_for("lsquic").unavailable_reason()
