"""One browser download, run inside the testbed's client namespace (or a two-host run's client "host"): the client
process of a browser stack.

    python -m replay.browser_driver chromium --server 198.18.100.2:4433 --size 5000000 --workdir DIR \\
        --cert DIR/cert.pem --ca DIR/ca.pem

starts the installed browser headless in a fresh profile, loads the measurement page (PAGE, which the
stack writes into the server's document root) over the transport asked for, lets the page fetch /<size>
and time it inside the browser (performance.now() from the request to the last body byte), and prints
the run as one JSON line. A run that cannot count (the browser fell back to TCP, refused the
certificate, never spoke h3, got the wrong bytes) also prints its JSON line, says why in one line on
stderr and exits with status 1.

Driven through public automation interfaces of the unpatched Debian builds: Chromium through the
DevTools protocol on --remote-debugging-pipe, Firefox through WebDriver BiDi on --remote-debugging-port
(a WebSocket on the namespace's own loopback).

Accounting. CPU: the driver is a child subreaper, so every process of the browser's tree, orphaned or
not, is reaped here or by a reaped ancestor, and wait4's rusage of the browser's processes adds up to
the tree's exact CPU time (the capture's dumpcap is left out). Memory: the largest sum of VmRSS over the
tree, sampled every 100 ms (a page shared by several processes counts in each, as in each process's
own RSS); a peak shorter than the interval can be missed.

Checks. The protocol the browser reports (Resource Timing's nextHopProtocol of the page and of the
download) must be the one asked for, and a capture of the run on the client's path interface must agree:
QUIC v1 packets and no TCP payload for h3, TCP and no UDP at all for h2. The browser's transport
parameters come from the ClientHello in the same capture (scanner.capture.extract).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tparams.program_cli import split_address
from tparams.workloads import STARTUP_BUFFER_S

HOST = "qreplay.lab"  # the server's name in the browser; each browser maps it to the server's address
BROWSERS = {"chromium": "chromium", "firefox": "firefox-esr"}
# What nextHopProtocol says for each transport asked for.
PROTOCOLS = {"quic": "h3", "tcp": "h2"}
MARKER_PORT = 9  # scanner.capture.frontend.wait_until_in_capture's marker datagram goes to the discard port
SAMPLE_S = 0.1

# The measurements, one function a workload, each reporting the browser's own timing (performance.now()) and its
# Resource Timing entries (the page's navigation opened the connection):
# - download: fetch /<size> uncached, read the body to its end without keeping it;
# - upload: PUT a body of <size> bytes to /<size>; the server answers with the number of body bytes it read
#   (tparams.workloads' replay protocol), timed from the request to the answer's end;
# - requests: <requests> GETs of /<size>, <concurrency> at once, as a page fetches its subresources: each one's
#   latency (request to its body's end, in completion order), the first one's time to its first byte;
# - stream: fetch /<size>?bitrate=<bits/s>, which the server paces, and play it back as it arrives by
#   tparams.workloads.Player, mirrored in qreplayPlayer (keep the two the same rule): stalls, their time, start-up.
PAGE = """<!doctype html>
<meta charset="utf-8"><title>qreplay</title>
<script>
performance.setResourceTimingBufferSize(100000);
const qreplayKeys = ["nextHopProtocol", "startTime", "fetchStart", "connectStart", "secureConnectionStart",
                     "connectEnd", "requestStart", "responseStart", "responseEnd", "transferSize", "encodedBodySize"];
