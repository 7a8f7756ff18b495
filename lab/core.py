"""The lab: bring the namespaces and servers up, describe them, tear them down.

State lives in /run/<instance>/ (state.json, certificate, logs, server work
dirs) so that `qscan lab status|down` in another process finds the lab, and
every namespace is named ``<instance>-...`` so that `down` can also sweep what
a crashed run left behind.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tparams import program_cli
from tparams.errors import ToolError

from common import netns
from common.process import ns_command, pid_alive, start_process, stop_process
from lab.kinds import LabContext, kind_for, runnable
from lab.probe import Pending, wait_until_ready
from lab.topology import IPV6_PREFIXLEN, LAB_DOMAIN, LAB_ZONE, Topology, default_topology, ipv6_of

DEFAULT_INSTANCE = "qlab"
RESOLVER = "resolver"  # its namespace is <instance>-resolver, so no server may take the name
RUN_DIR = Path("/run")
READY_TIMEOUT = 15.0


@dataclass(frozen=True)
class LabServer:
    """One running lab server. ``transport_parameters``: the performance
    parameters it sends, as sent (absent = not sent), where the lab knows them."""

    name: str
    kind: str
    library: str
    namespace: str
    ip: str
    port: int
    sni: str
    transport_parameters: dict[str, int | bool] | None
    serves_tcp: bool
    options: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None
    log: str = ""
    #: its IPv6 address where its kind listens on IPv6 (lab.kinds.ServerKind.listens_ipv6), else None
    ip6: str | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def address6(self) -> str | None:
        return None if self.ip6 is None else program_cli.address(self.ip6, self.port)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LabServer":
        return cls(**data)


class Lab:
    """A running lab. Get one with ``Lab.up()`` (a context manager that tears
    down on exit), ``up()`` (stays up, for the CLI) or ``Lab.current()``."""

    def __init__(self, state: dict[str, Any]):
        self.state = state
        self.instance: str = state["instance"]
        self.client_ns: str = state["client_namespace"]
        self.core_ns: str = state["core_namespace"]
        self.namespaces: list[str] = state["namespaces"]
        self.addresses: dict[str, Any] = state["addresses"]
        self.certificate = Path(state["certificate"])
        self.servers: tuple[LabServer, ...] = tuple(LabServer.from_dict(s) for s in state["servers"])

    @classmethod
    @contextlib.contextmanager
    def up(cls, topology: Topology | None = None, instance: str = DEFAULT_INSTANCE) -> Iterator["Lab"]:
        owner = os.getpid()
        with netns.teardown_on_signals():
            lab = up(topology, instance)
            try:
                yield lab
            finally:
                # A forked child (pyroute2 forks helpers) that unwinds through
                # here on an exception must not tear down its parent's lab.
                if os.getpid() == owner:
                    lab.down()

    @classmethod
    def current(cls, instance: str = DEFAULT_INSTANCE) -> "Lab":
        state = _read_state(instance)
        if state is None:
            raise ToolError(f"the lab {instance!r} is not up; start it with `qscan lab up`")
        return cls(state)

    def server(self, name: str) -> LabServer:
        for server in self.servers:
            if server.name == name:
                return server
        raise ToolError(f"no lab server {name!r} (have: {', '.join(s.name for s in self.servers)})")

    def servers_of(self, library: str) -> list[LabServer]:
        return [s for s in self.servers if s.library == library]

    def run_in_client(self, argv: Sequence[str], timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess:
        """Run a command in the client namespace; output captured as text unless told otherwise."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(ns_command(self.client_ns, argv), timeout=timeout, **kwargs)

    def in_client(self) -> contextlib.AbstractContextManager[None]:
        """Sockets created inside this block belong to the client namespace."""
        return netns.in_namespace(self.client_ns)

    def down(self) -> list[str]:
        return down(self.instance)


def up(topology: Topology | None = None, instance: str = DEFAULT_INSTANCE) -> Lab:
    """Bring the lab up and leave it running; on any failure (or Ctrl-C)
    half way, everything started so far is torn down before the error rises."""
    topology = runnable(topology or default_topology())
    _check_instance(instance)
    _check_machine()
    _check_topology(topology)
    owner = os.getpid()
    with _instance_lock(instance):
        _refuse_if_running(instance)
        try:
            return Lab(_bring_up(topology, instance))
        except BaseException:
            if os.getpid() == owner:  # see Lab.up: not from a forked helper
                _tear_down(instance)
            raise


def down(instance: str = DEFAULT_INSTANCE) -> list[str]:
    """Stop every server and delete every ``<instance>-`` namespace, whether
    or not a state file says they exist. Idempotent. Returns the deleted namespaces."""
    _check_instance(instance)
    _check_machine()
    with _instance_lock(instance):
        return _tear_down(instance)


