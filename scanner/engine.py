"""Stateful QUIC handshake engine: many handshakes, one event loop, few sockets.

Each handshake is a scanner.handshake.ClientHandshake, sans-I/O, so one
process drives thousands of them from a single epoll loop over a handful of
UDP sockets: datagrams are demultiplexed by the destination connection ID
the server must echo (our source CID), so any number of handshakes may share
one target address; each handshake's timer sits in one heap. Worker
processes (``workers``, default the core count) split the targets to use the
cores.

What is pure in its input is computed once per distinct input: the
ClientHello template per scan, the parsing of a certificate, the description
and verification of a certificate chain per chain. (Raw transport parameters
differ in every handshake, carrying its connection IDs, so they are decoded
every time.) Every handshake still generates its own keys and runs the full
TLS handshake, the server's CertificateVerify and Finished checked.

The server's raw ``quic_transport_parameters`` bytes are kept and decoded by
tparams.codec (wire order, GREASE, unknown ids, findings), so a server with
malformed parameters becomes a ``protocol_error`` record with the codec's
findings. Certificates are recorded and verified against certifi's roots,
but verification never stops a handshake.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import heapq
import ipaddress
import multiprocessing
import os
import queue
import select
import signal
import socket
import struct
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import certifi
from aioquic import tls
from aioquic.quic.packet import QuicErrorCode
from cryptography import x509
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.hazmat.primitives import hashes
from cryptography.x509 import verification

from tparams.codec import DecodedParameters
from tparams.errors import ToolError
from tparams.paramset import ParamSet, order_fingerprint, order_signature

from scanner.handshake.client import ClientHandshake
from scanner.handshake.hello import CID_LENGTH, X25519MLKEM768, HelloTemplate
from scanner.targets import Target

# Outcomes of one attempt (the `status` column).
OK = "ok"
TIMEOUT = "timeout"
VERSION_NEGOTIATION = "version_negotiation"
CONNECTION_CLOSE = "connection_close"
TLS_ALERT = "tls_alert"
PROTOCOL_ERROR = "protocol_error"
# An ICMP error (destination unreachable: a UDP-closed port, a host the last router cannot
# reach) answered our Initial before the server sent anything; a black hole stays `timeout`.
UNREACHABLE = "unreachable"
STATUSES = (OK, TIMEOUT, UNREACHABLE, VERSION_NEGOTIATION, CONNECTION_CLOSE, TLS_ALERT, PROTOCOL_ERROR)

GROUPS = {
    "x25519": tls.Group.X25519,
    "x448": tls.Group.X448,
    "secp256r1": tls.Group.SECP256R1,
    "secp384r1": tls.Group.SECP384R1,
    "secp521r1": tls.Group.SECP521R1,
    "x25519mlkem768": X25519MLKEM768,
}
_GROUP_NAMES = {value: name for name, value in GROUPS.items()}
_TLS_VERSIONS = {0x0304: "TLS 1.3", 0x0303: "TLS 1.2"}
_CRYPTO_ERROR = QuicErrorCode.CRYPTO_ERROR  # 0x100 + TLS alert (RFC 9001, 4.8)


@dataclass(frozen=True)
class ScanSettings:
    alpn: str = "h3"
    timeout: float = 5.0  # seconds from the first Initial to giving up
    rate: float = 100.0  # new handshakes per second over all workers; 0 = unlimited
    concurrency: int = 1000  # handshakes in flight over all workers
    workers: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    sockets: int = 4  # UDP sockets per worker and address family
    # Key shares sent in the ClientHello. aioquic offers four (P-256, P-384,
    # X25519, X448), costing ~0.4 ms of key generation per handshake; two cover
    # what servers pick (as Chrome does). Keys are never reused. supported_groups
    # lists every other group the engine completes too, which a server may ask for
    # in a HelloRetryRequest; x25519mlkem768 (1,216 bytes) makes the ClientHello two
    # Initial packets.
    groups: tuple[str, ...] = ("x25519", "secp256r1")
    keylog_file: str | None = None  # SSLKEYLOGFILE-format secrets, for tshark
    # Identification only: after the handshake, wait (at most a few hundred ms) for the server's
    # HANDSHAKE_DONE and note its NEW_TOKEN frames. Plain scans close with their Finished.
    await_handshake_done: bool = False

    def __post_init__(self) -> None:
        if not self.alpn or len(self.alpn.encode()) > 255:
            raise ToolError("--alpn must be 1-255 bytes")
        if self.timeout <= 0:
            raise ToolError("--timeout must be positive")
        if self.rate < 0:
            raise ToolError("--rate must be >= 0 (0 = unlimited)")
        if self.concurrency < 1 or self.workers < 1 or self.sockets < 1:
            raise ToolError("--concurrency, --workers and sockets must be >= 1")
        unknown = [g for g in self.groups if g not in GROUPS]
        if unknown or not self.groups:
            raise ToolError(f"unknown key-exchange group(s) {unknown} (known: {', '.join(GROUPS)})")
        if len(set(self.groups)) != len(self.groups):
            raise ToolError("--groups names a group twice (one key share a group, RFC 8446 4.2.8)")


@dataclass
class Certificate:
    sha256: str
    subject: str | None  # None: the server sent a name or date that does not parse (its DER, by sha256, is kept)
    issuer: str | None
    sans: list[str]
    not_before: dt.datetime | None
    not_after: dt.datetime | None


@dataclass
class HandshakeRecord:
    """Everything one attempt observed; the store turns a batch of these into rows."""

    ip: str
    port: int
    sni: str | None
    started_at: dt.datetime
    finished_at: dt.datetime
    handshake_ms: float | None  # first Initial sent -> handshake complete (ok only)
    status: str
    error: str | None = None
    error_code: int | None = None
    closed_by: str | None = None  # "server" or "client" for connection_close/tls_alert/protocol_error
    # The CONNECTION_CLOSE's Frame Type field (the frame that triggered it; 0x1c frames only,
    # None for an application close 0x1d) and its reason phrase, as sent: library habits.
    close_frame_type: int | None = None
    close_reason_phrase: str | None = None
    offered_versions: list[int] | None = None
    retry: bool = False
    retry_token_length: int | None = None  # of the first Retry packet's token
    # The token itself, not stored (identification reads library habits in it: netty's start "netty").
    retry_token: bytes | None = None
    quic_version: int | None = None
    alpn: str | None = None
    tls_version: str | None = None
    cipher_suite: str | None = None
    key_exchange_group: str | None = None
    hello_retry_request: bool = False  # the server answered the first ClientHello with one
    # With ScanSettings.await_handshake_done (not stored): whether HANDSHAKE_DONE came, and the
    # lengths of the NEW_TOKEN frames' tokens before it; None when not waited for or it did not come.
    handshake_done: bool | None = None
    new_token_lengths: list[int] | None = None
    certificates: list[Certificate] = field(default_factory=list)
    certificate_verified: bool | None = None
    certificate_error: str | None = None
    datagrams_received: int = 0
    transport_parameters_raw: bytes | None = None
    decoded: DecodedParameters | None = None

    @property
    def target(self) -> Target:
        return Target(self.ip, self.port, self.sni)

    @property
    def param_set(self) -> ParamSet | None:
        return None if self.decoded is None else ParamSet.from_decoded(self.decoded)

    @property
    def order_signature(self) -> str | None:
        return None if self.decoded is None else order_signature(self.decoded.ids)

    @property
    def order_fingerprint(self) -> str | None:
        return None if self.decoded is None else order_fingerprint(self.decoded.ids)


_CACHE_LIMIT = 65536  # distinct chains kept per cache; a scan sees few, a hostile one many


class _CertificateChecker:
    """Chain and name verification against certifi's roots, loaded once per worker.

    Verdicts are kept per (chain, name) for the life of the worker: a scan
    meets the same chain on many servers, and a verdict only changes when a
    certificate expires mid-scan.
    """

    def __init__(self) -> None:
        with open(certifi.where(), "rb") as handle, warnings.catch_warnings():
            # One certifi root has a non-positive serial; cryptography only warns.
            warnings.simplefilter("ignore", CryptographyDeprecationWarning)
            self._store = verification.Store(x509.load_pem_x509_certificates(handle.read()))
        self._verdicts: dict[tuple, str | None] = {}

    def check(self, leaf: x509.Certificate, chain: list[x509.Certificate], name: str) -> str | None:
        """None when the chain verifies for ``name``, else why not."""
        key = (leaf, *chain, name)
        if key in self._verdicts:
            return self._verdicts[key]
        if len(self._verdicts) >= _CACHE_LIMIT:
            self._verdicts.clear()
        verdict = self._verdicts[key] = self._verify(leaf, chain, name)
        return verdict

    def _verify(self, leaf: x509.Certificate, chain: list[x509.Certificate], name: str) -> str | None:
        try:
            try:
                subject: verification.DNSName | verification.IPAddress = verification.IPAddress(
                    ipaddress.ip_address(name)
                )
            except ValueError:
                subject = verification.DNSName(name)
            verifier = verification.PolicyBuilder().store(self._store).build_server_verifier(subject)
            verifier.verify(leaf, chain)
        except (verification.VerificationError, ValueError) as exc:
            return str(exc) or type(exc).__name__
        return None


_DESCRIBED: dict[x509.Certificate, Certificate] = {}


def _describe_certificate(cert: x509.Certificate) -> Certificate:
    # x509.Certificate hashes and compares by its DER bytes.
    described = _DESCRIBED.get(cert)
    if described is None:
        if len(_DESCRIBED) >= _CACHE_LIMIT:
            _DESCRIBED.clear()
        described = _DESCRIBED[cert] = _read_certificate(cert)
    return described


def _read_certificate(cert: x509.Certificate) -> Certificate:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = [str(v) for v in names.get_values_for_type(x509.DNSName)]
        sans += [str(v) for v in names.get_values_for_type(x509.IPAddress)]
    except (x509.ExtensionNotFound, ValueError):
        sans = []
    return Certificate(
        sha256=cert.fingerprint(hashes.SHA256()).hex(),
        subject=_parsed(lambda: cert.subject.rfc4514_string()),
        issuer=_parsed(lambda: cert.issuer.rfc4514_string()),
        sans=sans,
        not_before=_parsed(lambda: cert.not_valid_before_utc),
        not_after=_parsed(lambda: cert.not_valid_after_utc),
    )


def _parsed(read):
    """A certificate field, or None where it does not parse: cryptography parses names and dates only when they
    are read, so a certificate it accepted may still hold an issuer it cannot read (a hostile chain found one)."""
    try:
        return read()
    except ValueError:
        return None


def handshake_record(
    target: Target,
    conn: ClientHandshake,
    started_wall: dt.datetime,
    started: float,
    now: float,
    checker: _CertificateChecker,
    timeout: float,
    icmp: IcmpError | None = None,
) -> HandshakeRecord:
    """The record of one handshake: ok, how it failed, unreachable (``icmp``: an ICMP error answered
    it before the server said anything), or (still running at ``now``) a timeout."""
    if conn.completed_at is not None:
        status = OK
    elif icmp is not None:
        status = UNREACHABLE
    elif conn.failure is None:
        status = TIMEOUT
    else:
        status = _failure_status(conn)
    record = HandshakeRecord(
        ip=target.ip,
        port=target.port,
        sni=target.sni,
        started_at=started_wall,
        finished_at=started_wall + dt.timedelta(seconds=now - started),
        handshake_ms=None,
        status=status,
        offered_versions=conn.offered_versions,
        retry=conn.retry_seen,
        retry_token_length=None if conn.retry_token is None else len(conn.retry_token),
        retry_token=conn.retry_token,
        hello_retry_request=conn.hello_retry_request,
        handshake_done=conn.handshake_done,
        # counted only up to a HANDSHAKE_DONE that came: where the wait ran out (a server, or this scanner starved,
        # slower than HANDSHAKE_DONE_WAIT) the tokens were not seen, not absent (ngtcp2's counted "0" so, 2026-11-29)
        new_token_lengths=[len(token) for token in conn.new_tokens] if conn.handshake_done else None,
        datagrams_received=conn.datagrams_received,
        transport_parameters_raw=conn.transport_parameters_raw,
        decoded=conn.decoded,
        alpn=conn.alpn,
    )
    if conn.cipher_suite is not None:
        record.cipher_suite = tls.CipherSuite(conn.cipher_suite).name
        record.quic_version = conn.version
    if conn.key_exchange_group is not None:
        group = conn.key_exchange_group
        record.key_exchange_group = _GROUP_NAMES.get(group, f"0x{group:04x}")
    if conn.tls_version is not None:
        record.tls_version = _TLS_VERSIONS.get(conn.tls_version, f"0x{conn.tls_version:04x}")
    if conn.certificate is not None:
        record.certificates = [_describe_certificate(c) for c in (conn.certificate, *conn.certificate_chain)]
    if status == OK:
        record.handshake_ms = (conn.completed_at - started) * 1000.0  # type: ignore[operator]
        if conn.certificate is not None:
            error = checker.check(conn.certificate, conn.certificate_chain, target.sni or target.ip)
            record.certificate_verified = error is None
            record.certificate_error = error
        return record
    if status == TIMEOUT:
        record.error = f"no handshake within {timeout:g} s ({conn.datagrams_received} datagram(s) received)"
        return record
    if status == UNREACHABLE:
        record.error = icmp.describe()  # type: ignore[union-attr]
        return record
    failure = conn.failure
    assert failure is not None
    code = failure.error_code
    record.error_code = code
    record.closed_by = "server" if conn.closed_by_peer else "client"
    record.close_frame_type = failure.frame_type
    record.close_reason_phrase = failure.reason
    record.error = failure.reason or None
    if status == TLS_ALERT:
        record.error = f"alert {code - _CRYPTO_ERROR}" + (f": {failure.reason}" if failure.reason else "")
    elif status == VERSION_NEGOTIATION:
        offered = ", ".join(f"0x{v:08x}" for v in conn.offered_versions or [])
        record.error = f"no common version; server offers {offered or 'none'}"
    elif status == PROTOCOL_ERROR and record.decoded is not None and record.decoded.findings:
        record.error = "; ".join(f.detail for f in record.decoded.findings)
    return record


def _failure_status(conn: ClientHandshake) -> str:
    code = conn.failure.error_code  # type: ignore[union-attr]
    if conn.offered_versions is not None and not conn.closed_by_peer and conn.transport_parameters_raw is None:
        return VERSION_NEGOTIATION
    if conn.transport_parameters_rejected is not None or (
        conn.transport_parameters_raw is not None
        and code == QuicErrorCode.TRANSPORT_PARAMETER_ERROR
        and not conn.closed_by_peer
    ):
        return PROTOCOL_ERROR
    if _CRYPTO_ERROR <= code < _CRYPTO_ERROR + 0x100:
        return TLS_ALERT
    if conn.closed_by_peer:
        return CONNECTION_CLOSE
    return PROTOCOL_ERROR


# Linux's socket error queue (ip(7) IP_RECVERR, ipv6(7) IPV6_RECVERR; Python 3.11 names neither):
# an unconnected UDP socket hears of ICMP errors only through it, each with the start of the
# datagram it is about (so our connection ID) and the ICMP type and code.
_RECVERR = {socket.AF_INET: (socket.IPPROTO_IP, 11), socket.AF_INET6: (socket.IPPROTO_IPV6, 25)}
_ORIGIN_ICMP, _ORIGIN_ICMP6 = 2, 3  # SO_EE_ORIGIN_*
_EXTENDED_ERR = struct.Struct("=IBBBxII")  # struct sock_extended_err; the ICMP sender's sockaddr follows
_ICMP_NAMES = {
    (4, 3, 0): "network unreachable", (4, 3, 1): "host unreachable", (4, 3, 2): "protocol unreachable",
    (4, 3, 3): "port unreachable", (4, 3, 9): "network prohibited", (4, 3, 10): "host prohibited",
    (4, 3, 13): "administratively prohibited", (4, 11, 0): "TTL exceeded",
    (6, 1, 0): "no route", (6, 1, 1): "administratively prohibited", (6, 1, 3): "address unreachable",
    (6, 1, 4): "port unreachable", (6, 3, 0): "hop limit exceeded",
}


@dataclass(frozen=True)
class IcmpError:
    """An ICMP (``version`` 4) or ICMPv6 (6) error about one of our datagrams, and who sent it."""

    version: int
    type: int
    code: int
    sender: str

    def describe(self) -> str:
        name = _ICMP_NAMES.get((self.version, self.type, self.code), "error")
        return f"ICMP{'v6' if self.version == 6 else ''} {name} (type {self.type} code {self.code}) from {self.sender}"


def _icmp_errors(sock: socket.socket) -> Iterator[tuple[bytes, IcmpError]]:
    """Drain a socket's error queue: (the start of the datagram it is about, the ICMP error)."""
    while True:
        try:
            data, ancillary, _, _ = sock.recvmsg(64, 256, socket.MSG_ERRQUEUE)
        except (BlockingIOError, InterruptedError):
            return
        for level, kind, payload in ancillary:
            if (level, kind) not in _RECVERR.values() or len(payload) < _EXTENDED_ERR.size:
                continue
            _, origin, icmp_type, code, _, _ = _EXTENDED_ERR.unpack_from(payload)
            if origin in (_ORIGIN_ICMP, _ORIGIN_ICMP6):
                sender = _sockaddr_ip(payload[_EXTENDED_ERR.size:])
                yield data, IcmpError(4 if origin == _ORIGIN_ICMP else 6, icmp_type, code, sender)


