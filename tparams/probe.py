"""The discovery probe: a QUIC long-header Initial with a reserved version.

Pure: no I/O. The same bytes go to every address of a scan (ZMap's ``udp``
module sends one payload file), so the connection IDs chosen here are also
what every valid answer must echo back.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

from aioquic.buffer import Buffer

# RFC 9000 17.2: long header (0x80), fixed bit (0x40), type Initial (0x00).
_INITIAL_FIRST_BYTE = 0xC0
# RFC 9000 14.1: a client's Initial datagram is at least 1200 bytes, and a
# server only has to send Version Negotiation for datagrams of at least that
# size (6.1), so anything smaller may go unanswered.
MIN_PROBE_SIZE = 1200
MAX_CID_LENGTH = 20
# RFC 9000 7.2: a client's first Destination Connection ID is at least 8 bytes.
MIN_INITIAL_DCID_LENGTH = 8


def is_reserved_version(version: int) -> bool:
    """RFC 9000 15: versions 0x?a?a?a?a are reserved to exercise negotiation."""
    return version & 0x0F0F0F0F == 0x0A0A0A0A


@dataclass(frozen=True)
class Probe:
    version: int
    destination_cid: bytes
    source_cid: bytes
    payload: bytes

    @property
    def hex(self) -> str:
        return self.payload.hex()


def make_probe(
    size: int = MIN_PROBE_SIZE,
    version: int | None = None,
    destination_cid: bytes | None = None,
    source_cid: bytes | None = None,
    rng: random.Random | None = None,
) -> Probe:
    """A probe of ``size`` bytes; omitted fields are random (from ``rng`` when
    given, so a seeded generator reproduces a probe exactly)."""
    randbytes = rng.randbytes if rng else secrets.token_bytes
    randbelow = (lambda n: rng.randrange(n)) if rng else secrets.randbelow
    if size < MIN_PROBE_SIZE:
        raise ValueError(f"a probe must be at least {MIN_PROBE_SIZE} bytes (RFC 9000 14.1), not {size}")
    if version is None:
        # One random nibble per byte, each byte's low nibble 0xa.
        version = int.from_bytes(bytes((randbelow(16) << 4) | 0x0A for _ in range(4)), "big")
    if not is_reserved_version(version):
        raise ValueError(f"version 0x{version:08x} is not a reserved 0x?a?a?a?a version")
    if destination_cid is None:
        destination_cid = randbytes(MIN_INITIAL_DCID_LENGTH + randbelow(MAX_CID_LENGTH - MIN_INITIAL_DCID_LENGTH + 1))
    if source_cid is None:
        source_cid = randbytes(randbelow(MAX_CID_LENGTH + 1))
    if not MIN_INITIAL_DCID_LENGTH <= len(destination_cid) <= MAX_CID_LENGTH:
        raise ValueError(f"destination connection ID must be 8..20 bytes, not {len(destination_cid)}")
    if len(source_cid) > MAX_CID_LENGTH:
        raise ValueError(f"source connection ID must be at most 20 bytes, not {len(source_cid)}")

    header = Buffer(capacity=64)
    # The low bits (reserved + packet-number length) are randomised as a
    # real client's protected header byte would look.
    header.push_uint8(_INITIAL_FIRST_BYTE | randbelow(16))
    header.push_uint32(version)
    header.push_uint8(len(destination_cid))
    header.push_bytes(destination_cid)
    header.push_uint8(len(source_cid))
    header.push_bytes(source_cid)
    header.push_uint_var(0)  # token length
    # Length covers packet number + protected payload: the rest of the
    # datagram, so that a version-1-shaped parser also sees one whole packet.
    rest = size - header.tell() - 2
    header.push_uint16(0x4000 | rest)  # 2-byte varint
    payload = header.data + randbytes(rest)
    return Probe(version, destination_cid, source_cid, payload)
