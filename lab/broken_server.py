"""The lab's deliberately broken QUIC server, one mode per process.

garbage: answers every datagram with random bytes (no QUIC at all), from the
address the datagram was sent to, so that one garbage server bound to the
wildcard answers for a whole range of local addresses (lab/population.py).
duplicate-parameter, truncated-varint, short-reset-token: a real aioquic
handshake whose transport parameters are aioquic's own, then damaged:
initial_max_data sent a second time; max_idle_timeout's value a varint whose
length prefix promises 4 bytes but the parameter holds 2; a 15-byte
stateless_reset_token. Scanners must record these, not crash on them.
hello-retry-twice, hello-retry-unoffered-group: aioquic's QUIC without its
TLS; each ClientHello is answered with a HelloRetryRequest, the first asking for
P-384 (which a client may list without a share); with -twice the second
ClientHello gets another one (RFC 8446 4.1.4 allows one), with
-unoffered-group the first asks for ffdhe2048, which no QUIC client offers.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
from typing import Any

from aioquic import tls
from aioquic.quic.connection import QuicConnection

from common.aioquic_adapter import replace_tls, rewrite_transport_parameters
from lab.aioquic_server import configuration, http3_protocol, run
from tparams import program_cli
from tparams.codec import decode_transport_parameters, encode_transport_parameters, encode_value
from tparams.registry import id_for

HELLO_RETRY_MODES = {"hello-retry-twice": (0x0018, 0x0018), "hello-retry-unoffered-group": (0x0100,)}  # groups asked, in turn
MODES = ("garbage", "duplicate-parameter", "truncated-varint", "short-reset-token", *HELLO_RETRY_MODES)
HELLO_RETRY_RANDOM = bytes.fromhex("CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C")


def malformed(genuine: bytes, mode: str) -> bytes:
    """``genuine`` transport parameters damaged as ``mode`` says."""
    pairs = [(p.id, p.raw) for p in decode_transport_parameters(genuine, sender="server").parameters]
    if mode == "duplicate-parameter":
        max_data = id_for("initial_max_data")
        return encode_transport_parameters(pairs + [(max_data, encode_value(max_data, 12345))])
    if mode == "truncated-varint":
        idle = id_for("max_idle_timeout")
        return encode_transport_parameters([(pid, b"\x80\x01" if pid == idle else raw) for pid, raw in pairs])
    if mode == "short-reset-token":
        token = id_for("stateless_reset_token")
        return encode_transport_parameters([(pid, raw[:15] if pid == token else raw) for pid, raw in pairs])
    raise ValueError(f"no such mode {mode!r}")


def malformed_parameters_protocol(mode: str) -> type:
    """The lab's aioquic HTTP/3 server whose every connection sends its transport parameters damaged as ``mode`` says."""

    class MalformedParametersProtocol(http3_protocol()):  # type: ignore[misc]
        def __init__(self, quic: QuicConnection, *args: Any, **kwargs: Any) -> None:
            rewrite_transport_parameters(quic, lambda genuine: malformed(genuine, mode))
            super().__init__(quic, *args, **kwargs)

    return MalformedParametersProtocol


# IP_PKTINFO (linux/in.h; Python's socket module does not name it): received, it says which local
# address a datagram was sent to; sent, it makes that address the reply's source.
IP_PKTINFO = 8
_PKTINFO = struct.Struct("=I4s4s")  # struct in_pktinfo: ifindex, spec_dst, addr


def serve_garbage(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        sock.bind((host, port))
        print(f"garbage on {host}:{port}", flush=True)
        while True:
            _, ancillary, _, source = sock.recvmsg(2048, socket.CMSG_SPACE(_PKTINFO.size))
            asked = next((data for level, kind, data in ancillary
                          if level == socket.IPPROTO_IP and kind == IP_PKTINFO), None)
            reply = [(socket.IPPROTO_IP, IP_PKTINFO, _PKTINFO.pack(0, _PKTINFO.unpack(asked)[2], bytes(4)))] \
                if asked else []
            sock.sendmsg([os.urandom(random.randint(20, 1200))], reply, 0, source)


def hello_retry_request(client_hello: bytes, group: int) -> bytes:
    """A HelloRetryRequest (RFC 8446 4.1.4) answering ``client_hello`` and asking for ``group``."""
    session_id = client_hello[38 : 39 + client_hello[38]]  # echoed with its length
    extensions = b"\x00\x2b\x00\x02\x03\x04" + b"\x00\x33\x00\x02" + group.to_bytes(2, "big")
    body = b"\x03\x03" + HELLO_RETRY_RANDOM + session_id + b"\x13\x01\x00" + len(extensions).to_bytes(2, "big") + extensions
    return b"\x02" + len(body).to_bytes(3, "big") + body


def hello_retry_protocol(groups: tuple[int, ...]) -> type:
    """aioquic's server connection (its packets, ACKs, retransmissions) without its TLS: each
    ClientHello is answered with a HelloRetryRequest asking for ``groups`` in turn, then with nothing."""

    class HelloRetryProtocol(http3_protocol()):  # type: ignore[misc]
        def __init__(self, quic: QuicConnection, *args: Any, **kwargs: Any) -> None:
            received, hellos = bytearray(), [0]

            def handle_message(data: bytes, output: dict[tls.Epoch, tls.Buffer]) -> None:
                received.extend(data)
                while len(received) >= 4 and len(received) >= (end := 4 + int.from_bytes(received[1:4], "big")):
                    hello = bytes(received[:end])
                    del received[:end]
                    if hellos[0] < len(groups):
                        output[tls.Epoch.INITIAL].push_bytes(hello_retry_request(hello, groups[hellos[0]]))
                    hellos[0] += 1

            replace_tls(quic, handle_message)
            super().__init__(quic, *args, **kwargs)

    return HelloRetryProtocol


def main() -> None:
    parser = program_cli.parser("broken-server", __doc__.splitlines()[0])
    args = parser.parse_args()
    if args.mode not in MODES:
        parser.error(f"--mode takes {', '.join(MODES)}, not {args.mode!r}")
    if args.mode == "garbage":
        serve_garbage(*args.listen)
        return
    protocol = hello_retry_protocol(HELLO_RETRY_MODES[args.mode]) if args.mode in HELLO_RETRY_MODES \
        else malformed_parameters_protocol(args.mode)
    asyncio.run(run(*args.listen, configuration(args.cert, args.key), protocol=protocol))


if __name__ == "__main__":
    main()
