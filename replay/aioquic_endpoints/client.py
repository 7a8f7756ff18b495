"""aioquic replay client: makes --requests requests of --size bytes on one connection, each on its own stream
and at most --concurrency at once, GETs (--direction=down) or PUTs (up), and prints one JSON line
(tparams.workloads); exits 1 unless every request moved all its bytes."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived, StreamReset

from replay.aioquic_endpoints.common import Endpoint, command_line, configuration, request, send_paced


@dataclass
class Exchange:
    """One request's times and its response: a GET's byte count, a PUT's answer (the server's count)."""

    sent: float
    done: asyncio.Future
    first_byte: float | None = None
    finished: float | None = None
    received: int = 0
    answer: bytearray = field(default_factory=bytearray)


class BulkClient(Endpoint):
    def __init__(self, quic, *a, **kw):
        super().__init__(quic, *a, **kw)
        self._open: dict[int, Exchange] = {}

    async def exchange(self, method: str, size: int, bitrate: int | None = None) -> Exchange:
        """One request on a stream of its own (a GET paced at ``bitrate``: a stream), answered to its end (aioquic
        holds a stream's data until the server's stream credit lets it go)."""
        stream_id = self.connection.get_next_available_stream_id()
        exchange = self._open[stream_id] = Exchange(time.monotonic(), asyncio.get_running_loop().create_future())
        self.connection.send_stream_data(stream_id, request(method, size, bitrate), end_stream=method == "GET")
        self.transmit()
        if method == "PUT":
            await send_paced(self.connection, self.transmit, stream_id, size)
        await exchange.done
        return exchange

    def quic_event_received(self, event) -> None:
        if isinstance(event, StreamDataReceived) and event.stream_id in self._open:
            exchange = self._open[event.stream_id]
            if event.data and exchange.first_byte is None:
                exchange.first_byte = time.monotonic()
            exchange.received += len(event.data)
            if len(exchange.answer) < 32:  # a PUT's answer is a count; a GET's body is only counted
                exchange.answer += event.data[:32]
            if event.end_stream:
                exchange.finished = time.monotonic()
                exchange.done.set_result(None)
                del self._open[event.stream_id]
        elif isinstance(event, (StreamReset, ConnectionTerminated)):
            failed = [self._open.pop(event.stream_id)] if isinstance(event, StreamReset) else self._open.values()
            for exchange in failed:
                if not exchange.done.done():
                    exchange.done.set_exception(ConnectionError(f"the server ended the request: {event}"))


def moved(exchange: Exchange, method: str) -> int:
    """The payload a request moved: a GET's bytes received, a PUT's count as the server answered it."""
    if method == "GET":
        return exchange.received
    answer = exchange.answer.decode(errors="replace")
    if not answer.isdigit():
        raise SystemExit(f"error: the server's answer to a PUT is no count of bytes: {answer!r}")
    return int(answer)


@asynccontextmanager
async def connected(host: str, port: int, configuration, create_protocol) -> AsyncIterator[BulkClient]:
    """aioquic's connect(), built as it is from aioquic's lower public layer (QuicConnection and its asyncio
    protocol), less its wait on leaving for the closing period to end: three PTOs after the CONNECTION_CLOSE, which
    an endpoint closing its UDP socket, as this client does, MAY cut short (RFC 9000 10.2). Behind a deep queue the
    smoothed RTT reaches seconds and the wait tens of them: a stream through 1 Mbit/s lived 35.3 s for a 4.3 s
    transfer, the run's wall_s, which the breakdown's CPU shares divide by. The same CONNECTION_CLOSE goes on the
    wire, and the connection's own end of the closing period still ends its qlog."""
    loop = asyncio.get_running_loop()
    family, *_, address = (await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM))[0]
    configuration.server_name = configuration.server_name or host
    connection = QuicConnection(configuration=configuration)
    transport, client = await loop.create_datagram_endpoint(lambda: create_protocol(connection), family=family)
    try:
        client.connect(address)
        await client.wait_connected()
        yield client
    finally:
        client.close()  # the CONNECTION_CLOSE, sent now
        if (closing_ends := connection.get_timer()) is not None:
            connection.handle_timer(now=closing_ends)
        transport.close()


async def exchange_all(args: argparse.Namespace, protocol: type[BulkClient], method: str, requests: int,
                       concurrency: int, bitrate: int | None = None) -> tuple[BulkClient, list[Exchange], float]:
    """(the client, its exchanges, the handshake's seconds) of ``requests`` requests of --size bytes on one
    connection, ``concurrency`` at once (GETs paced at ``bitrate``: a stream); the bulk and the stream client's."""
    config = configuration(args, is_client=True)
    config.verify_mode = False
    protocol.args = args
    slots = asyncio.Semaphore(concurrency)
    started = time.monotonic()
    async with connected(*args.connect, configuration=config, create_protocol=protocol) as client:
        handshake = time.monotonic() - started

        async def one() -> Exchange:
            async with slots:
                return await client.exchange(method, args.size, bitrate)

        exchanges = await asyncio.gather(*(one() for _ in range(requests)))
    return client, exchanges, handshake


def result(exchanges: list[Exchange], method: str, size: int, handshake: float) -> dict:
    """The replay protocol's JSON line (tparams.workloads) of ``exchanges``, each of ``size`` bytes (SystemExit
    if one moved another count); a stream client adds its playback's fields."""
    for exchange in exchanges:
        if moved(exchange, method) != size:
            raise SystemExit(f"error: a {method} of {size} bytes moved {moved(exchange, method)}")
    first = min(exchanges, key=lambda exchange: exchange.sent)
    exchanges = sorted(exchanges, key=lambda exchange: exchange.finished)
    return {"bytes": sum(moved(exchange, method) for exchange in exchanges),
            "duration_s": exchanges[-1].finished - first.sent, "handshake_s": handshake,
            "requests": len(exchanges), "ttfb_s": first.first_byte - first.sent,
            "latencies_s": [exchange.finished - exchange.sent for exchange in exchanges],
            "timing": "request to last byte (client)"}


async def run(args: argparse.Namespace) -> dict:
    method = "PUT" if args.direction == "up" else "GET"
    _, exchanges, handshake = await exchange_all(args, BulkClient, method, args.requests or 1,
                                                 args.concurrency or 1)
    return result(exchanges, method, args.size, handshake)


async def main(role: str = "replay-client", run_with=run, description: str = __doc__) -> None:
    """Run the client of ``role`` (the stream client's too: stream_client) and print its JSON line."""
    args = command_line(role, description)  # type: ignore[arg-type]
    timeout = args.timeout_s or 600
    try:
        result = await asyncio.wait_for(run_with(args), timeout)
    except (TimeoutError, asyncio.TimeoutError):
        raise SystemExit(f"error: gave up after --timeout-s={timeout:g}") from None
    except ConnectionError as error:
        raise SystemExit(f"error: {str(error) or 'the connection closed before every request was answered'}") from None
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