def _sockaddr_ip(raw: bytes) -> str:
    family = struct.unpack_from("=H", raw)[0] if len(raw) >= 2 else 0
    if family == socket.AF_INET and len(raw) >= 8:
        return socket.inet_ntop(socket.AF_INET, raw[4:8])
    if family == socket.AF_INET6 and len(raw) >= 24:
        return socket.inet_ntop(socket.AF_INET6, raw[8:24])
    return "an unknown address"


def _send(sock: socket.socket, data: bytes, addr: tuple) -> None:
    try:
        sock.sendto(data, addr)
    except BlockingIOError:
        pass  # a full buffer: the probe timer or the timeout decide
    except OSError:
        # With IP_RECVERR, an ICMP error about any handshake on this socket fails the next send
        # once, whatever its destination (the socket's pending error): this one is sent again.
        with contextlib.suppress(OSError):
            sock.sendto(data, addr)


def _initial_source_cid(datagram: bytes) -> bytes:
    """The source connection ID of our own long-header packet (RFC 9000 17.2), b"" if cut short."""
    if len(datagram) < 7:
        return b""
    scid_at = 6 + datagram[5]
    return datagram[scid_at + 1 : scid_at + 1 + datagram[scid_at]] if len(datagram) > scid_at else b""


class _Attempt:
    __slots__ = ("target", "conn", "sock", "addr", "key", "started", "started_wall", "deadline", "timer", "record",
                 "icmp")

    def __init__(self, target: Target, conn: ClientHandshake, sock: socket.socket, addr: tuple, key: bytes, now: float):
        self.target = target
        self.conn = conn
        self.sock = sock
        self.addr = addr
        self.key = key
        self.started = now
        self.started_wall = dt.datetime.now(dt.timezone.utc)
        self.deadline = 0.0
        self.timer: float | None = None
        self.record: HandshakeRecord | None = None
        self.icmp: IcmpError | None = None