def status(instance: str = DEFAULT_INSTANCE) -> dict[str, Any] | None:
    """The state of a running lab with liveness filled in, or None when down."""
    state = _read_state(instance)
    if state is None:
        leftovers = netns.list_namespaces(f"{instance}-")
        return {"instance": instance, "up": False, "leftover_namespaces": leftovers} if leftovers else None
    present = set(netns.list_namespaces(f"{instance}-"))
    processes = [*state["servers"], *([state["resolver"]] if state.get("resolver") else [])]
    for process in processes:
        process["alive"] = process["pid"] is not None and pid_alive(process["pid"]) \
            and process["namespace"] in present
    state["up"] = all(p["alive"] for p in processes)
    return state


def state_dir(instance: str) -> Path:
    return RUN_DIR / instance


def _bring_up(topology: Topology, instance: str) -> dict[str, Any]:
    from common.certs import write_certificate  # cryptography: only to bring a lab up, not at every qscan's start

    directory = state_dir(instance)
    directory.mkdir(parents=True, exist_ok=True)
    ctx = LabContext(directory, directory / "cert.pem", directory / "key.pem")
    write_certificate(
        ctx.cert, ctx.key,
        [LAB_DOMAIN, f"*.{LAB_DOMAIN}", *(s.server_name for s in topology.servers)],
        [ip for s in topology.servers for ip in (s.ip, s.ip6)],
    )
    client_ns, core_ns = f"{instance}-client", f"{instance}-core"
    state: dict[str, Any] = {
        "instance": instance,
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "started_by_pid": os.getpid(),
        "state_dir": str(directory),
        "client_namespace": client_ns,
        "core_namespace": core_ns,
        "namespaces": [],
        "addresses": topology.addresses(),
        "certificate": str(ctx.cert),
        "private_key": str(ctx.key),
        "servers": [],
    }

    def namespace(name: str) -> str:
        netns.create_namespace(name)
        state["namespaces"].append(name)
        _write_state(instance, state)  # a crash from here on leaves a trail for `down`
        # Dual-stack, but static: no router advertisements or autoconfigured addresses (and, as in every
        # namespace of ours, no duplicate address detection: netns.create_namespace and add_address).
        for conf in ("all", "default"):
            for key in ("accept_ra", "autoconf"):
                netns.set_sysctl(name, f"net.ipv6.conf.{conf}.{key}", 0)
        return name

    namespace(core_ns)
    netns.set_sysctl(core_ns, "net.ipv4.ip_forward", 1)
    # Scans probe many closed/absent addresses; rate-limited ICMP would make results depend on timing.
    netns.set_sysctl(core_ns, "net.ipv4.icmp_ratelimit", 0)
    netns.set_sysctl(core_ns, "net.ipv6.conf.all.forwarding", 1)
    netns.set_sysctl(core_ns, "net.ipv6.icmp.ratelimit", 0)
    namespace(client_ns)
    netns.add_veth(client_ns, "eth0", core_ns, "client0")
    netns.add_address(client_ns, "eth0", topology.client_ip, topology.client_prefixlen)
    netns.add_address(core_ns, "client0", topology.core_client_ip, topology.client_prefixlen)
    netns.link_up(client_ns, "eth0")
    netns.link_up(core_ns, "client0")
    netns.add_address(client_ns, "eth0", ipv6_of(topology.client_ip), IPV6_PREFIXLEN)
    netns.add_address(core_ns, "client0", ipv6_of(topology.core_client_ip), IPV6_PREFIXLEN)
    netns.add_route(client_ns, "default", gateway=topology.core_client_ip)
    netns.add_route(client_ns, "default", gateway=ipv6_of(topology.core_client_ip))
    netns.add_bridge(core_ns, "lab0")
    netns.add_address(core_ns, "lab0", topology.core_server_ip, topology.server_prefixlen)
    netns.add_address(core_ns, "lab0", ipv6_of(topology.core_server_ip), IPV6_PREFIXLEN)
    netns.link_up(core_ns, "lab0")
    netns.add_route(core_ns, topology.silent_range, blackhole=True)
    netns.add_route(core_ns, topology.silent_range6, blackhole=True)

    def host(name: str, port: str, ip: str) -> str:
        ns = namespace(name)
        netns.add_veth(ns, "eth0", core_ns, port)
        netns.set_master(core_ns, port, "lab0")
        netns.link_up(core_ns, port)
        netns.add_address(ns, "eth0", ip, topology.server_prefixlen)
        netns.add_address(ns, "eth0", ipv6_of(ip), IPV6_PREFIXLEN)
        netns.link_up(ns, "eth0")
        # Only the lab ranges, never a default route: a server cannot reach anything else.
        netns.add_route(ns, topology.lab_range, gateway=topology.core_server_ip)
        netns.add_route(ns, topology.lab_range6, gateway=ipv6_of(topology.core_server_ip))
        return ns

    for index, ip in enumerate(topology.closed_hosts):
        ns = host(f"{instance}-closed{index}", f"c{index}", ip)
        netns.set_sysctl(ns, "net.ipv4.icmp_ratelimit", 0)
        netns.set_sysctl(ns, "net.ipv6.icmp.ratelimit", 0)

    pending: list[Pending] = []
    if topology.resolver is not None:
        pending.append(_start_resolver(host(f"{instance}-{RESOLVER}", "d0", topology.resolver), topology.resolver,
                                       directory, state))
        _write_state(instance, state)
    for index, spec in enumerate(topology.servers):
        kind = kind_for(spec.kind)
        ns = host(f"{instance}-{spec.name}", f"s{index}", spec.ip)
        launch = kind.launch(spec, ctx)
        log = directory / "logs" / f"{spec.name}.log"
        process = start_process(ns, launch.argv, log, env=launch.env, cwd=launch.cwd)
        server = LabServer(
            name=spec.name, kind=spec.kind, library=kind.library, namespace=ns, ip=spec.ip,
            ip6=spec.ip6 if kind.listens_ipv6 else None, port=spec.port,
            sni=spec.server_name, transport_parameters=kind.transport_parameters(spec),
            serves_tcp=kind.serves_tcp, options=dict(spec.options), pid=process.pid, log=str(log),
        )
        state["servers"].append(server.to_dict())
        _write_state(instance, state)
        pending.append(Pending(spec.name, spec.ip, spec.port, kind.serves_tcp, process, log))
    wait_until_ready(client_ns, pending, READY_TIMEOUT)
    return state


