"""The lab grown for discovery: a DNS server for lab domains, and a server
answering on a whole range of addresses (for discovery benchmarks).

Both are server kinds plugged into the lab's registry (importing this module
registers them); ``discovery_topology()`` is the default lab plus the DNS
server, ``LAB_DOMAINS`` the domain list ``qscan domains`` is tested on.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from pyroute2 import IPRoute

from lab.core import Lab
from lab.kinds import LabContext, Launch, ServerKind, register_kind
from lab.kinds.ngtcp2 import Ngtcp2Kind
from lab.netns import add_route
from lab.topology import LAB_DOMAIN, ServerSpec, Topology, default_topology

DNS_IP = "198.18.1.53"  # reserved for DNS in lab/topology.py
RANGE_SERVER_IP = "198.18.1.80"  # clear of the default servers (.10-.73); _check_topology refuses a clash
# 1,024 addresses answered by one server (routed to it by the core).
RANGE_SERVER_RANGE = "198.18.4.0/22"


def _d(label: str) -> str:
    return f"{label}.{LAB_DOMAIN}."


# What the lab's DNS serves. Evidence each domain should yield:
#   alpha, aioquic: HTTPS record with alpn h3 (and A)
#   caddy: only an A record; caddy's Alt-Svc over HTTPS/TCP says h3
#   other.caddy: HTTPS record alpn h3 to caddy's address, but caddy has no
#     site (certificate) for that name: the same address gives an SNI-dependent result
#   beta: A only, no TCP service: no QUIC evidence
#   closed: HTTPS record alpn h3 pointing at the UDP-closed host
#   missing: not in the zone (NXDOMAIN)
LAB_ZONE: dict[str, dict[str, list[str]]] = {
    _d("alpha"): {"A": ["198.18.1.10"], "HTTPS": ["1 . alpn=h3"]},
    _d("beta"): {"A": ["198.18.1.11"]},
    _d("caddy"): {"A": ["198.18.1.20"]},
    _d("other.caddy"): {"A": ["198.18.1.20"], "HTTPS": ["1 . alpn=h3"]},
    _d("aioquic"): {"A": ["198.18.1.30"], "HTTPS": ['1 . alpn="h3,h2" port=443 ipv4hint=198.18.1.30']},
    _d("closed"): {"A": ["198.18.1.100"], "HTTPS": ["1 . alpn=h3"]},
}
LAB_DOMAINS: tuple[str, ...] = tuple(name.rstrip(".") for name in LAB_ZONE) + (f"missing.{LAB_DOMAIN}",)


@register_kind
class DnsKind(ServerKind):
    """Our dnspython DNS server (lab/dns_server.py), zone from ``options["zone"]``."""

    name = "dns"
    library = "dnspython"

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        zone = ctx.workdir(spec) / "zone.json"
        zone.write_text(json.dumps(spec.options.get("zone", LAB_ZONE)))
        return Launch([sys.executable, "-m", "lab.dns_server", "--host", spec.ip,
                       "--port", str(spec.port), "--zone", str(zone)])


@register_kind
class RangeServerKind(Ngtcp2Kind):
    """ngtcp2's gtlsserver bound to 0.0.0.0 in a namespace that takes every
    address of ``options["range"]`` as local (``ip route add local``): one
    server, a thousand addresses, each answered from its own address (the
    server replies with the datagram's destination as source, IP_PKTINFO).
    Transport parameters from ``options["parameters"]``, as the ngtcp2 kind."""

    name = "ngtcp2-range"

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        return Launch(range_argv(spec, self.server_argv(spec, ctx, "0.0.0.0")))


def range_argv(spec: ServerSpec, server: list[str]) -> list[str]:
    """``server`` started in a namespace that first takes ``options["range"]`` as local addresses."""
    return [sys.executable, "-m", "lab.discovery_lab", spec.options["range"], "--", *server]


def route_range(lab: Lab, spec: ServerSpec) -> None:
    """The core's half of a range server: route its range to it."""
    add_route(lab.core_ns, spec.options["range"], gateway=spec.ip)


def range_server(ip: str = RANGE_SERVER_IP, network: str = RANGE_SERVER_RANGE) -> ServerSpec:
    return ServerSpec("ngtcp2-range", "ngtcp2-range", ip, options={"range": network})


def discovery_topology(*extra: ServerSpec) -> Topology:
    dns_server = ServerSpec("dns", "dns", DNS_IP, port=53, sni=f"dns.{LAB_DOMAIN}", options={"zone": LAB_ZONE})
    return default_topology().with_servers(dns_server, *extra)


def _take_range_and_exec(argv: list[str]) -> None:
    """Inside the server's namespace: make the range local, then become the server."""
    import os

    network, separator, *command = argv
    assert separator == "--", "usage: discovery_lab RANGE -- COMMAND..."
    net = ipaddress.IPv4Network(network)
    with IPRoute() as ipr:
        # `ip route add local RANGE dev lo`: the local table, host scope.
        ipr.route("add", dst=str(net), type="local", oif=ipr.link_lookup(ifname="lo")[0], table=255, scope=254)
    os.execvp(command[0], command)


if __name__ == "__main__":
    _take_range_and_exec(sys.argv[1:])
