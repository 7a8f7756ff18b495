"""QUIC long-header packets from captured UDP payloads: framing, unprotection, frames.

tshark 4.0 only decodes a client's transport parameters when the whole
ClientHello sits in one well-formed datagram. Browsers on loopback break
every one of those assumptions (GSO batches with padding between datagrams,
ClientHellos over several packets, CRYPTO frames out of order, a greased QUIC
bit), so the project walks the packets itself. Key derivation and AEAD are
aioquic's (C-accelerated); only the framing is done here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from aioquic.quic.crypto import (
    INITIAL_CIPHER_SUITE,
    INITIAL_SALT_VERSION_1,
    INITIAL_SALT_VERSION_2,
    CryptoContext,
    cipher_suite_hash,
    hkdf_expand_label,
    hkdf_extract,
)
from aioquic.quic.packet import (
    PACKET_LONG_TYPE_DECODE_VERSION_1,
    PACKET_LONG_TYPE_DECODE_VERSION_2,
    QuicPacketType,
    QuicProtocolVersion,
)

from tparams.varint import decode_varint

# aioquic derives Initial keys for these versions only (RFC 9001 and RFC 9369 salts).
INITIAL_KEY_VERSIONS = (QuicProtocolVersion.VERSION_1, QuicProtocolVersion.VERSION_2)
_LONG_TYPES = {
    QuicProtocolVersion.VERSION_1: PACKET_LONG_TYPE_DECODE_VERSION_1,
    QuicProtocolVersion.VERSION_2: PACKET_LONG_TYPE_DECODE_VERSION_2,
}

FRAME_PADDING = 0x00
FRAME_PING = 0x01
FRAME_ACK = 0x02
FRAME_ACK_ECN = 0x03
FRAME_CRYPTO = 0x06
FRAME_CONNECTION_CLOSE = 0x1C
FRAME_CONNECTION_CLOSE_APP = 0x1D


@dataclass(frozen=True)
class LongPacket:
    """One long-header packet inside a datagram, still protected."""

    version: int
    packet_type: QuicPacketType | None  # None for versions whose type bits we cannot read
    dcid: bytes
    scid: bytes
    data: bytes  # the whole packet, header included
    pn_offset: int  # where the protected packet number starts, relative to ``data``


def long_packets(payload: bytes) -> Iterator[LongPacket]:
    """Every long-header packet coalesced in one captured UDP payload.

    A GSO batch arrives in the capture as one oversized payload: datagram
    after datagram, each possibly followed by zero padding. So zero bytes
    between packets are skipped, and walking stops at the first byte that
    cannot start a long header (a short-header packet runs to the end).
    """
    offset = 0
    size = len(payload)
    while offset < size:
        first = payload[offset]
        if first == 0:
            offset += 1
            continue
        if not first & 0x80 or offset + 7 > size:
            return
        version = int.from_bytes(payload[offset + 1 : offset + 5], "big")
        if version == 0:  # Version Negotiation has no length: it is the rest of the datagram
            return
        pos = offset + 5
        dcid_length = payload[pos]
        dcid = payload[pos + 1 : pos + 1 + dcid_length]
        pos += 1 + dcid_length
        if pos >= size or dcid_length > 20:
            return
        scid_length = payload[pos]
        scid = payload[pos + 1 : pos + 1 + scid_length]
        pos += 1 + scid_length
        long_types = _LONG_TYPES.get(version)  # type: ignore[call-overload]
        packet_type = long_types[(first & 0x30) >> 4] if long_types else None
        if packet_type is None or packet_type == QuicPacketType.RETRY:
            return  # unknown framing, or a Retry: both run to the end of the datagram
        try:
            if packet_type == QuicPacketType.INITIAL:
                token_length, pos = decode_varint(payload, pos)
                pos += token_length
            length, pos = decode_varint(payload, pos)
        except ValueError:
            return
        end = pos + length
        if end > size:
            return
        yield LongPacket(version, packet_type, dcid, scid, payload[offset:end], pos - offset)
        offset = end


_INITIAL_HASH = cipher_suite_hash(INITIAL_CIPHER_SUITE)
_INITIAL_SALTS = {QuicProtocolVersion.VERSION_1: INITIAL_SALT_VERSION_1, QuicProtocolVersion.VERSION_2: INITIAL_SALT_VERSION_2}


def initial_keys(dcid: bytes, version: int, of_client: bool) -> CryptoContext:
    """The Initial keys protecting what the client (``of_client``) or the server sends.

    aioquic's own derivation (RFC 9001, 5.2), one direction only:
    CryptoPair.setup_initial derives both, and a capture of many clients
    spends most of its key time on the direction it never opens.
    """
    initial_secret = hkdf_extract(_INITIAL_HASH, _INITIAL_SALTS[version], dcid)  # type: ignore[index]
    label = b"client in" if of_client else b"server in"
    keys = CryptoContext()
    keys.setup(
        cipher_suite=INITIAL_CIPHER_SUITE,
        secret=hkdf_expand_label(_INITIAL_HASH, initial_secret, label, b"", _INITIAL_HASH.digest_size),
        version=version,
    )
    return keys


def unprotect(packet: LongPacket, keys: CryptoContext, expected_packet_number: int = 0) -> tuple[int, bytes] | None:
    """(packet number, plaintext payload), or None when these keys do not open the packet."""
    try:
        _, payload, packet_number, _ = keys.decrypt_packet(packet.data, packet.pn_offset, expected_packet_number)
    except Exception:  # aioquic raises plain ValueError/CryptoError on a wrong key; both mean "not these keys"
        return None
    return packet_number, payload


def crypto_frames(payload: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, data) of every CRYPTO frame, skipping the other frames an Initial or
    Handshake packet may carry (PADDING, PING, ACK, CONNECTION_CLOSE).

    Stops quietly at a frame type those packets cannot carry: what came before
    is still good, and nothing after it can be framed.
    """
    pos = 0
    size = len(payload)
    try:
        while pos < size:
            frame_type = payload[pos]
            pos += 1
            if frame_type == FRAME_PADDING:
                # Initials are padded to 1200+ bytes; skip the run in C, not byte by byte.
                rest = payload[pos:]
                pos += len(rest) - len(rest.lstrip(b"\x00"))
                continue
            if frame_type == FRAME_PING:
                continue
            if frame_type in (FRAME_ACK, FRAME_ACK_ECN):
                _, pos = decode_varint(payload, pos)  # largest acknowledged
                _, pos = decode_varint(payload, pos)  # ack delay
                range_count, pos = decode_varint(payload, pos)
                _, pos = decode_varint(payload, pos)  # first range
                for _ in range(2 * range_count + (3 if frame_type == FRAME_ACK_ECN else 0)):
                    _, pos = decode_varint(payload, pos)
            elif frame_type == FRAME_CRYPTO:
                offset, pos = decode_varint(payload, pos)
                length, pos = decode_varint(payload, pos)
                if pos + length > size:
                    return
                yield offset, payload[pos : pos + length]
                pos += length
            elif frame_type in (FRAME_CONNECTION_CLOSE, FRAME_CONNECTION_CLOSE_APP):
                _, pos = decode_varint(payload, pos)  # error code
                if frame_type == FRAME_CONNECTION_CLOSE:
                    _, pos = decode_varint(payload, pos)  # offending frame type
                reason_length, pos = decode_varint(payload, pos)
                pos += reason_length
            else:
                return
    except ValueError:
        return