class HandshakeLoop:
    """One process's share of a scan: an epoll loop over few sockets, many connections.

    ``emit`` receives each finished HandshakeRecord; ``should_stop`` is polled
    so a parent can interrupt.
    """

    def __init__(self, settings: ScanSettings, emit: Callable[[HandshakeRecord], None], share: float = 1.0):
        self.settings = settings
        self.emit = emit
        self.rate = settings.rate * share
        self.concurrency = max(1, int(settings.concurrency * share))
        self.template = HelloTemplate(settings.alpn, [GROUPS[g] for g in settings.groups])
        self.checker = _CertificateChecker()
        self.keylog = open(settings.keylog_file, "a") if settings.keylog_file else None
        self.epoll = select.epoll()
        self.sockets: dict[int, list[socket.socket]] = {}
        self.by_fd: dict[int, tuple[int, socket.socket]] = {}
        self.inflight: dict[bytes, _Attempt] = {}  # by our source connection ID
        self.by_address: dict[tuple[str, int], _Attempt] = {}  # the latest attempt per server address
        self.retired: dict[bytes, None] = {}  # CIDs of finished attempts, oldest first
        self.timers: list[tuple[float, int, bytes]] = []
        self.sequence = 0

    def _sockets_for(self, family: int) -> list[socket.socket]:
        if family not in self.sockets:
            af = socket.AF_INET6 if family == 6 else socket.AF_INET
            sockets = []
            for _ in range(self.settings.sockets):
                sock = socket.socket(af, socket.SOCK_DGRAM)
                sock.setblocking(False)
                # Thousands of handshakes answer in bursts; the default 208 KiB
                # receive buffer drops server flights under load.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
                sock.setsockopt(*_RECVERR[af], 1)  # ICMP errors into the error queue (_icmp_errors)
                sock.bind(("::" if family == 6 else "0.0.0.0", 0))
                self.epoll.register(sock.fileno(), select.EPOLLIN)
                self.by_fd[sock.fileno()] = (family, sock)
                sockets.append(sock)
            self.sockets[family] = sockets
        return self.sockets[family]

    def close(self) -> None:
        for sockets in self.sockets.values():
            for sock in sockets:
                sock.close()
        self.epoll.close()
        if self.keylog:
            self.keylog.close()

    # -- one attempt --------------------------------------------------------

    def _start(self, target: Target, now: float) -> None:
        random = os.urandom(48)
        while random[32 : 32 + CID_LENGTH] in self.inflight:  # 2^-64 per pair, but a mix-up would corrupt two records
            random = os.urandom(48)
        conn = ClientHandshake(self.template, target.sni, random, now, keylog=self.keylog is not None,
                               await_handshake_done=self.settings.await_handshake_done)
        sockets = self._sockets_for(target.family)
        self.sequence += 1
        addr = (target.ip, target.port)
        attempt = _Attempt(target, conn, sockets[self.sequence % len(sockets)], addr, conn.source_cid, now)
        attempt.deadline = now + self.settings.timeout
        self.inflight[attempt.key] = attempt
        self.by_address[addr] = attempt
        self._service(attempt, now)

    def _service(self, attempt: _Attempt, now: float) -> None:
        """Send what the handshake has, record it once it ended, else re-arm its timer."""
        conn = attempt.conn
        for data in conn.datagrams_to_send():
            _send(attempt.sock, data, attempt.addr)
        if conn.secrets:
            random = conn.client_random.hex()
            self.keylog.write("".join(f"{label} {random} {secret.hex()}\n" for label, secret in conn.secrets))  # type: ignore[union-attr]
            self.keylog.flush()  # type: ignore[union-attr]
            conn.secrets.clear()
        if conn.done:
            attempt.record = self._record(attempt, now)
            self._finish(attempt)
            return
        timer = conn.timer()
        when = attempt.deadline if timer is None else min(timer, attempt.deadline)
        if when != attempt.timer:
            attempt.timer = when
            self.sequence += 1
            heapq.heappush(self.timers, (when, self.sequence, attempt.key))

    def _finish(self, attempt: _Attempt) -> None:
        del self.inflight[attempt.key]
        if self.by_address.get(attempt.addr) is attempt:
            del self.by_address[attempt.addr]
        self.retired[attempt.key] = None
        if len(self.retired) > _RETIRED_KEPT:
            del self.retired[next(iter(self.retired))]
        self.emit(attempt.record)  # type: ignore[arg-type]

    def _timed_out(self, attempt: _Attempt, now: float) -> None:
        attempt.record = self._record(attempt, now)
        # A timed-out peer gets nothing more: no state to close politely.
        self._finish(attempt)

    def _record(self, attempt: _Attempt, now: float) -> HandshakeRecord:
        return handshake_record(
            attempt.target, attempt.conn, attempt.started_wall, attempt.started, now, self.checker,
            self.settings.timeout, attempt.icmp,
        )

    def _unreachable(self, sock: socket.socket, now: float) -> None:
        """ICMP errors end the attempts they are about, unless the server has already spoken (then
        an error about a later datagram, e.g. after it closed, is no verdict on the handshake)."""
        for datagram, icmp in _icmp_errors(sock):
            attempt = self.inflight.get(_initial_source_cid(datagram))
            if attempt is None or attempt.conn.datagrams_received:
                continue
            attempt.icmp = icmp
            attempt.record = self._record(attempt, now)
            self._finish(attempt)

    # -- the loop -------------------------------------------------------------

    def run(self, targets: Iterable[Target], should_stop: Callable[[], bool] = lambda: False) -> None:
        pending = list(targets)
        pending.reverse()  # pop() from the end keeps file order
        interval = 1.0 / self.rate if self.rate > 0 else 0.0
        next_start = time.monotonic()
        inflight = self.inflight
        while pending or inflight:
            now = time.monotonic()
            if should_stop():
                break
            # Start new handshakes, paced by the rate, bounded by concurrency.
            burst = 0
            while pending and len(inflight) < self.concurrency and next_start <= now:
                self._start(pending.pop(), now)
                next_start = max(next_start + interval, now - 0.05) if interval else now
                burst += 1
                if burst >= 64:
                    break  # read answers between bursts, or a fast server's flights queue up and time out
            # Wait for datagrams until the next timer or the next start slot.
            wake = self.timers[0][0] if self.timers else now + 0.1
            if pending and len(inflight) < self.concurrency:
                wake = min(wake, next_start)
            wait = max(0.0, min(wake - time.monotonic(), 0.1))
            touched: dict[bytes, _Attempt] = {}
            for fd, events in self.epoll.poll(wait):
                sock = self.by_fd[fd][1]
                if events & select.EPOLLERR:
                    self._unreachable(sock, time.monotonic())
                recvfrom = sock.recvfrom
                while True:
                    try:
                        data, addr = recvfrom(65536)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        continue  # an ICMP error's errno (its details are in the error queue, read above)
                    # The server addresses us by our connection ID (RFC 9000 5.2):
                    # long headers carry its length, short headers ours.
                    if not data:
                        continue
                    if data[0] & 0x80:
                        key = data[6 : 6 + data[5]] if len(data) > 6 else b""
                    else:
                        key = data[1 : 1 + CID_LENGTH]
                    attempt = inflight.get(key)
                    if attempt is None:
                        if key in self.retired:
                            continue  # late packets of a finished attempt
                        # Not addressed to any CID of ours: garbage, or a broken server.
                        # Its latest attempt gets it, so the record shows it answered.
                        attempt = self.by_address.get((_canonical_ip(addr[0]), addr[1]))
                        if attempt is None:
                            continue
                        key = attempt.key
                    elif addr[1] != attempt.addr[1] or (
                        addr[0] != attempt.addr[0] and _canonical_ip(addr[0]) != attempt.target.ip
                    ):
                        continue  # not from its server
                    attempt.conn.receive_datagram(data, time.monotonic())
                    touched[key] = attempt
            now = time.monotonic()
            for key, attempt in touched.items():
                if key in self.inflight:
                    self._service(attempt, now)
            # Timers due.
            while self.timers and self.timers[0][0] <= now:
                when, _, key = heapq.heappop(self.timers)
                attempt = self.inflight.get(key)
                if attempt is None or attempt.timer != when:
                    continue
                attempt.timer = None
                if now >= attempt.deadline:
                    self._timed_out(attempt, now)
                else:
                    attempt.conn.handle_timer(now)
                    self._service(attempt, now)


