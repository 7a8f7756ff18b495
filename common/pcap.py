"""Classic libpcap files, the format dumpcap -P writes and the project writes itself (test vectors, benchmark
captures, a trace's capture with its GSO bursts split): records read and written, and IPv4 header sums."""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterable, Iterator
from typing import BinaryIO
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
# dpkt's readers (the maintained library for this) take the first interface's link type and clock for a whole
# pcapng, skip Simple Packet Blocks and later sections, and raise mid-parse on a cut file without saying where;
# a capture reader must say where a damaged file stops being readable and keep everything before. So the two
# formats are read here, with the standard library, a record at a time.

PCAPNG_SECTION = 0x0A0D0D0A
_PCAPNG_BYTE_ORDER = 0x1A2B3C4D
_PCAP_MAGICS = {  # magic as read little-endian -> (byte order, ticks a second)
    0xA1B2C3D4: ("<", 1_000_000), 0xA1B23C4D: ("<", 1_000_000_000),
    0xD4C3B2A1: (">", 1_000_000), 0x4D3CB2A1: (">", 1_000_000_000),
}
# Larger than any snap length a capture tool writes (Wireshark's maximum is 256 KiB; dumpcap of a loopback with
# GSO keeps up to 64 KiB): a longer record is a damaged length field, not a packet.
_MAX_RECORD = 16 * 1024 * 1024
_READ_BUFFER = 1024 * 1024


# (packet number from 1, time stamp in seconds, link type, frame as captured, its original length)
Packet = tuple[int, float, int, bytes, int]


class CaptureFileError(ValueError):
    """The file is no pcap or pcapng capture at all (nothing in it can be read)."""


@dataclass(frozen=True)
class Damage:
    """Where a capture stops being readable: the byte offset of the first record that could not be read,
    how many packets were read before it, and what was wrong."""

    offset: int
    packets: int
    problem: str

    def __str__(self) -> str:
        return f"{self.problem} at byte {self.offset:,} (after packet {self.packets:,}); packets from there on are not read"


