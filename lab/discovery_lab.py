"""The lab grown for discovery benchmarks: a server answering on a whole range of addresses.

A server kind plugged into the lab's registry (importing this module registers
it). The DNS server for lab domains is part of every default lab (its
``resolver``, lab/topology.py).
"""

from __future__ import annotations

import ipaddress
import sys
from pyroute2 import IPRoute

from lab.core import Lab
from lab.kinds import LabContext, Launch, register_kind
from lab.kinds.ngtcp2 import Ngtcp2Kind
from common.netns import add_route
from lab.topology import ServerSpec

RANGE_SERVER_IP = "198.18.1.80"  # clear of the default servers (.10-.74) and the resolver; _check_topology refuses a clash
# 1,024 addresses answered by one server (routed to it by the core).
RANGE_SERVER_RANGE = "198.18.4.0/22"


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