class CryptoStream:
    """One direction's CRYPTO stream at one encryption level, reassembled by offset.

    Browsers send CRYPTO frames out of order and repeat them; the stream only
    grows at its contiguous end, and overlapping retransmissions are ignored.
    """

    def __init__(self) -> None:
        self._chunks: dict[int, bytes] = {}
        self._data = bytearray()

    def add(self, offset: int, data: bytes) -> None:
        end = offset + len(data)
        if end <= len(self._data):
            return
        if len(self._chunks.get(offset, b"")) < len(data):
            self._chunks[offset] = data
        self._advance()

    def add_frames(self, payload: bytes) -> bytes | None:
        """Add every CRYPTO frame of an opened packet; the first message once it is complete."""
        for offset, data in crypto_frames(payload):
            self.add(offset, data)
        return self.message()

    def _advance(self) -> None:
        progressed = True
        while progressed and self._chunks:
            progressed = False
            for offset in sorted(self._chunks):
                data = self._chunks[offset]
                if offset > len(self._data):
                    break
                del self._chunks[offset]
                skip = len(self._data) - offset
                if skip < len(data):
                    self._data += data[skip:]
                progressed = True

    @property
    def data(self) -> bytes:
        """The contiguous prefix received so far."""
        return bytes(self._data)

    def message(self) -> bytes | None:
        """The first TLS handshake message once it is complete, header included."""
        if len(self._data) < 4:
            return None
        end = 4 + int.from_bytes(self._data[1:4], "big")
        return bytes(self._data[:end]) if len(self._data) >= end else None
