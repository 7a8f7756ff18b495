"""QUIC long-header packets: framing, Initial keys, (un)protection, CRYPTO reassembly.

One implementation for the whole project: the capture reader opens browsers'
Initials with it and the scanner's handshake sends and opens its packets with
it. tshark 4.0 only decodes a client's transport parameters when the whole
ClientHello sits in one well-formed datagram. Browsers on loopback break
every one of those assumptions (GSO batches with padding between datagrams,
ClientHellos over several packets, CRYPTO frames out of order, a greased QUIC
bit), so the project walks the packets itself. Key derivation and AEAD are
aioquic's (over `cryptography`); only the framing is done here. CRYPTO frames
and their reassembly are compiled (scanner/native), and so is opening a client
Initial where a capture of many clients does it for each (scanner/capture/extract.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import functools
import hmac
import struct
from typing import NamedTuple

from aioquic.quic.crypto import (
    CIPHER_SUITES,
    INITIAL_CIPHER_SUITE,
    INITIAL_SALT_VERSION_1,
    INITIAL_SALT_VERSION_2,
    CryptoContext,
)
from aioquic.tls import CipherSuite
from aioquic.quic.packet import (
    PACKET_LONG_TYPE_DECODE_VERSION_1,
    PACKET_LONG_TYPE_DECODE_VERSION_2,
    QuicPacketType,
    QuicProtocolVersion,
    encode_long_header_first_byte,
)

from common.aioquic_adapter import packet_protection
try:
    # CRYPTO frames and their reassembly, compiled: walking a browser's many small frames and joining them in
    # Python cost a tenth of qscan pcap's time (scanner/native/src/crypto.rs).
    from qscan_native import CryptoStream, crypto_frames
except ImportError as exc:  # built by scripts/setup.sh, which every checkout runs first
    raise ImportError("qscan's compiled part (scanner/native) is not built: run scripts/setup.sh") from exc
from tparams.frames import FRAME_ACK, FRAME_CONNECTION_CLOSE, FRAME_CRYPTO
from tparams.varint import decode_varint, encode_varint

# Every version whose client Initials we open, with what reading one takes. Besides RFC 9001's and
# RFC 9369's salts (aioquic's), public captures of 2019-2023 hold the IETF drafts (Chrome and mvfst
# sent draft-23 to -29), mvfst's own versions and Google's TLS-based T050/T051. Their salts are
# published: drafts 23-28 share one and 29-32 another (draft-ietf-quic-tls-23 and -29, section 5.2),
# drafts 33 and 34 have RFC 9001's; mvfst's QuicConstants/FizzCryptoFactory give faceb001 draft-22's
# salt and faceb002/faceb00e draft-23's; Chromium's quic_crypto_utils gives T050's and T051's. All
# take v1's labels ("quic key") and long-header packet types.
_SALT_DRAFT_22 = bytes.fromhex("7fbcdb0e7c66bbe9193a96cd21519ebd7a02644a")
_SALT_DRAFT_23 = bytes.fromhex("c3eef712c72ebb5a11a7d2432bb46365bef9f502")
_SALT_DRAFT_29 = bytes.fromhex("afbfec289993d24c9e9786f19c6111e04390a899")
_SALT_T050 = bytes.fromhex("7ff579e5acd072915580304c43a2367c60488310")
_SALT_T051 = bytes.fromhex("7a4edef4e7ccee5fa4506c19124fc8ccda6e033d")
MVFST_D24, MVFST, MVFST_EXPERIMENTAL = 0xFACEB001, 0xFACEB002, 0xFACEB00E
GOOGLE_T050, GOOGLE_T051 = 0x54303530, 0x54303531


def draft_version(number: int) -> int:
    return 0xFF000000 | number


@dataclass(frozen=True)
class InitialFormat:
    """How to read a version's client Initial."""

    salt: bytes
    long_types: dict[int, QuicPacketType] = field(default_factory=lambda: PACKET_LONG_TYPE_DECODE_VERSION_1)
    # The transport parameters' framing before draft-27 (and in mvfst's faceb001 and Google's T050):
    # a 16-bit list length, then 16-bit ids and lengths; since draft-27 varint ids and lengths.
    sixteen_bit_parameters: bool = False
    # Google's versions carry Google QUIC frames in their packets (CRYPTO is 0x08 there, 0x06 is STOP_WAITING).
    google_frames: bool = False


