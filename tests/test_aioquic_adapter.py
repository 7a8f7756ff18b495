"""Each use of aioquic's internals (common/aioquic_adapter.py) against the real aioquic: an aioquic
client and server in this process, their datagrams handed over in memory. Each test fails if aioquic
renamed what the adapter reaches for, or if it stopped having the effect the project relies on."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest
from aioquic import tls
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.crypto import CIPHER_SUITES, CryptoContext, derive_key_iv_hp
from aioquic.quic.events import HandshakeCompleted
from aioquic.quic.logger import QuicLogger
from aioquic.quic.packet import QuicProtocolVersion

from common import aioquic_adapter as adapter
from common.certs import write_certificate
from tparams.codec import decode_transport_parameters, encode_transport_parameters
from tparams.paramset import ParamSet

CLIENT, SERVER = ("127.0.0.1", 40000), ("127.0.0.1", 4433)  # labels only: datagrams never leave the process
KIB = 1024


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("cert")
    write_certificate(tmp / "cert.pem", tmp / "key.pem", ["server.lab.test"], [SERVER[0]])
    return tmp / "cert.pem", tmp / "key.pem"


class Pair:
    """An aioquic client and server connection; ``run`` carries datagrams and fires timers until both are quiet."""

    def __init__(self, certificate: tuple[Path, Path], client_logger: QuicLogger | None = None):
        client = QuicConfiguration(is_client=True, alpn_protocols=["hq-interop"], server_name="server.lab.test",
                                   verify_mode=False, quic_logger=client_logger)
        server = QuicConfiguration(is_client=False, alpn_protocols=["hq-interop"])
        server.load_cert_chain(*certificate)
        self.client = QuicConnection(configuration=client)
        self.server: QuicConnection | None = None
        self.server_configuration = server
        self.prepare_server = lambda quic: None
        self.now = 0.0

    def run(self, rounds: int = 20_000) -> None:
        if self.server is None:
            self.client.connect(SERVER, now=self.now)
        for _ in range(rounds):
            moved = False
            for data, _ in self.client.datagrams_to_send(now=self.now):
                if self.server is None:
                    self.server = QuicConnection(configuration=self.server_configuration,
                                                 original_destination_connection_id=self.client.original_destination_connection_id)
                    self.prepare_server(self.server)
                self.server.receive_datagram(data, CLIENT, now=self.now)
                moved = True
            for data, _ in self.server.datagrams_to_send(now=self.now) if self.server else ():
                self.client.receive_datagram(data, SERVER, now=self.now)
                moved = True
            if not moved:
                timers = [t for t in (self.client.get_timer(), self.server and self.server.get_timer()) if t]
                if not timers or min(timers) > self.now + 1.0:  # only idle timeouts left: quiet
                    return
                self.now = max(self.now, min(timers))
                for quic in (self.client, self.server):
                    if quic is not None and quic.get_timer() is not None and quic.get_timer() <= self.now:
                        quic.handle_timer(now=self.now)

    def handshake_completed(self, quic: QuicConnection) -> bool:
        return any(isinstance(event, HandshakeCompleted) for event in iter(quic.next_event, None))

    def download(self, size: int) -> int:
        """The server sends ``size`` bytes on a stream the client opened; the bytes the client got."""
        stream_id = self.client.get_next_available_stream_id()
        self.client.send_stream_data(stream_id, b"GET\r\n", end_stream=True)
        self.run()
        self.server.send_stream_data(stream_id, bytes(size), end_stream=True)
        self.run()
        return sum(len(event.data) for event in iter(self.client.next_event, None) if hasattr(event, "data"))


def test_the_installed_aioquic_is_the_pinned_one() -> None:
    assert adapter.pinned_version() == importlib.metadata.version("aioquic")
    adapter.require_pinned_aioquic()


def test_another_aioquic_is_refused_naming_both_versions(tmp_path, monkeypatch) -> None:
    (tmp_path / "requirements.lock").write_text("duckdb==1.0.0\naioquic==0.9.99\n")
    monkeypatch.setattr(adapter, "LOCK_FILE", tmp_path / "requirements.lock")
    adapter.pinned_version.cache_clear()
    adapter.require_pinned_aioquic.cache_clear()
    try:
        with pytest.raises(adapter.ToolError, match=rf"aioquic {importlib.metadata.version('aioquic')} is installed "
                                                    r"but 0\.9\.99 is pinned"):
            adapter.require_pinned_aioquic()
    finally:
        adapter.pinned_version.cache_clear()
        adapter.require_pinned_aioquic.cache_clear()


@pytest.mark.parametrize("suite", list(CIPHER_SUITES))
@pytest.mark.parametrize("version", [QuicProtocolVersion.VERSION_1, QuicProtocolVersion.VERSION_2])
def test_packet_protection_seals_and_opens_as_aioquics_own(suite, version) -> None:
    secret = os.urandom(48 if suite == tls.CipherSuite.AES_256_GCM_SHA384 else 32)
    key, iv, hp_key = derive_key_iv_hp(cipher_suite=suite, secret=secret, version=version)
    hp_cipher, aead_cipher = CIPHER_SUITES[suite]
    ours = adapter.packet_protection(suite, secret, version, key, iv, hp_key, aead_cipher, hp_cipher)
    theirs = CryptoContext()
    theirs.setup(cipher_suite=suite, secret=secret, version=version)
    header = bytes([0xC1]) + bytes(20) + b"\x00\x07"  # a 2-byte packet number, 7
    sealed = ours.encrypt_packet(header, b"payload!" * 4, 7)
    assert sealed == theirs.encrypt_packet(header, b"payload!" * 4, 7)
    assert theirs.decrypt_packet(sealed, len(header) - 2, 7)[1] == b"payload!" * 4
    assert (ours.cipher_suite, ours.secret, ours.version) == (suite, secret, version)


def test_transport_parameters_sent_are_those_the_peer_received(certificate) -> None:
    pair = Pair(certificate)
    assert adapter.transport_parameters_sent(pair.client) is None
    pair.run()
    assert pair.handshake_completed(pair.client)
    for sender, receiver in ((pair.client, pair.server), (pair.server, pair.client)):
        sent = adapter.transport_parameters_sent(sender)
        assert sent and adapter.transport_parameters_received(receiver) == sent
    decoded = decode_transport_parameters(adapter.transport_parameters_sent(pair.server), sender="server")
    assert not decoded.findings and ParamSet.from_decoded(decoded).as_sent()["initial_max_data"] == 1 << 20


def test_local_parameters_set_one_by_one_are_advertised(certificate) -> None:
    asked = {"initial_max_data": 333_000, "initial_max_streams_bidi": 17, "initial_max_streams_uni": 5,
             "initial_max_stream_data_bidi_local": 70_001, "initial_max_stream_data_bidi_remote": 70_002,
             "initial_max_stream_data_uni": 70_003, "ack_delay_exponent": 6, "active_connection_id_limit": 4}
    assert set(asked) == set(adapter.LOCAL_PARAMETERS)
    pair = Pair(certificate)
    adapter.set_local_parameters(pair.client, asked)
    assert adapter.local_parameters(pair.client) == asked
    pair.run()
    received = ParamSet.from_decoded(decode_transport_parameters(adapter.transport_parameters_received(pair.server)))
    assert {name: received.as_sent()[name] for name in asked} == asked


def test_rewritten_transport_parameters_are_what_the_peer_receives(certificate) -> None:
    def add_grease(genuine: bytes) -> bytes:
        pairs = [(p.id, p.raw) for p in decode_transport_parameters(genuine, sender="server").parameters]
        return encode_transport_parameters([*pairs, (27 + 31 * 1000, b"lab")])

    pair = Pair(certificate)
    pair.prepare_server = lambda quic: adapter.rewrite_transport_parameters(quic, add_grease)
    pair.run()
    assert pair.handshake_completed(pair.client)  # aioquic ignores the unknown parameter
    received = decode_transport_parameters(adapter.transport_parameters_received(pair.client), sender="server")
    assert received.parameters[-1].id == 27 + 31 * 1000 and received.parameters[-1].raw == b"lab"


def _largest_limits(logger: QuicLogger) -> tuple[int, int]:
    """The largest MAX_DATA and MAX_STREAM_DATA the client sent, from its qlog."""
    frames = [frame for trace in logger.to_dict()["traces"] for event in trace["events"]
              if event["name"] == "transport:packet_sent" for frame in event["data"]["frames"]]
    return (max(f["maximum"] for f in frames if f["frame_type"] == "max_data"),
            max(f["maximum"] for f in frames if f["frame_type"] == "max_stream_data"))


@pytest.mark.parametrize("pinned", [True, False])
def test_pinned_windows_slide_where_aioquics_double(certificate, pinned) -> None:
    window, size = 64 * KIB, 1024 * KIB
    logger = QuicLogger()
    pair = Pair(certificate, client_logger=logger)
    adapter.set_local_parameters(pair.client, {name: window for name in adapter.LOCAL_PARAMETERS
                                               if name.startswith("initial_max_stream_data") or name == "initial_max_data"})
    if pinned:
        adapter.pin_flow_control_windows(pair.client)
    pair.run()
    assert pair.download(size) == size
    max_data, max_stream_data = _largest_limits(logger)
    if pinned:  # never more than a window beyond what had arrived
        assert max_data <= size + window and max_stream_data <= size + window
        assert adapter.local_parameters(pair.client)["initial_max_data"] <= size + window
    else:  # aioquic's own: doubled past it
        assert max_data >= 2 * size and max_stream_data >= 2 * size


def test_unacknowledged_bytes_drain_as_acks_come(certificate) -> None:
    pair = Pair(certificate)
    pair.run()
    stream_id = pair.client.get_next_available_stream_id()
    pair.client.send_stream_data(stream_id, b"GET\r\n", end_stream=True)
    pair.run()
    pair.server.send_stream_data(stream_id, bytes(50_000))
    assert adapter.unacknowledged_bytes(pair.server, stream_id) == 50_000
    pair.run()
    assert adapter.unacknowledged_bytes(pair.server, stream_id) == 0


def test_replaced_tls_gets_the_client_hello_and_answers_instead_of_aioquic(certificate) -> None:
    seen: list[bytes] = []

    def handle_message(data: bytes, output: dict) -> None:  # says nothing: the handshake cannot go on
        seen.append(bytes(data))

    pair = Pair(certificate)
    pair.prepare_server = lambda quic: adapter.replace_tls(quic, handle_message)
    pair.run(rounds=50)
    assert seen and seen[0][0] == tls.HandshakeType.CLIENT_HELLO
    assert not pair.handshake_completed(pair.client) and not pair.handshake_completed(pair.server)
