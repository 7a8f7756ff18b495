"""Interface, source address and gateway MAC for ZMap, from a namespace's routes.

ZMap 2.1.1 needs all three given explicitly or it waits. They are found the
way the kernel would route the first probe: ``ip route get`` for a target
address gives the interface, the preferred source and the gateway; the
gateway's MAC comes from the neighbour table, after one datagram to the
gateway's discard port makes the kernel resolve it if it has not already.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.netns import in_namespace, list_namespaces
from scanner.discovery.plan import LAB_RANGE
from tparams.errors import ToolError

if TYPE_CHECKING:  # pyroute2 (a fifth of a second) where a route is looked up, not for every scan
    from pyroute2 import IPRoute

# Neighbour states without a usable link-layer address (linux/neighbour.h).
_NUD_INCOMPLETE, _NUD_FAILED = 0x01, 0x20
_DISCARD_PORT = 9


@dataclass(frozen=True)
class Route:
    interface: str
    source_ip: str
    gateway_mac: str


def detect_route(
    probe_address: str,
    netns: str | None = None,
    interface: str | None = None,
    source_ip: str | None = None,
    gateway_mac: str | None = None,
    resolve: bool = True,
) -> Route:
    """Fill in what the caller did not give. ``resolve=False`` sends nothing
    (dry runs): an unknown gateway MAC is then reported as unresolved."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    require_namespace(netns)
    where = f"network namespace {netns}" if netns else "this network namespace"
    with IPRoute(**({"netns": netns} if netns else {})) as ipr:
        if interface is not None and not ipr.link_lookup(ifname=interface):
            raise ToolError(f"unknown interface {interface!r} in {where}")
        try:
            found = ipr.route("get", dst=probe_address)[0]
        except NetlinkError as exc:
            raise ToolError(f"no route to {probe_address} in {where} ({exc.args[-1]})") from None
        oif = found.get("RTA_OIF")
        gateway = found.get("RTA_GATEWAY")
        route_interface = ipr.get_links(oif)[0].get("IFLA_IFNAME")
        interface = interface or route_interface
        if source_ip is None:
            if interface == route_interface and found.get("RTA_PREFSRC"):
                source_ip = found.get("RTA_PREFSRC")
            else:
                addresses = ipr.get_addr(family=socket.AF_INET, index=ipr.link_lookup(ifname=interface)[0])
                if not addresses:
                    raise ToolError(f"interface {interface} has no IPv4 address in {where}; give --source-ip")
                source_ip = addresses[0].get("IFA_ADDRESS")
        if gateway_mac is None:
            if gateway is None:
                raise ToolError(f"{probe_address} is on-link from {interface}, not behind a gateway; "
                                "ZMap sends every probe to one gateway MAC: give --gateway-mac")
            gateway_mac = _neighbour_mac(ipr, gateway)
            if gateway_mac is None and resolve:
                _provoke_arp(gateway, netns)
                deadline = time.monotonic() + 3.0
                while gateway_mac is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                    gateway_mac = _neighbour_mac(ipr, gateway)
            if gateway_mac is None:
                if resolve:
                    raise ToolError(f"gateway {gateway} in {where} does not answer ARP; give --gateway-mac")
                gateway_mac = f"<MAC of {gateway}, resolved at run time>"
    return Route(interface, source_ip, gateway_mac)


def require_namespace(netns: str | None) -> None:
    """Fail on a namespace that does not exist (pyroute2 would quietly create it)."""
    if netns is not None and netns not in list_namespaces():
        raise ToolError(f"no network namespace {netns!r} (see `ip netns list`)")


# The benchmarking ranges (RFC 2544, RFC 5180): the lab's, never the Internet's.
LAB_RANGES = (LAB_RANGE, ipaddress.ip_network("2001:2::/48"))


def refuse_unreachable_lab(addresses: Iterable[str], netns: str | None = None) -> None:
    """Refuse lab addresses this namespace does not reach from inside the lab.

    A lab address is reached from a lab address (the lab's client namespace);
    from anywhere else its packets leave by the default route, out of the lab.
    The kernel is asked which source it would send from (a UDP connect sends
    nothing)."""
    lab = {a for a in addresses if a.startswith(("198.18.", "198.19.", "2001:2:"))
           and any(ipaddress.ip_address(a) in r for r in LAB_RANGES)}
    with in_namespace(netns) if netns else contextlib.nullcontext():
        for address in sorted(lab):
            source = _source_address(address)
            if source is None or not any(ipaddress.ip_address(source) in r for r in LAB_RANGES):
                where = f"network namespace {netns}" if netns else "this network namespace"
                how = f"it would leave from {source}, out of the lab" if source else "no route"
                raise ToolError(f"{address} is a lab address that {where} does not reach ({how}): run from the "
                                "lab's client namespace, `ip netns exec <client ns> qscan ...`, or give --netns "
                                "<client ns> (`qscan lab status` names it)")


def _source_address(address: str) -> str | None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((address, 443))
        except OSError:
            return None
        return sock.getsockname()[0]


def check_raw_socket_permission(netns: str | None = None) -> None:
    """ZMap sends and captures on raw packet sockets; without CAP_NET_RAW it
    fails deep in libpcap, so say so first and in one line."""
    with in_namespace(netns) if netns else contextlib.nullcontext():
        try:
            socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
        except PermissionError:
            raise ToolError("no permission to open raw sockets (ZMap needs root or CAP_NET_RAW)") from None


def _neighbour_mac(ipr: IPRoute, address: str) -> str | None:
    for entry in ipr.get_neighbours(dst=address):
        if entry.get("NDA_LLADDR") and not entry["state"] & (_NUD_INCOMPLETE | _NUD_FAILED):
            return entry.get("NDA_LLADDR")
    return None


def _provoke_arp(gateway: str, netns: str | None) -> None:
    with in_namespace(netns) if netns else contextlib.nullcontext():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            with contextlib.suppress(OSError):
                sock.sendto(b"", (gateway, _DISCARD_PORT))