INITIAL_FORMATS: dict[int, InitialFormat] = {
    QuicProtocolVersion.VERSION_1: InitialFormat(INITIAL_SALT_VERSION_1),
    QuicProtocolVersion.VERSION_2: InitialFormat(INITIAL_SALT_VERSION_2, PACKET_LONG_TYPE_DECODE_VERSION_2),
    **{draft_version(n): InitialFormat(_SALT_DRAFT_23, sixteen_bit_parameters=n < 27) for n in range(23, 29)},
    **{draft_version(n): InitialFormat(_SALT_DRAFT_29) for n in range(29, 33)},
    **{draft_version(n): InitialFormat(INITIAL_SALT_VERSION_1) for n in (33, 34)},
    MVFST_D24: InitialFormat(_SALT_DRAFT_22, sixteen_bit_parameters=True),
    MVFST: InitialFormat(_SALT_DRAFT_23),
    MVFST_EXPERIMENTAL: InitialFormat(_SALT_DRAFT_23),
    GOOGLE_T050: InitialFormat(_SALT_T050, sixteen_bit_parameters=True, google_frames=True),
    GOOGLE_T051: InitialFormat(_SALT_T051, google_frames=True),
}
INITIAL_KEY_VERSIONS = tuple(INITIAL_FORMATS)
# The long-header packet types by version (the type bits mean other types in QUIC v2).
LONG_TYPES = {version: spec.long_types for version, spec in INITIAL_FORMATS.items()}


class LongPacket(NamedTuple):
    """One long-header packet inside a datagram, still protected: a tuple, built for every packet of a capture
    (a frozen dataclass cost 2% of qscan pcap's time, 2026-11-28 15:23)."""

    version: int
    packet_type: QuicPacketType | None  # None for versions whose type bits we cannot read (0 is VERSION_NEGOTIATION)
    dcid: bytes
    scid: bytes
    data: bytes  # the whole packet, header included
    pn_offset: int  # where the protected packet number starts (a Retry's token), relative to ``data``