const qreplayPick = entry => Object.fromEntries(qreplayKeys.map(k => [k, entry ? entry[k] : null]));
function qreplayUrl(size) { return new URL("/" + size, location.href).href; }
async function qreplayRead(response, onFirst) {
  const reader = response.body.getReader();
  let bytes = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) return bytes;
    if (bytes === 0 && onFirst) onFirst();
    bytes += value.length;
  }
}
function qreplayReport(url, fields) {
  return JSON.stringify({...fields, navigation: qreplayPick(performance.getEntriesByType("navigation")[0]),
                         request: qreplayPick(performance.getEntriesByName(url).pop())});
}
async function qreplayMeasure(size) {
  const url = qreplayUrl(size);
  const started = performance.now();
  const response = await fetch(url, {cache: "no-store"});
  const bytes = await qreplayRead(response);
  return qreplayReport(url, {status: response.status, bytes, started_ms: started, ended_ms: performance.now()});
}
async function qreplayUpload(size) {
  const url = qreplayUrl(size), body = new Uint8Array(size);
  const started = performance.now();
  const response = await fetch(url, {method: "PUT", body, cache: "no-store"});
  const answer = await response.text();
  const ended = performance.now();
  return qreplayReport(url, {status: response.status, answer: answer.slice(0, 40), started_ms: started,
                             ended_ms: ended});
}
async function qreplayRequests(size, requests, concurrency) {
  const url = qreplayUrl(size);
  let next = 0, bytes = 0, firstByte = null, status = 200;
  const latencies = [];
  const started = performance.now();
  async function worker() {
    while (next < requests) {
      next += 1;
      const sent = performance.now();
      const response = await fetch(url, {cache: "no-store"});
      if (response.status !== 200) status = response.status;
      // read first, then add: "bytes += await ..." would add to the value bytes had before the await
      const read = await qreplayRead(response, () => { if (firstByte === null) firstByte = performance.now(); });
      bytes += read;
      latencies.push(performance.now() - sent);
    }
  }
  await Promise.all(Array.from({length: Math.min(concurrency, requests)}, worker));
  return qreplayReport(url, {status, bytes, requests: latencies.length, started_ms: started,
                             ended_ms: performance.now(), first_byte_ms: firstByte, latencies_ms: latencies});
}
function qreplayPlayer(bitrate, size) {  // tparams.workloads.Player, the same rule: change both together
  const p = {mediaS: size * 8 / bitrate, receivedS: 0, playingSince: null, positionS: 0, stalledSince: 0,
             startupS: null, stalls: 0, stallS: 0};
  p.received = (t, n) => {  // n bytes arrived t seconds after the request
    if (p.playingSince !== null) {
      const dryAt = p.playingSince + (p.receivedS - p.positionS);
      if (dryAt < t && p.receivedS < p.mediaS) {
        p.stalls += 1; p.positionS = p.receivedS; p.stalledSince = dryAt; p.playingSince = null;
      }
    }
    p.receivedS = Math.min(p.mediaS, p.receivedS + n * 8 / bitrate);
    if (p.playingSince === null
        && p.receivedS - p.positionS >= Math.min(STARTUP_BUFFER_S, p.mediaS - p.positionS - 1e-9)) {
      if (p.startupS === null) p.startupS = t; else p.stallS += t - p.stalledSince;
      p.playingSince = t;
    }
  };
  return p;
}
async function qreplayStream(size, bitrate) {
  const url = new URL("/" + size + "?bitrate=" + bitrate, location.href).href;
  const player = qreplayPlayer(bitrate, size);
  const started = performance.now();
  const response = await fetch(url, {cache: "no-store"});
  const reader = response.body.getReader();
  let bytes = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    bytes += value.length;
    player.received((performance.now() - started) / 1000, value.length);
  }
  return qreplayReport(url, {status: response.status, bytes, started_ms: started, ended_ms: performance.now(),
                             stalls: player.stalls, stall_s: player.stallS, startup_s: player.startupS});
}
</script>
""".replace("STARTUP_BUFFER_S", repr(STARTUP_BUFFER_S))


class RunFailed(Exception):
    """The run cannot count; the message is the one line the runner stores."""


def write_page(htdocs: Path) -> None:
    """The measurement page, as index.html of a server's document root."""
    htdocs.mkdir(parents=True, exist_ok=True)
    (htdocs / "index.html").write_text(PAGE)


def spki_sha256(cert: Path) -> str:
    """Base64 SHA-256 of the certificate's SubjectPublicKeyInfo (Chromium's pin format)."""
    public_key = x509.load_pem_x509_certificate(cert.read_bytes()).public_key()
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


# --- the process tree -------------------------------------------------------------------------------

PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000


def become_subreaper() -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise RunFailed(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")


def resolve_only(server_ip: str, workdir: Path) -> None:
    """Let HOST, and no other name, resolve (to the server) for this process and what it starts: its own
    mount namespace, where a hosts file of one line covers /etc/hosts. The testbed has no route to a name
    server, so a browser's background services find no address and send nothing. (Before any thread starts:
    unshare refuses a process whose threads share its file-system state.)"""
    hosts = workdir / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{server_ip} {HOST}\n")
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNS) != 0:
        raise RunFailed(f"unshare(CLONE_NEWNS) failed: {os.strerror(ctypes.get_errno())}")
    for argv in (["mount", "--make-rslave", "/"], ["mount", "--bind", str(hosts), "/etc/hosts"]):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise RunFailed(f"{' '.join(argv)} failed: {done.stderr.strip()[-200:]}")


