"""aioquic stream client (tparams.workloads' stream): one ``GET /<size>?bitrate=<bits/s>`` that the server paces,
played back as it arrives (tparams.workloads.Player); prints the replay protocol's JSON line with the
playback's stalls, their total time and the start-up delay added; exits 1 unless every byte came."""

from __future__ import annotations

import asyncio
import json
import time

from aioquic.asyncio import connect
from aioquic.quic.events import StreamDataReceived

from replay.aioquic_endpoints.client import BulkClient, Exchange
from replay.aioquic_endpoints.common import command_line, configuration, request
from tparams.workloads import Player


class StreamClient(BulkClient):
    player: Player
    sent: float

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
        stream_id = client.connection.get_next_available_stream_id()
        loop = asyncio.get_running_loop()
        exchange = client._open[stream_id] = Exchange(time.monotonic(), loop.create_future())
        client.connection.send_stream_data(stream_id, request("GET", args.size, args.bitrate), end_stream=True)
        client.transmit()
        await exchange.done
    if exchange.received != args.size:
        raise SystemExit(f"error: a stream of {args.size} bytes moved {exchange.received}")
    return {"bytes": exchange.received, "duration_s": exchange.finished - exchange.sent, "handshake_s": handshake,
            "requests": 1, "ttfb_s": exchange.first_byte - exchange.sent,
            "latencies_s": [exchange.finished - exchange.sent], "timing": "request to last byte (client)",
            "bitrate": args.bitrate, **client.player.result()}


async def main() -> None:
    args = command_line("replay-stream-client", __doc__)
    timeout = args.timeout_s or 600
    try:
        result = await asyncio.wait_for(run(args), timeout)
    except (TimeoutError, asyncio.TimeoutError):
        raise SystemExit(f"error: gave up after --timeout-s={timeout:g}") from None
    except ConnectionError as error:
        raise SystemExit(f"error: {str(error) or 'the connection closed before the stream ended'}") from None
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
