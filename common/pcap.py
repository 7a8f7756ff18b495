"""Classic libpcap files, the format dumpcap -P writes and the project writes itself (test vectors, benchmark
captures, a trace's capture with its GSO bursts split): records read and written, and IPv4 header sums."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MAGIC = 0xA1B2C3D4  # little-endian, microsecond timestamps
FILE_HEADER = struct.Struct("<IHHiIII")
RECORD_HEADER = struct.Struct("<IIII")
LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_IPV4 = 1, 101, 228
#: bytes before the IP header, by link type: Ethernet (veth), raw IP (tun, our own files), raw IPv4
LINK_HEADER_BYTES = {LINKTYPE_ETHERNET: 14, LINKTYPE_RAW: 0, LINKTYPE_IPV4: 0}


@dataclass(frozen=True)
class Record:
    seconds: int
    micros: int
    frame: bytes
    original_length: int

    @property
    def whole(self) -> bool:
        """Whether the capture kept the whole frame (no snap length cut it)."""
        return len(self.frame) == self.original_length


def file_header(linktype: int) -> bytes:
    return FILE_HEADER.pack(MAGIC, 2, 4, 0, 0, 65535, linktype)


def record(seconds: int, micros: int, frame: bytes) -> bytes:
    return RECORD_HEADER.pack(seconds, micros, len(frame), len(frame)) + frame


def write(path, linktype: int, frames: Iterable[tuple[float, bytes]]) -> None:
    """A file of ``(time, frame)`` records."""
    with open(path, "wb") as out:
        out.write(file_header(linktype))
        for when, frame in frames:
            out.write(record(*divmod(round(when * 1_000_000), 1_000_000), frame))


def linktype(data: bytes) -> int | None:
    """The link type of a classic little-endian microsecond pcap, None for anything else (pcapng, other
    byte orders or resolutions)."""
    if len(data) < FILE_HEADER.size:
        return None
    magic, *_, link = FILE_HEADER.unpack_from(data)
    return link if magic == MAGIC else None


def records(data: bytes) -> Iterator[Record]:
    """The records of a classic pcap (see ``linktype``), up to a truncated last one."""
    at = FILE_HEADER.size
    while at + RECORD_HEADER.size <= len(data):
        seconds, micros, caplen, origlen = RECORD_HEADER.unpack_from(data, at)
        at += RECORD_HEADER.size
        yield Record(seconds, micros, data[at:at + caplen], origlen)
        at += caplen


def ipv4_checksum(header: bytes) -> int:
    """The IPv4 header checksum of ``header`` (whose own checksum field is zero)."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