def _children(pid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def descendants(root: int, excluded: set[int]) -> list[int]:
    """Every live process below ``root``, leaving out the subtrees of ``excluded``."""
    out, todo = [], [c for c in _children(root) if c not in excluded]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += [c for c in _children(pid) if c not in excluded]
    return out


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class TreeAccount:
    """CPU and peak memory of this process's children and everything below them, except ``excluded``."""

    def __init__(self) -> None:
        self.excluded: set[int] = set()
        self.cpu_s = 0.0
        self.peak_rss_kb = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            total = sum(_rss_kb(pid) for pid in descendants(os.getpid(), self.excluded))
            self.peak_rss_kb = max(self.peak_rss_kb, total)

    def end_all(self, grace_s: float) -> None:
        """Wait ``grace_s`` for the tree to exit, then kill what is left; reap it all, adding up its CPU."""
        self._stop.set()
        deadline = time.monotonic() + grace_s
        while True:
            self._reap(block=False)
            left = descendants(os.getpid(), self.excluded)
            if not left:
                return
            if time.monotonic() > deadline:
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def _reap(self, block: bool) -> None:
        while True:
            try:
                pid, _, usage = os.wait4(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid not in self.excluded:
                self.cpu_s += usage.ru_utime + usage.ru_stime
                self.peak_rss_kb = max(self.peak_rss_kb, usage.ru_maxrss)


def path_device(server_ip: str) -> str:
    """The interface this namespace reaches the server through: the testbed's path, or a two-host run's link."""
    from common.netns import route_device
    from tparams.errors import ToolError
    try:
        return route_device(server_ip)
    except ToolError as exc:
        raise RunFailed(str(exc)) from None


def _only_the_path(device: str) -> bool:
    """Whether this namespace's interfaces are loopback and the path to the server alone (``ip netns exec``
    mounts the namespace's own /sys), so the browser can reach nothing but the server's namespace."""
    return set(os.listdir("/sys/class/net")) <= {"lo", device}


# --- the capture ------------------------------------------------------------------------------------

def capture_filter(transport: str, server_ip: str, client_ip: str) -> str:
    """What the capture keeps: cheap enough to run beside a fast download. h3 runs: QUIC long-header
    packets (the handshake, the ClientHello) and any TCP segment with payload or SYN, which must not be
    there; h2 runs: every UDP datagram (none must be there), the TCP handshakes and what the client sends
    (its TLS handshake, requests and window updates; not the download)."""
    if ":" in server_ip:
        # libpcap's udp[] and tcp[] read IPv4 packets only: over IPv6 the transport header is read at its offset
        # behind the fixed 40-byte header (the project's links add no extension headers)
        tcp_payload = "(ip6[4:2] - ((ip6[52] & 0xf0) >> 2)) > 0"
        syn, long_header = "ip6[53] & 0x02 != 0", "ip6[48] & 0x80 != 0"
    else:
        tcp_payload = "(ip[2:2] - ((ip[0] & 0xf) << 2) - ((tcp[12] & 0xf0) >> 2)) > 0"
        syn, long_header = "tcp[tcpflags] & tcp-syn != 0", "udp[8] & 0x80 != 0"
    if transport == "quic":
        return f"host {server_ip} and ((udp and {long_header}) or (tcp and ({syn} or {tcp_payload})))"
    return f"host {server_ip} and (udp or (tcp and ({syn} or (src host {client_ip} and {tcp_payload}))))"


@dataclass
class Capture:
    path: Path
    process: subprocess.Popen

    @classmethod
    def start(cls, device: str, transport: str, server_ip: str, client_ip: str, workdir: Path,
              account: TreeAccount) -> "Capture":
        from common.tshark import dumpcap_path, wait_until_capturing

        path, log = workdir / "run.pcapng", workdir / "dumpcap.log"
        with open(log, "wb") as out:
            process = subprocess.Popen([dumpcap_path(), "-i", device, "-f", capture_filter(transport, server_ip, client_ip),
                                        "-w", str(path)], stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
        account.excluded.add(process.pid)
        try:
            wait_until_capturing(process, log)
        except Exception:
            process.kill()
            process.wait()
            raise
        return cls(path, process)

    def stop(self, server_ip: str) -> None:
        from common.tshark import wait_until_in_capture

        try:
            wait_until_in_capture(self.path, server_ip, timeout=10)
        finally:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _own_address(server_ip: str) -> str:
    """This namespace's address towards the server."""
    with socket.socket(socket.AF_INET6 if ":" in server_ip else socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((server_ip, MARKER_PORT))
        return probe.getsockname()[0]


def read_transport(capture: Path, client_ip: str, server_ip: str, server_port: int) -> dict:
    """What crossed the path between the two namespaces (``transport_seen`` of the run): counts, and the
    handshake as the wire shows it, up to the moment the client can send its request: QUIC: the client's
    first Initial to its first Handshake packet (it holds the server's flight); TCP: the first SYN to the
    client's first TLS application-data record (its Finished, after TCP's and TLS 1.3's round trips);
    ``tcp_connect_s``: SYN to SYN-ACK."""
    from aioquic.quic.packet import QuicPacketType

    from common.tshark import tshark_path
    from scanner.capture.frontend import long_header_datagrams
    from scanner.handshake.packets import long_packets

    ip = "ipv6" if ":" in server_ip else "ip"  # tshark's field names by family
    fields = ["frame.time_epoch", f"{ip}.src", "udp.dstport", "tcp.len", "tcp.flags.syn", "tcp.stream"]
    command = [tshark_path(), "-n", "-r", str(capture), "--disable-protocol", "quic", "-Y", "udp or tcp",
               "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"]
    for name in fields:
        command += ["-e", name]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RunFailed(f"tshark cannot read the run's capture: {done.stderr.strip()[-200:]}")
    seen: dict = {"quic_v1_packets": 0, "quic_other_packets": 0, "udp_datagrams": 0, "tcp_syn_packets": 0,
                  "tcp_payload_packets": 0}
    first: dict[str, float] = {}
    syn_of_stream: dict[str, float] = {}
    for line in done.stdout.splitlines():
        when, src, udp_port, tcp_len, syn, stream = (line.split("\t") + [""] * 6)[:6]
        if udp_port:
            seen["udp_datagrams"] += udp_port != str(MARKER_PORT)
        elif tcp_len:
            is_syn = syn in ("1", "True")
            seen["tcp_syn_packets"] += is_syn
            seen["tcp_payload_packets"] += int(tcp_len) > 0
            if is_syn:
                first.setdefault("syn" if src == client_ip else "syn-ack", float(when))
                if src == client_ip:
                    syn_of_stream.setdefault(stream, float(when))
    for datagram in long_header_datagrams(capture):
        if datagram.dst_port == MARKER_PORT or {datagram.src_ip, datagram.dst_ip} != {client_ip, server_ip}:
            continue
        version = int.from_bytes(datagram.payload[1:5], "big")
        seen["quic_v1_packets" if version == 1 else "quic_other_packets"] += 1
        if datagram.src_ip == client_ip:
            for packet in long_packets(datagram.payload):
                if packet.packet_type in (QuicPacketType.INITIAL, QuicPacketType.HANDSHAKE):
                    first.setdefault(packet.packet_type.name, datagram.time)
    if syn_of_stream:  # the connection that first carried a request: a browser may open a spare one
        tls = subprocess.run([tshark_path(), "-n", "-r", str(capture), "-d", f"tcp.port=={server_port},tls", "-Y",
                              f"{ip}.src == {client_ip} and tls.record.content_type == 23", "-T", "fields", "-e",
                              "frame.time_epoch", "-e", "tcp.stream"], capture_output=True, text=True).stdout.split()
        if len(tls) >= 2 and tls[1] in syn_of_stream:
            first["tls-syn"], first["tls-finished"] = syn_of_stream[tls[1]], float(tls[0])
    for name, opened, done_at in (("quic_handshake_s", "INITIAL", "HANDSHAKE"), ("tcp_connect_s", "syn", "syn-ack"),
                                  ("tls_handshake_s", "tls-syn", "tls-finished")):
        if opened in first and done_at in first and first[done_at] >= first[opened]:
            seen[name] = first[done_at] - first[opened]
    return seen


def read_client_hello(capture: Path, label: str, server_port: int, keylog: Path | None = None) -> dict:
    """The browser's transport parameters from the run's first ClientHello (the twelve, by name), its
    fingerprint and how many ClientHellos the run had, and the server's answer to it (its EncryptedExtensions,
    decrypted with the browser's key log: ``server_sent``); {} when the capture holds none."""
    from scanner.capture.extract import read_capture
    from tparams.errors import ToolError
    from tparams.paramset import ParamSet

    try:
        hellos = read_capture(capture, keylog=keylog if keylog and keylog.is_file() else None, client=label,
                              ports=(server_port,)).hellos
    except ToolError:
        return {}
    sent = ParamSet.from_decoded(hellos[0].transport_parameters)
    answered = next((h.server_transport_parameters for h in hellos if h.server_transport_parameters), None)
    return {"client_sent": {k: v for k, v in sent.as_sent().items() if v is not None},
            "client_sent_fingerprint": sent.fingerprint(), "client_hellos": len(hellos),
            "client_sent_sets": len({ParamSet.from_decoded(h.transport_parameters).fingerprint() for h in hellos}),
            "server_sent": None if answered is None else
            {k: v for k, v in ParamSet.from_decoded(answered).as_sent().items() if v is not None}}


def namespace_counters() -> dict[str, int]:
    """This namespace's UDP datagrams and TCP segments received (/proc/net/snmp; IPv6's UDP apart in snmp6, TCP's
    one count for both families)."""
    lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()]
    table = {}
    for names, values in zip(lines[::2], lines[1::2]):
        table.update({f"{names[0]}{n}": int(v) for n, v in zip(names[1:], values[1:]) if v.lstrip("-").isdigit()})
    with contextlib.suppress(OSError):  # no snmp6 on a kernel without IPv6
        table.update(line.split() for line in Path("/proc/net/snmp6").read_text().splitlines())
    return {"udp_in_datagrams": table.get("Udp:InDatagrams", 0) + int(table.get("Udp6InDatagrams", 0)),
            "tcp_in_segments": table.get("Tcp:InSegs", 0)}


# --- the browsers -----------------------------------------------------------------------------------

@dataclass
class Target:
    browser: str  # chromium | firefox
    server_ip: str
    port: int
    size: int
    transport: str  # quic | tcp
    cert: Path  # the server's certificate (Chromium pins its key)
    ca: Path  # the CA that signed it (Firefox trusts it)
    trust: bool  # False: the browser is given nothing to trust the server's certificate by
    workdir: Path
    timeout_s: float
    keylog: Path | None = None
    environment: dict[str, str] = field(default_factory=dict)
    direction: str = "down"  # down: GETs, up: a PUT of a body of ``size`` bytes
    requests: int = 1
    concurrency: int = 1
    qlog_dir: Path | None = None  # firefox: neqo's qlog of each connection, copied here
    bitrate: int | None = None  # a stream's (bits/s): one GET the server paces, played back by the page

    @property
    def page_url(self) -> str:
        return f"https://{HOST}:{self.port}/index.html"

    @property
    def workload(self) -> str:
        """The workload's name in the page's words (and the run's error lines)."""
        return ("stream" if self.bitrate else "upload" if self.direction == "up" else
                "requests" if self.requests > 1 else "download")

    @property
    def expression(self) -> str:
        """The page's measurement of this run's workload (PAGE)."""
        if self.bitrate:
            return f"qreplayStream({self.size}, {self.bitrate})"
        if self.direction == "up":
            return f"qreplayUpload({self.size})"
        if self.requests > 1:
            return f"qreplayRequests({self.size}, {self.requests}, {self.concurrency})"
        return f"qreplayMeasure({self.size})"

    def process_environment(self) -> dict[str, str]:
        """The browser's own HOME, caches and temporary directory inside the run's directory (which the
        runner removes), so a run leaves nothing behind and inherits nothing."""
        home = self.workdir / "home"
        for sub in ("", "tmp", "cache", "config"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TMPDIR": str(home / "tmp"),
               "XDG_CACHE_HOME": str(home / "cache"), "XDG_CONFIG_HOME": str(home / "config"),
               "LANG": "C.UTF-8", **self.environment}
        if self.keylog:
            env["SSLKEYLOGFILE"] = str(self.keylog)
        return env


def quiet_chromium(profile: Path) -> list[str]:
    """Headless Chromium driven over --remote-debugging-pipe (launch_chromium), its profile in ``profile``,
    with nothing on the wire but what it is asked to load: no updates, sync, metrics, safe browsing or field
    trials."""
    return [BROWSERS["chromium"], "--headless=new", "--no-sandbox",  # root in the testbed
            "--disable-gpu", "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-extensions", "--disable-domain-reliability",
            "--disable-client-side-phishing-detection", "--safebrowsing-disable-auto-update",
            "--metrics-recording-only", "--disable-breakpad", "--no-pings", "--password-store=basic",
            "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
            "--remote-debugging-pipe"]


def chromium_command(target: Target, profile: Path) -> list[str]:
    # an IPv6 address in brackets: unbracketed, the rule is dropped and the name not resolved (Chromium 156)
    server = f"[{target.server_ip}]" if ":" in target.server_ip else target.server_ip
    argv = [*quiet_chromium(profile), f"--host-resolver-rules=MAP {HOST} {server}"]
    if target.transport == "quic":
        argv += ["--enable-quic", f"--origin-to-force-quic-on={HOST}:{target.port}"]
    else:
        argv.append("--disable-quic")
    if target.trust:
        argv.append(f"--ignore-certificate-errors-spki-list={spki_sha256(target.cert)}")
    return [*argv, "about:blank"]


FIREFOX_PREFERENCES = {
    # Name resolution: the system's (resolve_only); network.dns.disableIPv6 by the server's family
    # (firefox_preferences).
    "network.trr.mode": 5,
    "network.proxy.type": 0,
    # Quiet: no updates, telemetry, safe browsing, remote settings, portal or connectivity checks.
    "app.update.enabled": False, "app.normandy.enabled": False, "browser.shell.checkDefaultBrowser": False,
    "datareporting.policy.dataSubmissionEnabled": False, "datareporting.healthreport.uploadEnabled": False,
    "toolkit.telemetry.enabled": False, "toolkit.telemetry.reportingpolicy.firstRun": False,
    "network.captive-portal-service.enabled": False, "network.connectivity-service.enabled": False,
    "browser.safebrowsing.update.enabled": False, "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False, "browser.safebrowsing.downloads.enabled": False,
    "extensions.update.enabled": False, "geo.provider.network.url": "",
    "browser.region.network.url": "", "network.prefetch-next": False, "network.predictor.enabled": False,
    "privacy.reduceTimerPrecision": False,  # performance.now() at full resolution, not rounded to 1 ms
}


def firefox_preferences(target: Target) -> dict[str, object]:
    # IPv4 only to an IPv4 server: an IPv6 (::1) answer first left the load hanging
    prefs = {**FIREFOX_PREFERENCES, "network.dns.disableIPv6": ":" not in target.server_ip}
    if target.transport == "quic":
        prefs.update({
            "network.http.http3.enable": True,
            # Straight to h3, as a site with Alt-Svc already known: no TCP first.
            "network.http.http3.alt-svc-mapping-for-testing": f'{HOST};h3=":{target.port}"',
            "network.http.http3.force-use-alt-svc-mapping-for-testing": True,
            # Firefox drops HTTP/3 for a certificate chaining to a root it did not ship (the lab's CA).
            "network.http.http3.disable_when_third_party_roots_found": False,
            # No TCP connection "backing up" an h3 handshake that is slow to finish: with this delay at 1 ms,
            # every upload to caddy (which answers on TCP too) went partly over http/1.1 and failed its
            # protocol check (3 of 3, 2026-11-28), as one in a loaded test run had at Firefox's default; an
            # h3 handshake slower than this fails the run instead, as a timeout.
            "network.http.http3.backup_timer_delay": 30_000,
            # neqo's qlog (its congestion window, losses, state changes) into the temporary directory
            "network.http.http3.enable_qlog": target.qlog_dir is not None,
        })
    else:
        prefs["network.http.http3.enable"] = False
    return prefs


def prepare_firefox_profile(target: Target, profile: Path) -> None:
    """The run's own new profile, trusting the lab's CA, with the run's preferences (user.js).

    New for every run, not a copy of one Firefox started once (1.3-1.7 s less CPU a run, tried 2026-11-28): on
    a quiet machine a copied profile's page of 20 objects at 100 ms took 615-633 ms in 5 of 7 invocations
    (4 runs each), a new one 460-495 ms in 8 of 8, interleaved, 19:37-19:42 at load 0.4-3.8; a slow run's capture
    shows Firefox's second connection, which the page's fetches use, opened when they start (394 ms) instead of
    beside the first handshake (42-110 ms in fast runs). Which of the profile's state does it: not found."""
    profile.mkdir(parents=True)
    if target.trust:
        for argv in (["certutil", "-N", "-d", f"sql:{profile}", "--empty-password"],
                     ["certutil", "-A", "-d", f"sql:{profile}", "-n", "qreplay lab CA", "-t", "CT,C,C",
                      "-i", str(target.ca)]):
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise RunFailed(f"certutil could not trust the lab CA: {done.stderr.strip()[-200:]}")
    (profile / "user.js").write_text("".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n"
                                             for k, v in firefox_preferences(target).items()))


class DevTools:
    """The Chrome DevTools protocol on --remote-debugging-pipe: JSON messages ended by a NUL byte, the
    browser reading its fd 3 and writing its fd 4."""

    def __init__(self, to_browser: int, from_browser: int, deadline: float):
        self.to_browser, self.from_browser, self.deadline = to_browser, from_browser, deadline
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def _message(self) -> dict:
        while b"\0" not in self._buffer:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_browser], [], [], left)[0]:
                raise RunFailed("chromium did not finish within the run's timeout")
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RunFailed("chromium closed its DevTools pipe (it exited)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RunFailed(f"chromium refused {method}: {reply['error'].get('message')}")
                return reply["result"]
            self.events.append(reply)

    def close(self) -> None:
        os.close(self.to_browser)
        os.close(self.from_browser)

    def wait_event(self, method: str) -> dict:
        while True:
            found = next((e for e in self.events if e.get("method") == method), None)
            if found:
                self.events.remove(found)
                return found
            self.events.append(self._message())


def launch_chromium(argv: list[str], env: dict[str, str], log: Path,
                    timeout_s: float) -> tuple[subprocess.Popen, DevTools]:
    """Start Chromium (``argv`` with --remote-debugging-pipe, e.g. quiet_chromium's) and the DevTools session
    to it, whose calls fail after ``timeout_s``; the caller closes both (DevTools.close)."""
    to_read, to_browser = os.pipe()  # the browser reads commands on its fd 3
    from_browser, to_write = os.pipe()  # and writes replies on its fd 4

    def pipes_at_3_and_4() -> None:
        # Moved clear of 3 and 4 first: either pipe end may itself be fd 3 or 4.
        reading, writing = fcntl.fcntl(to_read, fcntl.F_DUPFD, 10), fcntl.fcntl(to_write, fcntl.F_DUPFD, 10)
        os.dup2(reading, 3)
        os.dup2(writing, 4)

    with open(log, "wb") as written:
        browser = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=written, stderr=written, env=env,
                                   pass_fds=(to_read, to_write, 3, 4), preexec_fn=pipes_at_3_and_4)
    os.close(to_read)
    os.close(to_write)
    return browser, DevTools(to_browser, from_browser, time.monotonic() + timeout_s)


