"""The replay testbed: a client and a server network namespace joined by an
emulated path (replay/link.py), with UDP socket buffers enlarged for the run.

    with Testbed(link=LinkConfig(delay_down_ms=30), backend="auto") as tb:
        server = tb.start_server(["gtlsserver", ...])
        tb.run_client(["gtlsclient", tb.server_ip, ...], timeout=60)

Everything is torn down on exit, Ctrl-C, SIGTERM and exceptions; namespaces
left by a crashed process (named qrep-<pid>-...) are swept by the next one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from replay.cpuidle import ShallowIdle
from replay.link import LINKEM, PATH_DEVICE, LinkBackend, LinkConfig, select_backend
from common.process import (STARTED_PIDS, NotListening, ns_command, pid_alive, run_to_end, start_process,
                            stop_process, wait_listening)
from common.signals import signals_deferred
from common import netns
from tparams.errors import ToolError
from tparams.program_cli import address

PREFIX = "qrep-"
CLIENT_IP = "198.18.100.1"
SERVER_IP = "198.18.100.2"
# The Kempf thesis: default UDP buffers (208 KiB) dropped packets and about
# 2 MiB was best; it used 1664 KiB, and so do we.
BUFFER_BYTES = 1664 * 1024
BUFFER_SYSCTLS = ("net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default", "net.core.wmem_default")
SYSCTL_STATE = Path("/run/qreplay/socket-buffers.json")
_counter = itertools.count()


def sweep_stale() -> list[str]:
    """Delete qrep- namespaces whose creating process is gone (a crash or SIGKILL)."""
    removed = []
    for name in netns.list_namespaces(PREFIX):
        m = re.match(rf"{PREFIX}(\d+)-", name)
        if m and not pid_alive(int(m.group(1))):
            netns.delete_namespace(name)
            removed.append(name)
    return removed


class SocketBuffers:
    """Raises the UDP socket buffer sysctls for the run and restores them after.

    On this kernel net.core.{r,w}mem_* are global (read-only inside a
    namespace), so several testbeds at once share one raise: a state file
    under a lock keeps the original values and the live holders, and the
    last holder to leave restores. A holder that died is ignored, so a crash
    never leaves the machine raised for good."""

    def __init__(self, size: int = BUFFER_BYTES):
        self.size = size

    def __enter__(self) -> "SocketBuffers":
        with self._locked() as state:
            if not state["holders"]:
                _restore(state.get("saved", {}))  # a crashed holder's raise
                state["saved"] = {key: _read_sysctl(key) for key in BUFFER_SYSCTLS}
            state["holders"].append(os.getpid())
            for key in BUFFER_SYSCTLS:
                # Never lower a maximum somebody set higher on purpose.
                value = max(self.size, state["saved"][key]) if key.endswith("_max") else self.size
                _write_sysctl(key, value)
        return self

    def __exit__(self, *exc) -> None:
        with self._locked() as state:
            with contextlib.suppress(ValueError):
                state["holders"].remove(os.getpid())
            if not state["holders"]:
                _restore(state.pop("saved", {}))

    @contextlib.contextmanager
    def _locked(self):
        SYSCTL_STATE.parent.mkdir(parents=True, exist_ok=True)
        with open(SYSCTL_STATE.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = json.loads(SYSCTL_STATE.read_text())
            except (FileNotFoundError, ValueError):
                state = {}
            state["holders"] = [p for p in state.get("holders", []) if pid_alive(p)]
            yield state
            if state["holders"] or state.get("saved"):
                SYSCTL_STATE.write_text(json.dumps(state))
            else:
                SYSCTL_STATE.unlink(missing_ok=True)


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def _read_sysctl(key: str) -> int:
    return int(_sysctl_path(key).read_text())


def _write_sysctl(key: str, value: int) -> None:
    try:
        _sysctl_path(key).write_text(f"{value}\n")
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # e.g. below the kernel's floor (4096 here: 1KiB is refused)
            raise ToolError(f"the kernel refuses {key} = {value} bytes (--udp-buffer): give a larger size, "
                            "e.g. 1664KiB") from None
        raise ToolError(f"cannot set {key}: {exc.strerror}{' (run as root)' if os.geteuid() else ''}") from None


def _restore(saved: dict) -> None:
    for key, value in saved.items():
        _write_sysctl(key, value)


@dataclass
class ProcessResult:
    argv: list[str]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    wall_s: float
    cpu_s: float
    max_rss_kib: int


class Endpoints:
    """Processes on the client's and the server's side of a path: the testbed's two namespaces, or two hosts
    (replay/twohost.py). ``client_ns``/``server_ns`` say where each side's commands run (common.process.ns_command);
    ``workdir`` holds the logs; ``_processes`` what is still to be stopped."""

    client_ns: object
    server_ns: object
    server_ip: str
    workdir: Path
    _processes: list[subprocess.Popen]

    def start_server(self, argv: Sequence[str], log_name: str = "server.log") -> subprocess.Popen:
        return self._start(self.server_ns, argv, log_name)

    def start_client(self, argv: Sequence[str], log_name: str = "client.log") -> subprocess.Popen:
        return self._start(self.client_ns, argv, log_name)

    def _start(self, ns: str, argv: Sequence[str], log_name: str) -> subprocess.Popen:
        with signals_deferred():
            process = start_process(ns, list(argv), self.workdir / log_name)
            self._processes.append(process)
        return process

    def run_client(self, argv: Sequence[str], timeout: float = 60.0) -> ProcessResult:
        """Run ``argv`` in the client namespace to the end (killed after ``timeout`` s)."""
        return self.run_in(self.client_ns, argv, timeout)

    def run_in(self, ns: str, argv: Sequence[str], timeout: float = 60.0) -> ProcessResult:
        started = time.monotonic()
        with tempfile.TemporaryFile(dir=self.workdir) as out:
            returncode, rusage = run_to_end(ns, list(argv), out, timeout)
            out.seek(0)
            text = out.read().decode(errors="replace")
        return ProcessResult(list(argv), returncode, text, time.monotonic() - started,
                             rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss)

    def __exit__(self, *exc) -> None:
        self.close()

    def stop(self, process: subprocess.Popen) -> None:
        """End a process started here, with its group."""
        if process.poll() is None:
            stop_process(process.pid)
        process.poll()
        STARTED_PIDS.discard(process.pid)

    def wait_listening(self, port: int, transport: str, timeout: float = 5.0) -> None:
        """Until a ``transport`` ("udp" or "tcp") socket listens on ``port`` in the server namespace."""
        try:
            wait_listening(self.server_ns, port, transport, timeout, interval_s=0.02)
        except NotListening as exc:
            raise ToolError(f"{exc} on the server's side") from None


class Testbed(Endpoints):
    """Two namespaces (client, server) and the emulated path between them."""

    __test__ = False  # the name starts with "Test"; keep pytest from collecting it

    def __init__(self, link: LinkConfig | None = None, backend: str = "auto", workdir: Path | None = None,
                 buffer_bytes: int = BUFFER_BYTES, shallow_idle: bool = True):
        self.link = link or LinkConfig()
        self.backend_class = select_backend(backend, self.link)
        self.backend = self.backend_class.name
        tag = f"{PREFIX}{os.getpid()}-{next(_counter)}"
        self.client_ns, self.server_ns = f"{tag}-c", f"{tag}-s"
        self.client_ip, self.server_ip = CLIENT_IP, SERVER_IP
        # mkdtemp, not TemporaryDirectory: the latter's finalizer would also
        # run in pyroute2's forked children and delete the directory under us.
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="qreplay-testbed-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.buffer_bytes = buffer_bytes
        self._buffers = SocketBuffers(buffer_bytes)
        self.idle = ShallowIdle()
        self._shallow_idle = shallow_idle
        self._path: LinkBackend | None = None
        self._processes: list[subprocess.Popen] = []
        self._held = contextlib.ExitStack()  # signal handling and the idle-state request, for the testbed's life
        self._owner = os.getpid()

    def __enter__(self) -> "Testbed":
        self._held.enter_context(netns.teardown_on_signals())
        if self._shallow_idle:
            self._held.enter_context(self.idle)
        try:
            sweep_stale()
            netns.create_namespace(self.client_ns)
            netns.create_namespace(self.server_ns)
            self._path = self.backend_class(self.client_ns, self.server_ns, self.client_ip, self.server_ip,
                                            self.workdir)
            self._path.attach(self.link)
            self._buffers.__enter__()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Idempotent teardown; each step runs even if an earlier one failed."""
        if os.getpid() != self._owner:
            # pyroute2 forks to create namespaces; a child unwinding through
            # our frames must not tear down the parent's testbed.
            return
        steps = [lambda p=p: self.stop(p) for p in self._processes]
        if self._path:
            steps.append(self._path.detach)
        steps += [lambda: netns.delete_namespace(self.client_ns), lambda: netns.delete_namespace(self.server_ns)]
        if self._path:
            steps.append(lambda: self._buffers.__exit__(None, None, None))
        errors = []
        for step in steps:
            try:
                step()
            except Exception as exc:  # keep tearing down; report the first failure after
                errors.append(exc)
        self._processes.clear()
        self._path = None
        self._held.close()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if errors:
            raise errors[0]

    # --- the path -----------------------------------------------------------------------------------

    def queue_applied(self, link: LinkConfig) -> str | None:
        """The down queue the path holds under ``link`` (as ran; ``link.queue`` is the request)."""
        return self.backend_class.queue_applied(link)

    def reconfigure(self, link: LinkConfig) -> None:
        """Change the emulation in place (netem: tc replace; relay: linkem restart, a few ms)."""
        self._path.apply(link)
        self.link = link

    def interface_counters(self) -> dict:
        """Cumulative packets and bytes of each end's path interface, as
        {"client": {"tx": {"packets", "bytes"}, "rx": {...}, "udp": {...}}, "server": {...}},
        plus the emulator's own counters (drops by cause) under "link".
        Packets are wire packets (of at most the MTU) with linkem and with a
        plain veth (whose own counters count a GSO burst once: the datagrams
        that reached the far end's UDP layer count instead, since a veth
        loses none). "udp" holds the namespace's UDP
        counters (see udp_counters), where the datagrams the path delivered
        but a full socket buffer dropped show up."""
        counters = {}
        for role, ns in (("client", self.client_ns), ("server", self.server_ns)):
            with netns.iproute(ns) as ipr:
                stats = ipr.get_links(ipr.link_lookup(ifname=PATH_DEVICE)[0])[0].get_attr("IFLA_STATS64")
            counters[role] = {way: {"packets": stats[f"{way}_packets"], "bytes": stats[f"{way}_bytes"],
                                    "dropped": stats[f"{way}_dropped"]} for way in ("tx", "rx")}
            counters[role]["udp"] = udp_counters(ns)
        link = {d: {k: v for k, v in c.items() if not k.startswith("delay_error")}
                for d, c in self._path.link_counters().items() if isinstance(c, dict)}
        if link:
            counters["link"] = link
            # linkem takes GSO/TSO bursts whole, which its tun interfaces
            # count as one packet each; linkem counts every wire packet.
            for role, way, direction, end in (("server", "tx", "down", "in"), ("client", "rx", "down", "out"),
                                              ("client", "tx", "up", "in"), ("server", "rx", "up", "out")):
                counters[role][way]["packets"] = link[direction][f"packets_{end}"]
                counters[role][way]["bytes"] = link[direction][f"bytes_{end}"]
        elif self.backend == "veth":
            for sender, receiver in (("server", "client"), ("client", "server")):
                udp = counters[receiver]["udp"]
                # InErrors holds the datagrams a full socket buffer dropped: they crossed the wire too.
                counters[sender]["tx"]["packets"] = counters[receiver]["rx"]["packets"] = (
                    udp["in_datagrams"] + udp["in_errors"])
        return counters

    def link_counters(self) -> dict:
        """The emulator's full counters including delay-error quantiles ({} for netem)."""
        return self._path.link_counters()