_RETIRED_KEPT = 65536  # finished CIDs remembered, so their late packets are not taken for garbage
_IP_CACHE: dict[str, str] = {}


def _canonical_ip(text: str) -> str:
    # Sockets report IPv6 in compressed form and may carry a scope; targets are canonical.
    ip = _IP_CACHE.get(text)
    if ip is None:
        ip = _IP_CACHE[text] = str(ipaddress.ip_address(text.split("%", 1)[0]))
    return ip


# A worker's records cross to the parent at this size or age: larger batches are cheaper
# to convert and send (12 us a record at 200, 6 at 1,000: measured), the age bounds
# what the progress bar and a kill -9 lag behind.
BATCH_RECORDS = 1000
BATCH_SECONDS = 0.5


class _Batches:
    """Finished records in batches of up to BATCH_RECORDS or BATCH_SECONDS, each handed on
    through ``prepare`` (in a worker: turned into what crosses to the parent)."""

    def __init__(self, prepare: Callable[[list[HandshakeRecord]], Any], hand_on: Callable[[Any], None]):
        self._prepare, self._hand_on = prepare, hand_on
        self._records: list[HandshakeRecord] = []
        self._since = time.monotonic()

    def emit(self, record: HandshakeRecord) -> None:
        self._records.append(record)
        if len(self._records) >= BATCH_RECORDS or time.monotonic() - self._since > BATCH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self._records:
            self._hand_on(self._prepare(self._records))
            self._records = []
        self._since = time.monotonic()


