"""aioquic bulk server: answers each stream's ``GET /<size>`` with that many bytes."""

from __future__ import annotations

import argparse
import asyncio

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.quic.events import StreamDataReceived

from common.aioquic_adapter import unacknowledged_bytes
from replay.aioquic_endpoints.common import apply_parameters, command_line, configuration, requested_size

CHUNK = bytes(1 << 16)
BACKLOG = 8 << 20  # bytes a stream may hold unacknowledged before we stop handing it more


class BulkServer(QuicConnectionProtocol):
    args: argparse.Namespace

    def __init__(self, quic, *a, **kw):
        apply_parameters(quic, self.args)
        super().__init__(quic, *a, **kw)
        self.connection = quic  # the protocol's own reference is private (_quic)
        self._requests: dict[int, bytes] = {}
        self._serving: set[int] = set()  # streams whose request was answered (more data may follow it)

    def quic_event_received(self, event) -> None:
        if isinstance(event, StreamDataReceived):
            data = self._requests.get(event.stream_id, b"") + event.data
            self._requests[event.stream_id] = data
            try:
                size = requested_size(data, event.end_stream)
            except ValueError:
                self.connection.reset_stream(event.stream_id, 0)
                return
            if size is not None and event.stream_id not in self._serving:
                self._serving.add(event.stream_id)
                asyncio.ensure_future(self._send(event.stream_id, size))

    async def _send(self, stream_id: int, remaining: int) -> None:
        # Hand data over in slices and yield, so aioquic's flow control (not our buffer) paces the sender.
        while remaining > 0:
            n = min(remaining, len(CHUNK))
            remaining -= n
            self.connection.send_stream_data(stream_id, CHUNK[:n], end_stream=remaining == 0)
            self.transmit()
            while unacknowledged_bytes(self.connection, stream_id) > BACKLOG:  # let ACKs drain it
                await asyncio.sleep(0.001)
            await asyncio.sleep(0)


async def main() -> None:
    args = command_line("replay-server", __doc__)
    config = configuration(args, is_client=False)
    config.load_cert_chain(args.cert, args.key)
    BulkServer.args = args
    await serve(*args.listen, configuration=config, create_protocol=BulkServer)
    await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())