# /proc/net/snmp's UDP counters, by the names the results use.
UDP_COUNTERS = {"InDatagrams": "in_datagrams", "OutDatagrams": "out_datagrams", "InErrors": "in_errors",
                "RcvbufErrors": "rcvbuf_errors", "SndbufErrors": "sndbuf_errors"}


def udp_counters(ns: str) -> dict[str, int]:
    """A namespace's UDP counters. ``rcvbuf_errors`` counts datagrams dropped
    because the receiving socket's buffer was full: the Kempf thesis's
    finding that the UDP receive buffer decides QUIC goodput shows here, and
    nowhere on the path."""
    done = subprocess.run(ns_command(ns, ["cat", "/proc/net/snmp"]), capture_output=True, text=True)
    names, values = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("Udp:")]
    return {UDP_COUNTERS[name]: int(value) for name, value in zip(names, values) if name in UDP_COUNTERS}


# --- calibration ------------------------------------------------------------------------------------

@dataclass
class Calibration:
    backend: str
    link: LinkConfig
    rtt: dict  # linkem ping summary: rtt_min/p50/mean/p99/max_ms, sent, received, loss_pct
    rate: dict | None  # iperf3 UDP download: bits_per_second, lost_percent, packets
    link_counters: dict
    cpu_idle: str  # ShallowIdle.state during the measurement
    wakeups: dict | None  # measure_wakeups(): deadlines, error_p50_us, error_p99_us, error_max_us

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(quantity, configured, measured, note) for a table."""
        rows = [("RTT p50", f"{self.link.rtt_ms:.3f} ms", f"{self.rtt['rtt_p50_ms']:.3f} ms",
                 f"error {self.rtt['rtt_p50_ms'] - self.link.rtt_ms:+.3f} ms, "
                 f"p99 {self.rtt['rtt_p99_ms']:.3f} ms"),
                ("loss (echo, down)", f"{self.expected_loss_pct:g} %", f"{self.rtt['loss_pct']:.2f} %",
                 f"{self.rtt['sent'] - self.rtt['received']} of {self.rtt['sent']} lost")]
        if self.rate:
            configured = f"{self.link.rate_bps / 1e6:g} Mbit/s" if self.link.rate_bps else "unlimited"
            rows.append(("rate (UDP down)", configured, f"{self.rate['bits_per_second'] / 1e6:.1f} Mbit/s",
                         f"{self.rate['lost_percent']:.2f} % of {self.rate['packets']} datagrams lost"))
        for direction in ("down", "up"):
            c = self.link_counters.get(direction)
            if c:
                rows.append((f"linkem {direction} delay error", "0", f"p50 {c['delay_error_p50_us']:g} us",
                             f"p99 {c['delay_error_p99_us']:g} us, dropped loss/queue "
                             f"{c['dropped_loss']}/{c['dropped_queue']}"))
        rows.append(("CPU idle states", "shallowest (PM QoS 0 us)", self.cpu_idle,
                     "deep idle makes timers late by up to milliseconds"))
        if self.wakeups:
            w = self.wakeups
            rows.append(("wake-up error, 1 ms sleeps", "0", f"p50 {w['error_p50_us']:g} us",
                         f"p99 {w['error_p99_us']:g} us, max {w['error_max_us']:.0f} us: this machine's floor for "
                         "any emulator's delay error"))
        return rows

    @property
    def expected_loss_pct(self) -> float:
        return self.link.gilbert.stationary_loss_pct if self.link.gilbert else self.link.loss_pct

    def as_dict(self) -> dict:
        return {"backend": self.backend, "link": self.link.describe(), "configured_rtt_ms": self.link.rtt_ms,
                "configured_loss_pct": self.expected_loss_pct, "configured_rate_bps": self.link.rate_bps,
                "rtt": self.rtt, "rate": self.rate, "link_counters": self.link_counters, "cpu_idle": self.cpu_idle,
                "wakeups": self.wakeups}


ECHO_PORT = 7007
IPERF_PORT = 5201
UDP_PAYLOAD = 1400
IPERF_SETUP_ATTEMPTS = 4  # at 1% loss all four lose the reply once in 10^8 tests
# rates are compared at the IP level, where the link limit applies
IP_UDP_HEADERS = {4: 28, 6: 48}  # by IP version


def ip_udp_headers(ip: str) -> int:
    """The IP and UDP headers' bytes of a datagram to ``ip``."""
    return IP_UDP_HEADERS[ipaddress.ip_address(ip).version]


