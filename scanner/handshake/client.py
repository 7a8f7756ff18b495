"""The client side of one QUIC handshake, as far as a scanner needs it; no sockets.

In the spirit of aioquic's QuicConnection, cut down to the handshake: the
client's Initial with the ClientHello; the server's Initial and Handshake
packets (coalesced, out of order, CRYPTO reassembled by offset); the TLS 1.3
key schedule; EncryptedExtensions (the raw transport parameters, decoded by
tparams.codec), Certificate, CertificateVerify and Finished checked; the
client's Finished and ACKs; a polite CONNECTION_CLOSE; Retry, Version
Negotiation, HelloRetryRequest, PTO retransmission, and ACKs that lift the
server's amplification limit when its certificate chain is long. No streams,
and 1-RTT keys only for identification (the client's Finished and the closing
frame travel in a Handshake packet, which RFC 9000 10.2.3 allows before the
handshake is confirmed; identification instead waits for the server's
HANDSHAKE_DONE, reading its 1-RTT frames for NEW_TOKEN, and closes in 1-RTT).

It stands on aioquic's lower layers: packet protection (CryptoContext), the
TLS message codecs and Alert classes of aioquic.tls, and `cryptography`. The
checks, error codes and reason phrases are aioquic's, so a server gets the
same verdict as from the aioquic-based engine this replaced.

The server is not trusted: every datagram ends, at worst, in ``failure``
being set; ``receive_datagram`` never raises.
"""

from __future__ import annotations

import functools
import hashlib
import hmac

from aioquic.buffer import Buffer, BufferReadError
from aioquic.quic.crypto import CryptoContext
from aioquic.quic.packet import (
    RETRY_INTEGRITY_TAG_SIZE,
    QuicErrorCode,
    QuicFrameType,
    QuicPacketType,
    get_retry_integrity_tag,
)
from aioquic.tls import (
    RSA_PKCS1_SIGNATURE_ALGORITHMS,
    SERVER_CONTEXT_STRING,
    Alert,
    AlertBadCertificate,
    AlertDecodeError,
    AlertDecryptError,
    AlertHandshakeFailure,
    AlertIllegalParameter,
    AlertMissingExtension,
    AlertNoApplicationProtocol,
    AlertUnexpectedMessage,
    AlertUnsupportedCertificate,
    AlertDescription,
    Certificate as CertificateMessage,
    ExtensionType,
    HandshakeType,
    pull_certificate_request,
    push_certificate,
    signature_algorithm_key_type,
    signature_algorithm_params,
)
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm

from scanner.handshake.hello import (
    CID_LENGTH,
    CIPHER_SUITES,
    QUIC_VERSIONS,
    SIGNATURE_ALGORITHMS,
    TLS_VERSION_1_3,
    HelloTemplate,
    generate_key_share,
    shared_secret,
)
from scanner.handshake.messages import (
    read_certificate,
    read_certificate_verify,
    read_encrypted_extensions,
    read_server_hello,
)
from scanner.handshake.packets import (
    HASH_NAMES,
    PACKET_NUMBER_LENGTH,
    AEAD_TAG_LENGTH,
    LONG_TYPES,
    CryptoStream,
    LongPacket,
    ack_frame,
    connection_close_frame,
    crypto_frame,
    hkdf_expand_label,
    hkdf_extract,
    initial_keys,
    long_packets,
    packet_keys,
    seal_long_packet,
)
from tparams.codec import DecodedParameters, decode_transport_parameters
from tparams.frames import (
    FRAME_ACK,
    FRAME_ACK_ECN,
    FRAME_CONNECTION_CLOSE,
    FRAME_CONNECTION_CLOSE_APP,
    FRAME_CRYPTO,
    FRAME_DATA_BLOCKED,
    FRAME_DATAGRAM,
    FRAME_DATAGRAM_WITH_LENGTH,
    FRAME_HANDSHAKE_DONE,
    FRAME_MAX_DATA,
    FRAME_MAX_STREAM_DATA,
    FRAME_MAX_STREAMS_BIDI,
    FRAME_MAX_STREAMS_UNI,
    FRAME_NEW_CONNECTION_ID,
    FRAME_NEW_TOKEN,
    FRAME_PADDING,
    FRAME_PATH_CHALLENGE,
    FRAME_PATH_RESPONSE,
    FRAME_PING,
    FRAME_RESET_STREAM,
    FRAME_RETIRE_CONNECTION_ID,
    FRAME_STOP_SENDING,
    FRAME_STREAM_DATA_BLOCKED,
    FRAME_STREAM_FIRST,
    FRAME_STREAM_LAST,
    FRAME_STREAMS_BLOCKED_BIDI,
    FRAME_STREAMS_BLOCKED_UNI,
    STREAM_LEN,
    STREAM_OFF,
)
from tparams.varint import VARINT_MAX, decode_varint, encode_varint

MIN_INITIAL_DATAGRAM = 1200  # RFC 9000 14.1: every datagram carrying a client Initial
MAX_PENDING_CRYPTO = 524_288  # aioquic's bound on CRYPTO data held out of order
INITIAL_PTO = 0.3  # seconds before the first retransmission, as aioquic's initial RTT gives
MIN_PTO = 0.05  # a loaded server answers in milliseconds, not microseconds
MAX_EARLY_HANDSHAKE_PACKETS = 8  # Handshake packets held until the ServerHello gives their keys
# How long a handshake that waits for HANDSHAKE_DONE (identification) stays open after our
# Finished: servers send it, with NEW_TOKEN, in 1-RTT one round trip later (measured on the lab:
# 1-5 ms; kwik ~50-140 ms under load), so a few hundred ms bound the cost of a silent one.
HANDSHAKE_DONE_WAIT = 0.3
# 1-RTT frames skipped while looking for NEW_TOKEN and HANDSHAKE_DONE (RFC 9000 19, RFC 9221): the
# number of varints before any bytes. STREAM, ACK, CRYPTO, NEW_CONNECTION_ID and DATAGRAM are read apart.
_VARINT_FRAMES = {FRAME_PING: 0, FRAME_RESET_STREAM: 3, FRAME_STOP_SENDING: 2, FRAME_MAX_DATA: 1,
                  FRAME_MAX_STREAM_DATA: 2, FRAME_MAX_STREAMS_BIDI: 1, FRAME_MAX_STREAMS_UNI: 1,
                  FRAME_DATA_BLOCKED: 1, FRAME_STREAM_DATA_BLOCKED: 2, FRAME_STREAMS_BLOCKED_BIDI: 1,
                  FRAME_STREAMS_BLOCKED_UNI: 1, FRAME_RETIRE_CONNECTION_ID: 1}