def _worker(
    targets: list[Target],
    settings: ScanSettings,
    share: float,
    prepare: Callable[[list[HandshakeRecord]], Any],
    results: "multiprocessing.Queue",
) -> None:
    # Ctrl-C reaches the whole process group: a worker stops starting handshakes and
    # hands on what it finished; the parent decides when to give up on it.
    interrupted: list[int] = []
    signal.signal(signal.SIGINT, lambda *_: interrupted.append(1))
    batches = _Batches(prepare, results.put)
    loop = HandshakeLoop(settings, batches.emit, share)
    try:
        loop.run(targets, should_stop=lambda: bool(interrupted))
    finally:
        loop.close()
        batches.flush()
        results.put(None)


# After Ctrl-C, how long the workers get to hand on what they finished.
INTERRUPT_GRACE_SECONDS = 10.0


@contextlib.contextmanager
def _interruptible() -> Iterator[list[int]]:
    """Ctrl-C noted instead of raised while records are being handed on (an exception in
    the middle of a store append could leave a batch half-counted); a second Ctrl-C
    raises at once. Outside the main thread Python delivers no signals: nothing to do.

    Not common.signals.signals_deferred, which holds Ctrl-C and SIGTERM, every one of them,
    until a short step is done: this block is a whole scan (minutes), so the first Ctrl-C is
    a request to stop that the scan polls (the list yielded: it starts no more handshakes and
    hands on what finished), and a second must still end it at once; SIGTERM is left as it was."""
    interrupted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def note(*_: object) -> None:
        if interrupted:
            raise KeyboardInterrupt
        interrupted.append(1)

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt


