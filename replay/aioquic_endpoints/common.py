"""What the aioquic client and server share: their command line (tparams.program_cli, roles replay-server
and replay-client), every one of the twelve parameters applied to a connection before its transport
parameters are sent, and pinned flow-control windows.

The download protocol is every qreplay program's (lab/servers/common/src/replay.rs): hq-interop,
``GET /<size>`` on a client-opened stream, answered with that many bytes.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from aioquic.buffer import Buffer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import pull_quic_transport_parameters, push_quic_transport_parameters

from common.aioquic_adapter import (
    LOCAL_PARAMETERS,
    pin_flow_control_windows,
    rewrite_transport_parameters,
    set_local_parameters,
)
from tparams import program_cli
from tparams.paramset import PERFORMANCE_PARAMETERS

ALPN = "hq-interop"
MAX_REQUEST = 64
_REQUEST = re.compile(rb"GET /(\d+)\r?")


def request(size: int) -> bytes:
    return f"GET /{size}\r\n".encode()


def requested_size(received: bytes, finished: bool) -> int | None:
    """The size a request asks for; None while the line is incomplete; ValueError if it is no request."""
    line, newline, _ = received.partition(b"\n")
    if not newline and not finished:
        if len(received) > MAX_REQUEST:
            raise ValueError("request line too long")
        return None
    found = _REQUEST.fullmatch(line)
    if not found:
        raise ValueError(f"not a request for /<size>: {received[:MAX_REQUEST]!r}")
    return int(found.group(1))


def command_line(role: program_cli.Role, description: str) -> argparse.Namespace:
    """The parsed command line of ``role``; what these programs do not do (BBR, qlog) refused in one line."""
    parser = program_cli.parser(role, description)
    args = parser.parse_args()
    for refused, given in (("--cc=bbr", args.cc == "bbr"), ("--qlog-dir", args.qlog_dir)):
        if given:
            parser.exit(2, f"error: the aioquic endpoints cannot take {refused}\n")
    return args


def configuration(args: argparse.Namespace, is_client: bool) -> QuicConfiguration:
    """The configuration both ends share: hq-interop, the congestion control named (aioquic's own
    default is Reno: it is always named, so that what ran is what is stored), the key log."""
    configuration = QuicConfiguration(is_client=is_client, alpn_protocols=[ALPN],
                                      congestion_control_algorithm=args.cc or "cubic")
    if args.keylog:
        configuration.secrets_log_file = Path(args.keylog).open("a")
    return configuration


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