class CaptureReader:
    """The packets of a classic pcap (either byte order, micro- or nanosecond clock) or a pcapng file (every
    section and interface with its own link type, clock and byte order), in file order, streamed:
    ``for number, time, link, frame, original_length in reader`` (the length on the wire, longer than
    ``frame`` where the snap length cut it); a file's bytes already in memory are read with ``in_memory``. Iteration stops at the end of the file or at the first
    damaged or cut-short record, which ``damage`` then names; every packet before it has been yielded.
    ``offset`` is how far the file has been read (for progress)."""

    def __init__(self, path: str | os.PathLike, file: BinaryIO | None = None) -> None:
        self.path = path
        self.damage: Damage | None = None
        self.offset = 0
        self.packets = 0
        self._file = file or open(path, "rb", buffering=_READ_BUFFER)  # noqa: SIM115 - closed when iteration ends
        head = self._file.read(24)
        if len(head) >= 4 and int.from_bytes(head[:4], "little") == PCAPNG_SECTION:
            self._records = self._pcapng(head)
        elif len(head) >= 4 and int.from_bytes(head[:4], "little") in _PCAP_MAGICS:
            if len(head) < 24:
                self._file.close()
                raise CaptureFileError(f"a pcap file header of {len(head)} bytes, not 24")
            self._records = self._pcap(head)
        else:
            self._file.close()
            raise CaptureFileError("not a pcap or pcapng capture (unknown magic number)")

    @classmethod
    def in_memory(cls, data: bytes) -> "CaptureReader":
        return cls("(in memory)", io.BytesIO(data))

    def __iter__(self) -> Iterator[Packet]:
        try:
            yield from self._records
        finally:
            self._file.close()

    def _stop(self, offset: int, problem: str) -> None:
        self.damage = Damage(offset, self.packets, problem)

    def _pcap(self, head: bytes) -> Iterator[Packet]:
        order, ticks = _PCAP_MAGICS[int.from_bytes(head[:4], "little")]
        link = struct.unpack(order + "I", head[20:24])[0] & 0x0FFFFFFF  # the top bits carry FCS flags
        header = struct.Struct(order + "IIII")
        read, unpack = self._file.read, header.unpack
        at = 24
        number = 0
        while True:
            raw = read(16)
            if len(raw) < 16:
                if raw:
                    self._stop(at, f"the capture ends inside a record header ({len(raw)} of 16 bytes)")
                break
            seconds, fraction, caplen, original = unpack(raw)
            if caplen > _MAX_RECORD:
                self._stop(at, f"a damaged record header (captured length {caplen:,})")
                break
            frame = read(caplen)
            if len(frame) < caplen:
                self._stop(at, f"the capture ends inside packet {number + 1:,} ({len(frame):,} of {caplen:,} bytes)")
                break
            at += 16 + caplen
            number += 1
            self.offset, self.packets = at, number
            yield number, seconds + fraction / ticks, link, frame, original

    def _pcapng(self, head: bytes) -> Iterator[Packet]:
        read = self._file.read
        pending = head  # bytes already read of the next block
        at = 0
        number = 0
        order = "<"
        interfaces: list[tuple[int, int, int, int]] = []  # (link type, snap length, ticks a second, offset s)
        while True:
            start = pending + read(max(0, 8 - len(pending)))
            if len(start) < 8:
                if start:
                    self._stop(at, f"the capture ends inside a block header ({len(start)} of 8 bytes)")
                break
            kind = struct.unpack_from(order + "I", start)[0]
            if kind == PCAPNG_SECTION:
                start += read(max(0, 12 - len(start)))
                if len(start) < 12:
                    self._stop(at, "the capture ends inside a section header")
                    break
                magic = start[8:12]
                order = "<" if magic == _PCAPNG_BYTE_ORDER.to_bytes(4, "little") else ">" if magic == _PCAPNG_BYTE_ORDER.to_bytes(4, "big") else ""
                if not order:
                    self._stop(at, "a damaged section header (unknown byte-order magic)")
                    break
                interfaces = []
            length = struct.unpack_from(order + "I", start, 4)[0]
            if length < 12 or length % 4 or length > _MAX_RECORD:
                self._stop(at, f"a damaged block header (block length {length:,})")
                break
            block = start[:length] + read(max(0, length - len(start)))
            pending = start[length:]
            if len(block) < length:
                self._stop(at, f"the capture ends inside a block ({len(block):,} of {length:,} bytes)")
                break
            if struct.unpack_from(order + "I", block, length - 4)[0] != length:
                self._stop(at, "a damaged block (its two length fields differ)")
                break
            at += length
            self.offset = at
            packet = None
            if kind == 6 and length >= 32:  # Enhanced Packet Block
                interface, high, low, caplen, original = struct.unpack_from(order + "IIIII", block, 8)
                packet = interface, (high << 32) | low, block[28 : 28 + caplen], original
            elif kind == 3 and length >= 16 and interfaces:  # Simple Packet Block: interface 0, no time stamp
                original = struct.unpack_from(order + "I", block, 8)[0]
                packet = 0, None, block[12 : 12 + min(original, interfaces[0][1] or original, length - 16)], original
            elif kind == 2 and length >= 32:  # Packet Block (obsolete)
                interface, _, high, low, caplen, original = struct.unpack_from(order + "HHIIII", block, 8)
                packet = interface, (high << 32) | low, block[28 : 28 + caplen], original
            elif kind == 1 and length >= 20:  # Interface Description Block
                interfaces.append(_interface(order, block))
            if packet is None:
                continue
            interface, ticks, frame, original = packet
            if interface >= len(interfaces):
                self._stop(at - length, f"a packet of interface {interface}, which the file never describes")
                break
            link, _, per_second, offset = interfaces[interface]
            number += 1
            self.packets = number
            yield number, 0.0 if ticks is None else offset + ticks / per_second, link, frame, original


def _interface(order: str, block: bytes) -> tuple[int, int, int, int]:
    """An Interface Description Block's link type, snap length, clock (if_tsresol) and if_tsoffset."""
    link, _, snaplen = struct.unpack_from(order + "HHI", block, 8)
    per_second, offset = 1_000_000, 0
    at, end = 16, len(block) - 4
    while at + 4 <= end:
        code, length = struct.unpack_from(order + "HH", block, at)
        value = block[at + 4 : at + 4 + length]
        if code == 0:
            break
        if code == 9 and length == 1:
            per_second = 2 ** (value[0] & 0x7F) if value[0] & 0x80 else 10 ** value[0]
        elif code == 14 and length == 8:
            offset = struct.unpack(order + "q", value)[0]
        at += 4 + (length + 3) // 4 * 4
    return link, snaplen, per_second, offset


