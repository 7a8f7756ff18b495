"""What the aioquic client and server share: their command line (tparams.program_cli, roles replay-server
and replay-client), every one of the twelve parameters applied to a connection before its transport
parameters are sent, pinned flow-control windows, and the replay protocol.

The replay protocol is every qreplay program's (tparams.workloads): hq-interop, each request on a
client-opened stream of its own, ``GET /<size>`` answered with that many bytes, ``PUT /<size>`` and its
body with the number of body bytes received, in decimal; ``GET /<size>?bitrate=<bits/s>`` (a stream) answered
with that many bytes paced at that bitrate (send_at_bitrate).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import re
from collections.abc import Callable
from pathlib import Path

from aioquic.buffer import Buffer
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.logger import QuicFileLogger, QuicLoggerTrace
from aioquic.quic.packet import pull_quic_transport_parameters, push_quic_transport_parameters
from aioquic.tls import CipherSuite

from common.aioquic_adapter import (
    LOCAL_PARAMETERS,
    pin_flow_control_windows,
    rewrite_transport_parameters,
    set_local_parameters,
    unacknowledged_bytes,
)
from tparams import program_cli
from tparams.knobs import GSO
from tparams.paramset import PERFORMANCE_PARAMETERS

ALPN = "hq-interop"
MAX_REQUEST = 64
_REQUEST = re.compile(rb"(GET|PUT) /(\d+)(?:\?bitrate=(\d+))?\r?\n?")
PACING_TICK_S = 0.02  # a paced stream's sender hands over what the bitrate allows every this many seconds
CHUNK = bytes(1 << 16)
BACKLOG = 8 << 20  # bytes a stream may hold unacknowledged before we stop handing it more


def request(method: str, size: int, bitrate: int | None = None) -> bytes:
    """The request line moving ``size`` bytes: GET for a download, PUT for an upload; a GET paced at
    ``bitrate`` for a stream."""
    return f"{method} /{size}{f'?bitrate={bitrate}' if bitrate else ''}\r\n".encode()


def parse_request(received: bytes, finished: bool) -> tuple[str, int, int, int | None] | None:
    """A request's (method, size, length of its line; an upload's body follows it, a stream's bitrate or
    None); None while the line is incomplete; ValueError if it is no request."""
    line, newline, _ = received.partition(b"\n")
    if not newline and not finished:
        if len(received) > MAX_REQUEST:
            raise ValueError("request line too long")
        return None
    found = _REQUEST.fullmatch(line + newline)
    if not found:
        raise ValueError(f"not a GET or PUT of /<size>: {received[:MAX_REQUEST]!r}")
    bitrate = int(found.group(3)) if found.group(3) else None
    if bitrate == 0 or (bitrate and found.group(1) != b"GET"):
        raise ValueError(f"a bitrate is a GET's, above 0: {received[:MAX_REQUEST]!r}")
    return found.group(1).decode(), int(found.group(2)), len(line + newline), bitrate


async def send_paced(quic: QuicConnection, transmit: Callable[[], None], stream_id: int, remaining: int,
                     send: Callable[[int, bytes, bool], None] | None = None) -> None:
    """Send ``remaining`` bytes and FIN on a stream, in slices, yielding between them, so that aioquic's
    flow control (not our buffer) paces the sender; ``send`` frames them (HTTP/3's DATA), by default as they
    are."""
    send = send or (lambda stream, data, end: quic.send_stream_data(stream, data, end_stream=end))
    while True:
        n = min(remaining, len(CHUNK))
        remaining -= n
        send(stream_id, CHUNK[:n], remaining == 0)
        transmit()
        if remaining == 0:
            return
        while unacknowledged_bytes(quic, stream_id) > BACKLOG:  # let ACKs drain it
            await asyncio.sleep(0.001)
        await asyncio.sleep(0)


async def send_at_bitrate(quic: QuicConnection, transmit: Callable[[], None], stream_id: int, size: int,
                          bitrate: int, send: Callable[[int, bytes, bool], None] | None = None) -> None:
    """Send ``size`` bytes and FIN on a stream paced at ``bitrate`` bits/s (a stream's server): every
    PACING_TICK_S what the bitrate allows since the first byte, whatever the link would take (what it cannot
    carry waits in the connection's buffer, as a live source's would)."""
    send = send or (lambda stream, data, end: quic.send_stream_data(stream, data, end_stream=end))
    loop, sent = asyncio.get_running_loop(), 0
    started = loop.time()
    while sent < size:
        due = min(size, int((loop.time() - started + PACING_TICK_S) * bitrate / 8))
        while sent < due:
            n = min(due - sent, len(CHUNK))
            sent += n
            send(stream_id, CHUNK[:n], sent == size)
        transmit()
        await asyncio.sleep(PACING_TICK_S)


def command_line(role: program_cli.Role, description: str) -> argparse.Namespace:
    """The parsed command line of ``role``; what these programs do not do (BBR, GSO) refused in one line, as
    are fewer than one request or one at a time and a stream's bitrate of 0."""
    parser = program_cli.parser(role, description)
    args = parser.parse_args()
    for refused, given in (("--cc=bbr", args.cc == "bbr"),
                           (f"{GSO.option}: {GSO.cannot['aioquic']}", args.gso is not None)):
        if given:
            parser.exit(2, f"error: the aioquic endpoints cannot take {refused}\n")
    for name in ("requests", "concurrency", "bitrate"):
        if getattr(args, name, None) is not None and getattr(args, name) < 1:
            parser.exit(2, f"error: --{name} takes a number of at least 1\n")
    return args


def configuration(args: argparse.Namespace, is_client: bool) -> QuicConfiguration:
    """The configuration both ends share: hq-interop, the congestion control named (aioquic's own
    default is Reno: it is always named, so that what ran is what is stored), the one cipher suite
    asked for (offered by the client, accepted by the server), the key log, the qlog."""
    configuration = QuicConfiguration(is_client=is_client, alpn_protocols=[ALPN],
                                      congestion_control_algorithm=args.cc or "cubic")
    if args.cipher:
        configuration.cipher_suites = [CipherSuite[args.cipher.removeprefix("TLS_")]]
    if args.keylog:
        configuration.secrets_log_file = Path(args.keylog).open("a")
    if args.qlog_dir:
        configuration.quic_logger = QlogFiles(args.qlog_dir)
    return configuration


class QlogFiles(QuicFileLogger):
    """aioquic's own qlog writer (one JSON file a connection, ``<ODCID>.qlog``, its recovery metrics with the
    congestion window as ``cwnd`` and ``bytes_in_flight``), which writes a connection's file only when the
    connection has ended: this one also writes those still open when the program exits (a server stopped by
    SIGTERM, the runner's stop, exits: server.main), whose connection may still be draining or idle."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.open_traces: list[QuicLoggerTrace] = []  # its own list: the logger's is private
        atexit.register(self.write_open)

    def start_trace(self, is_client: bool, odcid: bytes) -> QuicLoggerTrace:
        trace = super().start_trace(is_client, odcid)
        self.open_traces.append(trace)
        return trace

    def end_trace(self, trace: QuicLoggerTrace) -> None:
        self.open_traces.remove(trace)
        super().end_trace(trace)

    def write_open(self) -> None:
        for trace in list(self.open_traces):
            self.end_trace(trace)


class Endpoint(QuicConnectionProtocol):
    """A client or server connection of ours: the command line's parameters applied before the handshake."""

    args: argparse.Namespace

    def __init__(self, quic: QuicConnection, *a, **kw):
        apply_parameters(quic, self.args)
        super().__init__(quic, *a, **kw)
        self.connection = quic  # the protocol's own reference is private (_quic)


def apply_parameters(quic: QuicConnection, args: argparse.Namespace) -> None:
    """Set the advertised values and make the connection behave by them (before the handshake)."""
    values = {name: getattr(args, name) for name in PERFORMANCE_PARAMETERS if getattr(args, name) not in (None, False)}
    set_local_parameters(quic, {name: value for name, value in values.items() if name in LOCAL_PARAMETERS})
    if "max_idle_timeout" in values:
        quic.configuration.idle_timeout = values["max_idle_timeout"] / 1000.0
    # aioquic hard-codes these three in its transport parameters; rewrite them on the way out.
    rewritten = {k: values[k] for k in ("max_ack_delay", "max_udp_payload_size", "disable_active_migration")
                 if k in values}
    if rewritten:
        def _rewrite(serialized: bytes) -> bytes:
            params = pull_quic_transport_parameters(Buffer(data=serialized))
            for name, value in rewritten.items():
                setattr(params, name, value)
            buf = Buffer(capacity=3 * 1024 + 64)
            push_quic_transport_parameters(buf, params)
            return buf.data

        rewrite_transport_parameters(quic, _rewrite)
    if not args.autotune:
        pin_flow_control_windows(quic)