def long_packets(payload: bytes) -> Iterator[LongPacket]:
    """Every long-header packet coalesced in one captured UDP payload.

    A GSO batch arrives in the capture as one oversized payload: datagram
    after datagram, each possibly followed by zero padding. So zero bytes
    between packets are skipped, and walking stops at the first byte that
    cannot start a long header (a short-header packet runs to the end), and
    after a Retry, a Version Negotiation or a packet of a version we cannot
    frame, which have no Length field we read and so are the rest of the datagram.
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
        pos = offset + 5
        dcid_length = payload[pos]
        dcid = payload[pos + 1 : pos + 1 + dcid_length]
        pos += 1 + dcid_length
        scid_length = payload[pos] if pos < size else 0
        scid = payload[pos + 1 : pos + 1 + scid_length]
        long_types = LONG_TYPES.get(version)  # type: ignore[call-overload]
        if long_types is None:
            # Version Negotiation and versions we cannot frame (Google's Q046 and Q050, unknown ones) have
            # no Length we can read: the rest of the datagram, yielded without a type so callers can count it.
            kind = QuicPacketType.VERSION_NEGOTIATION if version == 0 else None
            yield LongPacket(version, kind, dcid, scid, payload[offset:], min(pos + 1 + scid_length, size) - offset)
            return
        if pos >= size or dcid_length > 20:
            return
        pos += 1 + scid_length
        packet_type = long_types[(first & 0x30) >> 4]
        if packet_type == QuicPacketType.RETRY:  # no Length: the rest of the datagram
            yield LongPacket(version, packet_type, dcid, scid, payload[offset:], pos - offset)
            return
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


# The keys a client that greases the version of its first Initial was seen protecting it with:
# v1's, or draft-29's (quic-interop-runner's clients of 2020; tshark 4.0 takes draft-29's for 0x?a?a?a?a).
GREASED_INITIAL_KEYS = (QuicProtocolVersion.VERSION_1, draft_version(29))


def as_version_1_initial(packet: LongPacket) -> LongPacket | None:
    """A packet of a version without Initial keys of its own, read as a QUIC v1 Initial; None
    when it cannot be one.

    A client that forces Version Negotiation with a reserved version (0x?a?a?a?a, as
    quic-interop-runner's test case V does) still lays out and protects its Initial somehow:
    the clients seen keep v1's layout and take the keys of a version they speak. Only the
    AEAD tag can tell whether the guess was right: the caller tries GREASED_INITIAL_KEYS.
    """
    data = packet.data
    if packet.packet_type is not None or data[0] & 0x30 or len(packet.dcid) > 20:
        return None
    try:
        token_length, pos = decode_varint(data, packet.pn_offset)
        length, pos = decode_varint(data, pos + token_length)
    except ValueError:
        return None
    if pos + length > len(data):
        return None
    return LongPacket(packet.version, QuicPacketType.INITIAL, packet.dcid, packet.scid, data[: pos + length], pos)


# The hash of each TLS 1.3 cipher suite, by hashlib's name.
HASH_NAMES = {
    CipherSuite.AES_128_GCM_SHA256: "sha256",
    CipherSuite.AES_256_GCM_SHA384: "sha384",
    CipherSuite.CHACHA20_POLY1305_SHA256: "sha256",
}
_KEY_SIZES = {CipherSuite.AES_128_GCM_SHA256: 16, CipherSuite.AES_256_GCM_SHA384: 32, CipherSuite.CHACHA20_POLY1305_SHA256: 32}


def hkdf_extract(hash_name: str, salt: bytes, key_material: bytes) -> bytes:
    return hmac.digest(salt, key_material, hash_name)


def hkdf_expand_label(hash_name: str, secret: bytes, label: bytes, context: bytes, length: int) -> bytes:
    """HKDF-Expand-Label (RFC 8446 7.1) for outputs of at most one hash, which is all TLS 1.3
    and QUIC ask for: then HKDF-Expand is a single HMAC (RFC 5869 2.3), a third of the
    cost of building a `cryptography` HKDFExpand object per call (aioquic's way)."""
    return hmac.digest(secret, _expand_info(label, context, length), hash_name)[:length]


@functools.lru_cache(maxsize=64)
def _expand_info(label: bytes, context: bytes, length: int) -> bytes:
    """HKDF-Expand's input for one label, built once: a capture of many clients derives the same few labels
    for every connection. Bounded, as the handshake's context is a transcript hash, new every time."""
    return struct.pack("!HB", length, 6 + len(label)) + b"tls13 " + label + bytes((len(context),)) + context + b"\x01"


def packet_keys(cipher_suite: int, secret: bytes, version: int) -> CryptoContext:
    """aioquic's packet protection for one direction from a traffic secret (RFC 9001 5.1;
    RFC 9369 3.3.2's labels for QUIC v2): CryptoContext.setup's result, derived as above."""
    hash_name = HASH_NAMES[cipher_suite]  # type: ignore[index]
    key_size = _KEY_SIZES[cipher_suite]  # type: ignore[index]
    prefix = b"quicv2 " if version == QuicProtocolVersion.VERSION_2 else b"quic "
    hp_cipher, aead_cipher = CIPHER_SUITES[cipher_suite]  # type: ignore[index]
    return packet_protection(
        cipher_suite, secret, version,
        key=hkdf_expand_label(hash_name, secret, prefix + b"key", b"", key_size),
        iv=hkdf_expand_label(hash_name, secret, prefix + b"iv", b"", 12),
        hp_key=hkdf_expand_label(hash_name, secret, prefix + b"hp", b"", key_size),
        aead_cipher=aead_cipher, hp_cipher=hp_cipher,
    )


def initial_keys(dcid: bytes, version: int, of_client: bool) -> CryptoContext:
    """The Initial keys protecting what the client (``of_client``) or the server sends
    (RFC 9001, 5.2), one direction only: CryptoPair.setup_initial derives both, and
    a capture of many clients spends most of its key time on the direction it never
    opens, a scanner on the one a silent target never uses."""
    initial_secret = hkdf_extract("sha256", INITIAL_FORMATS[version].salt, dcid)
    label = b"client in" if of_client else b"server in"
    return packet_keys(INITIAL_CIPHER_SUITE, hkdf_expand_label("sha256", initial_secret, label, b"", 32), version)


def unprotect(packet: LongPacket, keys: CryptoContext, expected_packet_number: int = 0) -> tuple[int, bytes] | None:
    """(packet number, plaintext payload), or None when these keys do not open the packet."""
    try:
        _, payload, packet_number, _ = keys.decrypt_packet(packet.data, packet.pn_offset, expected_packet_number)
    except Exception:  # aioquic raises plain ValueError/CryptoError on a wrong key; both mean "not these keys"
        return None
    return packet_number, payload


PACKET_NUMBER_LENGTH = 2  # what we send; enough for a handshake's few packets
AEAD_TAG_LENGTH = 16


def seal_long_packet(
    keys: CryptoContext,
    version: int,
    packet_type: QuicPacketType,
    dcid: bytes,
    scid: bytes,
    packet_number: int,
    payload: bytes,
    token: bytes = b"",
    min_size: int = 0,
) -> bytes:
    """One protected Initial or Handshake packet, its payload padded to ``min_size`` bytes of packet.

    Padding is PADDING frames (zero bytes) at the end of the payload. The
    payload is also padded to the 4 bytes the header-protection sample needs
    (RFC 9001, 5.4.2).
    """
    header = bytearray((encode_long_header_first_byte(version, packet_type, PACKET_NUMBER_LENGTH - 1),))
    header += version.to_bytes(4, "big")
    header += bytes((len(dcid),)) + dcid + bytes((len(scid),)) + scid
    if packet_type == QuicPacketType.INITIAL:
        header += encode_varint(len(token)) + token
    # The Length field is always written in 2 bytes, so its size is known before padding.
    size = len(header) + 2 + PACKET_NUMBER_LENGTH + len(payload) + AEAD_TAG_LENGTH
    padding = max(min_size - size, 4 - PACKET_NUMBER_LENGTH - len(payload), 0)
    if padding:
        payload += bytes(padding)
    header += (0x4000 | (PACKET_NUMBER_LENGTH + len(payload) + AEAD_TAG_LENGTH)).to_bytes(2, "big")
    header += (packet_number & 0xFFFF).to_bytes(PACKET_NUMBER_LENGTH, "big")
    return keys.encrypt_packet(bytes(header), payload, packet_number)


def ack_frame(received: set[int], max_ranges: int = 32) -> bytes:
    """An ACK frame (delay 0) for the packet numbers in ``received``, newest ranges first."""
    ranges: list[list[int]] = []  # [largest, smallest], descending
    for packet_number in sorted(received, reverse=True):
        if ranges and ranges[-1][1] == packet_number + 1:
            ranges[-1][1] = packet_number
        elif len(ranges) < max_ranges:
            ranges.append([packet_number, packet_number])
        else:
            break
    largest, smallest = ranges[0]
    frame = bytearray((FRAME_ACK,))
    frame += encode_varint(largest) + b"\x00" + encode_varint(len(ranges) - 1) + encode_varint(largest - smallest)
    for high, low in ranges[1:]:
        frame += encode_varint(smallest - high - 2) + encode_varint(high - low)
        smallest = low
    return bytes(frame)


def connection_close_frame(error_code: int, frame_type: int | None, reason: str) -> bytes:
    """A transport CONNECTION_CLOSE (0x1c), the only kind Initial and Handshake packets carry."""
    phrase = reason.encode()
    return (
        bytes((FRAME_CONNECTION_CLOSE,))
        + encode_varint(error_code)
        + encode_varint(frame_type or 0)
        + encode_varint(len(phrase))
        + phrase
    )


def crypto_frame(offset: int, data: bytes) -> bytes:
    return bytes((FRAME_CRYPTO,)) + encode_varint(offset) + encode_varint(len(data)) + data
