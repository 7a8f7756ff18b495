"""A small aioquic HTTP/3 server for the lab: answers every request with 200 and a short body.

Run inside a lab namespace by the "aioquic" server kind, with the lab-server command line
(tparams.program_cli):
    python -m lab.aioquic_server IP:443 --cert=C --key=K [--initial-max-data=N ...]
        [--alpn=h3,hq-interop --cid-length=N --datagrams=true --retry]
"""

from __future__ import annotations

import asyncio
import importlib
import signal
from collections.abc import Mapping
from typing import Any

from aioquic.quic.connection import QuicConnection

from common.aioquic_adapter import transport_parameters_sent
from tparams import program_cli
from tparams.codec import decode_transport_parameters
from tparams.libraries import library as library_descriptor
from tparams.paramset import ParamSet


def http3_protocol(library: str = "aioquic") -> type:
    """A protocol class answering every HTTP/3 request, built on ``library``:
    aioquic or its fork qh3, which keep aioquic's module layout and API."""
    base = importlib.import_module(f"{library}.asyncio").QuicConnectionProtocol
    h3 = importlib.import_module(f"{library}.h3.connection")
    headers_received = importlib.import_module(f"{library}.h3.events").HeadersReceived
    protocol_negotiated = importlib.import_module(f"{library}.quic.events").ProtocolNegotiated
    body = f"{library} lab server\n".encode()

    class Http3ServerProtocol(base):  # type: ignore[misc, valid-type]
        """HTTP/3 once ALPN says h3; every request gets the same small response."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._http = None

        def quic_event_received(self, event: Any) -> None:
            if isinstance(event, protocol_negotiated) and event.alpn_protocol in h3.H3_ALPN:
                self._http = h3.H3Connection(self._quic)
            if self._http is None:
                return
            for h3_event in self._http.handle_event(event):
                if isinstance(h3_event, headers_received):
                    self._http.send_headers(h3_event.stream_id, [
                        (b":status", b"200"), (b"content-type", b"text/plain"),
                        (b"content-length", str(len(body)).encode())])
                    self._http.send_data(h3_event.stream_id, body, end_stream=True)
            self.transmit()

    return Http3ServerProtocol


# The transport parameters aioquic's (and qh3's) configuration can set. One window
# for all three stream directions (the largest given); the stream limits are fixed.
STREAM_WINDOWS = ("initial_max_stream_data_bidi_local", "initial_max_stream_data_bidi_remote",
                  "initial_max_stream_data_uni")
SETTABLE = ("max_idle_timeout", "initial_max_data", *STREAM_WINDOWS)


def apply_parameters(config: Any, asked: Mapping[str, int | None]) -> None:
    """Set the SETTABLE parameters of ``asked`` (None or absent: the library's default)."""
    if asked.get("max_idle_timeout") is not None:
        config.idle_timeout = asked["max_idle_timeout"] / 1000
    if asked.get("initial_max_data") is not None:
        config.max_data = asked["initial_max_data"]
    windows = [asked[name] for name in STREAM_WINDOWS if asked.get(name) is not None]
    if windows:
        config.max_stream_data = max(windows)


def configuration(certificate: str | None = None, private_key: str | None = None, is_client: bool = False,
                  asked: Mapping[str, Any] | None = None, library: str = "aioquic") -> Any:
    """``library``: aioquic or its fork qh3, which keeps aioquic's API. ``asked``: the
    SETTABLE parameters and the application's choices (``arguments``), None or absent
    for the library's own."""
    asked = asked or {}
    configuration_class = importlib.import_module(f"{library}.quic.configuration").QuicConfiguration
    alpn = asked.get("alpn") or importlib.import_module(f"{library}.h3.connection").H3_ALPN
    config = configuration_class(is_client=is_client, alpn_protocols=alpn)
    apply_parameters(config, asked)
    if asked.get("cid_length") is not None:
        config.connection_id_length = asked["cid_length"]
    if asked.get("datagrams"):
        config.max_datagram_frame_size = 65536
    if asked.get("active_connection_id_limit") is not None:
        config.active_connection_id_limit = asked["active_connection_id_limit"]  # qh3 only
    if certificate:
        config.load_cert_chain(certificate, private_key)
    return config


def expected_transport_parameters(asked: Mapping[str, int | None] | None = None) -> dict[str, int | bool]:
    """The performance parameters this server sends, computed by aioquic itself
    from the same configuration (client and server serialise the same locals)."""
    connection = QuicConnection(configuration=configuration(is_client=True, asked=asked))
    connection.connect(("127.0.0.1", 443), now=0.0)  # builds the ClientHello in memory; nothing is sent
    sent = ParamSet.from_decoded(decode_transport_parameters(transport_parameters_sent(connection)))
    return {name: value for name, value in sent.as_sent().items() if value is not None}


async def run(host: str, port: int, config: Any, library: str = "aioquic", retry: bool = False,
              protocol: type | None = None) -> None:
    """Serve until SIGTERM, then return (the lab stops its servers with SIGTERM). ``protocol``:
    http3_protocol(library) or a subclass of it."""
    serve = importlib.import_module(f"{library}.asyncio").serve
    server = await serve(host, port, configuration=config, create_protocol=protocol or http3_protocol(library),
                         retry=retry)
    print(f"listening on {host}:{port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


def serve_main(library: str) -> None:
    parser = program_cli.parser("lab-server", f"A small {library} HTTP/3 server for the lab")
    args = vars(parser.parse_args())
    program_cli.refuse_unsupported(parser, args, library, "lab-server", (*SETTABLE, *library_descriptor(library).offered))
    config = configuration(args["cert"], args["key"], asked=args, library=library)
    asyncio.run(run(*args["listen"], config, library=library, retry=args["retry"]))


def main() -> None:
    serve_main("aioquic")


if __name__ == "__main__":
    main()