def _start_resolver(ns: str, ip: str, directory: Path, state: dict[str, Any]) -> Pending:
    """The lab's DNS server for LAB_ZONE (lab/dns_server.py) in its own namespace; it answers the
    readiness probe's datagram with FORMERR."""
    zone, log = directory / "zone.json", directory / "logs" / f"{RESOLVER}.log"
    zone.write_text(json.dumps(LAB_ZONE))
    process = start_process(ns, [sys.executable, "-m", "lab.dns_server", *program_cli.arguments(
        "resolver", {"listen": program_cli.address(ip, 53), "zone": zone})], log)
    state["resolver"] = {"namespace": ns, "ip": ip, "port": 53, "pid": process.pid, "log": str(log)}
    return Pending(RESOLVER, ip, 53, False, process, log)


def _tear_down(instance: str) -> list[str]:
    state = _read_state(instance)
    for process in [*(state or {}).get("servers", []), (state or {}).get("resolver") or {}]:
        if process.get("pid"):
            stop_process(process["pid"])
    removed = netns.sweep(f"{instance}-")
    shutil.rmtree(state_dir(instance), ignore_errors=True)
    return removed


def _check_instance(instance: str) -> None:
    # No dash: the sweep of "qlab-*" must never reach the namespaces of an instance "qlab-x".
    if not re.fullmatch(r"[a-z][a-z0-9]{0,15}", instance):
        raise ToolError(f"lab instance name {instance!r}: use 1-16 lowercase letters and digits, no dash")


def _check_machine() -> None:
    if os.geteuid() != 0:
        raise ToolError("the lab needs root (it creates network namespaces); run it as root")
    if not Path("/proc/self/ns/net").exists() or shutil.which("ip") is None:
        raise ToolError("the lab needs network-namespace support and the `ip` command (iproute2)")


def _check_topology(topology: Topology) -> None:
    subnet = ipaddress.ip_network(f"{topology.core_server_ip}/{topology.server_prefixlen}", strict=False)
    seen: dict[str, str] = {topology.core_server_ip: "the core"}
    for ip in topology.closed_hosts:
        seen[ip] = "a UDP-closed host"
    if topology.resolver is not None:
        seen[topology.resolver] = "the resolver"
    names = set()
    for spec in topology.servers:
        reason = kind_for(spec.kind).unavailable_reason()
        if reason:
            raise ToolError(f"lab server {spec.name}: {reason}")
        if spec.name in names:
            raise ToolError(f"two lab servers are named {spec.name!r}")
        if spec.name == RESOLVER and topology.resolver is not None:
            raise ToolError(f"lab server {spec.name!r}: the resolver's namespace has that name")
        names.add(spec.name)
        if ipaddress.ip_address(spec.ip) not in subnet:
            raise ToolError(f"lab server {spec.name}: {spec.ip} is outside the server subnet {subnet}")
        if spec.ip in seen:
            raise ToolError(f"lab server {spec.name}: {spec.ip} is already used by {seen[spec.ip]}")
        if ipaddress.ip_address(spec.ip) in ipaddress.ip_network(topology.silent_range):
            raise ToolError(f"lab server {spec.name}: {spec.ip} is in the silent range {topology.silent_range}")
        seen[spec.ip] = spec.name


def _refuse_if_running(instance: str) -> None:
    existing = netns.list_namespaces(f"{instance}-")
    state = _read_state(instance)
    if existing or state:
        since = f" since {state['started_at']}" if state else ""
        raise ToolError(f"the lab {instance!r} is already up{since} ({len(existing)} namespaces); "
                        f"run `qscan lab down` first")


@contextlib.contextmanager
def _instance_lock(instance: str) -> Iterator[None]:
    # The lock file sits beside the state dir, which `down` deletes.
    with open(RUN_DIR / f"{instance}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ToolError(f"another `qscan lab up/down` of {instance!r} is running; wait for it") from None
        yield


def _read_state(instance: str) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir(instance) / "state.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _write_state(instance: str, state: dict[str, Any]) -> None:
    path = state_dir(instance) / "state.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)
