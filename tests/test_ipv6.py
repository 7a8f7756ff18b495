"""IPv6 end to end: the dual-stack lab (2001:2::/48), handshakes with every lab kind that
listens on IPv6, from the client namespace only."""

from __future__ import annotations

import socket
import subprocess

import pytest

from lab import netns
from lab.kinds import kind_for
from lab.topology import ipv6_of
from scanner.engine import ScanSettings, scan_targets
from scanner.targets import Target


def _sent(record) -> dict[str, int | bool]:  # type: ignore[no-untyped-def]
    return {name: value for name, value in record.param_set.as_sent().items() if value is not None}


@pytest.mark.lab
def test_every_kind_that_listens_on_ipv6_completes_and_sends_what_it_sends_on_ipv4(lab):
    dual = [s for s in lab.servers if s.ip6]
    assert {s.kind for s in lab.servers if not s.ip6} <= {"broken", "msquic", "lsquic"}
    assert all(s.ip6 == ipv6_of(s.ip) and kind_for(s.kind).listens_ipv6 for s in dual)
    targets = [Target(ip, s.port, s.sni) for s in dual for ip in (s.ip6, s.ip)]
    records: list = []
    with lab.in_client():
        scan_targets(targets, ScanSettings(timeout=3, rate=0), records.extend)
    by_ip = {record.ip: record for record in records}
    assert len(by_ip) == len(targets)
    for server in dual:
        over6, over4 = by_ip[server.ip6], by_ip[server.ip]
        assert (over6.status, over4.status) == ("ok", "ok"), (server.name, over6.error, over4.error)
        # Exactly what the lab knows the server sends, where it knows; the same as over IPv4 everywhere.
        if server.transport_parameters is not None:
            assert _sent(over6) == server.transport_parameters, server.name
        assert _sent(over6) == _sent(over4), server.name
        assert (over6.alpn, over6.quic_version, over6.retry) == (over4.alpn, over4.quic_version, over4.retry)


@pytest.mark.lab
def test_no_ipv6_route_out_of_the_lab(lab):
    routes = lab.run_in_client(["ip", "-6", "route", "show", "default"]).stdout
    assert routes.split()[:3] == ["default", "via", ipv6_of(lab.state["addresses"]["core_client_side"])], routes
    for namespace in [lab.core_ns, *(s.namespace for s in lab.servers)]:
        result = subprocess.run(netns.ns_command(namespace, ["ip", "-6", "route", "get", "2001:db8::1"]),
                                capture_output=True, text=True)
        assert result.returncode != 0 and "unreachable" in result.stderr, (namespace, result)


@pytest.mark.lab
def test_the_silent_range_has_an_ipv6_twin(lab):
    with lab.in_client():
        silent = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with silent:
        silent.settimeout(0.5)
        silent.connect((ipv6_of("198.18.1.241"), 443))
        silent.send(b"hello")
        with pytest.raises(socket.timeout):
            silent.recv(100)
