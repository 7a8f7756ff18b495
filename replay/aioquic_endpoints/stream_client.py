"""aioquic stream client (tparams.workloads' stream): one ``GET /<size>?bitrate=<bits/s>`` that the server paces,
played back as it arrives (tparams.workloads.Player); prints the replay protocol's JSON line with the
playback's stalls, their total time and the start-up delay added; exits 1 unless every byte came."""

from __future__ import annotations

import asyncio
import time

from aioquic.asyncio import connect
from aioquic.quic.events import StreamDataReceived

from replay.aioquic_endpoints.client import BulkClient, main
from replay.aioquic_endpoints.common import configuration
from tparams.workloads import Player


class StreamClient(BulkClient):
    player: Player

    def quic_event_received(self, event) -> None:
        if isinstance(event, StreamDataReceived) and event.data and event.stream_id in self._open:
            self.player.received(time.monotonic() - self._open[event.stream_id].sent, len(event.data))
        super().quic_event_received(event)


async def run(args) -> dict:
    config = configuration(args, is_client=True)
    config.verify_mode = False
    StreamClient.args = args
    started = time.monotonic()
    async with connect(*args.connect, configuration=config, create_protocol=StreamClient) as client:
        handshake = time.monotonic() - started
        client.player = Player(args.bitrate, args.size)
        exchange = await client.exchange("GET", args.size, args.bitrate)
    if exchange.received != args.size:
        raise SystemExit(f"error: a stream of {args.size} bytes moved {exchange.received}")
    return {"bytes": exchange.received, "duration_s": exchange.finished - exchange.sent, "handshake_s": handshake,
            "requests": 1, "ttfb_s": exchange.first_byte - exchange.sent,
            "latencies_s": [exchange.finished - exchange.sent], "timing": "request to last byte (client)",
            "bitrate": args.bitrate, **client.player.result()}


if __name__ == "__main__":
    asyncio.run(main("replay-stream-client", run, __doc__))