def measure_rtt(tb: Endpoints, count: int = 2000, interval_ms: float = 1.0) -> dict:
    """UDP echo round trips from the client to the server namespace (linkem's ping/echo)."""
    echo = tb.start_server([str(LINKEM), "echo", "--listen", address(tb.server_ip, ECHO_PORT)], "echo.log")
    try:
        tb.wait_listening(ECHO_PORT, "udp")
        done = tb.run_client([str(LINKEM), "ping", "--target", address(tb.server_ip, ECHO_PORT), "--count",
                              str(count), "--interval", f"{interval_ms}ms",
                              "--wait", f"{max(500, 4 * tb.link.rtt_ms):.0f}ms"],
                             timeout=count * interval_ms / 1000 + 30)
    finally:
        tb.stop(echo)
    if done.returncode != 0:
        raise ToolError(f"linkem ping failed: {done.stdout.strip()[-200:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_rate(tb: Endpoints, seconds: float = 4.0, offered_bps: int | None = None,
                 payload: int = UDP_PAYLOAD) -> dict:
    """Server-to-client UDP bulk transfer with iperf3 of ``payload``-byte datagrams; the receiver's rate and
    loss."""
    if not shutil.which("iperf3"):
        raise ToolError("iperf3 is missing: apt-get install iperf3 (or run scripts/setup.sh)")
    if offered_bps is None:
        # Over-drive a configured rate by 20% so the limit, not the sender, decides.
        offered_bps = int(tb.link.rate_bps * 1.2) if tb.link.rate_bps else 0
    # iperf3 3.12 opens the UDP stream with one datagram and one reply, which in reverse mode crosses the
    # emulated downlink and its loss; a lost reply ends the test at once ("unable to read from stream socket",
    # no interval: 5 of 12 tests at 50% loss, once in a CI run at 1%), and iperf3 has no retry of its own.
    for attempt in range(1, IPERF_SETUP_ATTEMPTS + 1):
        done = _iperf3_download(tb, seconds, offered_bps, payload)
        try:
            # after any warning iperf3 prints first (a datagram larger than the TCP MSS, on a path MTU below 1500)
            result = json.loads(done.stdout[done.stdout.find("{"):])
        except ValueError as exc:
            raise ToolError(f"iperf3 failed: {done.stdout.strip()[-200:]}") from exc
        if "unable to read from stream socket" not in result.get("error", "") or result.get("intervals"):
            break
    try:
        summary, intervals = result["end"]["sum"], result["intervals"]
    except KeyError as exc:
        tries = f" {attempt} times (its stream setup crosses the lossy link)" if attempt > 1 else ""
        raise ToolError(f"iperf3 failed{tries}: {done.stdout.strip()[-200:]}") from exc
    # The receiver's per-second rates, without the first second (start-up):
    # the end summary would count the queue's drain after the sender stops.
    steady = [i["sum"]["bits_per_second"] for i in intervals[1:]] or [summary["bits_per_second"]]
    payload_bps = sum(steady) / len(steady)
    return {"bits_per_second": payload_bps * (payload + ip_udp_headers(tb.server_ip)) / payload,
            "payload_bits_per_second": payload_bps, "lost_percent": summary["lost_percent"],
            "packets": summary["packets"], "lost_packets": summary["lost_packets"],
            "offered_bps": offered_bps, "seconds": seconds, "setup_attempts": attempt}


