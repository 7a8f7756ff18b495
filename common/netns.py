"""Network-namespace primitives shared by the lab and the replay testbed.

Everything here acts on *named* namespaces (``/run/netns/<name>``) so that a
crashed run leaves something a sweeper can find by name prefix. Links,
addresses and routes go through pyroute2 (netlink, no fork per call); processes
are started in a namespace by common.process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyroute2 import IPRoute

from common.process import STARVED_S, stop_process
from tparams.errors import ToolError


# pyroute2 takes a fifth of a second of CPU to import, as long as the rest of a qscan or qreplay command's
# start, and most commands never touch a namespace: it is imported where a namespace is.
def _pyroute2_netns():
    from pyroute2 import config, netns
    # pyroute2 does namespace work in a forked child and gives up on it after 2 s: a starved process (the tests at
    # SCHED_IDLE, a loaded machine) took longer to create one (TimeoutError 'no response from the child',
    # 2026-11-29, beside the normal-priority busy loops of another measurement)
    config.default_communicate_timeout = STARVED_S
    return netns


def iproute(ns: str) -> IPRoute:
    """A netlink socket inside namespace ``ns`` (close it, or use it as a context manager)."""
    from pyroute2 import IPRoute
    return IPRoute(fileno=_netlink_socket_in(ns).detach())


def _netlink_socket_in(ns: str) -> socket.socket:
    """A route netlink socket of namespace ``ns``, opened by a thread of its own that enters ``ns`` and ends (the
    kernel binds a socket to the namespace it was opened in; the network namespace is a thread's, so no other
    thread moves). pyroute2's IPRoute(netns=) forks a child for it: 10 ms of CPU in a process of qreplay's size,
    against 1 ms (2026-11-28, load 12), and a testbed's set-up opens a dozen. A namespace that does not exist
    is made, as IPRoute(netns=) and in_namespace make it."""
    opened: list[socket.socket | BaseException] = []

    def inside() -> None:
        try:
            _pyroute2_netns().setns(ns)
            opened.append(socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE))
        except BaseException as exc:  # raised again in the calling thread
            opened.append(exc)

    thread = threading.Thread(target=inside, name=f"netlink-{ns}")
    thread.start()
    thread.join()
    if isinstance(opened[0], BaseException):
        raise opened[0]
    return opened[0]


@contextlib.contextmanager
def teardown_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM (a test runner's timeout, `kill`) raises
    SystemExit(143) in this process, so the block's teardown runs as on
    Ctrl-C; a plain SIGTERM would end Python without it and leave
    namespaces behind. Forked copies of this process (pyroute2 forks
    helpers, which inherit the handler and are stopped with SIGTERM) die at
    once instead of unwinding the parent's frames into its teardown.

    Only from the main thread (the only one that may set handlers), and
    only over the default action: a caller's own handler, or an enclosing
    block's, is left in charge."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    owner = os.getpid()

    def on_signal(signum: int, frame: object) -> None:
        if os.getpid() != owner:
            os._exit(128 + signum)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def list_namespaces(prefix: str = "") -> list[str]:
    return sorted(name for name in _pyroute2_netns().listnetns() if name.startswith(prefix))


# IFA_F_NODAD (linux/if_addr.h): an address added with it is never "tentative"
IFA_F_NODAD = 0x02


def create_namespace(name: str) -> None:
    """A fresh namespace with loopback up; refuses to reuse an existing one."""
    if name in _pyroute2_netns().listnetns():
        raise ToolError(f"network namespace {name} already exists")
    _pyroute2_netns().create(name)
    with iproute(name) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
    # No IPv6 duplicate address detection in the project's namespaces, whose addresses are its own. add_address's
    # IFA_F_NODAD covers the addresses it adds; this covers the link-local one the kernel adds to every interface
    # as its link comes up, which an interface made here (both ends of add_veth, each in its own namespace) takes
    # from `default` (1 in a new namespace; `all` 0): measured 2026-11-28 at load 11-13, such a link-local stayed
    # tentative 1.4-1.8 s, 4-44 ms with this. Nothing of ours sends from a link-local address (an echo
    # between two NODAD addresses crossed while both link-locals were tentative), so this only keeps DAD's
    # solicitations off the links, and `all` against a host whose new namespaces inherit its own.
    with contextlib.suppress(FileNotFoundError):  # a kernel without IPv6 has no DAD to turn off
        for conf in ("all", "default"):
            set_sysctl(name, f"net.ipv6.conf.{conf}.accept_dad", 0)


def delete_namespace(name: str) -> None:
    """Kill what runs in it, then remove it (its interfaces go with it). Idempotent."""
    if name not in _pyroute2_netns().listnetns():
        return
    for pid in namespace_pids(name):
        stop_process(pid)
    with contextlib.suppress(FileNotFoundError):
        _pyroute2_netns().remove(name)


def namespace_pids(name: str) -> list[int]:
    try:
        return [int(pid) for pid in _pyroute2_netns().ns_pids().get(name, [])]
    except (OSError, ValueError):
        return []


def add_veth(ns_a: str, if_a: str, ns_b: str, if_b: str) -> None:
    """A veth pair created directly inside the two namespaces, so the root
    namespace never sees the names (two labs side by side cannot collide)."""
    with iproute(ns_a) as ipr:
        ipr.link("add", ifname=if_a, kind="veth", peer={"ifname": if_b, "net_ns_fd": ns_b})


def add_bridge(ns: str, ifname: str) -> None:
    with iproute(ns) as ipr:
        ipr.link("add", ifname=ifname, kind="bridge")


def set_master(ns: str, ifname: str, bridge: str) -> None:
    with iproute(ns) as ipr:
        ipr.link("set", index=_index(ipr, ns, ifname), master=_index(ipr, ns, bridge))


def link_up(ns: str, ifname: str) -> None:
    with iproute(ns) as ipr:
        ipr.link("set", index=_index(ipr, ns, ifname), state="up")


def set_mtu(ns: str, ifname: str, mtu: int) -> None:
    with iproute(ns) as ipr:
        ipr.link("set", index=_index(ipr, ns, ifname), mtu=mtu)


def add_address(ns: str, ifname: str, address: str, prefixlen: int) -> None:
    """An IPv6 address is usable (bindable, a source) the moment this returns: with duplicate address detection
    off (accept_dad 0) an address still stays "tentative" until the kernel's DAD work runs, and binding it fails
    "cannot assign requested address" until then (a lab server's under load, caddy in `qscan lab up`; measured
    2026-11-28 at load 11: 3 of 12 binds right after the add failed with accept_dad 0 on the interface or the
    namespace's default, none of 12 with IFA_F_NODAD)."""
    with iproute(ns) as ipr:
        ipr.addr("add", index=_index(ipr, ns, ifname), address=address, prefixlen=prefixlen,
                 **({"flags": IFA_F_NODAD} if ":" in address else {}))


def add_route(ns: str, destination: str, gateway: str | None = None, blackhole: bool = False) -> None:
    """``destination`` is a CIDR or "default" (IPv6 when it or ``gateway`` is); ``blackhole`` drops
    silently (no ICMP)."""
    ipv6 = ":" in destination or ":" in (gateway or "")
    spec: dict[str, object] = {"dst": "::/0" if ipv6 and destination == "default" else destination,
                               "family": socket.AF_INET6 if ipv6 else socket.AF_INET}
    if blackhole:
        spec["type"] = "blackhole"
    elif gateway:
        spec["gateway"] = gateway
    with iproute(ns) as ipr:
        ipr.route("add", **spec)


def set_sysctl(ns: str, key: str, value: str | int) -> None:
    """``key`` in dotted form (net.ipv4.ip_forward). /proc/sys/net shows the
    namespace of the opening thread, hence the brief switch."""
    path = Path("/proc/sys") / key.replace(".", "/")
    with in_namespace(ns):
        path.write_text(f"{value}\n")


@contextlib.contextmanager
def in_namespace(ns: str) -> Iterator[None]:
    """Run the block with this thread inside ``ns``: sockets created in it
    stay in ``ns`` after the block (the kernel binds a socket to the namespace
    it was created in)."""
    _pyroute2_netns().pushns(ns)
    try:
        yield
    finally:
        _pyroute2_netns().popns()


def sweep(prefix: str) -> list[str]:
    """Kill every process in, then delete, every namespace named ``prefix*``:
    the cleanup after a crash, when no state file says what was there."""
    if not prefix:
        raise ValueError("sweep needs a non-empty prefix")
    removed = list_namespaces(prefix)
    for name in removed:
        delete_namespace(name)
    return removed


def _index(ipr: IPRoute, ns: str, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise ToolError(f"no interface {ifname} in network namespace {ns}")
    return found[0]


def route_device(address: str) -> str:
    """The interface this namespace reaches ``address`` through (``ip route get``): the testbed's path, or a
    two-host run's link (a browser's capture there, a traced run's: replay/trace.capture)."""
    done = subprocess.run(["ip", "-j", "route", "get", address], capture_output=True, text=True)
    if done.returncode != 0:
        raise ToolError(f"no route to the server {address}: {done.stderr.strip()[-200:]}")
    return json.loads(done.stdout)[0]["dev"]
