"""A run's client and server on two hosts joined by a real network: the server side is started on the other host
by a launcher (common/launchers: a namespace standing for a host, ssh, or a Slurm step), the client runs here.
Nothing is emulated, so the link's facts are measured before the runs and stored with each:

    with TwoHosts("198.18.0.2", get_launcher("ssh:node2")) as hosts:   # measures RTT, rate, path MTU
        hosts.measured   # the run's link columns: link_backend "measured", delay_ms = RTT/2, ...

RTT: UDP echo round trips (linkem ping to linkem echo on the server's host); rate: a short iperf3 UDP
download, unlimited, received here; path MTU: the largest datagram with don't-fragment set whose echo returns.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import shutil
import socket
import tempfile
import time
from pathlib import Path

from common import netns
from common.launchers.base import Launcher
from replay.cpuidle import ShallowIdle
from replay.link import LINKEM, LinkConfig
from replay.testbed import ECHO_PORT, Endpoints, ip_udp_headers, measure_rate, measure_rtt
from tparams.errors import ToolError
from tparams.program_cli import address

BACKEND = "measured"  # the runs' link_backend: the link's columns hold what was measured, not emulated
RTT_PINGS = 200
RATE_SECONDS = 2.0
# Probe bounds (IP packet bytes): IPv4's and IPv6's minimum MTUs (every path carries them) and the largest
# jumbo frame in common use.
MTU_FLOOR = {socket.AF_INET: 576, socket.AF_INET6: 1280}
MTU_CEILING = 9216
# Linux's values where Python's socket module does not name them
IP_MTU_DISCOVER, IP_PMTUDISC_DO = getattr(socket, "IP_MTU_DISCOVER", 10), getattr(socket, "IP_PMTUDISC_DO", 2)
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO = getattr(socket, "IPV6_MTU_DISCOVER", 23), getattr(socket, "IPV6_PMTUDISC_DO", 2)


class TwoHosts(Endpoints):
    """The path of a two-host run, in place of the testbed: the same process handling (Endpoints), the server's
    side through ``launcher``, the client's here, no emulation. Entering it measures the link (``facts``). It has
    no ``reconfigure``: an Experiment with a server host refuses any link to emulate before it runs."""

    client_ns = None
    client_ip = None
    backend = BACKEND
    buffer_bytes = None  # each host's own socket buffers: the hosts' settings are theirs
    capture_end = "client"  # --trace captures here, the client's host (trace.capture): a download's receiver

    def __init__(self, server_host: str, launcher: Launcher, shallow_idle: bool = True,
                 rate_seconds: float = RATE_SECONDS):
        self.server_ip, self.server_ns = server_host, launcher
        self.link = LinkConfig()
        self.idle = ShallowIdle()
        self._shallow_idle = shallow_idle
        self.rate_seconds = rate_seconds
        self._processes = []
        self.workdir = Path(tempfile.mkdtemp(prefix="qreplay-twohost-"))
        self._held = contextlib.ExitStack()
        self.facts: dict = {}

    def __enter__(self) -> "TwoHosts":
        try:
            reason = self.server_ns.unavailable_reason()
            if reason:
                raise ToolError(f"--launcher {self.server_ns.describe()}: {reason}")
            if not LINKEM.exists():
                raise ToolError(f"{LINKEM} is missing: it measures the link's RTT and MTU (run scripts/setup.sh)")
            # a SIGTERM unwinds like Ctrl-C, so the servers started on the other host are stopped
            self._held.enter_context(netns.teardown_on_signals())
            if self._shallow_idle:
                self._held.enter_context(self.idle)
            self.facts = self.measure()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for process in self._processes:
            self.stop(process)
        self._processes.clear()
        self._held.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def measure(self) -> dict:
        """The link's own facts, before any run: RTT, loss of the echoes, rate, path MTU."""
        hostname = self.server_hostname()  # first: a launcher that reaches nothing says why, at once
        rtt = measure_rtt(self, RTT_PINGS)
        if not rtt.get("received"):
            raise ToolError(f"no echo came back from {self.server_ip}: the server's host is unreachable from here")
        mtu = self.probe_mtu(rtt["rtt_max_ms"])
        # datagrams that fill the path MTU, unfragmented, as a QUIC stack's would
        rate = measure_rate(self, self.rate_seconds, payload=mtu - ip_udp_headers(self.server_ip))
        return {"server_host": self.server_ip, "launcher": self.server_ns.describe(),
                "server_hostname": hostname, "rtt": rtt, "rate": rate, "path_mtu": mtu,
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def server_hostname(self) -> str:
        """The name of the host the launcher reached: what ran, beside the address and launcher asked for."""
        done = self.run_in(self.server_ns, ["uname", "-n"], timeout=30)
        if done.returncode != 0:
            raise ToolError(f"--launcher {self.server_ns.describe()} ran nothing on the server's host: "
                            f"{' '.join(done.stdout.split())[-200:]}")  # one line, a terminal's \r\n too
        return done.stdout.strip().splitlines()[-1]

    def probe_mtu(self, rtt_ms: float) -> int:
        """The largest IP packet that crosses to the server's host and back with don't-fragment set, by
        bisection over echoed UDP datagrams (linkem echo on the server's host)."""
        family, headers = _family(self.server_ip), ip_udp_headers(self.server_ip)
        echo = self.start_server([str(LINKEM), "echo", "--listen", address(self.server_ip, ECHO_PORT)],
                                 "mtu-echo.log")
        try:
            self.wait_listening(ECHO_PORT, "udp")
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                if family == socket.AF_INET:
                    sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
                else:
                    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)
                sock.connect((self.server_ip, ECHO_PORT))
                wait_s = max(0.1, 4 * rtt_ms / 1000)
                low, high = MTU_FLOOR[family], MTU_CEILING + 1  # low crosses; high is the first size known not to
                if not _crosses(sock, low - headers, wait_s):
                    raise ToolError(f"not even a {low}-byte packet crossed to {self.server_ip} and back")
                while high - low > 1:
                    size = (low + high) // 2
                    if _crosses(sock, size - headers, wait_s):
                        low = size
                    else:
                        high = size
                return low
        finally:
            self.stop(echo)

    @property
    def measured(self) -> dict:
        """A run's link columns: what the link was, as measured (one-way delays are half the echo RTT's median:
        the two directions are not told apart without synchronised clocks)."""
        rtt, rate = self.facts["rtt"], self.facts["rate"]
        return {"link_backend": BACKEND, "delay_ms": rtt["rtt_p50_ms"] / 2, "delay_up_ms": rtt["rtt_p50_ms"] / 2,
                "jitter_ms": 0.0, "loss_pct": rtt["loss_pct"], "rate_bps": int(rate["bits_per_second"]),
                "queue": None, "path_mtu": self.facts["path_mtu"], "link_measured": json.dumps(self.facts)}

    # --- what run_once asks of a path ---------------------------------------------------------------

    def queue_applied(self, link: LinkConfig) -> None:
        return None

    def interface_counters(self) -> dict:
        return {}


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET


def _crosses(sock: socket.socket, payload: int, wait_s: float, attempts: int = 3) -> bool:
    """Whether a ``payload``-byte datagram with don't-fragment set comes back from the echo server. Too large
    for the path MTU this host knows (its interface, or an ICMP "fragmentation needed" already received):
    EMSGSIZE at once."""
    probe = payload.to_bytes(4, "big") + bytes(payload - 4)
    for _ in range(attempts):
        try:
            sock.send(probe)
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE:
                return False
            raise
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                reply = sock.recv(65536)
            except (TimeoutError, socket.timeout):
                break
            except OSError as exc:  # an ICMP error for an earlier probe, reported on this socket
                if exc.errno == errno.EMSGSIZE:
                    return False
                continue
            if reply == probe:
                return True
    return False