def _iperf3_download(tb: Endpoints, seconds: float, offered_bps: int, payload: int) -> ProcessResult:
    server = tb.start_server(["iperf3", "-s", "-1", "-B", tb.server_ip, "-p", str(IPERF_PORT)], "iperf3.log")
    try:
        tb.wait_listening(IPERF_PORT, "tcp")  # iperf3's control connection, before any UDP
        return tb.run_client(["iperf3", "-c", tb.server_ip, "-p", str(IPERF_PORT), "-u", "-R", "-J",
                              "-l", str(payload), "-b", str(offered_bps), "-t", str(seconds)], timeout=seconds + 30)
    finally:
        tb.stop(server)


def calibrate(link: LinkConfig, backend: str = "auto", pings: int = 2000, ping_interval_ms: float = 1.0,
              rate_seconds: float = 4.0, measure_throughput: bool = True, shallow_idle: bool = True,
              buffer_bytes: int = BUFFER_BYTES) -> Calibration:
    """Configured versus achieved RTT, loss and rate of one backend."""
    with Testbed(link=link, backend=backend, shallow_idle=shallow_idle, buffer_bytes=buffer_bytes) as tb:
        rtt = measure_rtt(tb, pings, ping_interval_ms)
        counters = tb.link_counters()  # delay error of the echo traffic, before the bulk load
        wakeups = measure_wakeups()
        rate = measure_rate(tb, rate_seconds) if measure_throughput else None
        return Calibration(tb.backend, link, rtt, rate, counters, tb.idle.state, wakeups)


def measure_wakeups(interval_ms: float = 1.0, seconds: float = 1.0) -> dict | None:
    """How far from its deadlines a real-time thread with linkem's waiting policy wakes on this machine,
    now (`linkem timer`): the floor under any emulator's delay error. None without linkem."""
    if not LINKEM.exists():
        return None
    done = subprocess.run([str(LINKEM), "timer", "--interval", f"{interval_ms}ms", "--duration", f"{seconds}s"],
                          capture_output=True, text=True, timeout=seconds + 30)
    if done.returncode:
        raise ToolError(f"linkem timer failed: {done.stderr.strip()[-200:]}")
    return json.loads(done.stdout)
