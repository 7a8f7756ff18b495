"""aioquic bulk client: downloads --size bytes and prints one JSON line (bytes, request to last byte)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aioquic.asyncio import QuicConnectionProtocol, connect
from aioquic.quic.events import StreamDataReceived

from replay.aioquic_endpoints.common import apply_parameters, command_line, configuration, request


class BulkClient(QuicConnectionProtocol):
    args: argparse.Namespace

    def __init__(self, quic, *a, **kw):
        apply_parameters(quic, self.args)
        super().__init__(quic, *a, **kw)
        self.connection = quic  # the protocol's own reference is private (_quic)
        self.received = 0
        self.done = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event) -> None:
        if isinstance(event, StreamDataReceived):
            self.received += len(event.data)
            if event.end_stream and not self.done.done():
                self.done.set_result(time.monotonic())


async def main() -> None:
    args = command_line("replay-client", __doc__)
    config = configuration(args, is_client=True)
    config.verify_mode = False
    BulkClient.args = args
    host, port = args.connect
    async with connect(host, port, configuration=config, create_protocol=BulkClient) as client:
        stream_id = client.connection.get_next_available_stream_id()
        requested_at = time.monotonic()
        client.connection.send_stream_data(stream_id, request(args.size), end_stream=True)
        client.transmit()
        last_byte = await asyncio.wait_for(client.done, args.timeout_s or 600)
        if client.received != args.size:
            raise SystemExit(f"error: received {client.received} of {args.size} bytes")
        print(json.dumps({"bytes": client.received, "duration_s": last_byte - requested_at,
                          "timing": "request to last byte (client)"}))


if __name__ == "__main__":
    asyncio.run(main())