def scan_targets(
    targets: Sequence[Target],
    settings: ScanSettings,
    on_records: Callable[[Any], None],
    prepare: Callable[[list[HandshakeRecord]], Any] = list,
) -> None:
    """Handshake with every target; ``on_records`` receives each batch of finished records
    as ``prepare`` made it (by default the list of records itself).

    With one worker the loop runs in this process; with more, each worker
    process takes every n-th target, runs ``prepare`` (a module-level function:
    it is sent to the worker) and the results come back over a queue.
    Ctrl-C stops new handshakes; every record finished by then is handed on
    before KeyboardInterrupt is raised.
    """
    # A worker costs ~1 s of interpreter start and imports: worth it for
    # hundreds of targets, not for a handful.
    workers = max(1, min(settings.workers, len(targets) // 256))
    with _interruptible() as interrupted:
        if workers == 1:
            batches = _Batches(prepare, on_records)
            loop = HandshakeLoop(settings, batches.emit)
            try:
                loop.run(targets, should_stop=lambda: bool(interrupted))
            finally:
                loop.close()
            batches.flush()
        else:
            _gather(targets, settings, on_records, prepare, workers, interrupted)


def _gather(
    targets: Sequence[Target],
    settings: ScanSettings,
    on_records: Callable[[Any], None],
    prepare: Callable[[list[HandshakeRecord]], Any],
    workers: int,
    interrupted: list[int],
) -> None:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [
        context.Process(
            target=_worker, args=(list(targets[i::workers]), settings, 1.0 / workers, prepare, results), daemon=True
        )
        for i in range(workers)
    ]
    # Started with Ctrl-C ignored (the setting survives exec), so that one arriving while
    # a worker imports does not end it with a traceback; _worker then takes it over.
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main_thread else None
    try:
        for process in processes:
            process.start()
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)
    try:
        running, deadline = workers, None
        while running:
            if interrupted and deadline is None:
                # A Ctrl-C from a terminal reached the workers too; a SIGINT sent to
                # this process alone did not.
                for process in processes:
                    if process.is_alive():
                        os.kill(process.pid, signal.SIGINT)
                deadline = time.monotonic() + INTERRUPT_GRACE_SECONDS
            if deadline is not None and time.monotonic() > deadline:
                break
            try:
                item = results.get(timeout=0.2)
            except queue.Empty:
                if not any(p.is_alive() for p in processes):
                    raise ToolError("a scan worker died without reporting") from None
                continue
            if item is None:
                running -= 1
            else:
                on_records(item)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(timeout=5)
