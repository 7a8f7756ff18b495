"""A population big enough to measure: tens of thousands of addresses in one lab.

A block (default 198.18.64.0/18, 16,384 addresses) is cut into parts, each
an aligned CIDR with one behaviour:

    quic     a namespace that takes the part as ``local`` addresses, and
             ngtcp2's gtlsserver on 0.0.0.0 answering each address from that
             address (IP_PKTINFO); one parameter set per part (alpha, beta)
    garbage  the same with our garbage server (random bytes, IP_PKTINFO)
    closed   local addresses with nothing listening: ICMP port unreachable
             (the ICMP rate limits are off there, so every probe gets one)
    silent   blackholed in the core: no answer at all

so that ZMap and the handshake engine meet as many hosts as the block has
addresses, and what they must find is computed here (``responsive``).
``clients`` shard namespaces (``<instance>-shard<i>``, 198.18.2.4i+2/30, a
default route into the core) are the hosts of a sharded campaign.

    with population_lab(Population(), clients=4, instance="qpop") as lab:
        ...  # lab.client_ns, shard_namespace(lab, i)
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from common.setfiles import builtin_set
from tparams.errors import ToolError
from tparams.program_cli import address

from common import netns
from lab.core import Lab, state_dir, up
from lab.discovery_lab import range_argv, route_range
from lab.kinds import LabContext, Launch, ServerKind, register_kind
from lab.kinds.broken import BrokenKind
from lab.topology import ServerSpec, Topology

POPULATION_BLOCK = "198.18.64.0/18"
DEFAULT_INSTANCE = "qpop"
BEHAVIOURS = ("quic", "garbage", "closed", "silent")
# Shard client namespaces: one /30 each out of 198.18.2.0/24 (core .4i+1, client .4i+2).
SHARD_NETWORK = ipaddress.IPv4Network("198.18.2.0/24")
MAX_CLIENTS = SHARD_NETWORK.num_addresses // 4
_FIRST_SERVER, _FIRST_CLOSED = 10, 100  # host numbers in the lab's server subnet 198.18.1.0/24


@dataclass(frozen=True)
class Part:
    name: str
    behaviour: str
    weight: int  # a power of two: the part's share of the block is weight / sum of weights


DEFAULT_PARTS = (Part("silent", "silent", 4), Part("alpha", "quic", 1), Part("beta", "quic", 1),
                 Part("garbage", "garbage", 1), Part("closed", "closed", 1))


@dataclass(frozen=True)
class Population:
    block: str = POPULATION_BLOCK
    parts: tuple[Part, ...] = DEFAULT_PARTS

    def __post_init__(self) -> None:
        network = self.network
        if not network.subnet_of(ipaddress.IPv4Network("198.18.0.0/15")):
            raise ToolError(f"population block {self.block} must lie inside the lab range 198.18.0.0/15")
        reserved = ipaddress.IPv4Network("198.18.0.0/21")  # client, servers, shard clients, the discovery range
        if network.overlaps(reserved):
            raise ToolError(f"population block {self.block} overlaps the lab's own addresses {reserved}")
        total = sum(p.weight for p in self.parts)
        for part in self.parts:
            if part.behaviour not in BEHAVIOURS:
                raise ToolError(f"population part {part.name}: behaviour must be one of {', '.join(BEHAVIOURS)}")
            if part.weight < 1 or part.weight & (part.weight - 1):
                raise ToolError(f"population part {part.name}: weight must be a power of two, not {part.weight}")
        if total & (total - 1) or total > network.num_addresses:
            raise ToolError(f"population weights sum to {total}: must be a power of two up to the block's size")

    @property
    def network(self) -> ipaddress.IPv4Network:
        try:
            return ipaddress.IPv4Network(self.block)
        except ValueError as exc:
            raise ToolError(f"bad population block {self.block!r}: {exc}") from None

    def layout(self) -> list[tuple[Part, ipaddress.IPv4Network]]:
        """Each part's CIDR: largest first, so every part is one aligned prefix."""
        total = sum(p.weight for p in self.parts)
        unit = self.network.num_addresses // total
        start = int(self.network.network_address)
        cidrs = []
        for part in sorted(self.parts, key=lambda p: -p.weight):
            size = part.weight * unit
            cidrs.append((part, ipaddress.IPv4Network((start, 32 - size.bit_length() + 1))))
            start += size
        return cidrs

    def addresses(self, behaviour: str) -> int:
        return sum(net.num_addresses for part, net in self.layout() if part.behaviour == behaviour)

    def responsive(self) -> set[str]:
        """Every address a QUIC server answers on: what a complete scan of the block must find."""
        return {str(ip) for part, net in self.layout() if part.behaviour == "quic" for ip in net}

    def topology(self) -> Topology:
        servers, closed = [], []
        for part, net in self.layout():
            if part.behaviour == "quic":
                ip = f"198.18.1.{_FIRST_SERVER + len(servers)}"
                servers.append(ServerSpec(f"pop-{part.name}", "ngtcp2-range", ip, options={
                    "range": str(net), "parameter_set": part.name, "parameters": builtin_set(part.name).as_sent()}))
            elif part.behaviour == "garbage":
                ip = f"198.18.1.{_FIRST_SERVER + len(servers)}"
                servers.append(ServerSpec(f"pop-{part.name}", "garbage-range", ip, options={"range": str(net)}))
            elif part.behaviour == "closed":
                closed.append(f"198.18.1.{_FIRST_CLOSED + len(closed)}")
        return Topology(servers=tuple(servers), closed_hosts=tuple(closed))

    def to_dict(self) -> dict[str, Any]:
        return {"block": self.block, "parts": [
            {"name": p.name, "behaviour": p.behaviour, "weight": p.weight, "cidr": str(net),
             "addresses": net.num_addresses} for p, net in self.layout()]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Population":
        return cls(data["block"], tuple(Part(p["name"], p["behaviour"], p["weight"]) for p in data["parts"]))


@register_kind
class GarbageRangeKind(ServerKind):
    """Our garbage server (lab/broken_server.py) on 0.0.0.0 for a whole range of local addresses."""

    name = "garbage-range"
    library = "broken"

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        return Launch(range_argv(spec, BrokenKind().argv(address("0.0.0.0", spec.port), ctx, "garbage")))


def bring_up(population: Population, clients: int = 0, instance: str = DEFAULT_INSTANCE) -> Lab:
    """The population's lab, left running (``qscan lab down --instance`` ends it)."""
    if not 0 <= clients <= MAX_CLIENTS:
        raise ToolError(f"shard clients must be 0-{MAX_CLIENTS}, not {clients}")
    lab = up(population.topology(), instance)
    owner = os.getpid()
    try:
        _attach(lab, population, clients)
    except BaseException:
        if os.getpid() == owner:
            lab.down()
        raise
    return lab


@contextlib.contextmanager
def population_lab(population: Population, clients: int = 0, instance: str = DEFAULT_INSTANCE) -> Iterator[Lab]:
    """``bring_up`` torn down on exit, exception, Ctrl-C and SIGTERM."""
    owner = os.getpid()
    with netns.teardown_on_signals():
        lab = bring_up(population, clients, instance)
        try:
            yield lab
        finally:
            if os.getpid() == owner:
                lab.down()


def described(instance: str = DEFAULT_INSTANCE) -> tuple[Population, list[str]]:
    """The population and shard namespaces of a running population lab."""
    try:
        data = json.loads((state_dir(instance) / "population.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        raise ToolError(f"no population lab {instance!r} is up; start one with `qscan lab population`") from None
    return Population.from_dict(data["population"]), data["clients"]


def shard_namespace(instance: str, index: int) -> str:
    return f"{instance}-shard{index}"


def _attach(lab: Lab, population: Population, clients: int) -> None:
    servers = {s.options.get("range"): s for s in lab.servers}
    # The lab names the namespace of its k-th UDP-closed host <instance>-closed<k>.
    closed = iter(enumerate(lab.addresses["closed_hosts"]))
    for part, net in population.layout():
        if part.behaviour in ("quic", "garbage"):
            route_range(lab, servers[str(net)])
        elif part.behaviour == "closed":
            index, host = next(closed)
            ns = f"{lab.instance}-closed{index}"
            netns.add_route(lab.core_ns, str(net), gateway=host)
            with netns.iproute(ns) as ipr:
                ipr.route("add", dst=str(net), type="local", oif=ipr.link_lookup(ifname="lo")[0], table=255, scope=254)
            # Port unreachable is rate-limited per peer and globally (1,000/s) unless its type leaves the mask.
            netns.set_sysctl(ns, "net.ipv4.icmp_ratemask", 0)
        else:
            netns.add_route(lab.core_ns, str(net), blackhole=True)
    names = []
    for index in range(clients):
        ns = shard_namespace(lab.instance, index)
        netns.create_namespace(ns)
        names.append(ns)
        netns.set_sysctl(ns, "net.ipv6.conf.all.disable_ipv6", 1)
        core_side, client_side = (str(SHARD_NETWORK.network_address + 4 * index + k) for k in (1, 2))
        netns.add_veth(ns, "eth0", lab.core_ns, f"sh{index}")
        netns.add_address(ns, "eth0", client_side, 30)
        netns.add_address(lab.core_ns, f"sh{index}", core_side, 30)
        netns.link_up(ns, "eth0")
        netns.link_up(lab.core_ns, f"sh{index}")
        netns.add_route(ns, "default", gateway=core_side)
    (state_dir(lab.instance) / "population.json").write_text(
        json.dumps({"population": population.to_dict(), "clients": names}, indent=2))

