"""aioquic stream client (tparams.workloads' stream): one ``GET /<size>?bitrate=<bits/s>`` that the server paces,
played back as it arrives (tparams.workloads.Player); prints the replay protocol's JSON line with the
playback's stalls, their total time and the start-up delay added; exits 1 unless every byte came."""

from __future__ import annotations

import asyncio
import time

from aioquic.quic.events import StreamDataReceived

from replay.aioquic_endpoints.client import BulkClient, exchange_all, main, result
from tparams.workloads import Player


class StreamClient(BulkClient):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.player = Player(self.args.bitrate, self.args.size)

    def quic_event_received(self, event) -> None:
        if isinstance(event, StreamDataReceived) and event.data and event.stream_id in self._open:
            self.player.received(time.monotonic() - self._open[event.stream_id].sent, len(event.data))
        super().quic_event_received(event)


async def run(args) -> dict:
    client, exchanges, handshake = await exchange_all(args, StreamClient, "GET", 1, 1, args.bitrate)
    return {**result(exchanges, "GET", args.size, handshake), "bitrate": args.bitrate, **client.player.result()}


if __name__ == "__main__":
    asyncio.run(main("replay-stream-client", run, __doc__))