def run_chromium(target: Target, profile: Path, out: dict) -> dict:
    """The page's measurement from Chromium (its exact version into ``out``)."""
    _, devtools = launch_chromium(chromium_command(target, profile), target.process_environment(),
                                  target.workdir / "browser.log", target.timeout_s)
    try:
        version = out["browser_version"] = devtools.call("Browser.getVersion")["product"].split("/")[-1]
        pages = [t for t in devtools.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
        if not pages:
            raise RunFailed("chromium opened no page")
        session = devtools.call("Target.attachToTarget", {"targetId": pages[0]["targetId"], "flatten": True})[
            "sessionId"]
        devtools.call("Page.enable", session=session)
        navigated = devtools.call("Page.navigate", {"url": target.page_url}, session)
        if navigated.get("errorText"):
            raise RunFailed(f"chromium {version} could not load the page over "
                            f"{PROTOCOLS[target.transport]}: {navigated['errorText']}")
        devtools.wait_event("Page.loadEventFired")
        evaluated = devtools.call("Runtime.evaluate", {"expression": target.expression,
                                                       "awaitPromise": True, "returnByValue": True}, session)
        if "exceptionDetails" in evaluated:
            details = evaluated["exceptionDetails"]
            raise RunFailed(f"the page's {target.workload} failed in chromium {version}: "
                            f"{details.get('exception', {}).get('description', details.get('text'))}".splitlines()[0])
        measured = json.loads(evaluated["result"]["value"])
        with contextlib.suppress(RunFailed):
            devtools.call("Browser.close")
        return measured
    finally:
        devtools.close()


@contextlib.contextmanager
def firefox_session(target: Target, profile: Path) -> Iterator[Callable[[str, dict], dict]]:
    """Firefox started headless on ``profile`` in the run's environment, and a function that makes one
    WebDriver BiDi call within the run's timeout (its result; RunFailed for an error or the timeout)."""
    from websockets.sync.client import connect

    env = {**target.process_environment(), "MOZ_HEADLESS": "1"}
    browser = subprocess.Popen([BROWSERS["firefox"], "--headless", "--no-remote", "--profile", str(profile),
                                "--remote-debugging-port=0", "about:blank"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    url = _bidi_url(browser, target.workdir / "browser.log", time.monotonic() + min(60.0, target.timeout_s))
    deadline = time.monotonic() + target.timeout_s
    with connect(f"{url}/session", max_size=None, open_timeout=30) as channel:
        counter = iter(range(1, 1 << 30))

        def call(method: str, params: dict) -> dict:
            number = next(counter)
            channel.send(json.dumps({"id": number, "method": method, "params": params}))
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RunFailed("firefox did not finish within the run's timeout")
                try:
                    reply = json.loads(channel.recv(timeout=left))
                except TimeoutError:
                    raise RunFailed("firefox did not finish within the run's timeout") from None
                if reply.get("id") == number:
                    if reply.get("type") == "error":
                        raise RunFailed(f"firefox refused {method}: {reply.get('error')}: "
                                        f"{reply.get('message', '')}".splitlines()[0][:300])
                    return reply["result"]

        yield call


def run_firefox(target: Target, profile: Path, out: dict) -> dict:
    """The page's measurement from Firefox through WebDriver BiDi (its exact version into ``out``)."""
    prepare_firefox_profile(target, profile)
    with firefox_session(target, profile) as call:
        version = out["browser_version"] = call("session.new", {"capabilities": {}})["capabilities"]["browserVersion"]
        context = call("browsingContext.getTree", {})["contexts"][0]["context"]
        try:
            call("browsingContext.navigate", {"context": context, "url": target.page_url, "wait": "complete"})
        except RunFailed as exc:
            raise RunFailed(f"firefox {version} could not load the page over {PROTOCOLS[target.transport]}: "
                            f"{str(exc).split(': ', 2)[-1].removeprefix('Error: ')}") from None
        evaluated = call("script.evaluate", {"expression": target.expression,
                                             "target": {"context": context}, "awaitPromise": True})
        if evaluated.get("type") == "exception":
            details = evaluated.get("exceptionDetails", {})
            where = details.get("stackTrace", {}).get("callFrames", [{}])[0].get("url", "")
            if where.startswith("about:"):  # an error page: a refused certificate, a failed connection
                raise RunFailed(f"firefox {version} could not load the page over {PROTOCOLS[target.transport]}: "
                                f"it showed {where.split('&')[0]}")
            raise RunFailed(f"the page's {target.workload} failed in firefox {version}: {details.get('text')}")
        measured = json.loads(evaluated["result"]["value"])
        with contextlib.suppress(RunFailed, OSError):
            call("browser.close", {})
    return measured


def keep_qlogs(target: Target) -> None:
    """Firefox's qlogs (one a connection, in qlog_<pid> of its temporary directory) into target.qlog_dir."""
    target.qlog_dir.mkdir(parents=True, exist_ok=True)
    for written in Path(target.process_environment()["TMPDIR"]).glob("qlog*/*"):
        shutil.copy(written, target.qlog_dir / written.name)


def _bidi_url(browser: subprocess.Popen, log: Path, deadline: float) -> str:
    """The WebDriver BiDi address Firefox prints; the rest of its output is copied to ``log``."""
    assert browser.stdout is not None
    found: list[str] = []
    ready = threading.Event()

    def copy() -> None:
        with open(log, "wb") as out:
            for line in browser.stdout:
                out.write(line)
                match = re.search(rb"WebDriver BiDi listening on (ws://\S+)", line)
                if match and not found:
                    found.append(match.group(1).decode())
                    ready.set()
        ready.set()

    threading.Thread(target=copy, daemon=True).start()
    if not ready.wait(max(0.0, deadline - time.monotonic())) or not found:
        raise RunFailed("firefox opened no WebDriver BiDi port: " + _tail(log))
    return found[0]


def _tail(log: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1][:200] if lines else "no output"
    return "no output"


# --- one run ----------------------------------------------------------------------------------------

def check_protocol(target: Target, measured: dict, seen: dict, label: str) -> str:
    """The protocol the run used, when the browser's word and the capture agree on the one asked for;
    else RunFailed with the one line that says what happened instead."""
    expected = PROTOCOLS[target.transport]
    said = {measured["navigation"]["nextHopProtocol"], measured["request"]["nextHopProtocol"]}
    if said != {expected}:
        spoken = " and ".join(sorted(str(p) for p in said))
        fell_back = " (fell back to TCP)" if target.transport == "quic" and said & {"h2", "http/1.1"} else ""
        raise RunFailed(f"{label} spoke {spoken}, not {expected}{fell_back}")
    if target.transport == "quic":
        if not seen["quic_v1_packets"]:
            raise RunFailed(f"{label} said h3 but the capture holds no QUIC v1 packet between the namespaces")
        if seen["tcp_payload_packets"]:
            raise RunFailed(f"{label} said h3 but the capture holds {seen['tcp_payload_packets']} TCP segments "
                            "with payload")
    else:
        if not seen["tcp_syn_packets"]:
            raise RunFailed(f"{label} said {expected} but the capture holds no TCP handshake")
        if seen["udp_datagrams"]:
            raise RunFailed(f"{label} said {expected} but the capture holds {seen['udp_datagrams']} UDP datagrams")
    return expected


def run(target: Target, out: dict) -> None:
    """Fill ``out`` with the run as the runner stores it; RunFailed when it cannot count (``out`` then
    holds what was measured all the same: the version, CPU, the capture's counts, the ClientHello)."""
    device = path_device(target.server_ip)
    if not _only_the_path(device):
        raise RunFailed("a browser runs only in a namespace whose one way out is the path to the server, here "
                        f"{device} (the testbed's client namespace, or a two-host run's standing for its host; not "
                        "with --link loopback)")
    resolve_only(target.server_ip, target.workdir)
    become_subreaper()
    profile = target.workdir / "profile"
    shutil.rmtree(profile, ignore_errors=True)
    account = TreeAccount()
    client_ip = _own_address(target.server_ip)
    capture = Capture.start(device, target.transport, target.server_ip, client_ip, target.workdir, account)
    before = namespace_counters()
    failure: RunFailed | None = None
    try:
        try:
            measured = (run_chromium(target, profile, out) if target.browser == "chromium" else
                        run_firefox(target, profile, out))
        except RunFailed as exc:
            failure = exc
        finally:
            account.end_all(grace_s=5.0)
            out.update(client_cpu_s=account.cpu_s, client_maxrss_kb=account.peak_rss_kb)
    finally:
        after = namespace_counters()
        capture.stop(target.server_ip)
    label = f"{target.browser} {out.get('browser_version', '')}".strip()
    seen = read_transport(capture.path, client_ip, target.server_ip, target.port)
    out["transport_seen"] = {**seen, **{k: after[k] - before[k] for k in after}}
    if target.transport == "quic":
        out.update(read_client_hello(capture.path, label, target.port, target.keylog))
        # what the server answered with: the parameters that bound the browser as a sender (an upload's)
        out["transport_seen"]["server_sent"] = out.pop("server_sent", None)
    if failure:
        if target.transport == "quic" and "quic_handshake_s" in seen and seen["tcp_syn_packets"]:
            # Firefox retries over TCP after an h3 connection fails (a refused certificate among the causes)
            # and may then report the TCP attempt's error: the capture tells what came first.
            raise RunFailed(f"{failure} (after a QUIC handshake that reached the server's flight, it fell back "
                            "to TCP)")
        raise failure
    out.update(measured_row(target, measured), handshake_s=seen.get("quic_handshake_s", seen.get("tls_handshake_s")))
    out["protocol_seen"] = check_protocol(target, measured, seen, label)
    check_moved(target, measured, label)


def measured_row(target: Target, measured: dict) -> dict:
    """What the run reports of the page's measurement, in the replay protocol's words (tparams.workloads):
    bytes moved (an upload's: the count the server answered), request to last response finished, and for
    many requests their count, the first one's time to first byte and each one's latency."""
    row = {"duration_s": (measured["ended_ms"] - measured["started_ms"]) / 1000, "http_status": measured["status"],
           "resource_timing": {"navigation": measured["navigation"], target.workload: measured["request"]}}
    if target.direction == "up":
        answer = measured["answer"].strip()
        row.update(bytes=int(answer) if answer.isdigit() else 0, server_answer=measured["answer"],
                   timing="request to the answer's end (in the browser: performance.now() around fetch() of a "
                          "PUT and the server's answer, the count of body bytes it read; the page's load opened "
                          "the connection)")
    else:
        row.update(bytes=measured["bytes"],
                   timing="request to last body byte (in the browser: performance.now() around fetch() and its "
                          "body reader; the page's load opened the connection)")
    if target.requests > 1:
        row.update(requests=measured["requests"], ttfb_s=(measured["first_byte_ms"] - measured["started_ms"]) / 1000,
                   latencies_s=[ms / 1000 for ms in measured["latencies_ms"]],
                   timing="first request to last body byte (in the browser: performance.now() around each "
                          "fetch() and its body reader; the page's load opened the connection)")
    if target.bitrate:
        row.update(stalls=measured["stalls"], stall_s=measured["stall_s"],
                   startup_s=measured["startup_s"], bitrate=target.bitrate)
    return row


def check_moved(target: Target, measured: dict, label: str) -> None:
    """RunFailed unless every request was answered 200 and moved its bytes, an upload's as counted by the
    server."""
    status = measured["status"]
    if target.direction == "up":
        answer = measured["answer"].strip()
        if status != 200 or answer != str(target.size):
            raise RunFailed(f"{label} put {target.size} bytes and got status {status} and the answer "
                            f"{answer[:20]!r}, not the count {target.size} of body bytes read")
        return
    wanted = target.size * target.requests
    if status != 200 or measured["bytes"] != wanted:
        raise RunFailed(f"{label} got status {status} and {measured['bytes']} of {wanted} bytes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replay.browser_driver", description=__doc__.split("\n")[0])
    parser.add_argument("browser", choices=sorted(BROWSERS))
    parser.add_argument("--server", required=True, help="IP:PORT of the server ([IPv6]:PORT)")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--transport", choices=sorted(PROTOCOLS), default="quic")
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--ca", type=Path, required=True)
    parser.add_argument("--no-trust", action="store_true", help="give the browser nothing to trust the server by")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--keylog", type=Path)
    # the replay protocol's workload options (tparams.workloads), as the replay clients take them
    parser.add_argument("--direction", choices=("down", "up"), default="down")
    parser.add_argument("--requests", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--bitrate", type=int, help="a stream: the bits/s the server paces it at and the page plays "
                                                     "it at")
    parser.add_argument("--qlog-dir", type=Path, help="firefox: write neqo's qlog of each connection here")
    args = parser.parse_args(argv)
    ip, port = split_address(args.server)
    args.workdir.mkdir(parents=True, exist_ok=True)
    target = Target(args.browser, ip, int(port), args.size, args.transport, args.cert, args.ca, not args.no_trust,
                    args.workdir, args.timeout_s, args.keylog or args.workdir / "keylog", direction=args.direction,
                    requests=args.requests, concurrency=args.concurrency, qlog_dir=args.qlog_dir,
                    bitrate=args.bitrate)
    # The runner stops a client with SIGTERM: unwind, so the browser's tree is ended and reaped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result: dict = {"bytes": 0}
    try:
        run(target, result)
        print(json.dumps(result), flush=True)
        return 0
    except RunFailed as exc:
        print(json.dumps({**result, "error": str(exc)}), flush=True)
        print(str(exc), file=sys.stderr, flush=True)
        return 1
    finally:
        if target.qlog_dir is not None:
            keep_qlogs(target)


if __name__ == "__main__":
    sys.exit(main())
