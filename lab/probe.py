"""Is a lab server answering yet? Probes sent from the client namespace only."""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

from tparams.errors import ToolError

from tparams.probe import make_probe
from common.netns import in_namespace


@dataclass
class Pending:
    name: str
    ip: str
    port: int
    tcp: bool
    process: Popen
    log: Path
    udp_answered: bool = False
    tcp_answered: bool = False

    @property
    def ready(self) -> bool:
        return self.udp_answered and (self.tcp_answered or not self.tcp)


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def wait_until_ready(client_ns: str, servers: list[Pending], timeout: float) -> None:
    """Probe every server until it answers UDP (and TCP where it serves it);
    a server that exits or stays mute raises a ToolError naming it and its log."""
    with in_namespace(client_ns):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setblocking(False)
    by_address = {(s.ip, s.port): s for s in servers}
    deadline = time.monotonic() + timeout
    try:
        while True:
            pending = [s for s in servers if not s.ready]
            if not pending:
                return
            for server in pending:
                if server.process.poll() is not None:
                    raise ToolError(f"lab server {server.name} exited with status {server.process.returncode}: "
                                    f"{log_tail(server.log)}")
            if time.monotonic() > deadline:
                server = pending[0]
                raise ToolError(f"lab server {server.name} did not answer on {server.ip}:{server.port} "
                                f"within {timeout:.0f}s: {log_tail(server.log)}")
            for server in pending:
                if not server.udp_answered:
                    udp.sendto(make_probe().payload, (server.ip, server.port))
                if server.tcp and not server.tcp_answered:
                    server.tcp_answered = _tcp_accepts(client_ns, server.ip, server.port)
            end = time.monotonic() + 0.1
            while (left := end - time.monotonic()) > 0 and select.select([udp], [], [], left)[0]:
                try:
                    _, source = udp.recvfrom(65535)
                except OSError:
                    continue
                if source in by_address:
                    by_address[source].udp_answered = True
    finally:
        udp.close()


def _tcp_accepts(client_ns: str, ip: str, port: int) -> bool:
    with in_namespace(client_ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(0.2)
    try:
        return sock.connect_ex((ip, port)) == 0
    finally:
        sock.close()