MIN_CRYPTO_PER_PACKET = 256  # ClientHello bytes an Initial carries even behind a long Retry token
_CRYPTO_FRAME_HEADER = 1 + 4 + 2  # type, offset, length: at most this for a ClientHello
CRYPTO_ERROR = QuicErrorCode.CRYPTO_ERROR
_HELLO_RETRY_RANDOM = bytes.fromhex("CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C")
# Frames Initial and Handshake packets may not carry, but that exist (aioquic: "Unexpected frame type").
_LATER_FRAMES = (frozenset(range(FRAME_RESET_STREAM, FRAME_CONNECTION_CLOSE))
                 | {FRAME_CONNECTION_CLOSE_APP, FRAME_HANDSHAKE_DONE, FRAME_DATAGRAM, FRAME_DATAGRAM_WITH_LENGTH}) - {FRAME_CRYPTO}
_ADVERTISED_SIGNATURES = frozenset(int(a) for a in SIGNATURE_ALGORITHMS)

# Expecting (the TLS states a client passes).
SERVER_HELLO, ENCRYPTED_EXTENSIONS, CERTIFICATE_OR_REQUEST, CERTIFICATE, CERTIFICATE_VERIFY, FINISHED, DONE = range(7)


class HandshakeFailed(Exception):
    """Ends the handshake: what the client closes with (aioquic's QuicConnectionError)."""

    def __init__(self, error_code: int, frame_type: int | None, reason: str):
        super().__init__(reason)
        self.error_code = int(error_code)
        self.frame_type = None if frame_type is None else int(frame_type)
        self.reason = reason


class _KeySchedule:
    """TLS 1.3's key schedule without PSK (RFC 8446, 7.1) and the transcript, for one hash."""

    _derived_early: dict[str, bytes] = {}  # Derive-Secret(Early Secret, "derived", "") is a constant per hash

    def __init__(self, cipher_suite: int):
        self.hash_name = name = HASH_NAMES[cipher_suite]  # type: ignore[index]
        self.transcript = hashlib.new(name)
        self.size = size = self.transcript.digest_size
        derived = self._derived_early.get(name)
        if derived is None:
            early = hkdf_extract(name, bytes(size), bytes(size))
            derived = self._derived_early[name] = hkdf_expand_label(
                name, early, b"derived", hashlib.new(name).digest(), size
            )
        self.derived_early = derived
        self.handshake_secret = b""

    def transcript_hash(self) -> bytes:
        return self.transcript.copy().digest()

    def derive(self, secret: bytes, label: bytes) -> bytes:
        return hkdf_expand_label(self.hash_name, secret, label, self.transcript_hash(), self.size)

    def finished(self, traffic_secret: bytes) -> bytes:
        """verify_data of a Finished over the transcript so far."""
        key = hkdf_expand_label(self.hash_name, traffic_secret, b"finished", b"", self.size)
        return hmac.digest(key, self.transcript_hash(), self.hash_name)

    def application_secrets(self) -> tuple[bytes, bytes]:
        """(client, server) 1-RTT traffic secrets; only a key log asks for them."""
        empty = hashlib.new(self.hash_name).digest()
        derived = hkdf_expand_label(self.hash_name, self.handshake_secret, b"derived", empty, self.size)
        master = hkdf_extract(self.hash_name, derived, bytes(self.size))
        return self.derive(master, b"c ap traffic"), self.derive(master, b"s ap traffic")


# aioquic's verify() arguments per signature algorithm (immutable), and parsed certificates
# and their public keys by DER bytes: a scan meets the same chains again and again.
_signature_params = functools.cache(signature_algorithm_params)


@functools.lru_cache(maxsize=4096)
def _load_certificate(der: bytes) -> x509.Certificate:
    return x509.load_der_x509_certificate(der)  # ValueError when corrupt


@functools.lru_cache(maxsize=4096)
def _public_key(cert: x509.Certificate) -> object:
    return cert.public_key()  # UnsupportedAlgorithm or ValueError


