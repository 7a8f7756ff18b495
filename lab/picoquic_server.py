"""The lab's picoquic server, through aiopquic (a Python binding bundling picoquic):
completes handshakes and holds each connection until the client leaves.

aiopquic needs Python >= 3.12, so it lives in its own virtual environment
(.venv-picoquic, scripts/setup.sh) and this file runs as a script there,
importing nothing of the project:
    .venv-picoquic/bin/python lab/picoquic_server.py --host IP --port 443 --certificate C --private-key K
        [--max_idle_timeout MS --initial_max_data N ...] [--alpn=h3,... --datagrams=false --retry]
picoquic has one window for every stream (the largest given) and picks its own
connection-ID length (8 bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from aiopquic.asyncio import serve
from aiopquic.asyncio.protocol import QuicConnectionProtocol
from aiopquic.quic.configuration import QuicConfiguration

STREAM_WINDOWS = ("initial_max_stream_data_bidi_local", "initial_max_stream_data_bidi_remote",
                  "initial_max_stream_data_uni")


def configuration(args: argparse.Namespace) -> QuicConfiguration:
    config = QuicConfiguration(is_client=False, alpn_protocols=args.alpn, certificate_file=args.certificate,
                               private_key_file=args.private_key)
    if args.max_idle_timeout is not None:
        config.idle_timeout = args.max_idle_timeout / 1000
    if args.initial_max_data is not None:
        config.max_data = args.initial_max_data
    windows = [getattr(args, name) for name in STREAM_WINDOWS if getattr(args, name) is not None]
    if windows:
        config.max_stream_data = max(windows)
    if args.initial_max_streams_bidi is not None:
        config.max_streams_bidi = args.initial_max_streams_bidi
    if args.initial_max_streams_uni is not None:
        config.max_streams_uni = args.initial_max_streams_uni
    if args.datagrams is not None:
        config.max_datagram_frame_size = 65535 if args.datagrams else None
    return config


async def run(args: argparse.Namespace) -> None:
    """Serve until SIGTERM (the lab stops its servers with SIGTERM)."""
    server = await serve(args.host, args.port, configuration=configuration(args),
                         create_protocol=QuicConnectionProtocol, retry=args.retry)
    print(f"listening on {args.host}:{args.port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=443)
    parser.add_argument("--certificate", required=True)
    parser.add_argument("--private-key", required=True)
    for name in ("max_idle_timeout", *STREAM_WINDOWS, "initial_max_data", "initial_max_streams_bidi",
                 "initial_max_streams_uni"):
        parser.add_argument(f"--{name}", type=int)
    parser.add_argument("--alpn", type=lambda text: text.split(","), default=["h3"])
    parser.add_argument("--datagrams", type=lambda text: text == "true")
    parser.add_argument("--retry", action="store_true")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
