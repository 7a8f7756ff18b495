"""Capture files: classic libpcap files written (the format dumpcap -P writes and the project writes itself:
test vectors, benchmark captures, a trace's capture with its GSO bursts split), pcap and pcapng files read
(compiled), and IPv4 header sums."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

MAGIC = 0xA1B2C3D4  # little-endian, microsecond timestamps
FILE_HEADER = struct.Struct("<IHHiIII")
RECORD_HEADER = struct.Struct("<IIII")
LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_IPV4 = 1, 101, 228


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


def ipv4_checksum(header: bytes) -> int:
    """The IPv4 header checksum of ``header`` (whose own checksum field is zero)."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


# -- reading any capture file, record by record ---------------------------------------------------------------------
#
# Compiled (scanner/native/src/capture.rs), the one reader of capture files: qscan pcap reads every packet of a
# capture of many gigabytes, and reading the records and framing their datagrams in Python cost an eighth of its
# time. CaptureReader yields ``(packet number from 1, time stamp in seconds, link type, frame as captured, its
# original length)`` per packet of a classic pcap (either byte order, micro- or nanosecond clock) or a pcapng
# file (every section and interface with its own link type, clock and byte order), in file order, streamed
# (``CaptureReader.in_memory(data)`` for a file's bytes already read); ip_start(link, frame) is (where the IP
# header starts, 4 or 6) in a frame of that link type, None for other traffic.
try:
    from qscan_native import CaptureFileError, CaptureReader, ip_start  # noqa: F401 - this module's API
except ImportError as exc:  # pragma: no cover - scripts/setup.sh builds it
    raise ImportError("qscan's compiled part (scanner/native) is not built: run scripts/setup.sh") from exc


@dataclass(frozen=True)
class Damage:
    """Where a capture stops being readable: the byte offset of the first record that could not be read,
    how many packets were read before it, and what was wrong."""

    offset: int
    packets: int
    problem: str

    def __str__(self) -> str:
        return f"{self.problem} at byte {self.offset:,} (after packet {self.packets:,}); packets from there on are not read"

    @classmethod
    def of(cls, reader: "CaptureReader") -> "Damage | None":
        """Where ``reader`` (a CaptureReader or the compiled long-header datagrams) stopped at a damaged or
        cut-short record, None while it has not."""
        stopped = reader.stopped
        return None if stopped is None else cls(*stopped)
