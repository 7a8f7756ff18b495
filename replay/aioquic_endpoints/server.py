"""aioquic replay server: answers each stream's ``GET /<size>`` with that many bytes (``?bitrate=<bits/s>``: paced at
it, a stream), its ``PUT /<size>`` with the number of body bytes received once the body has ended.

It speaks HTTP/3 too (aioquic.h3), to a client that offers h3 (a browser): ``GET /<size>`` answered with
that many bytes, a PUT or POST with the number of body bytes it read, in decimal, once the body has ended, and
``GET /<file>`` with that file of the directory named by QREPLAY_HTDOCS (the browser's measurement page).
Either way the connection carries the command line's transport parameters, so a browser meets aioquic
configured with any set.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

from aioquic.asyncio import serve
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.events import ProtocolNegotiated, StreamDataReceived

from replay.stacks.base import HTDOCS_ENV
from replay.aioquic_endpoints.common import (Endpoint, command_line, configuration, parse_request, send_at_bitrate,
                                            send_paced)

_SIZE = re.compile(r"/(\d+)")
_BITRATE = re.compile(r"bitrate=(\d+)")  # a stream's query: GET /<size>?bitrate=<bits/s>
_FILE = re.compile(r"/([A-Za-z0-9_.-]+)")


class BulkServer(Endpoint):
    def __init__(self, quic, *a, **kw):
        super().__init__(quic, *a, **kw)
        self._lines: dict[int, bytes] = {}  # streams whose request line is still coming
        # streams whose request was read: a PUT's body bytes so far, None for a GET (more data is ignored)
        self._bodies: dict[int, int | None] = {}
        self.h3: H3Connection | None = None

    def quic_event_received(self, event) -> None:
        if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
            self.h3 = H3Connection(self.connection)
        if self.h3 is not None:
            for h3_event in self.h3.handle_event(event):
                self.h3_event_received(h3_event)
            return
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
            method, size, length, bitrate = parsed
            if method == "GET":
                self._bodies[stream_id] = None
                asyncio.ensure_future(send_at_bitrate(self.connection, self.transmit, stream_id, size, bitrate)
                                      if bitrate else send_paced(self.connection, self.transmit, stream_id, size))
            else:
                self._bodies[stream_id] = len(line) - length
        elif self._bodies[stream_id] is not None:
            self._bodies[stream_id] += len(event.data)
        if event.end_stream:
            received = self._bodies.pop(stream_id)
            if received is not None:
                self.connection.send_stream_data(stream_id, str(received).encode(), end_stream=True)

    # --- HTTP/3 ---------------------------------------------------------------------------------------

    def h3_event_received(self, event) -> None:
        stream_id = event.stream_id
        if isinstance(event, HeadersReceived):
            headers = dict(event.headers)
            method = headers.get(b":method", b"").decode()
            path, _, query = headers.get(b":path", b"/").decode().partition("?")
            bitrate = int(found.group(1)) if (found := _BITRATE.fullmatch(query)) and int(found.group(1)) else None
            if method in ("PUT", "POST"):
                self._bodies[stream_id] = 0
            elif method == "GET" and (size := _SIZE.fullmatch(path)):
                self._respond(stream_id, 200, {b"content-length": size.group(1).encode()})
                length = int(size.group(1))
                asyncio.ensure_future(
                    send_at_bitrate(self.connection, self.transmit, stream_id, length, bitrate, self.h3.send_data)
                    if bitrate else send_paced(self.connection, self.transmit, stream_id, length, self.h3.send_data))
                return
            elif method == "GET" and (page := self._file(path)) is not None:
                self._respond(stream_id, 200, {b"content-type": b"text/html; charset=utf-8"}, page)
                return
            else:
                self._respond(stream_id, 404, {}, b"")
                return
        elif isinstance(event, DataReceived) and stream_id in self._bodies:
            self._bodies[stream_id] += len(event.data)
        else:
            return
        if event.stream_ended:
            count = str(self._bodies.pop(stream_id)).encode()
            self._respond(stream_id, 200, {b"content-type": b"text/plain"}, count)

    def _respond(self, stream_id: int, status: int, headers: dict[bytes, bytes], body: bytes | None = None) -> None:
        """Send the response's headers, and ``body`` with FIN unless it is None (the body follows)."""
        fields = [(b":status", str(status).encode()), *headers.items()]
        if body is not None:
            fields.append((b"content-length", str(len(body)).encode()))
        self.h3.send_headers(stream_id, fields)
        if body is not None:
            self.h3.send_data(stream_id, body, end_stream=True)
        self.transmit()

    @staticmethod
    def _file(path: str) -> bytes | None:
        """A file of QREPLAY_HTDOCS by its name (``/`` is index.html); None if there is none."""
        htdocs, name = os.environ.get(HTDOCS_ENV), _FILE.fullmatch("/index.html" if path == "/" else path)
        if not htdocs or not name or not (Path(htdocs) / name.group(1)).is_file():
            return None
        return (Path(htdocs) / name.group(1)).read_bytes()


async def main() -> None:
    args = command_line("replay-server", __doc__)
    config = configuration(args, is_client=False)
    config.alpn_protocols = [*config.alpn_protocols, *H3_ALPN]
    config.load_cert_chain(args.cert, args.key)
    BulkServer.args = args
    await serve(*args.listen, configuration=config, create_protocol=BulkServer)
    stopped = asyncio.get_running_loop().create_future()
    if args.qlog_dir:  # stopped, it exits, writing the qlog of the connections still open (common.QlogFiles)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set_result, None)
    await stopped


if __name__ == "__main__":
    asyncio.run(main())