# Link types whose frames start with an IP header (raw IP, as tun devices and our own files have it).
_RAW_IP = {LINKTYPE_RAW, LINKTYPE_IPV4, 229, 12, 14}
_LINKTYPE_NULL, _LINKTYPE_PPP, _LINKTYPE_LOOP, _LINKTYPE_LINUX_SLL, _LINKTYPE_LINUX_SLL2 = 0, 9, 108, 113, 276
_VLAN_TAGS = {0x8100, 0x88A8, 0x9100}
_ETHERTYPE_IPV4, _ETHERTYPE_IPV6 = 0x0800, 0x86DD
_PPP_IP = {0x0021: _ETHERTYPE_IPV4, 0x0057: _ETHERTYPE_IPV6}
_BSD_AF_INET6 = {10, 24, 28, 30}  # AF_INET6 on Linux, NetBSD/OpenBSD, FreeBSD, macOS
_IPV6_EXTENSIONS = {0, 43, 60}  # hop-by-hop, routing, destination options: skipped; 44 (fragment) ends the walk
_UDP = 17


def ip_start(link: int, frame: bytes) -> tuple[int, int] | None:
    """(where the IP header starts, 4 or 6) in a frame of link type ``link``; None for other traffic."""
    if link == LINKTYPE_ETHERNET:
        at, ethertype = 14, int.from_bytes(frame[12:14], "big")
        while ethertype in _VLAN_TAGS:
            ethertype, at = int.from_bytes(frame[at + 2 : at + 4], "big"), at + 4
    elif link in _RAW_IP:
        return (0, frame[0] >> 4) if frame else None
    elif link == _LINKTYPE_LINUX_SLL:
        at, ethertype = 16, int.from_bytes(frame[14:16], "big")
    elif link == _LINKTYPE_LINUX_SLL2:
        at, ethertype = 20, int.from_bytes(frame[0:2], "big")
    elif link == _LINKTYPE_PPP:
        at = 2 if frame[:2] == b"\xff\x03" else 0  # address and control, when not compressed away
        ethertype, at = _PPP_IP.get(int.from_bytes(frame[at : at + 2], "big"), 0), at + 2
    elif link in (_LINKTYPE_NULL, _LINKTYPE_LOOP):
        family = int.from_bytes(frame[:4], "big" if link == _LINKTYPE_LOOP else "little")
        if family > 0xFFFF:  # a null header written on a host of the other byte order
            family = int.from_bytes(frame[:4], "big")
        at, ethertype = 4, _ETHERTYPE_IPV4 if family == 2 else _ETHERTYPE_IPV6 if family in _BSD_AF_INET6 else 0
    else:
        return None
    if ethertype == _ETHERTYPE_IPV4:
        return at, 4
    return (at, 6) if ethertype == _ETHERTYPE_IPV6 else None


def udp_datagram(link: int, frame: bytes) -> tuple[bytes, int, bytes, int, bytes] | None:
    """(source address, source port, destination address, destination port, payload) of a UDP datagram in
    an IPv4 or IPv6 frame, addresses as packed bytes; None for anything else, for a fragment of a datagram
    (not reassembled), and for a frame the capture cut before the UDP header."""
    start = ip_start(link, frame)
    if start is None:
        return None
    at, version = start
    if version == 4:
        if len(frame) < at + 20 or frame[at + 9] != _UDP or int.from_bytes(frame[at + 6 : at + 8], "big") & 0x3FFF:
            return None  # not UDP, or a fragment (more fragments, or an offset)
        header = (frame[at] & 0x0F) * 4
        total = int.from_bytes(frame[at + 2 : at + 4], "big")  # Ethernet pads short frames; 0 under TSO
        end = at + total if total else len(frame)
        source, destination, udp = frame[at + 12 : at + 16], frame[at + 16 : at + 20], at + header
    elif version == 6:
        if len(frame) < at + 40:
            return None
        next_header, udp = frame[at + 6], at + 40
        while next_header in _IPV6_EXTENSIONS and udp + 2 <= len(frame):
            next_header, udp = frame[udp], udp + 8 + frame[udp + 1] * 8
        if next_header != _UDP:
            return None
        total = int.from_bytes(frame[at + 4 : at + 6], "big")  # 0 for a jumbogram
        end = at + 40 + total if total else len(frame)
        source, destination = frame[at + 8 : at + 24], frame[at + 24 : at + 40]
    else:
        return None
    if len(frame) < udp + 8:
        return None
    ports = struct.unpack_from("!HH", frame, udp)
    # To the end of the IP packet, not by the UDP length: tshark 4.0 reads a damaged UDP length so too
    # (shared/captures' fuzz reproducer zeek_383379789-decrypt-crash.pcap).
    return source, ports[0], destination, ports[1], frame[udp + 8 : end]