class ClientHandshake:
    """One handshake. Feed it datagrams and timer expiries; collect datagrams to send.

    ``done`` once it ended: ``completed`` (the server's Finished checked), or
    ``failure`` set (who closed, code, reason). Everything observed on the
    way stays readable for the record: offered versions, Retry, negotiated
    suite/group/ALPN, raw and decoded transport parameters, certificates.
    """

    def __init__(self, template: HelloTemplate, server_name: str | None, random: bytes, now: float, keylog: bool = False,
                 await_handshake_done: bool = False):
        """``random``: 48 unpredictable bytes (client random, our CID, the server's first CID).
        ``await_handshake_done``: after our Finished, stay open (at most HANDSHAKE_DONE_WAIT) for the
        server's HANDSHAKE_DONE, noting its NEW_TOKEN frames (identification reads the habit)."""
        self._template = template
        self._server_name = server_name
        self.version: int = QUIC_VERSIONS[0]
        self.source_cid = random[32 : 32 + CID_LENGTH]
        # The Initial keys derive from the DCID of our first Initial, or a Retry's new one.
        self.original_dcid = self.dcid = self._keys_dcid = random[32 + CID_LENGTH : 32 + 2 * CID_LENGTH]
        self.client_random = random[:32]
        self._keylog = keylog
        self.secrets: list[tuple[str, bytes]] = []  # (NSS key-log label, secret) with keylog
        # what the record reports
        self.datagrams_received = 0
        self.offered_versions: list[int] | None = None
        self.retry_seen = False
        self.retry_token: bytes | None = None  # of the first Retry-typed datagram, valid or not
        self.cipher_suite: int | None = None
        self.key_exchange_group: int | None = None
        self.hello_retry_request = False  # the server sent one (valid or not)
        self.tls_version: int | None = None
        self.alpn: str | None = None
        self.transport_parameters_raw: bytes | None = None
        self.decoded: DecodedParameters | None = None
        self.transport_parameters_rejected: str | None = None
        self.certificate: x509.Certificate | None = None
        self.certificate_chain: list[x509.Certificate] = []
        self.completed_at: float | None = None
        self.failure: HandshakeFailed | None = None
        self.closed_by_peer = False
        # With await_handshake_done: whether HANDSHAKE_DONE came within the wait, and the tokens of the
        # NEW_TOKEN frames before it; None and [] when not waited for.
        self.handshake_done: bool | None = None
        self.new_tokens: list[bytes] = []
        # state
        self._await_handshake_done = await_handshake_done
        self._wait_until: float | None = None  # while waiting for HANDSHAKE_DONE
        self._one_rtt_receive: CryptoContext | None = None
        self._one_rtt_send: CryptoContext | None = None
        self._one_rtt_expected = 0
        self._expecting = SERVER_HELLO
        self._token = b""
        self._retry_source_cid: bytes | None = None
        self._version_negotiated = False
        self._server_cid: bytes | None = None  # the server's first Source CID, once a packet of it opened
        self._private_keys = {}
        shares = []
        for group in template.groups:
            self._private_keys[group], public = generate_key_share(group)
            shares.append(public)
        self._public_keys = shares
        self._client_hello = template.fill(self.client_random, shares, self.source_cid, server_name, self.version)
        self._initial_send = initial_keys(self._keys_dcid, self.version, of_client=True)
        self._initial_receive: CryptoContext | None = None
        self._initial_receive_version = 0
        self._initial_stream = CryptoStream()
        self._handshake_stream = CryptoStream()
        self._handshake_send: CryptoContext | None = None
        self._handshake_receive: CryptoContext | None = None
        self._early_handshake: list[bytes] = []
        self._received = ({}, {})  # per space (Initial, Handshake): packet numbers -> None
        self._ack_pending = [False, False]
        self._acks_sent = [0, 0]
        self._expected_packet_number = [0, 0]
        self._next_packet_number = [0, 0]
        self._initial_discarded = False
        self._schedule: _KeySchedule | None = None
        self._client_secret = self._server_secret = b""
        self._certificate_request_context: bytes | None = None
        self._hello_offset = 0  # where our ClientHello starts in the CRYPTO stream (not 0 after a HelloRetryRequest)
        self._transcript_prefix = b""  # message_hash(ClientHello1) + HelloRetryRequest, after one
        self._hello_retry_suite: int | None = None
        self._hello_retry_group: int | None = None  # the group a HelloRetryRequest asked for
        self._outbox: list[bytes] = []
        self._rtt: float | None = None
        self._pto_count = 0
        self._last_sent = self._now = now
        self._send_client_hello()

    # -- the driver's side ------------------------------------------------------

    @property
    def done(self) -> bool:
        return (self.completed_at is not None and self._wait_until is None) or self.failure is not None

    def datagrams_to_send(self) -> list[bytes]:
        """Datagrams to send now (ACKs for what arrived since the last call included)."""
        if not self.done:
            if self._ack_pending[1] and self._handshake_send is not None:
                self._send(1, b"")
            elif self._ack_pending[0] and not self._initial_discarded:
                self._send(0, b"")
        out, self._outbox = self._outbox, []
        return out

    def timer(self) -> float | None:
        """When ``handle_timer`` wants to run (the next probe), None once done."""
        if self.done:
            return None
        if self._wait_until is not None:
            return self._wait_until
        pto = INITIAL_PTO if self._rtt is None else max(3 * self._rtt, MIN_PTO)
        return self._last_sent + pto * (1 << min(self._pto_count, 16))

    def handle_timer(self, now: float) -> None:
        """A probe timeout: send again what the server may have missed (RFC 9002, 6.2.4)."""
        if self.done:
            return
        if self._wait_until is not None:
            if now >= self._wait_until:
                self._stop_waiting()
            return
        self._pto_count += 1
        self._last_sent = now
        if self._handshake_send is not None:
            self._send(1, bytes((FRAME_PING,)))
        else:
            self._send_client_hello()

    def receive_datagram(self, data: bytes, now: float) -> None:
        self.datagrams_received += 1  # also after the end: the record counts what the server sent
        if self.done:
            return
        self._now = now
        if len(data) >= 7 and data[0] & 0x80:
            version = int.from_bytes(data[1:5], "big")
            if version in LONG_TYPES and LONG_TYPES[version][(data[0] & 0x30) >> 4] == QuicPacketType.RETRY:
                if not self.retry_seen:
                    self.retry_token = _retry_token(data)
                self.retry_seen = True  # whether or not it is valid: the server sent one
        try:
            self._receive(data, now)
        except HandshakeFailed as failure:
            self._fail(failure)
        except Alert as alert:
            self._fail(HandshakeFailed(CRYPTO_ERROR + int(alert.description), FRAME_CRYPTO, str(alert)))
        except Exception as exc:  # a path hostile input reached that the checks above missed: still a record
            self._fail(HandshakeFailed(QuicErrorCode.INTERNAL_ERROR, None, f"{type(exc).__name__}: {exc}"))

    # -- receiving ----------------------------------------------------------------

    def _receive(self, data: bytes, now: float) -> None:
        size = len(data)
        if size >= 7 and data[0] & 0x80 and data[1:5] == b"\x00\x00\x00\x00":
            self._version_negotiation(data)
            return
        end = 0
        for packet in long_packets(data):
            end = data.find(packet.data, end) + len(packet.data)
            if packet.dcid != self.source_cid:
                return  # not ours (aioquic drops the rest of the datagram too)
            if packet.packet_type == QuicPacketType.RETRY:
                self._retry(packet)
                return
            if self._server_cid is not None and packet.scid != self._server_cid:
                continue  # RFC 9000 7.2: not the server's connection
            if packet.packet_type == QuicPacketType.INITIAL:
                self._initial_packet(packet, now)
            elif packet.packet_type == QuicPacketType.HANDSHAKE:
                if self._handshake_receive is None:
                    if len(self._early_handshake) < MAX_EARLY_HANDSHAKE_PACKETS:
                        self._early_handshake.append(packet)
                else:
                    self._handshake_packet(packet)
            # 0-RTT from a server means nothing; skip it
            if self.done:
                return
        if self._wait_until is not None:
            rest = data[end:].lstrip(b"\x00")  # a short-header packet runs to the end of the datagram
            if rest and rest[0] & 0xC0 == 0x40:
                self._one_rtt_packet(rest)

    def _one_rtt_packet(self, data: bytes) -> None:
        """A 1-RTT packet while waiting for HANDSHAKE_DONE: NEW_TOKEN frames noted, HANDSHAKE_DONE
        (or the server's close) ends the wait. What cannot be read ends the reading of this packet
        only: the handshake has completed, nothing here fails it."""
        try:
            _, payload, packet_number, _ = self._one_rtt_receive.decrypt_packet(  # type: ignore[union-attr]
                data, 1 + len(self.source_cid), self._one_rtt_expected
            )
        except Exception:  # wrong keys (a key update) or a damaged packet: dropped, as in _open
            return
        self._one_rtt_expected = max(self._one_rtt_expected, packet_number + 1)
        pos, size, ended = 0, len(payload), False
        try:
            while pos < size:
                frame_type, pos = decode_varint(payload, pos)
                if frame_type == FRAME_PADDING:
                    continue
                if frame_type in _VARINT_FRAMES:
                    for _ in range(_VARINT_FRAMES[frame_type]):
                        _, pos = decode_varint(payload, pos)
                elif frame_type in (FRAME_ACK, FRAME_ACK_ECN):
                    pos = self._ack(payload, pos, frame_type)
                elif (frame_type in (FRAME_CRYPTO, FRAME_NEW_TOKEN, FRAME_DATAGRAM_WITH_LENGTH)
                      or FRAME_STREAM_FIRST <= frame_type <= FRAME_STREAM_LAST):
                    stream = FRAME_STREAM_FIRST <= frame_type <= FRAME_STREAM_LAST
                    if frame_type == FRAME_CRYPTO or stream:
                        _, pos = decode_varint(payload, pos)  # offset, or stream id
                    if stream and frame_type & STREAM_OFF:
                        _, pos = decode_varint(payload, pos)  # offset
                    if stream and not frame_type & STREAM_LEN:
                        length = size - pos  # to the end of the packet
                    else:
                        length, pos = decode_varint(payload, pos)
                    if pos + length > size:
                        break
                    if frame_type == FRAME_NEW_TOKEN:
                        self.new_tokens.append(payload[pos : pos + length])
                    pos += length
                elif frame_type == FRAME_NEW_CONNECTION_ID:  # sequence, retire prior to, CID, reset token
                    _, pos = decode_varint(payload, pos)
                    _, pos = decode_varint(payload, pos)
                    pos += 1 + payload[pos] + 16
                elif frame_type in (FRAME_PATH_CHALLENGE, FRAME_PATH_RESPONSE):
                    pos += 8
                elif frame_type == FRAME_HANDSHAKE_DONE:
                    self.handshake_done = ended = True
                elif frame_type == FRAME_DATAGRAM:  # to the end of the packet
                    break
                else:  # CONNECTION_CLOSE, or a frame we do not read
                    ended = ended or frame_type in (FRAME_CONNECTION_CLOSE, FRAME_CONNECTION_CLOSE_APP)
                    break
        except (ValueError, IndexError, HandshakeFailed):
            pass
        if ended:
            self._stop_waiting()

    def _open(self, keys: CryptoContext, packet: LongPacket, space: int) -> tuple[int, bytes] | None:
        try:
            plain_header, payload, packet_number, _ = keys.decrypt_packet(
                packet.data, packet.pn_offset, self._expected_packet_number[space]
            )
        except Exception:  # wrong keys or a damaged packet: dropped, as RFC 9001 5.3 says
            return None
        received = self._received[space]
        if packet_number in received:
            return None  # a duplicate (RFC 9000 12.3)
        if plain_header[0] & 0x0C:
            raise HandshakeFailed(QuicErrorCode.PROTOCOL_VIOLATION, QuicFrameType.PADDING, "Reserved bits must be zero")
        if packet_number >= self._expected_packet_number[space]:
            self._expected_packet_number[space] = packet_number + 1
        received[packet_number] = None
        return packet_number, payload

    def _first_server_packet(self, scid: bytes, now: float) -> None:
        if self._server_cid is None:
            self._server_cid = self.dcid = scid
            self._rtt = now - self._last_sent

    def _initial_packet(self, packet: LongPacket, now: float) -> None:
        if self._initial_discarded:
            return
        version = packet.version
        if self._initial_receive is None or self._initial_receive_version != version:
            # Derived when first needed (a silent target never needs them), and again if the
            # server answers in another version it could read our Initial as (RFC 9368).
            self._initial_receive = initial_keys(self._keys_dcid, version, of_client=False)
            self._initial_receive_version = version
        opened = self._open(self._initial_receive, packet, 0)
        if opened is None:
            return
        if version != self.version:
            # Compatible version negotiation (RFC 9368 4): the server answered our v1 Initial in
            # v2 (or back). From here on both sides speak its version, Handshake keys included.
            self.version = version
            self._initial_send = initial_keys(self._keys_dcid, version, of_client=True)
        self._first_server_packet(packet.scid, now)
        self._packet_received(opened[1], 0, self._initial_stream)

    def _handshake_packet(self, packet: LongPacket) -> None:
        assert self._handshake_receive is not None
        opened = self._open(self._handshake_receive, packet, 1)
        if opened is None:
            return
        self._packet_received(opened[1], 1, self._handshake_stream)

    def _packet_received(self, payload: bytes, space: int, stream: CryptoStream) -> None:
        acks_sent = self._acks_sent[space]
        if self._frames(payload, space, stream) and self._acks_sent[space] == acks_sent:
            self._ack_pending[space] = True  # unless what the packet made us send carried the ACK

    def _frames(self, payload: bytes, space: int, stream: CryptoStream) -> bool:
        """Handle one packet's frames as aioquic does; True when the packet elicits an ACK."""
        pos, size = 0, len(payload)
        if not size:
            raise HandshakeFailed(QuicErrorCode.PROTOCOL_VIOLATION, QuicFrameType.PADDING, "Packet contains no frames")
        eliciting = False
        while pos < size:
            try:
                frame_type, pos = decode_varint(payload, pos)
            except ValueError:
                raise HandshakeFailed(QuicErrorCode.FRAME_ENCODING_ERROR, None, "Malformed frame type") from None
            try:
                if frame_type == FRAME_PADDING:
                    rest = payload[pos:]
                    pos += len(rest) - len(rest.lstrip(b"\x00"))
                elif frame_type == FRAME_PING:
                    eliciting = True
                elif frame_type == FRAME_ACK or frame_type == FRAME_ACK_ECN:
                    pos = self._ack(payload, pos, frame_type)
                elif frame_type == FRAME_CRYPTO:
                    eliciting = True
                    offset, pos = decode_varint(payload, pos)
                    length, pos = decode_varint(payload, pos)
                    if offset + length > VARINT_MAX:
                        raise HandshakeFailed(
                            QuicErrorCode.FRAME_ENCODING_ERROR, frame_type, "offset + length cannot exceed 2^62 - 1"
                        )
                    if pos + length > size:
                        raise ValueError("CRYPTO frame runs past the packet")
                    if offset + length - stream.contiguous > MAX_PENDING_CRYPTO:
                        raise HandshakeFailed(QuicErrorCode.CRYPTO_BUFFER_EXCEEDED, frame_type, "too much crypto buffering")
                    stream.add(offset, payload[pos : pos + length])
                    pos += length
                    self._tls(stream, space)
                    if self.done:
                        return eliciting
                elif frame_type == FRAME_CONNECTION_CLOSE:
                    self._server_close(payload, pos)
                    return eliciting
                elif frame_type in _LATER_FRAMES:
                    raise HandshakeFailed(QuicErrorCode.PROTOCOL_VIOLATION, frame_type, "Unexpected frame type")
                else:
                    raise HandshakeFailed(QuicErrorCode.FRAME_ENCODING_ERROR, frame_type, "Unknown frame type")
            except ValueError:
                raise HandshakeFailed(QuicErrorCode.FRAME_ENCODING_ERROR, frame_type, "Failed to parse frame") from None
        return eliciting

    @staticmethod
    def _ack(payload: bytes, pos: int, frame_type: int) -> int:
        # What we sent needs no loss accounting beyond the probe timer: the frame is only checked.
        largest, pos = decode_varint(payload, pos)
        _, pos = decode_varint(payload, pos)  # ACK delay
        ranges, pos = decode_varint(payload, pos)
        first, pos = decode_varint(payload, pos)
        smallest = largest - first
        for _ in range(ranges):
            gap, pos = decode_varint(payload, pos)
            length, pos = decode_varint(payload, pos)
            smallest -= gap + 2 + length
        if smallest < 0:
            raise HandshakeFailed(
                QuicErrorCode.FRAME_ENCODING_ERROR, frame_type, "ACK range contains a negative packet number"
            )
        if frame_type == FRAME_ACK_ECN:
            for _ in range(3):
                _, pos = decode_varint(payload, pos)
        return pos

    def _server_close(self, payload: bytes, pos: int) -> None:
        error_code, pos = decode_varint(payload, pos)
        frame_type, pos = decode_varint(payload, pos)
        length, pos = decode_varint(payload, pos)
        if pos + length > len(payload):
            raise ValueError("reason runs past the packet")
        try:
            reason = payload[pos : pos + length].decode("utf8")
        except UnicodeDecodeError:
            reason = ""
        self.closed_by_peer = True
        self.failure = HandshakeFailed(error_code, frame_type, reason)

    def _version_negotiation(self, data: bytes) -> None:
        # RFC 9000 17.2.1: flags, version 0, DCID len+DCID, SCID len+SCID, versions.
        pos = 5
        dcid = data[pos + 1 : pos + 1 + data[pos]]
        pos += 1 + data[pos]
        if pos >= len(data):
            self.offered_versions = []
            return
        pos += 1 + data[pos]
        self.offered_versions = offered = [int.from_bytes(data[i : i + 4], "big") for i in range(pos, len(data) - 3, 4)]
        if dcid != self.source_cid or self._server_cid is not None or self._version_negotiated:
            return
        if self.version in offered:
            return  # RFC 9368 4: a Version Negotiation that lists our version is ignored
        common = [v for v in QUIC_VERSIONS if v in offered]
        if not common:
            # aioquic ends here without a word to the server: there is no version to say it in.
            self.failure = HandshakeFailed(
                QuicErrorCode.INTERNAL_ERROR, QuicFrameType.PADDING, "Could not find a common protocol version"
            )
            return
        self._version_negotiated = True
        self.version = common[0]
        self._client_hello = self._template.fill(
            self.client_random, self._public_keys, self.source_cid, self._server_name, self.version
        )
        self._initial_send = initial_keys(self._keys_dcid, self.version, of_client=True)
        self._next_packet_number[0] = 0
        self._send_client_hello()

    def _retry(self, packet: LongPacket) -> None:
        # RFC 9000 17.2.5: at most one, before any other server packet, with a token and a valid tag.
        if self._server_cid is not None or self._retry_source_cid is not None or packet.scid == self.dcid:
            return
        token = packet.data[packet.pn_offset : -RETRY_INTEGRITY_TAG_SIZE]
        tag = packet.data[-RETRY_INTEGRITY_TAG_SIZE:]
        if len(packet.data) - packet.pn_offset < RETRY_INTEGRITY_TAG_SIZE or not token:
            return
        if tag != get_retry_integrity_tag(packet.data[:-RETRY_INTEGRITY_TAG_SIZE], self.dcid, version=packet.version):
            return
        self._retry_source_cid = self.dcid = self._keys_dcid = packet.scid
        self._token = token
        self._initial_send = initial_keys(self._keys_dcid, self.version, of_client=True)
        self._initial_receive = None
        self._send_client_hello()

    # -- TLS -----------------------------------------------------------------------

    def _tls(self, stream: CryptoStream, space: int) -> None:
        message = stream.next_message()
        while message is not None and not self.done:
            kind = message[0]
            try:
                if space == 0:
                    if self._expecting != SERVER_HELLO or kind != HandshakeType.SERVER_HELLO:
                        raise AlertUnexpectedMessage
                    self._server_hello(message)
                elif self._expecting == ENCRYPTED_EXTENSIONS and kind == HandshakeType.ENCRYPTED_EXTENSIONS:
                    self._encrypted_extensions(message)
                elif self._expecting == CERTIFICATE_OR_REQUEST and kind == HandshakeType.CERTIFICATE_REQUEST:
                    self._certificate_request_context = pull_certificate_request(Buffer(data=message)).request_context
                    self._schedule.transcript.update(message)  # type: ignore[union-attr]
                    self._expecting = CERTIFICATE
                elif self._expecting in (CERTIFICATE_OR_REQUEST, CERTIFICATE) and kind == HandshakeType.CERTIFICATE:
                    self._certificate(message)
                elif self._expecting == CERTIFICATE_VERIFY and kind == HandshakeType.CERTIFICATE_VERIFY:
                    self._certificate_verify(message)
                elif self._expecting == FINISHED and kind == HandshakeType.FINISHED:
                    self._finished(message)
                else:
                    raise AlertUnexpectedMessage
            except BufferReadError:
                raise AlertDecodeError("Could not parse TLS message") from None
            message = stream.next_message()

    def _server_hello(self, message: bytes) -> None:
        if message[6:38] == _HELLO_RETRY_RANDOM:
            self._hello_retry_request(message)
            return
        hello = read_server_hello(message)
        if hello.cipher_suite not in CIPHER_SUITES:
            raise AlertHandshakeFailure("Unsupported cipher suite")
        if hello.compression_method != 0:
            raise AlertIllegalParameter("ServerHello has a compression method we did not advertise")
        if hello.supported_version != TLS_VERSION_1_3:
            raise AlertIllegalParameter("ServerHello has a version we did not advertise")
        if hello.key_share is None:
            raise AlertMissingExtension("ServerHello has no key share")
        if hello.pre_shared_key is not None:
            raise AlertIllegalParameter  # we offered no PSK
        if self._hello_retry_suite is not None and hello.cipher_suite != self._hello_retry_suite:
            raise AlertIllegalParameter("ServerHello changes the HelloRetryRequest's cipher suite")
        self.cipher_suite = hello.cipher_suite
        group, peer = hello.key_share
        if self._hello_retry_group is not None and group != self._hello_retry_group:
            raise AlertIllegalParameter("ServerHello's key share is not the group its HelloRetryRequest asked for")
        private = self._private_keys.get(group)
        if private is None:
            raise AlertIllegalParameter("ServerHello has a key share we did not advertise")
        try:
            shared = shared_secret(group, private, peer)
        except ValueError:
            raise AlertIllegalParameter("ServerHello has an invalid key share") from None
        self.key_exchange_group = group
        self.tls_version = hello.supported_version
        self._private_keys = {}  # secrets no longer needed
        schedule = self._schedule = _KeySchedule(hello.cipher_suite)
        schedule.transcript.update(self._transcript_prefix + self._client_hello)
        schedule.transcript.update(message)
        schedule.handshake_secret = hkdf_extract(schedule.hash_name, schedule.derived_early, shared)
        self._client_secret = schedule.derive(schedule.handshake_secret, b"c hs traffic")
        self._server_secret = schedule.derive(schedule.handshake_secret, b"s hs traffic")
        if self._keylog:
            self.secrets += [
                ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", self._client_secret),
                ("SERVER_HANDSHAKE_TRAFFIC_SECRET", self._server_secret),
            ]
        self._handshake_send = packet_keys(hello.cipher_suite, self._client_secret, self.version)
        self._handshake_receive = packet_keys(hello.cipher_suite, self._server_secret, self.version)
        self._expecting = ENCRYPTED_EXTENSIONS
        early, self._early_handshake = self._early_handshake, []
        for packet in early:
            if not self.done:
                self._handshake_packet(packet)

    def _hello_retry_request(self, message: bytes) -> None:
        """RFC 8446 4.1.4: the server wants a second ClientHello, with the one key share it
        names and its cookie; a request it may not make is the alert 4.1.4 prescribes."""
        self.hello_retry_request = True
        if self._hello_retry_suite is not None:
            raise AlertUnexpectedMessage("a second HelloRetryRequest")
        hello = Buffer(data=message)
        hello.seek(4 + 2 + 32)
        hello.seek(hello.tell() + 1 + hello.pull_uint8())  # legacy_session_id_echo
        cipher_suite = hello.pull_uint16()
        hello.pull_uint8()  # compression
        extensions_end = hello.pull_uint16() + hello.tell()
        extensions: dict[int, bytes] = {}
        while hello.tell() < extensions_end:
            kind, length = hello.pull_uint16(), hello.pull_uint16()
            if kind in extensions:
                raise AlertIllegalParameter(f"HelloRetryRequest repeats extension 0x{kind:04x}")
            extensions[kind] = hello.pull_bytes(length)
        if hello.tell() != extensions_end or extensions_end != len(message):
            raise AlertDecodeError("HelloRetryRequest's extensions do not add up")
        if cipher_suite not in CIPHER_SUITES:
            raise AlertIllegalParameter("HelloRetryRequest has a cipher suite we did not offer")
        if extensions.get(ExtensionType.SUPPORTED_VERSIONS) != TLS_VERSION_1_3.to_bytes(2, "big"):
            raise AlertIllegalParameter("HelloRetryRequest has a version we did not advertise")
        selected, cookie = extensions.get(ExtensionType.KEY_SHARE), extensions.get(ExtensionType.COOKIE)
        if selected is not None and len(selected) != 2:
            raise AlertDecodeError("HelloRetryRequest's key_share is not one group")
        group = None if selected is None else int.from_bytes(selected, "big")
        if group is not None and group not in self._template.supported_groups:
            raise AlertIllegalParameter(f"HelloRetryRequest asks for group 0x{group:04x}, which we did not offer")
        if group in self._private_keys:
            raise AlertIllegalParameter(f"HelloRetryRequest asks for group 0x{group:04x}, whose key share we sent")
        if group is None and cookie is None:
            raise AlertIllegalParameter("HelloRetryRequest asks for nothing we can change")
        self._hello_retry_suite = cipher_suite
        # The transcript restarts from a message_hash of the first ClientHello (RFC 8446 4.4.1).
        digest = hashlib.new(HASH_NAMES[cipher_suite], self._client_hello).digest()  # type: ignore[index]
        self._transcript_prefix = bytes((HandshakeType.MESSAGE_HASH, 0, 0, len(digest))) + digest + message
        self._hello_offset = len(self._client_hello)
        if group is not None:
            self._hello_retry_group = group
            private, public = generate_key_share(group)
            self._private_keys = {group: private}
            self._client_hello = self._template.with_key_share(self._client_hello, group, public)
        if cookie is not None:
            # The extension's body as the server sent it: the cookie with its length.
            self._client_hello = self._template.with_extension(self._client_hello, ExtensionType.COOKIE, cookie)
        self._send_client_hello()

    def _encrypted_extensions(self, message: bytes) -> None:
        extensions = read_encrypted_extensions(message)
        if extensions.alpn_protocol != self._template.alpn:
            raise AlertNoApplicationProtocol("No common ALPN protocols")
        self.alpn = extensions.alpn_protocol
        raw = next((data for kind, data in extensions.other_extensions if kind == 0x39), None)
        if raw is None:
            raise HandshakeFailed(
                CRYPTO_ERROR + AlertDescription.missing_extension, FRAME_CRYPTO, "No QUIC transport parameters received"
            )
        self._transport_parameters(raw)
        self._schedule.transcript.update(message)  # type: ignore[union-attr]
        self._expecting = CERTIFICATE_OR_REQUEST

    def _transport_parameters(self, raw: bytes) -> None:
        """Keep the raw bytes, decode them, and refuse what aioquic (and RFC 9000 7.4, 18.2) refuses."""
        self.transport_parameters_raw = raw
        decoded = self.decoded = decode_transport_parameters(raw, "server")
        if decoded.findings:
            # Duplicates, bad lengths and out-of-range values are TRANSPORT_PARAMETER_ERRORs.
            self.transport_parameters_rejected = decoded.findings[0].detail
            raise HandshakeFailed(
                QuicErrorCode.TRANSPORT_PARAMETER_ERROR, FRAME_CRYPTO, "malformed transport parameters"
            )
        values = {p.name: p.value for p in decoded.parameters}
        reason = None
        if values.get("initial_source_connection_id") != self._server_cid:
            reason = "initial_source_connection_id does not match"
        elif values.get("original_destination_connection_id") != self.original_dcid:
            reason = "original_destination_connection_id does not match"
        elif values.get("retry_source_connection_id") != self._retry_source_cid:
            reason = "retry_source_connection_id does not match"
        elif "preferred_address" in values and not self._server_cid:
            reason = "preferred_address is not allowed with a zero-length connection ID"
        # Values out of RFC 9000 18.2's ranges are findings of the codec (tparams.codec._RANGES),
        # refused above.
        if reason is not None:
            self.transport_parameters_rejected = reason
            raise HandshakeFailed(QuicErrorCode.TRANSPORT_PARAMETER_ERROR, FRAME_CRYPTO, reason)
        information = values.get("version_information")
        if information is not None and getattr(information, "chosen_version", None) != self.version:
            reason = "version_information's chosen_version does not match the version in use"
            self.transport_parameters_rejected = reason
            raise HandshakeFailed(QuicErrorCode.VERSION_NEGOTIATION_ERROR, FRAME_CRYPTO, reason)

    def _certificate(self, message: bytes) -> None:
        certificate = read_certificate(message)
        if not certificate.certificates:
            raise AlertDecodeError("Certificate message is empty")
        self._schedule.transcript.update(message)  # type: ignore[union-attr]
        try:
            self.certificate = _load_certificate(certificate.certificates[0][0])
            self.certificate_chain = [_load_certificate(der) for der, _ in certificate.certificates[1:]]
        except ValueError:
            raise AlertBadCertificate("Certificate could not be parsed") from None
        self._expecting = CERTIFICATE_VERIFY

    def _certificate_verify(self, message: bytes) -> None:
        verify = read_certificate_verify(message)
        if verify.algorithm not in _ADVERTISED_SIGNATURES:
            raise AlertDecryptError("CertificateVerify has a signature algorithm we did not advertise")
        if verify.algorithm in RSA_PKCS1_SIGNATURE_ALGORITHMS:
            raise AlertIllegalParameter("CertificateVerify has an RSASSA-PKCS1-v1_5 signature algorithm")
        try:
            public_key = _public_key(self.certificate)  # type: ignore[arg-type]
        except UnsupportedAlgorithm:
            raise AlertUnsupportedCertificate("Certificate has an unsupported key type") from None
        except ValueError:
            raise AlertBadCertificate("Certificate has an invalid key") from None
        if not isinstance(public_key, signature_algorithm_key_type(verify.algorithm)):
            raise AlertDecryptError("CertificateVerify has a signature algorithm which does not match the certificate's key")
        schedule = self._schedule
        assert schedule is not None
        signed = b" " * 64 + SERVER_CONTEXT_STRING + b"\x00" + schedule.transcript_hash()
        try:
            public_key.verify(verify.signature, signed, *_signature_params(verify.algorithm))  # type: ignore[attr-defined]
        except InvalidSignature:
            raise AlertDecryptError from None
        schedule.transcript.update(message)
        self._expecting = FINISHED

    def _finished(self, message: bytes) -> None:
        schedule = self._schedule
        assert schedule is not None
        if not hmac.compare_digest(message[4:], schedule.finished(self._server_secret)):
            raise AlertDecryptError
        schedule.transcript.update(message)
        if self._keylog or self._await_handshake_done:
            client, server = schedule.application_secrets()
        if self._keylog:
            self.secrets += [("CLIENT_TRAFFIC_SECRET_0", client), ("SERVER_TRAFFIC_SECRET_0", server)]
        flight = b""
        if self._certificate_request_context is not None:
            # We have no certificate to give: an empty Certificate, as aioquic sends (RFC 8446 4.4.2).
            buf = Buffer(capacity=300)
            push_certificate(buf, CertificateMessage(request_context=self._certificate_request_context))
            flight = buf.data
            schedule.transcript.update(flight)
        verify_data = schedule.finished(self._client_secret)
        flight += bytes((HandshakeType.FINISHED, 0, 0, len(verify_data))) + verify_data
        self._expecting = DONE
        self.completed_at = self._now
        if self._await_handshake_done:
            self._one_rtt_send = packet_keys(self.cipher_suite, client, self.version)  # type: ignore[arg-type]
            self._one_rtt_receive = packet_keys(self.cipher_suite, server, self.version)  # type: ignore[arg-type]
            self.handshake_done = False
            self._wait_until = self._now + HANDSHAKE_DONE_WAIT
            self._send(1, crypto_frame(0, flight))
            return
        # Finished, then a polite close in the same packet: the scanner has what it came for.
        self._send(1, crypto_frame(0, flight) + connection_close_frame(QuicErrorCode.NO_ERROR, None, ""))

    def _stop_waiting(self) -> None:
        """The wait for HANDSHAKE_DONE is over: close politely in 1-RTT (a server that confirmed
        the handshake has dropped its Handshake keys, RFC 9001 4.9.2)."""
        self._wait_until = None
        # Our only 1-RTT packet: packet number 0 of its space.
        header = bytes((0x40 | (PACKET_NUMBER_LENGTH - 1),)) + self.dcid + bytes(PACKET_NUMBER_LENGTH)
        close = connection_close_frame(QuicErrorCode.NO_ERROR, None, "")
        self._outbox.append(self._one_rtt_send.encrypt_packet(header, close, 0))  # type: ignore[union-attr]

    # -- sending -------------------------------------------------------------------

    def _send_client_hello(self) -> None:
        """The ClientHello in as many Initial packets as it needs, each at most a minimal
        datagram where it can be: one for classic key shares, two when a post-quantum share
        makes it ~1,550 bytes, each padded to 1,200 bytes, as browsers send it."""
        hello, offset = self._client_hello, self._hello_offset
        token = len(encode_varint(len(self._token))) + len(self._token)
        header = 1 + 4 + 2 + len(self.dcid) + len(self.source_cid) + token + 2 + PACKET_NUMBER_LENGTH
        room = max(MIN_INITIAL_DATAGRAM - header - AEAD_TAG_LENGTH - _CRYPTO_FRAME_HEADER, MIN_CRYPTO_PER_PACKET)
        for start in range(0, len(hello), room):
            self._send(0, crypto_frame(offset + start, hello[start : start + room]))

    def _send(self, space: int, frames: bytes) -> None:
        """One packet in ``space`` (0 Initial, 1 Handshake) with ``frames``, after an ACK of what arrived."""
        received = self._received[space]
        if received:
            frames = ack_frame(received) + frames
            self._ack_pending[space] = False
            self._acks_sent[space] += 1
        if not frames:
            return
        packet_number = self._next_packet_number[space]
        self._next_packet_number[space] += 1
        if space == 0:
            packet = seal_long_packet(
                self._initial_send, self.version, QuicPacketType.INITIAL, self.dcid, self.source_cid,
                packet_number, frames, token=self._token, min_size=MIN_INITIAL_DATAGRAM,
            )  # fmt: skip
        else:
            # RFC 9001 4.9.1: a client drops its Initial keys when it first sends a Handshake packet.
            self._initial_discarded = True
            packet = seal_long_packet(
                self._handshake_send, self.version, QuicPacketType.HANDSHAKE, self.dcid, self.source_cid,  # type: ignore[arg-type]
                packet_number, frames,
            )  # fmt: skip
        self._outbox.append(packet)

    def _fail(self, failure: HandshakeFailed) -> None:
        """Close after an error of ours: CONNECTION_CLOSE at the highest level the server can read."""
        self.failure = failure
        close = connection_close_frame(failure.error_code, failure.frame_type, failure.reason)
        if self._handshake_send is not None:
            self._send(1, close)
        elif not self._initial_discarded:
            self._send(0, close)


def _retry_token(data: bytes) -> bytes | None:
    # RFC 9000 17.2.5: flags, version, DCID len+DCID, SCID len+SCID, token, 16-byte integrity tag.
    offset = 5
    offset += 1 + data[offset]
    if offset >= len(data):
        return None
    offset += 1 + data[offset]
    return data[offset:len(data) - RETRY_INTEGRITY_TAG_SIZE] if len(data) - offset >= RETRY_INTEGRITY_TAG_SIZE else None
