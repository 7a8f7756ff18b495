"""aioquic replay server: answers each stream's ``GET /<size>`` with that many bytes, its ``PUT /<size>``
with the number of body bytes received once the body has ended."""

from __future__ import annotations

import asyncio

from aioquic.asyncio import serve
from aioquic.quic.events import StreamDataReceived

from replay.aioquic_endpoints.common import Endpoint, command_line, configuration, parse_request, send_paced


class BulkServer(Endpoint):
    def __init__(self, quic, *a, **kw):
        super().__init__(quic, *a, **kw)
        self._lines: dict[int, bytes] = {}  # streams whose request line is still coming
        # streams whose request was read: a PUT's body bytes so far, None for a GET (more data is ignored)
        self._bodies: dict[int, int | None] = {}

    def quic_event_received(self, event) -> None:
        if not isinstance(event, StreamDataReceived):
            return
        stream_id = event.stream_id
        if stream_id not in self._bodies:
            line = self._lines.pop(stream_id, b"") + event.data
            try:
                parsed = parse_request(line, event.end_stream)
            except ValueError:
                self.connection.reset_stream(stream_id, 0)
                return
            if parsed is None:
                self._lines[stream_id] = line
                return
            method, size, length = parsed
            if method == "GET":
                self._bodies[stream_id] = None
                asyncio.ensure_future(send_paced(self.connection, self.transmit, stream_id, size))
            else:
                self._bodies[stream_id] = len(line) - length
        elif self._bodies[stream_id] is not None:
            self._bodies[stream_id] += len(event.data)
        if event.end_stream:
            received = self._bodies.pop(stream_id)
            if received is not None:
                self.connection.send_stream_data(stream_id, str(received).encode(), end_stream=True)


async def main() -> None:
    args = command_line("replay-server", __doc__)
    config = configuration(args, is_client=False)
    config.load_cert_chain(args.cert, args.key)
    BulkServer.args = args
    await serve(*args.listen, configuration=config, create_protocol=BulkServer)
    await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())
