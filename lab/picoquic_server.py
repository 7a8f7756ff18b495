"""The lab's picoquic server, through aiopquic (a Python binding bundling picoquic):
completes handshakes and holds each connection until the client leaves.

aiopquic needs Python >= 3.12, so it lives in its own virtual environment
(.venv-picoquic, scripts/setup.sh) and this file runs as a script there,
importing of the project only its command line (tparams.program_cli, the standard
library alone):
    .venv-picoquic/bin/python lab/picoquic_server.py IP:443 --cert=C --key=K
        [--max-idle-timeout=MS --initial-max-data=N ...] [--alpn=h3,... --datagrams=false --retry]
picoquic has one window for every stream (the largest given) and picks its own
connection-ID length (8 bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from aiopquic.asyncio import serve
from aiopquic.asyncio.protocol import QuicConnectionProtocol
from aiopquic.quic.configuration import QuicConfiguration

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project's root, for tparams alone
from tparams import program_cli  # noqa: E402

STREAM_WINDOWS = ("initial_max_stream_data_bidi_local", "initial_max_stream_data_bidi_remote",
                  "initial_max_stream_data_uni")
# What picoquic lets an application choose of the lab-server command line; the rest is refused.
SUPPORTED = (*program_cli.FLOW_CONTROL, "alpn", "datagrams", "retry")


def configuration(args: argparse.Namespace) -> QuicConfiguration:
    config = QuicConfiguration(is_client=False, alpn_protocols=args.alpn or ["h3"], certificate_file=args.cert,
                               private_key_file=args.key)
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
    host, port = args.listen
    server = await serve(host, port, configuration=configuration(args),
                         create_protocol=QuicConnectionProtocol, retry=args.retry)
    print(f"listening on {host}:{port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    parser = program_cli.parser("lab-server", __doc__.splitlines()[0])
    args = parser.parse_args()
    program_cli.refuse_unsupported(parser, vars(args), "picoquic", "lab-server", SUPPORTED)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
