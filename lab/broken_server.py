"""The lab's deliberately broken QUIC server, one mode per process.

garbage: answers every datagram with random bytes (no QUIC at all), from the
address the datagram was sent to, so that one garbage server bound to the
wildcard answers for a whole range of local addresses (lab/population.py).
duplicate-parameter, truncated-varint, short-reset-token: a real aioquic
handshake whose transport parameters are aioquic's own, then damaged:
initial_max_data sent a second time; max_idle_timeout's value a varint whose
length prefix promises 4 bytes but the parameter holds 2; a 15-byte
stateless_reset_token. Scanners must record these, not crash on them.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct

import aioquic.asyncio.server
from aioquic.quic.connection import QuicConnection

from lab.aioquic_server import arguments, configuration, run
from tparams.codec import decode_transport_parameters, encode_transport_parameters, encode_value
from tparams.registry import id_for

MODES = ("garbage", "duplicate-parameter", "truncated-varint", "short-reset-token")


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


def connection_class(mode: str) -> type[QuicConnection]:
    class MalformedParametersConnection(QuicConnection):
        def _serialize_transport_parameters(self) -> bytes:
            return malformed(super()._serialize_transport_parameters(), mode)

    return MalformedParametersConnection


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


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    args = parser.parse_args()
    if args.mode == "garbage":
        serve_garbage(args.host, args.port)
        return
    # aioquic's server builds its connections by this module-level name; this
    # process exists only to serve the damaged parameters.
    aioquic.asyncio.server.QuicConnection = connection_class(args.mode)
    asyncio.run(run(args.host, args.port, configuration(args.certificate, args.private_key)))


if __name__ == "__main__":
    main()
