"""`qreplay --trace`: a run's packets, decrypted, as the sender's time series.

The capture is taken in the server's namespace (the download's sender) on the path device, or, of a
two-host run, on the client's host (the download's receiver: receiver_series reads the sender's state from
it, as from an upload's capture at the server); tshark decrypts it with the client's key log and prints
JSON, whose tree keeps every frame with its own packet (tshark's field output lists each field's values per
datagram, which cannot tell which ACK of a coalesced datagram was the 1-RTT one, nor give the length of a
STREAM frame sent without one).

Pure functions (``packets_from_tshark``, ``sender_series``, ``downsample``, ``flow_control_rule``) are
kept apart from the I/O (``capture``, ``decrypt``, ``sender_qlog``) so a test can feed them a capture.
"""

from __future__ import annotations

import bisect
import json
import socket
import statistics
import struct
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from common import pcap
from common.process import ns_command, start_process, stop_process
from common.tshark import (CAPTURE_BUFFER_MIB, dropped_packets, tshark_path, tshark_version, wait_until_capturing,
                           wait_until_in_capture)
from common import netns
from replay.link import PATH_DEVICE
from tparams.errors import ToolError
from tparams.knobs import CIPHER_SUITE_NAMES
from tparams.varint import read_varint
from tparams.frames import (
    FRAME_ACK,
    FRAME_ACK_ECN,
    FRAME_DATA_BLOCKED,
    FRAME_MAX_DATA,
    FRAME_MAX_STREAM_DATA,
    FRAME_MAX_STREAMS_BIDI,
    FRAME_STREAM_DATA_BLOCKED,
    FRAME_STREAMS_BLOCKED_BIDI,
    FRAME_STREAM_FIRST,
    FRAME_STREAM_LAST,
    NON_ACK_ELICITING,
)

MAX_POINTS = 20_000
#: an HTTP/3 response's HEADERS and DATA frame headers, at most (a 200's are a few dozen bytes): page_flights
RESPONSE_FRAMING = 1_000
#: RFC 9002 kPacketThreshold: a packet this many numbers below an acknowledged one counts as lost
PACKET_THRESHOLD = 3
DEFAULT_ACK_DELAY_EXPONENT = 3  # RFC 9000 18.2
MIN_DATAGRAM = 1200  # RFC 9000 14: the smallest datagram a path must carry, so the smallest MTU probe


@dataclass(frozen=True)
class StreamFrame:
    stream_id: int
    offset: int
    length: int
    fin: bool


@dataclass(frozen=True)
class AckFrame:
    largest: int
    ack_delay: int  # as sent: microseconds divided by 2^ack_delay_exponent
    ranges: tuple[tuple[int, int], ...]  # (smallest, largest) packet numbers acknowledged, highest first


@dataclass(frozen=True)
class Packet:
    """One 1-RTT packet as the capture saw it."""

    time: float  # capture time, epoch seconds
    down: bool  # server to client (the download's direction)
    number: int
    size: int  # the QUIC packet's bytes on the wire
    streams: tuple[StreamFrame, ...] = ()
    acks: tuple[AckFrame, ...] = ()
    max_data: tuple[int, ...] = ()
    max_stream_data: tuple[tuple[int, int], ...] = ()  # (stream id, limit)
    data_blocked: tuple[int, ...] = ()
    stream_data_blocked: tuple[tuple[int, int], ...] = ()
    max_streams: tuple[int, ...] = ()  # MAX_STREAMS (bidirectional) limits
    streams_blocked: tuple[int, ...] = ()  # STREAMS_BLOCKED (bidirectional) limits
    ack_eliciting: bool = True


@dataclass
class Decoded:
    """What the capture holds: the 1-RTT packets and the client's advertised parameters."""

    packets: list[Packet] = field(default_factory=list)
    client_params: dict[str, int] = field(default_factory=dict)
    #: the server's, from its EncryptedExtensions (a Handshake packet the key log decrypts)
    server_params: dict[str, int] = field(default_factory=dict)
    undecrypted: int = 0  # short-header packets tshark could not decrypt (joined ones apart)
    # Datagrams in which the sender put a short-header packet after another, so that the first runs to the
    # datagram's end and no receiver can decrypt either (Firefox 153 sent such a GSO segment: two 39-byte
    # packets as one 78-byte datagram behind a 95-byte one); counted by the end that sent them.
    joined: dict[str, int] = field(default_factory=lambda: {"client": 0, "server": 0})
    bursts_split: int = 0  # datagrams that reached the capture as one GSO burst (split_bursts)
    cipher: str | None = None  # the TLS 1.3 cipher suite of the server's ServerHello (IANA name)
    #: the connection IDs its packets carried (lowercase hex; either end's, long headers' and short headers'): what
    #: matches a connection of several clients to its sender's qlog (connection_qlog)
    cids: set[str] = field(default_factory=set)
    client_port: int | None = None  # the client's UDP port (a run of several clients: one a connection)


# --- from tshark's JSON to packets ---------------------------------------------------------------------

def _list(value) -> list:
    return value if isinstance(value, list) else [] if value is None else [value]


def _ack(frame: dict) -> AckFrame:
    largest = int(frame["quic.ack.largest_acknowledged"])
    low = largest - int(frame["quic.ack.first_ack_range"])
    ranges = [(low, largest)]
    # RFC 9000 19.3.1: each gap and range are counted down from the previous range's smallest
    for gap, length in zip(_list(frame.get("quic.ack.gap")), _list(frame.get("quic.ack.ack_range"))):
        high = low - int(gap) - 2
        low = high - int(length)
        ranges.append((low, high))
    return AckFrame(largest, int(frame["quic.ack.ack_delay"]), tuple(ranges))


def _stream(frame: dict) -> StreamFrame:
    if "quic.stream.length" in frame:
        length = int(frame["quic.stream.length"])
    else:  # no Length field: the frame runs to the packet's end, only its data says how far
        data = frame.get("quic.stream_data") or ""
        length = (len(data) + 1) // 3 if data else 0
    return StreamFrame(int(frame["quic.stream.stream_id"]), int(frame.get("quic.stream.offset", 0)), length,
                       frame.get("quic.stream.fin") in ("1", "True", True))


def _short_packet(quic: dict, when: float, down: bool) -> Packet | None:
    header = quic.get("quic.short")
    frames = _list(quic.get("quic.frame"))
    if not isinstance(header, dict) or not frames or "quic.packet_number" not in header:
        return None
    parts: dict[str, list] = {"streams": [], "acks": [], "max_data": [], "max_stream_data": [], "data_blocked": [],
                              "stream_data_blocked": [], "max_streams": [], "streams_blocked": []}
    eliciting = False
    for frame in frames:
        kind = int(frame["quic.frame_type"])
        eliciting |= kind not in NON_ACK_ELICITING
        if FRAME_STREAM_FIRST <= kind <= FRAME_STREAM_LAST:
            parts["streams"].append(_stream(frame))
        elif kind in (FRAME_ACK, FRAME_ACK_ECN):
            parts["acks"].append(_ack(frame))
        elif kind == FRAME_MAX_DATA:
            parts["max_data"].append(int(frame["quic.md.maximum_data"]))
        elif kind == FRAME_MAX_STREAM_DATA:
            parts["max_stream_data"].append((int(frame["quic.msd.stream_id"]),
                                             int(frame["quic.msd.maximum_stream_data"])))
        elif kind == FRAME_DATA_BLOCKED:
            parts["data_blocked"].append(int(frame["quic.sb.stream_data_limit"]))
        elif kind == FRAME_STREAM_DATA_BLOCKED:
            # tshark 4.0 files STREAM_DATA_BLOCKED's limit under DATA_BLOCKED's field name
            parts["stream_data_blocked"].append((int(frame["quic.sdb.stream_id"]),
                                                 int(frame["quic.sb.stream_data_limit"])))
        elif kind == FRAME_MAX_STREAMS_BIDI:
            parts["max_streams"].append(int(frame["quic.ms.max_streams"]))
        elif kind == FRAME_STREAMS_BLOCKED_BIDI:
            parts["streams_blocked"].append(int(frame["quic.sib.stream_limit"]))
    return Packet(when, down, int(header["quic.packet_number"]), int(quic.get("quic.packet_length", 0)),
                  ack_eliciting=eliciting, **{k: tuple(v) for k, v in parts.items()})


def _transport_parameters(tree, found: dict[str, int]) -> None:
    """The tls.quic.parameter.* integers anywhere under ``tree`` (the ClientHello's extension)."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            name = key.removeprefix("tls.quic.parameter.")
            if name != key and isinstance(value, str) and value.isdigit() and name not in ("type", "length", "value"):
                found.setdefault(name, int(value))
            else:
                _transport_parameters(value, found)
    elif isinstance(tree, list):
        for item in tree:
            _transport_parameters(item, found)


def decode_datagram(layers: dict, server_ip: str, decoded: Decoded) -> None:
    """Adds one datagram of tshark's JSON (``_source.layers``) to ``decoded``."""
    down = layers.get("ip", {}).get("ip.src") == server_ip
    when = float(layers["frame"]["frame.time_epoch"])
    for quic in _list(layers.get("quic")):
        header = quic.get("quic.short") if isinstance(quic.get("quic.short"), dict) else quic
        decoded.cids.update(cid.replace(":", "").lower() for cid in (header.get("quic.dcid"), quic.get("quic.scid"))
                            if isinstance(cid, str) and len(cid) >= 3 * CID_PROBE - 1)
        if "quic.short" in quic:
            packet = _short_packet(quic, when, down)
            if packet is not None:
                decoded.packets.append(packet)
            elif _joined(quic["quic.short"]):
                decoded.joined["server" if down else "client"] += 1
            else:
                decoded.undecrypted += 1
        elif not down and not decoded.client_params:
            _transport_parameters(quic, decoded.client_params)
        elif down and decoded.cipher is None and (code := _first(quic, "tls.handshake.ciphersuite")):
            decoded.cipher = CIPHER_SUITE_NAMES.get(int(code, 16), code)
        elif down and not decoded.server_params:
            _transport_parameters(quic, decoded.server_params)


def _joined(header) -> bool:
    """Whether an undecryptable short-header packet holds another packet to the same connection ID: its
    protected payload repeats the whole DCID (of at least CID_PROBE bytes; a shorter one could repeat
    by chance)."""
    if not isinstance(header, dict):
        return False
    dcid, payload = header.get("quic.dcid", ""), header.get("quic.protected_payload", "")
    return len(dcid) >= 3 * CID_PROBE - 1 and dcid in payload  # tshark's bytes: hex pairs joined by colons


def _first(tree, key: str) -> str | None:
    """The first value of field ``key`` anywhere under ``tree`` (the server's Initial holds one ServerHello)."""
    if isinstance(tree, dict):
        for name, value in tree.items():
            found = value if name == key and isinstance(value, str) else _first(value, key)
            if found:
                return found
    elif isinstance(tree, list):
        return next((found for item in tree if (found := _first(item, key))), None)
    return None


def _datagrams(lines: Iterable[str]) -> Iterator[dict]:
    """The ``_source.layers`` of each datagram of ``tshark -T json --no-duplicate-keys`` output, one at a time (the
    whole document of a long run would not fit in memory as one object)."""
    chunk: list[str] = []
    for line in lines:
        if line.startswith("  {"):
            chunk = [line]
        elif line.startswith("  }"):
            chunk.append("}")
            yield json.loads("".join(chunk))["_source"]["layers"]
            chunk = []
        elif chunk:
            chunk.append(line)


def packets_from_tshark(lines: Iterable[str], server_ip: str) -> Decoded:
    """tshark's JSON output (``_datagrams``) as one connection's packets."""
    decoded = Decoded()
    for layers in _datagrams(lines):
        decode_datagram(layers, server_ip, decoded)
    return decoded


def connections_from_tshark(lines: Iterable[str], server_ip: str) -> list[Decoded]:
    """tshark's JSON output as the packets of each connection, told apart by the client's UDP port (several clients
    in one namespace, each its own socket), in the order their first datagrams came; the bursts split and the
    cipher are the capture's (each connection's its own too, as it read them)."""
    found: dict[int | None, Decoded] = {}
    for layers in _datagrams(lines):
        udp = layers.get("udp") or {}
        down = layers.get("ip", {}).get("ip.src") == server_ip
        port = udp.get("udp.dstport" if down else "udp.srcport")
        port = int(port) if isinstance(port, str) and port.isdigit() else None
        decode_datagram(layers, server_ip, found.setdefault(port, Decoded(client_port=port)))
    return list(found.values())


# --- bursts merged on the way in ------------------------------------------------------------------------

# A short-header packet: header form 0 (header protection leaves it; the fixed bit may be greased,
# RFC 9287), then the DCID. A long-header one: form 1, the version, the DCID's length, the DCID.
MIN_SHORT_PACKET = 21  # first byte, a connection ID, a packet number byte, an AEAD tag
CID_PROBE = 4  # bytes of the DCID compared: the shortest connection IDs stacks choose
LONG_DCID_AT = 6  # first byte, version (4), DCID length


def _burst_dcid(payload: bytes) -> tuple[bytes, bytes | None]:
    """(DCID bytes every segment repeats, the version of a long-header first packet or None)."""
    if not payload[0] & 0x80:
        return payload[1:1 + CID_PROBE], None
    return payload[LONG_DCID_AT:LONG_DCID_AT + min(payload[LONG_DCID_AT - 1], 8)], payload[1:5]


def _segment_starts(payload: bytes, at: int, dcid: bytes, version: bytes | None) -> bool:
    """Whether a packet to ``dcid`` begins at ``at``: a short-header one, or a long-header one of ``version``
    (a client's handshake datagrams and its first 1-RTT one can leave as one burst)."""
    if payload[at] & 0x80:
        return version is not None and payload[at + 1:at + 5] == version and \
            payload[at + LONG_DCID_AT:at + LONG_DCID_AT + len(dcid)] == dcid
    return payload[at + 1:at + 1 + len(dcid)] == dcid


def split_burst(payload: bytes) -> list[bytes]:
    """The datagrams of one UDP GSO burst, or ``[payload]``.

    linkem writes datagrams of one flow that are due together as one GSO burst, which the receiving
    namespace's capture sees whole (its kernel splits it only after the capture tap); tshark would take
    it for one packet and fail to decrypt it (a browser's ClientHello, padded into two Initial datagrams
    that left together, was lost so, and with it every key). The segments are equally long except the
    last, and each starts with a packet to the same DCID, so the first repeat of the DCID at a packet's
    start gives the segment size. (Several packets coalesced in one datagram may be cut apart at a
    packet's start too: each part is still whole packets.)"""
    if len(payload) < 2 * MIN_SHORT_PACKET:
        return [payload]
    dcid, version = _burst_dcid(payload)
    if len(dcid) < CID_PROBE:
        return [payload]
    found = payload.find(dcid, MIN_SHORT_PACKET + 1)
    while found > 0:
        # A long-header first packet's repeat at a long header first: its DCID's byte before may pass for a
        # short header's first byte.
        for size in (found - LONG_DCID_AT, found - 1) if version else (found - 1,):
            starts = range(0, len(payload), size)
            if all(_segment_starts(payload, i, dcid, version) for i in starts):
                return [payload[i:i + size] for i in starts]
        found = payload.find(dcid, found + 1)
    return [payload]


def handshake_part(payload: bytes) -> bytes:
    """The server's first flight (a datagram with an Initial) cut before a short-header packet coalesced behind its
    long-header ones (its 0.5-RTT packet); any other datagram as it is.

    tshark 4.0 never decrypts that packet (quiche's first flight to Chromium, 10 of 10 captures, 2026-11-28:
    wrong header protection, a random key-phase bit), and where the bit reads 1 it takes every later packet
    of the server for the next key phase and decrypts none (7 of those 10); without it, all decrypt. What
    every trace loses so: the server's opening frames sent before any request reached it (HTTP/3 SETTINGS,
    new connection IDs), no byte of a response."""
    at, initial = 0, False
    while at < len(payload) and payload[at] & 0x80:
        kind = (payload[at] >> 4) & 0x03
        initial |= kind == 0
        if payload[at + 1:at + 5] == b"\0\0\0\0" or kind == 3 or at + 6 > len(payload):
            return payload  # version negotiation, Retry: no length to step over
        cursor = at + 6 + payload[at + 5]
        cursor += 1 + (payload[cursor] if cursor < len(payload) else 0)  # the SCID
        if kind == 0 and (token := read_varint(payload, cursor, len(payload))):  # an Initial's token
            cursor = token[1] + token[0]
        length = read_varint(payload, cursor, len(payload))
        if length is None:
            return payload
        at = length[1] + length[0]
    # Only the first flight (an Initial in it): later Handshake packets come coalesced with 1-RTT ones that carry
    # the response and MAX_STREAMS (quic-go's do), which tshark decrypts and the trace needs.
    return payload[:at] if initial and 0 < at < len(payload) else payload


def split_bursts(data: bytes, server_ip: str | None = None) -> tuple[bytes, int]:
    """A pcap file (libpcap format, as dumpcap -P writes it) with every IPv4 UDP burst split into its
    datagrams (checksum 0: none, as IPv4 allows), and each of ``server_ip``'s datagrams cut to its
    handshake_part; returns the new file and how many bursts it split."""
    link = pcap.linktype(data)
    if link is None:
        return data, 0
    out, split = [data[:pcap.FILE_HEADER.size]], 0
    for _, when, _, frame, original in pcap.CaptureReader.in_memory(data):
        seconds, micros = divmod(round(when * 1_000_000), 1_000_000)  # exact: the file's clock is microseconds
        ip, version = pcap.ip_start(link, frame) or (0, None)
        if version != 4 or len(frame) < ip + 28 or frame[ip + 9] != 17 or len(frame) != original:
            out.append(pcap.RECORD_HEADER.pack(seconds, micros, len(frame), original) + frame)
            continue
        header = (frame[ip] & 0x0F) * 4
        udp = ip + header
        parts = split_burst(frame[udp + 8:])
        split += len(parts) > 1
        if server_ip and socket.inet_ntoa(frame[ip + 12:ip + 16]) == server_ip:
            parts = [handshake_part(part) for part in parts]
        for part in parts:
            ip_header = bytearray(frame[ip:udp])
            struct.pack_into("!H", ip_header, 2, header + 8 + len(part))
            struct.pack_into("!H", ip_header, 10, 0)
            struct.pack_into("!H", ip_header, 10, pcap.ipv4_checksum(bytes(ip_header)))
            out.append(pcap.record(seconds, micros, frame[:ip] + ip_header + frame[udp:udp + 4]
                                   + struct.pack("!HH", 8 + len(part), 0) + part))
    return b"".join(out), split


# --- the sender's time series ---------------------------------------------------------------------

@dataclass
class _Sent:
    time: float
    size: int
    stream_bytes: int
    eliciting: bool


def download_stream(packets: list[Packet]) -> int | None:
    """The stream the server sent the most bytes on."""
    totals: dict[int, int] = {}
    for packet in packets:
        if packet.down:
            for frame in packet.streams:
                totals[frame.stream_id] = totals.get(frame.stream_id, 0) + frame.length
    return max(totals, key=totals.get) if totals else None


def upload_stream(packets: list[Packet]) -> int | None:
    """The client's bidirectional stream that carried the most bytes (an upload's)."""
    totals: dict[int, int] = {}
    for packet in packets:
        if not packet.down:
            for frame in packet.streams:
                if frame.stream_id % 4 == 0:
                    totals[frame.stream_id] = totals.get(frame.stream_id, 0) + frame.length
    return max(totals, key=totals.get) if totals else None


def sender_series(packets: list[Packet], client_params: dict[str, int],
                  server_params: dict[str, int] | None = None) -> tuple[list[dict], dict]:
    """One point per 1-RTT packet, t from the request's arrival at the server, with the sender's state
    after it, and a summary (download stream, t0, the client's windows and ack_delay_exponent).

    Of every stream besides the download stream: the bytes a packet sent on all streams, and the requests'
    streams (the client's bidirectional streams it has opened, against the credit the server gave: its
    initial_max_streams_bidi, raised by MAX_STREAMS), so that a run of many requests shows its transfer's
    whole span and the time its requests waited for a stream.

    Bytes in flight are the packet bytes of ack-eliciting packets neither acknowledged nor below the
    largest acknowledged by PACKET_THRESHOLD (RFC 9002's packet threshold; the time threshold is not
    modelled), in the congestion window's unit. Credits start at the client's initial_max_data and
    initial_max_stream_data_bidi_local and only grow (a repeated or reordered update lowers nothing)."""
    stream = download_stream(packets)
    request = next((p for p in packets if not p.down and any(f.stream_id == stream for f in p.streams)), None)
    t0 = request.time if request else (packets[0].time if packets else 0.0)
    exponent = client_params.get("ack_delay_exponent", DEFAULT_ACK_DELAY_EXPONENT)
    conn_credit = client_params.get("initial_max_data")
    stream_credit = client_params.get("initial_max_stream_data_bidi_local")
    streams_credit = (server_params or {}).get("initial_max_streams_bidi")
    opened: set[int] = set()
    outstanding: dict[int, _Sent] = {}
    sent_max = sent_total = acked = in_flight = 0
    largest_acked = -1
    points = []
    for packet in packets:
        point = {"t_s": packet.time - t0, "direction": "down" if packet.down else "up",
                 "packet_number": packet.number, "packet_bytes": packet.size}
        if packet.down:
            own = [f for f in packet.streams if f.stream_id == stream]
            nbytes = sum(f.length for f in own)
            sent_total += nbytes
            sent_max = max([sent_max, *(f.offset + f.length for f in own)])
            outstanding[packet.number] = _Sent(packet.time, packet.size, nbytes, packet.ack_eliciting)
            if packet.ack_eliciting:
                in_flight += packet.size
            point["stream_bytes"] = nbytes or None
            point["stream_bytes_all"] = sum(f.length for f in packet.streams) or None
            if packet.max_streams:
                point["max_streams"] = max(packet.max_streams)
                streams_credit = max(streams_credit or 0, point["max_streams"])
            blocked = [limit for sid, limit in packet.stream_data_blocked if sid == stream]
            point["data_blocked"] = max(packet.data_blocked) if packet.data_blocked else None
            point["stream_data_blocked"] = max(blocked) if blocked else None
        else:
            opened.update(f.stream_id for f in packet.streams if f.stream_id % 4 == 0)  # client-initiated bidi
            if packet.streams_blocked:
                point["streams_blocked"] = max(packet.streams_blocked)
            for ack in packet.acks:
                if ack.largest in outstanding and ack.largest > largest_acked:
                    # RFC 9002 5.1: a sample only when the largest acknowledged is newly acknowledged
                    rtt = packet.time - outstanding[ack.largest].time - ack.ack_delay * 2 ** exponent / 1e6
                    point["rtt_ms"] = rtt * 1000
                for low, high in ack.ranges:
                    for number in [n for n in outstanding if low <= n <= high]:
                        sent = outstanding.pop(number)
                        acked += sent.stream_bytes
                        in_flight -= sent.size if sent.eliciting else 0
                largest_acked = max(largest_acked, ack.largest)
            for number in [n for n in outstanding if n <= largest_acked - PACKET_THRESHOLD]:
                sent = outstanding.pop(number)
                in_flight -= sent.size if sent.eliciting else 0
            updates = [limit for sid, limit in packet.max_stream_data if sid == stream]
            if packet.max_data:
                point["max_data"] = max(packet.max_data)
                conn_credit = max(conn_credit or 0, point["max_data"])
            if updates:
                point["max_stream_data"] = max(updates)
                stream_credit = max(stream_credit or 0, point["max_stream_data"])
        point.update(sent_max=sent_max, sent_total=sent_total, acked=acked, in_flight=in_flight,
                     conn_credit=conn_credit, stream_credit=stream_credit, streams_open=len(opened),
                     streams_credit=streams_credit)
        points.append(point)
    summary = {"download_stream": stream, "t0_epoch": t0, "ack_delay_exponent": exponent,
               "initial_max_data": client_params.get("initial_max_data"),
               "initial_max_stream_data_bidi_local": client_params.get("initial_max_stream_data_bidi_local")}
    return points, summary


def _as_known(times: list[float], values: list, when: float, before=None):
    """The last of ``values`` (their ``times`` ascending) at or before ``when``, else ``before``."""
    at = bisect.bisect_right(times, when)
    return values[at - 1] if at else before


@dataclass(frozen=True)
class Receiver:
    """Which end a capture at the receiver is at, as data for receiver_series: the direction the data flows
    (``down``: the server's packets), the stream it flows on, and the parameter names of the receiver's initial
    credits (the stream's: the receiver's bidi_local for a stream the client opened and the client receives on,
    bidi_remote for one the server receives on) and of the sender's ACKs' ack_delay_exponent."""

    name: str  # "client" | "server": the receiver, whose capture it is
    down: bool  # the data's direction: the server's packets (a download) or the client's (an upload)
    stream_credit_param: str

    def stream(self, packets: list[Packet]) -> int | None:
        return download_stream(packets) if self.down else upload_stream(packets)

    def params(self, client_params: dict[str, int], server_params: dict[str, int]) -> tuple[dict, dict]:
        """(the receiver's parameters, the sender's)."""
        return (client_params, server_params) if self.name == "client" else (server_params, client_params)


#: an upload's receiver is the server (the testbed's capture); a download's the client (a two-host run's capture,
#: taken on the client's host)
AT_SERVER = Receiver("server", False, "initial_max_stream_data_bidi_remote")
AT_CLIENT = Receiver("client", True, "initial_max_stream_data_bidi_local")


def receiver_series(packets: list[Packet], client_params: dict[str, int], server_params: dict[str, int] | None,
                    receiver: Receiver) -> tuple[list[dict], dict]:
    """A sender's series in sender_series' form, so that replay.limits reads it alike, from the capture at the
    receiver (``receiver``: an upload's at the server, AT_SERVER; a download's at the client, AT_CLIENT): one
    point per 1-RTT packet, t from the request's arrival at the sender as the receiver's clock can tell it.

    The capture sees what the sender did one way later and what it learned one way earlier: a data packet
    reaching the receiver at t left the sender about one way before, when the sender knew of the receiver's
    ACKs and credits sent one way before that, at t less the round trip. So the sender's state after a point is,
    with the run's smallest RTT sample (the receiver's packets the sender's ACKs covered, its ack delay taken
    off, as sender_series' samples): ``sent_max`` the highest offset of the data stream arrived, ``in_flight``
    the ack-eliciting packet bytes arrived less those the receiver's ACKs had covered (or put 3 packet numbers
    below one covered) by t less that RTT, ``acked`` likewise the stream bytes they covered, and
    ``stream_credit`` / ``conn_credit`` the receiver's MAX_STREAM_DATA of the data stream and MAX_DATA limits
    (from its initial credit for the stream and its initial_max_data) sent by then. DATA_BLOCKED and
    STREAM_DATA_BLOCKED are the sender's, on the packets that carry them. Bytes still queued on the way have
    not arrived, so in flight never exceeds what the path holds: a link's queue on the data's way does not show.

    t = 0: where the stream's first packet is the data's (an upload's PUT opens the stream its body follows),
    its arrival; where it is the receiver's request (a download's), its departure plus that smallest RTT: its
    arrival at the sender, on the clock of the data's arrivals (one way later), so the time the sender took to
    answer stays in the transfer as the sender's own capture would have it."""
    receiver_params, sender_params = receiver.params(client_params, server_params or {})
    stream = receiver.stream(packets)
    exponent = sender_params.get("ack_delay_exponent", DEFAULT_ACK_DELAY_EXPONENT)
    # The receiver's side first: when it sent each packet (for the sender's ACKs' RTT samples), and what its ACKs
    # and credits had told the sender by each time.
    sent_back = {p.number: p.time for p in packets if p.down != receiver.down}
    rtts: dict[int, float] = {}  # index of the sender's packet -> its RTT sample, ms
    largest = -1
    for i, packet in enumerate(packets):
        if packet.down == receiver.down:
            for ack in packet.acks:
                if ack.largest in sent_back and ack.largest > largest:
                    rtts[i] = (packet.time - sent_back[ack.largest] - ack.ack_delay * 2 ** exponent / 1e6) * 1000
                largest = max(largest, ack.largest)
    positive = [r for r in rtts.values() if r > 0]
    lag = min(positive) / 1000 if positive else 0.0
    opening = next((p for p in packets if any(f.stream_id == stream for f in p.streams)), None)
    t0 = (opening.time + (0.0 if opening.down == receiver.down else lag)) if opening else \
        (packets[0].time if packets else 0.0)
    arrived: dict[int, _Sent] = {}  # the sender's packets the receiver had received and not yet covered by an ACK
    told_at: list[float] = []  # the times of the receiver's packets, and after each what it had told the sender:
    told: list[tuple[int, int, int | None, int | None]] = []  # (packet bytes and stream bytes out of flight, credits)
    gone = gone_stream = 0
    initial = (0, 0, receiver_params.get(receiver.stream_credit_param), receiver_params.get("initial_max_data"))
    _, _, stream_credit, conn_credit = initial
    covered = -1
    for packet in packets:
        if packet.down == receiver.down:
            arrived[packet.number] = _Sent(packet.time, packet.size,
                                           sum(f.length for f in packet.streams if f.stream_id == stream),
                                           packet.ack_eliciting)
            continue
        for ack in packet.acks:
            for low, high in ack.ranges:
                for number in [n for n in arrived if low <= n <= high]:
                    sent = arrived.pop(number)
                    gone += sent.size if sent.eliciting else 0
                    gone_stream += sent.stream_bytes
            covered = max(covered, ack.largest)
        for number in [n for n in arrived if n <= covered - PACKET_THRESHOLD]:
            sent = arrived.pop(number)
            gone += sent.size if sent.eliciting else 0
        limits = [limit for sid, limit in packet.max_stream_data if sid == stream]
        stream_credit = max([stream_credit or 0, *limits]) if limits else stream_credit
        conn_credit = max([conn_credit or 0, *packet.max_data]) if packet.max_data else conn_credit
        told_at.append(packet.time)
        told.append((gone, gone_stream, stream_credit, conn_credit))
    sending, back = ("down", "up") if receiver.down else ("up", "down")
    points = []
    sent_max = sent_total = eliciting_bytes = 0
    for i, packet in enumerate(packets):
        point = {"t_s": packet.time - t0, "direction": sending if packet.down == receiver.down else back,
                 "packet_number": packet.number, "packet_bytes": packet.size}
        if packet.down == receiver.down:
            own = [f for f in packet.streams if f.stream_id == stream]
            sent_total += sum(f.length for f in own)
            sent_max = max([sent_max, *(f.offset + f.length for f in own)])
            eliciting_bytes += packet.size if packet.ack_eliciting else 0
            point["stream_bytes"] = sum(f.length for f in own) or None
            point["stream_bytes_all"] = sum(f.length for f in packet.streams) or None
            blocked = [limit for sid, limit in packet.stream_data_blocked if sid == stream]
            point["data_blocked"] = max(packet.data_blocked) if packet.data_blocked else None
            point["stream_data_blocked"] = max(blocked) if blocked else None
            if i in rtts:
                point["rtt_ms"] = rtts[i]
        else:
            limits = [limit for sid, limit in packet.max_stream_data if sid == stream]
            point["max_stream_data"] = max(limits) if limits else None
            point["max_data"] = max(packet.max_data) if packet.max_data else None
        out, out_stream, stream_known, conn_known = _as_known(told_at, told, packet.time - lag, initial)
        point.update(sent_max=sent_max, sent_total=sent_total, acked=out_stream,
                     in_flight=max(0, eliciting_bytes - out), conn_credit=conn_known, stream_credit=stream_known)
        points.append(point)
    summary = {"t0_epoch": t0, "ack_delay_exponent": exponent}
    if receiver.down:  # a download's, as sender_series' summary names them
        summary.update(download_stream=stream, initial_max_data=client_params.get("initial_max_data"),
                       initial_max_stream_data_bidi_local=client_params.get("initial_max_stream_data_bidi_local"))
    return points, summary


def upload_series(packets: list[Packet], client_params: dict[str, int],
                  server_params: dict[str, int] | None = None) -> tuple[list[dict], dict]:
    """An upload's sender series (the client the sender, the data ``up``) from the server's capture:
    receiver_series at the server."""
    return receiver_series(packets, client_params, server_params, AT_SERVER)


def receiver_credit(packets: list[Packet], server_params: dict[str, int]) -> dict:
    """What an upload's receiver (the server) granted, over time: its MAX_STREAM_DATA limits for the upload
    stream (the client's bidirectional stream that carried the most bytes) and its MAX_DATA limits, each with
    the bytes received by then, t from the upload's first byte. ``credit`` is a limit less the bytes received
    when it was sent: what the client may still send, i.e. the window the server is running at that moment.
    A credit above the initial window the server advertised is a window grown mid-connection (auto-tuning),
    which a fixed-window model leaves out."""
    stream = upload_stream(packets)
    t0 = next((p.time for p in packets if not p.down and any(f.stream_id == stream for f in p.streams)), None)
    stream_window = server_params.get("initial_max_stream_data_bidi_remote")
    conn_window = server_params.get("initial_max_data")
    stream_at = conn_at = 0  # highest offset reached on the upload stream; stream bytes of every stream
    highest: dict[int, int] = {}
    stream_updates: list[tuple[float, int, int]] = []  # (t, limit, credit)
    conn_updates: list[tuple[float, int, int]] = []
    for packet in packets:
        if packet.down:
            t = round(packet.time - t0, 6) if t0 is not None else None
            stream_updates += [(t, limit, limit - stream_at) for sid, limit in packet.max_stream_data if sid == stream]
            conn_updates += [(t, limit, limit - conn_at) for limit in packet.max_data]
            continue
        for frame in packet.streams:
            end = frame.offset + frame.length
            if end > highest.get(frame.stream_id, 0):
                conn_at += end - highest.get(frame.stream_id, 0)
                highest[frame.stream_id] = end
        stream_at = highest.get(stream, 0) if stream is not None else 0
    largest_stream = max((c for _, _, c in stream_updates), default=None)
    largest_conn = max((c for _, _, c in conn_updates), default=None)

    def least_left(updates: list[tuple[float, int, int]], initial: int | None) -> int | None:
        # what the client still had when each update left the server (the limit before it less the bytes
        # received): near 0, the client had used its window; far above, with updates more than a round trip
        # apart (so the client knew the limit before), something else held it back (its congestion window, its
        # pacing). A receiver updating many times a round trip leaves credit here that the client did not know
        # of yet: read the updates' spacing beside it.
        limits = [initial, *(limit for _, limit, _ in updates)]
        left = [before - (limit - credit) for before, (_, limit, credit) in zip(limits, updates) if before is not None]
        return min(left, default=None)

    return {"upload_stream": stream, "upload_bytes": stream_at, "initial_stream_window": stream_window,
            "initial_conn_window": conn_window, "max_stream_data_updates": len(stream_updates),
            "max_data_updates": len(conn_updates), "largest_stream_credit": largest_stream,
            "largest_conn_credit": largest_conn,
            "least_stream_credit_left": least_left(stream_updates, stream_window),
            "least_conn_credit_left": least_left(conn_updates, conn_window),
            "stream_window_grew": None if largest_stream is None or stream_window is None
            else largest_stream > stream_window,
            "conn_window_grew": None if largest_conn is None or conn_window is None else largest_conn > conn_window,
            "stream_credit_over_time": stream_updates, "conn_credit_over_time": conn_updates}


def page_flights(packets: list[Packet], delay_ms: float, object_bytes: int) -> dict:
    """What a server did with a page's requests for objects of ``object_bytes``, from a capture at its end
    (scripts/page_load_senders.py; the impact prediction's page load starts from the library's initial window).

    The objects' requests are the client-opened bidirectional streams whose responses carry an object's bytes
    (``object_bytes`` to ``object_bytes`` + RESPONSE_FRAMING of stream data: the page itself, its favicon's 404
    and such are smaller or larger). t0 is the first object request's arrival. The first flight is the wire bytes
    of the server's ack-eliciting packets sent from t0 until the first ACK arrived that covers a packet of the
    objects' responses: what its congestion window let it send before any was acknowledged. ``bytes_per_round``: the
    objects' stream bytes sent in each ``delay_ms`` after t0 (the path's round trip, the delay being on the
    server-to-client direction alone)."""
    requested: dict[int, float] = {}
    answered: dict[int, int] = {}
    streams_blocked = max_streams_updates = 0
    for p in packets:
        if p.down:
            max_streams_updates += len(p.max_streams)
        else:
            streams_blocked += len(p.streams_blocked)
        for f in p.streams:
            if f.stream_id % 4 == 0:
                if not p.down:
                    requested.setdefault(f.stream_id, p.time)
                else:
                    answered[f.stream_id] = answered.get(f.stream_id, 0) + f.length
    opened = {s: t for s, t in requested.items()
              if object_bytes <= answered.get(s, 0) <= object_bytes + RESPONSE_FRAMING}
    if not opened:
        return {}
    t0 = min(opened.values())
    rtt_s = delay_ms / 1000
    first_answer: dict[int, float] = {}
    last_sent, first_number, acked_at = t0, None, None
    flight: list[Packet] = []
    rounds: list[int] = []
    for p in packets:  # in capture order: the first flight is what left before the first response's ACK came back
        if p.time < t0:
            continue
        if not p.down:
            if acked_at is None and first_number is not None and \
                    any(high >= first_number for a in p.acks for _, high in a.ranges):
                acked_at = p.time
            continue
        if p.ack_eliciting and acked_at is None:
            flight.append(p)
        own = [f for f in p.streams if f.stream_id in opened]
        if not own:
            continue
        for f in own:
            first_answer.setdefault(f.stream_id, p.time)
        first_number = p.number if first_number is None else first_number
        last_sent = max(last_sent, p.time)
        if sent := sum(f.length for f in own):
            k = int((p.time - t0) / rtt_s)
            rounds += [0] * (k + 1 - len(rounds))
            rounds[k] += sent
    ttfb = [(first_answer[s] - opened[s]) * 1000 for s in first_answer]
    return {"requests_seen": len(opened),
            "request_spread_ms": round((max(opened.values()) - t0) * 1000, 1),
            "streams_blocked": streams_blocked, "max_streams_updates": max_streams_updates,
            "first_flight_bytes": sum(p.size for p in flight) if acked_at else None,
            "first_flight_packets": len(flight) if acked_at else None,
            # how long it took to send (a pacer spreads a window over most of the round trip)
            "first_flight_ms": round((flight[-1].time - flight[0].time) * 1000, 1) if acked_at and flight else None,
            # from the flight's last packet to the ACK: a sender whose window is full waits, one that its pacer or
            # its CPU held back was still sending when the ACK came (a packet's spacing before it)
            "first_flight_wait_ms": round((acked_at - flight[-1].time) * 1000, 1) if acked_at and flight else None,
            "response_bytes": sum(rounds), "bytes_per_round": ";".join(map(str, rounds)),
            "rounds_to_last_byte": len(rounds),
            "ttfb_ms_median": round(statistics.median(ttfb), 1) if ttfb else None,
            "ttfb_ms_max": round(max(ttfb), 1) if ttfb else None,
            "last_byte_sent_ms": round((last_sent - t0) * 1000, 1)}


def _qlog_records(lines: Iterable[str]) -> Iterator[tuple[str, dict, float]]:
    """(name, data, time) of each event of a qlog (JSON-SEQ, any of the stacks' drafts; or one JSON document
    of traces, aioquic's, whose recovery metrics name the congestion window ``cwnd``)."""
    for line in lines:
        line = line.strip().lstrip("\x1e")
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by the process's end
        for event in [e for trace in record["traces"] for e in trace.get("events", ())] \
                if isinstance(record.get("traces"), list) else [record]:
            if event.get("time") is not None:
                data = event.get("data") or {}
                if "cwnd" in data and "congestion_window" not in data:
                    data = {**data, "congestion_window": data["cwnd"]}
                yield event.get("name", ""), data, float(event["time"])


def _one_rtt(data: dict) -> bool:
    return (data.get("header") or {}).get("packet_type") in ("1RTT", "1rtt")


def _one_rtt_sent(name: str, data: dict) -> bool:
    return name.endswith("packet_sent") and _one_rtt(data)


def qlog_events(lines: Iterable[str]) -> tuple[dict[int, float], list[tuple[float, int]],
                                                 dict[tuple[str, int], tuple[int, int]],
                                                 dict[int, tuple[float, int | None]]]:
    """From a sender's qlog: when each 1-RTT packet number was sent, (time, congestion window) of each
    recovery metrics update, in the qlog's own time unit, and for each 1-RTT packet it logged, by direction
    and packet number, the window the stack had for it as (that update's place among the updates, window): a
    packet it sent ("down"), the window it sent it under (its last update logged before the packet: sending
    moves no window); a packet it received ("up"), the window once it had handled it (its last update logged
    before its next packet event: ngtcp2 and quiche log a packet's update after the packet, quic-go before
    it, where the received packet's own update is the one logged before its next); and for each 1-RTT packet it
    received, by packet number, (when it logged reading it, the number of the first 1-RTT packet it sent after
    it, or None)."""
    sent: dict[int, float] = {}
    windows: list[tuple[float, int]] = []
    handled: dict[tuple[str, int], tuple[int, int]] = {}
    reads: dict[int, tuple[float, int | None]] = {}
    waiting: list[int] = []  # read, no packet sent since
    received = None  # the received packet the updates since are after
    for name, data, when in _qlog_records(lines):
        if name.endswith(("packet_sent", "packet_received")):
            if received is not None and windows:
                handled.setdefault(received, (len(windows), windows[-1][1]))
            received = None
            number = data["header"].get("packet_number") if _one_rtt(data) else None
            if number is None:
                continue
            if name.endswith("packet_received"):
                received = ("up", number)
                if number not in reads:
                    reads[number] = (when, None)
                    waiting.append(number)
            else:
                sent.setdefault(number, when)
                if windows:
                    handled.setdefault(("down", number), (len(windows), windows[-1][1]))
                for read in waiting:
                    reads[read] = (reads[read][0], number)
                waiting = []
        elif name.endswith("metrics_updated") and isinstance(data.get("congestion_window"), int):
            windows.append((when, data["congestion_window"]))
    if received is not None and windows:
        handled.setdefault(received, (len(windows), windows[-1][1]))
    return sent, windows, handled, reads


def _packet_length(data: dict) -> int:
    """A qlog packet event's packet length: its raw length (tquic's, aioquic's), else its header's (quinn's)."""
    raw = data.get("raw") if isinstance(data.get("raw"), dict) else {}
    return raw.get("length") or (data.get("header") or {}).get("length") or 0


def qlog_window_share(lines: Iterable[str], mss: int, ends: tuple[int, int] | None = None,
                      omits: str | None = None) -> float | None:
    """The stack's own account of its congestion window, for holding a breakdown against: the share of its
    transfer (the request's arrival, its first 1-RTT packet received with a frame of a client-initiated
    bidirectional stream, to its last 1-RTT packet sent carrying stream bytes: the breakdown's span) during
    which the latest metrics update it wrote had bytes in flight within ``mss`` of its congestion window. None
    where its qlog reports neither. Neither end is the first stream frame the server sent: its HTTP/3 control
    and QPACK streams go out at the handshake (ngtcp2's at its qlog's time 0, 0.5-RTT data), one round trip
    before the request, which held ngtcp2's share 2-5 points lower (of the 2-21 it lay below the capture's);
    and over all its 1-RTT packets its last (ACKs) come after the body, which held quic-go's 8-12 points lower
    (both 2026-11-28). A qlog that names no frames (quinn-proto 0.11's: a packet's number and type only)
    marks the span by ``ends``, the 1-RTT packet numbers of the request received and of the last packet sent
    with stream bytes (limits.span_packets: the breakdown's span's ends on the capture).

    ``omits`` (the stack's ``qlog_in_flight_omits``) adds to the bytes in flight what its updates leave out:
    "probe", an MTU probe it sent, until its next update (a 1-RTT packet of at least MIN_DATAGRAM bytes logged
    sent after the last update: a probe is larger than the path's MTU, what else goes unreported, ACKs, far
    smaller); "sent", the packet an update is logged right after (in flight, by its frames: any but ACK),
    until the next update."""
    requested = None
    sent_times: list[float] = []
    by_number: dict[tuple[str, int], float] = {}  # (sent or received, 1-RTT packet number): when first logged
    updates: list[tuple[float, int, int]] = []  # (time, window, in flight), each as last reported
    window = in_flight = None
    unlogged = 0  # bytes in flight the last update left out
    just_sent = 0  # the bytes of the in-flight 1-RTT packet the last event logged sent, else 0
    for name, data, when in _qlog_records(lines):
        streams = [f.get("stream_id") for f in data.get("frames") or () if f.get("frame_type") == "stream"]
        sent = _one_rtt_sent(name, data)
        if name.endswith(("packet_sent", "packet_received")) and _one_rtt(data):
            by_number.setdefault((name.rsplit(":", 1)[-1], data["header"].get("packet_number")), when)
        length = _packet_length(data) if sent else 0
        if omits == "probe" and sent and length >= MIN_DATAGRAM and window is not None and in_flight is not None:
            unlogged += length
            updates.append((when, window, in_flight + unlogged))
        if sent and streams:
            sent_times.append(when)
        elif name.endswith("packet_received") and requested is None and any(
                isinstance(s, int) and s % 4 == 0 for s in streams):
            requested = when
        elif name.endswith("metrics_updated"):
            window = data.get("congestion_window", window)
            in_flight = data.get("bytes_in_flight", in_flight)
            unlogged = just_sent if omits == "sent" else 0
            if window is not None and in_flight is not None:
                updates.append((when, window, in_flight + unlogged))
        just_sent = length if sent and any(f.get("frame_type") != "ack" for f in data.get("frames") or ()) else 0
    if (requested is None or not sent_times) and ends:
        requested = by_number.get(("packet_received", ends[0]))
        sent_times = [by_number[("packet_sent", ends[1])]] if ("packet_sent", ends[1]) in by_number else []
    if requested is None or not sent_times or not updates:
        return None
    start, end = requested, max(sent_times)
    full = 0.0
    for (when, window, flight), (after, _, _) in zip(updates, [*updates[1:], (end, 0, 0)]):
        span = min(after, end) - max(when, start)
        if span > 0 and flight >= window - mss:
            full += span
    return full / (end - start) if end > start else None


#: a packet the sender's qlog logged sent this much before the capture saw it on the wire (beyond the clocks'
#: median offset) was built and counted in flight while the sender had not yet got it out: ``logged_s``
UNSENT_LAG_S = 0.0005


def attach_congestion_window(points: list[dict], sent: dict[int, float], windows: list[tuple[float, int]],
                             handled: Mapping[tuple[str, int], tuple[int, int]] | None = None,
                             reads: Mapping[int, tuple[float, int | None]] | None = None,
                             tolerance_s: float = 0.005) -> bool:
    """Put the sender's congestion window on each point. Where the qlog names the packet (``handled``): the
    later in the stack's own order of the window it had for that packet and the one it had once it had handled
    the last packet received before the point (the capture's order); else the last update before the point by
    the clock. The qlog's clock is mapped onto the capture's through the 1-RTT packet numbers both saw sent,
    in whichever unit (ms or s) makes the packets agree; False, and nothing attached, when no unit lines them
    up within ``tolerance_s`` (median deviation) or there are no updates.

    By the packet, because the clock cannot say on which side of a point an update fell: a stack's qlog times
    may be whole milliseconds (ngtcp2's), and it handles an ACK some time after the capture saw it arrive,
    often with no packet of its own between that update and the next burst (tens of milliseconds at 30 ms).
    And the capture's order, because the capture takes an ACK's bytes out of flight when it arrives: ngtcp2
    may send a burst under its old window before it reads an ACK that came first, and the window that ACK
    raised is the one to hold that flight against. By the clock alone the stretch after such an ACK kept the
    window from before it, lower, and counted at the window: ngtcp2's share at its window -0.4 to +12 points
    from its own qlog's in 8 runs by the clock, -1.6 to -0.1 by the packet (2026-11-28, load 6-11).

    With ``reads`` (qlog_events'), each received packet's ``read_s``: when the sender read it, on the capture's
    clock, no sooner than it arrived and no later than the capture saw the first packet the stack sent after
    reading it (a qlog in whole milliseconds cannot place it closer). And each packet sent that the qlog logged
    sent more than UNSENT_LAG_S before the capture saw it gets ``logged_s``, that time on the capture's clock: the
    stack counted it in flight from then (aioquic builds a burst's datagrams, logging each sent, before it
    writes any; starved of its core in between, it wrote them up to 37 ms later, 2026-11-29)."""
    pairs = [(p["t_s"], sent[p["packet_number"]]) for p in points
             if p["direction"] == "down" and p.get("packet_number") in sent]
    if not pairs or not windows:
        return False
    best = None
    for scale in (1e-3, 1.0):
        offsets = sorted(t - q * scale for t, q in pairs)
        offset = offsets[len(offsets) // 2]
        spread = sorted(abs(o - offset) for o in offsets)[len(offsets) // 2]
        if best is None or spread < best[0]:
            best = (spread, scale, offset)
    spread, scale, offset = best
    if spread > tolerance_s:
        return False
    departed = {p["packet_number"]: p["t_s"] for p in points if p["direction"] == "down"}
    for point in points:
        logged = sent.get(point.get("packet_number")) if point["direction"] == "down" else None
        if logged is not None and point["t_s"] - (logged * scale + offset) > UNSENT_LAG_S:
            point["logged_s"] = logged * scale + offset  # counted in flight from then, on the wire only now
        read = (reads or {}).get(point.get("packet_number")) if point["direction"] == "up" else None
        if read is not None:
            when, next_sent = read
            point["read_s"] = max(point["t_s"], min(when * scale + offset, departed.get(next_sent, float("inf"))))
    timeline = sorted(((q * scale + offset, window) for q, window in windows), key=lambda update: update[0])
    index, current, acked = 0, None, (-1, None)  # acked: the window after the last received packet named
    for point in sorted(points, key=lambda p: p["t_s"]):
        while index < len(timeline) and timeline[index][0] <= point["t_s"]:
            current = timeline[index][1]
            index += 1
        own = (handled or {}).get((point["direction"], point.get("packet_number")))
        if own is None:
            point["cwnd"] = current
            continue
        if point["direction"] == "up":
            acked = max(acked, own)
        point["cwnd"] = max(own, acked)[1]
    return True


def downsample(points: list[dict], limit: int = MAX_POINTS) -> list[dict]:
    """At most about ``limit`` points: every point carrying a flow-control frame or an RTT sample is kept
    (they are what the figures and the rule are made of), the others evenly thinned."""
    if len(points) <= limit:
        return points
    marked = {"max_data", "max_stream_data", "data_blocked", "stream_data_blocked", "rtt_ms", "max_streams",
              "streams_blocked"}
    keep = {i for i, p in enumerate(points) if any(p.get(name) is not None for name in marked)}
    rest = [i for i in range(len(points)) if i not in keep]
    step = max(1, len(rest) // max(1, limit - len(keep)))
    return [points[i] for i in sorted({*keep, *rest[::step], len(points) - 1})]


# --- a receiver's update rule, measured ---------------------------------------------------------------

def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


#: a window estimate this much above the window in force counts as growth (below: the estimate's noise)
GROWTH_NOISE = 1.1


def flow_control_rule(points: list[dict], window: int, which: str, rtt_ms: float | None = None) -> dict:
    """How the client's receiver re-opened one window (``which``: "stream" or "connection") that started at
    ``window`` during a trace: the updates that raised the limit, the credit each granted as a share of the
    window in force, the bytes consumed when it was sent beside what the server had sent one round trip
    before the update reached it, updates per round trip, and whether the window grew.

    The window an update announces is estimated as its limit less what the client had received when it
    sent it (the more of: what the server had sent one round trip before the update reached it, and what
    the client's ACKs had covered): a receiver that re-opens as it reads announces its window so. The window in force starts at ``window`` and follows
    these estimates up (an estimate below it is the client's reading lagging, which ``window_median``
    shows); ``window_ceiling`` is the largest it reached, ``growth_factor`` that over ``window`` and
    ``rtts_to_ceiling`` how long, from the first update, it took to get there (None without growth).
    ``rtt_ms`` defaults to the trace's median RTT sample."""
    column = "max_stream_data" if which == "stream" else "max_data"
    samples = [p["rtt_ms"] for p in points if p.get("rtt_ms") is not None]
    rtt_ms = rtt_ms or (statistics.median(samples) if samples else None)
    previous, in_force = window, window
    grants, consumed_ratio, times, estimates = [], [], [], []
    reached_at = None
    down = [p for p in points if p["direction"] == "down"]
    sent_times = [p["t_s"] for p in down]  # in capture order, so ascending
    for point in points:
        limit = point.get(column)
        if limit is None or limit <= previous:
            continue
        if rtt_ms:
            before = bisect.bisect_right(sent_times, point["t_s"] - rtt_ms / 1000)
            sent_before = down[before - 1]["sent_max"] if before else 0
            # Each reading of "received" falls short at times: the RTT varies within a burst, an ACK lags
            # the update it travels with; the larger is the closer.
            received = max(sent_before, point.get("acked") or 0)
            estimates.append(limit - received)
            if estimates[-1] > GROWTH_NOISE * in_force:
                in_force, reached_at = estimates[-1], point["t_s"]
            if sent_before:
                consumed_ratio.append((limit - in_force) / sent_before)
        grants.append((limit - previous) / in_force)
        times.append(point["t_s"])
        previous = limit
    out = {"which": which, "window": window, "rtt_ms": rtt_ms, "n_updates": len(grants)}
    if not grants:
        return {**out, "fraction_median": None, "fraction_p10": None, "fraction_p90": None,
                "consumed_vs_sent_rtt_before": None, "updates_per_rtt": None, "window_median": None,
                "window_ceiling": None, "growth_factor": None, "rtts_to_ceiling": None}
    span = times[-1] - times[0]
    return {**out, "fraction_median": statistics.median(grants), "fraction_p10": _quantile(grants, 0.1),
            "fraction_p90": _quantile(grants, 0.9),
            "consumed_vs_sent_rtt_before": statistics.median(consumed_ratio) if consumed_ratio else None,
            "updates_per_rtt": (len(grants) - 1) / (span * 1000 / rtt_ms) if rtt_ms and span > 0 else None,
            "window_median": statistics.median(estimates) if estimates else None, "window_ceiling": in_force,
            "growth_factor": in_force / window,
            "rtts_to_ceiling": (reached_at - times[0]) * 1000 / rtt_ms if reached_at is not None else None}


# --- a TCP download's series ---------------------------------------------------------------------------

#: tshark's fields of a TCP segment, in the order tcp_series reads them
TCP_FIELDS = ("frame.number", "frame.time_epoch", "ip.src", "tcp.seq", "tcp.len", "tcp.ack", "tcp.window_size",
              "tcp.analysis.ack_rtt", "tcp.srcport", "tcp.dstport")
#: the server's sent bytes beyond which its TLS handshake (certificate, tickets, HTTP/2 settings: a few KB)
#: is over and the response has begun
TCP_HANDSHAKE_BYTES = 16_384


def tcp_series(rows: Iterable[list[str]], server_ip: str) -> tuple[list[dict], dict]:
    """The sender's series of a TCP download from tshark's fields (TCP_FIELDS, relative sequence numbers,
    the window scaled as the SYNs announced it), in sender_series' form, so that replay.limits reads both:
    bytes are the TCP stream's (TLS records and all), ``in_flight`` is the highest byte sent less the highest
    acknowledged, ``conn_credit`` the last ACK plus the window it announced (TCP's one receive window, which
    a receiver may shrink: the latest, not the largest), ``packet_number`` the capture's frame number.
    t = 0 is the client's last segment with payload before the server had sent TCP_HANDSHAKE_BYTES: its
    request."""
    segments = [(int(r[0]), float(r[1]), r[2] == server_ip, int(r[3] or 0), int(r[4] or 0), int(r[5] or 0),
                 int(r[6] or 0), float(r[7]) if len(r) > 7 and r[7] else None) for r in rows if len(r) >= 7]
    t0 = segments[0][1] if segments else 0.0
    sent_max = 0
    for _, when, down, seq, length, *_ in segments:
        if down:
            sent_max = max(sent_max, seq + length)
            if sent_max > TCP_HANDSHAKE_BYTES:
                break
        elif length:
            t0 = when
    points, sent_max, sent_total, acked, credit = [], 0, 0, 0, None
    for number, when, down, seq, length, ack, window, ack_rtt in segments:
        point = {"t_s": when - t0, "direction": "down" if down else "up", "packet_number": number,
                 "packet_bytes": length}
        if down:
            sent_max, sent_total = max(sent_max, seq + length), sent_total + length
            point["stream_bytes"] = length or None
        else:
            acked, credit = max(acked, ack), ack + window
            point["rtt_ms"] = ack_rtt * 1000 if ack_rtt is not None else None
        point.update(sent_max=sent_max, sent_total=sent_total, acked=acked, in_flight=max(0, sent_max - acked),
                     conn_credit=credit, stream_credit=None)
        points.append(point)
    return points, {"t0_epoch": t0}


def tcp_upload_series(rows: Iterable[list[str]], server_ip: str) -> tuple[list[dict], dict]:
    """An upload's sender series (the client the sender, the data ``up``) of a TCP run, in tcp_series' form,
    from the capture at the receiver and told as upload_series tells a QUIC one: a client segment reaching the
    server at t left the client when it knew of the server's ACKs and windows sent one round trip before (the
    run's smallest RTT sample, tshark's ack_rtt of the server's segments the client acknowledged), so
    ``acked``, ``in_flight`` (the highest byte arrived less the highest acknowledged then) and ``conn_credit``
    (that ACK plus its window) are the server's as of t less that RTT. t = 0 is the client's first segment with
    payload after the server's first (its handshake flight): the client's Finished and the request behind it."""
    segments = [(int(r[0]), float(r[1]), r[2] == server_ip, int(r[3] or 0), int(r[4] or 0), int(r[5] or 0),
                 int(r[6] or 0), float(r[7]) if len(r) > 7 and r[7] else None) for r in rows if len(r) >= 7]
    server_spoke = next((s[1] for s in segments if s[2] and s[4]), None)
    t0 = next((s[1] for s in segments if not s[2] and s[4] and server_spoke is not None and s[1] > server_spoke),
              segments[0][1] if segments else 0.0)
    samples = [s[7] for s in segments if not s[2] and s[7] is not None and s[7] > 0]
    lag = min(samples) if samples else 0.0
    told_at, told, acked, credit = [], [], 0, None
    for _, when, down, _, _, ack, window, _ in segments:
        if down:
            acked, credit = max(acked, ack), ack + window
            told_at.append(when)
            told.append((acked, credit))
    points, sent_max, sent_total = [], 0, 0
    for number, when, down, seq, length, _, _, ack_rtt in segments:
        point = {"t_s": when - t0, "direction": "down" if down else "up", "packet_number": number,
                 "packet_bytes": length}
        if not down:
            sent_max, sent_total = max(sent_max, seq + length), sent_total + length
            point["stream_bytes"] = length or None
            point["rtt_ms"] = ack_rtt * 1000 if ack_rtt is not None else None
        known_acked, known_credit = _as_known(told_at, told, when - lag, (0, None))
        point.update(sent_max=sent_max, sent_total=sent_total, acked=known_acked,
                     in_flight=max(0, sent_max - known_acked), conn_credit=known_credit, stream_credit=None)
        points.append(point)
    return points, {"t0_epoch": t0}


#: tshark's fields of the HTTP/2 frames a TCP capture holds once its TLS is decrypted, in h2_streams' order
H2_FIELDS = ("frame.number", "ip.src", "http2.type", "http2.streamid", "http2.flags",
             "http2.settings.max_concurrent_streams", "http2.rst_stream.error", "tcp.srcport", "tcp.dstport")
H2_DATA, H2_HEADERS, H2_RST_STREAM = 0, 1, 3
H2_END_STREAM = 0x1
H2_REFUSED_STREAM = 0x7


def h2_streams(rows: Iterable[list[str]], server_ip: str) -> dict[int, tuple[int, int | None]]:
    """HTTP/2's stream limit in the QUIC series' terms, from tshark's H2_FIELDS (one row a TCP segment whose TLS
    records held HTTP/2 frames, a field's values comma-separated in frame order): for each such segment's frame
    number, (streams the client has opened, ``streams_credit``) after it. HTTP/2's limit is the server's
    SETTINGS_MAX_CONCURRENT_STREAMS of streams open at once (none before it says one), where QUIC's
    initial_max_streams_bidi and MAX_STREAMS count every stream ever opened; the credit here is that limit plus
    the streams closed by then (both ends' END_STREAM, or a RST_STREAM), the count of streams the client may
    have opened in all, as MAX_STREAMS would say it. A stream the server refused (RST_STREAM REFUSED_STREAM: opened
    before its SETTINGS arrived, the client assuming 100) was never open there: it counts neither as opened nor
    as closed, and the request's retry opens another."""
    opened: set[int] = set()
    ended: dict[bool, set[int]] = {True: set(), False: set()}  # by the server (True) and the client
    reset: set[int] = set()
    refused: set[int] = set()
    limit = None
    out = {}
    for row in rows:
        if len(row) < 5 or not row[0]:
            continue
        down = row[1] == server_ip
        types, ids, flags = (field.split(",") if field else [] for field in row[2:5])
        errors = iter(row[6].split(",") if len(row) > 6 and row[6] else [])  # one a RST_STREAM, in order
        for kind, stream, flag in zip(types, ids, flags):
            kind, stream, flag = int(kind), int(stream), int(flag, 16)
            if kind == H2_HEADERS and not down and stream:
                opened.add(stream)
            if kind in (H2_DATA, H2_HEADERS) and flag & H2_END_STREAM:
                ended[down].add(stream)
            if kind == H2_RST_STREAM:
                error = next(errors, "")
                (refused if down and error and int(error, 0) == H2_REFUSED_STREAM else reset).add(stream)
        if down and len(row) > 5 and row[5]:
            limit = int(row[5].split(",")[-1])
        closed = len(((ended[True] & ended[False]) | reset) - refused)
        out[int(row[0])] = (len(opened - refused), None if limit is None else limit + closed)
    return out


def attach_h2_streams(points: list[dict], streams: Mapping[int, tuple[int, int | None]]) -> None:
    """Gives tcp_series' points (in capture order, ``packet_number`` the frame number) the streams the client had
    opened and the server's credit after each (h2_streams), in place; a server segment that raised the credit
    carries it as ``max_streams`` too, as a QUIC MAX_STREAMS frame does (trace.downsample keeps it)."""
    frames = sorted(streams)
    at, opened, credit = 0, 0, None
    for point in points:
        while at < len(frames) and frames[at] <= point["packet_number"]:
            opened, now = streams[frames[at]]
            raised = now is not None and now != credit and frames[at] == point["packet_number"]
            if point["direction"] == "down" and raised:
                point["max_streams"] = now
            credit = now
            at += 1
        point.update(streams_open=opened, streams_credit=credit)


def _client_port(row: list[str], fields: tuple[str, ...], server_ip: str) -> str:
    """The client's port of a tshark row of ``fields`` (ip.src, tcp.srcport and tcp.dstport among them)."""
    at = {name: i for i, name in enumerate(fields)}
    if len(row) <= at["tcp.dstport"]:
        return ""
    return row[at["tcp.dstport"] if row[at["ip.src"]] == server_ip else at["tcp.srcport"]]


def read_tcp(pcap: Path, server_ip: str, upload: bool = False,
             keylog: Path | None = None) -> list[tuple[list[dict], dict]]:
    """tcp_series (of an upload: tcp_upload_series) of each TCP connection of a capture (I/O: tshark's field
    output), told apart by the client's port, in the order they began: one for a run of one client, one a client
    for several. With the client's TLS key log, a download's points also hold HTTP/2's streams opened and the
    server's stream credit (h2_streams): what replay.limits' stream limit reads."""
    argv = [tshark_path(), "-n", "-r", str(pcap), "-Y", "tcp", "-T", "fields", "-E", "separator=\t",
            *(word for field in TCP_FIELDS for word in ("-e", field))]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise ToolError(f"tshark could not read {pcap}: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    segments: dict[str, list[list[str]]] = {}
    for line in done.stdout.splitlines():
        row = line.split("\t")
        segments.setdefault(_client_port(row, TCP_FIELDS, server_ip), []).append(row)
    series = {port: (tcp_upload_series if upload else tcp_series)(rows, server_ip) for port, rows in segments.items()}
    if keylog is not None and not upload and keylog.exists() and keylog.stat().st_size:
        argv = [tshark_path(), "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-Y", "http2", "-T",
                "fields", "-E", "separator=\t", *(word for field in H2_FIELDS for word in ("-e", field))]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode:
            raise ToolError(f"tshark could not decrypt {pcap}: "
                            f"{done.stderr.strip().splitlines()[-1:] or done.returncode}")
        frames: dict[str, list[list[str]]] = {}
        for line in done.stdout.splitlines():
            row = line.split("\t")
            frames.setdefault(_client_port(row, H2_FIELDS, server_ip), []).append(row)
        for port, (points, _) in series.items():
            attach_h2_streams(points, h2_streams(frames.get(port, []), server_ip))
    return list(series.values())


def build_tcp_trace(run_id: str, points: list[dict], summary: dict, captured: dict) -> tuple[dict, list[dict]]:
    """The `traces` row and the `trace_points` rows of a TCP run (no stream, no transport parameters)."""
    kept = downsample(points)
    row = {"run_id": run_id, **summary, "packets": len(points), "points": len(kept), "undecrypted": 0,
           "bursts_split": 0, "capture": json.dumps(captured), "client_params": json.dumps({})}
    return row, [{"run_id": run_id, "seq": i, **p} for i, p in enumerate(kept)]


# --- capture and decryption (I/O) -------------------------------------------------------------------

def _ethtool(ns: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(ns_command(ns, ["ethtool", *args]), capture_output=True, text=True, check=False)


#: the offloads switched off for a capture of each transport: a UDP GSO burst cannot be decrypted, and a TCP
#: segment of 64 KB (TSO, GSO) hides the wire's segments, whose size the limit rules measure against
OFFLOADS = {"udp": ("tx-udp-segmentation",), "tcp": ("tcp-segmentation-offload", "generic-segmentation-offload")}
#: what each transport's capture keeps: its packets, and the datagram wait_until_in_capture sends to port 9
CAPTURE_FILTERS = {"udp": "udp", "tcp": "tcp or udp dst port 9"}


def segmentation_off(namespaces: Iterable[str | None], transport: str = "udp",
                     device: str = PATH_DEVICE) -> dict[str | None, str]:
    """Switches the transport's segmentation offloads (OFFLOADS) off on the path device of each namespace (None:
    this one), so that the capture holds the packets the wire carries. Returns each namespace's resulting state of
    the first as ethtool reports it."""
    states = {}
    for ns in namespaces:
        for feature in OFFLOADS[transport]:
            _ethtool(ns, "-K", device, feature, "off")
        shown = _ethtool(ns, "-k", device).stdout
        states[ns] = next((line.split(":", 1)[1].strip() for line in shown.splitlines()
                           if line.strip().startswith(OFFLOADS[transport][0] + ":")), "unknown")
    return states


@contextmanager
def capture(path, pcap: Path, transport: str = "udp") -> Iterator[dict]:
    """tshark on the path for the block's duration (the run's transport only, whole packets), segmentation offload
    off where it runs; yields the capture's description, which the caller stores with the trace; once the block
    has ended, it also holds the packets the capture dropped. The testbed's is taken in the server's namespace on
    the path device, offload off on both ends; a two-host run's (its path's ``capture_end`` "client") on this, the
    client's, host, on the interface its route to the server leaves by, of the packets to and from the server
    alone, offload off on that interface (the server's host is not ours: a GSO burst it sends is split, as
    split_bursts splits any)."""
    at_client = getattr(path, "capture_end", "server") == "client"
    if not at_client and not getattr(path, "server_ns", None):
        raise ToolError("--trace needs the testbed's namespaces; --link loopback has none")
    ns, device = (None, netns.route_device(path.server_ip)) if at_client else (path.server_ns, PATH_DEVICE)
    offload = segmentation_off((ns,) if at_client else (path.client_ns, path.server_ns), transport, device)
    keep = f"({CAPTURE_FILTERS[transport]}) and host {path.server_ip}" if at_client else CAPTURE_FILTERS[transport]
    log = pcap.with_suffix(".log")
    tshark = start_process(ns, [tshark_path(), "-i", device, "-q", "-s", "0", "-f", keep,
                                "-B", str(CAPTURE_BUFFER_MIB), "-F", "pcap", "-w", str(pcap)], log)
    captured = {"device": device, "namespace": "client" if at_client else "server",
                "backend": getattr(path, "backend", None), "transport": transport,
                OFFLOADS[transport][0].replace("-", "_"): {"client": offload[None]} if at_client else
                {"client": offload[path.client_ns], "server": offload[path.server_ns]},
                "buffer_mib": CAPTURE_BUFFER_MIB}
    try:
        wait_until_capturing(tshark, log)
        yield captured
        if at_client:  # the marker to the server's address leaves through the captured interface
            wait_until_in_capture(pcap, path.server_ip)
        else:
            with netns.in_namespace(path.server_ns):
                wait_until_in_capture(pcap, path.client_ip)
    finally:
        stop_process(tshark.pid)
    captured.update(tshark=tshark_version(), dropped=dropped_packets(log))


def decrypt(pcap: Path, keylog: Path, server_ip: str) -> Decoded:
    """tshark's decryption of a capture (pcap format) with the client's key log, as packets."""
    decoded, bursts = _decrypted(pcap, keylog, server_ip, packets_from_tshark)
    decoded.bursts_split = bursts
    return decoded


def decrypt_connections(pcap: Path, keylog: Path, server_ip: str) -> list[Decoded]:
    """tshark's decryption of a capture of several clients' connections with one key log holding all their
    secrets (runner: each client's own, gathered into one), as each connection's packets (connections_from_tshark);
    the bursts the capture split counted on the first."""
    found, bursts = _decrypted(pcap, keylog, server_ip, connections_from_tshark)
    if found:
        found[0].bursts_split = bursts
    return found


def _decrypted(pcap: Path, keylog: Path, server_ip: str, reader):
    """(``reader`` over tshark's JSON of the capture decrypted, the GSO bursts split before it read them)."""
    if not keylog.is_file() or not keylog.stat().st_size:
        raise ToolError("the client wrote no TLS key log: the capture cannot be decrypted")
    data, bursts = split_bursts(pcap.read_bytes(), server_ip)
    pcap = pcap.with_suffix(".split.pcap")
    pcap.write_bytes(data)
    argv = [tshark_path(), "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-Y", "quic",
            "-T", "json", "--no-duplicate-keys", "-J", "frame ip udp quic"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        decoded = reader(process.stdout, server_ip)
        stderr = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    if process.returncode:
        raise ToolError(f"tshark could not read {pcap}: {stderr.strip().splitlines()[-1:] or process.returncode}")
    return decoded, bursts


def no_packets_note(decoded: Decoded, keylog: Path) -> str:
    """Why a capture gave no 1-RTT packet, as far as the handshake shows: each step tshark needs before the
    first 1-RTT packet (the client's ClientHello, which names the key log's secrets; the server's ServerHello;
    its EncryptedExtensions, the first thing the key log's handshake secrets decrypt) read or not, and the
    secrets the key log holds (CI's traced quiche run once lacked its breakdown, the cause not visible)."""
    lines = keylog.read_text(errors="replace").splitlines() if keylog.is_file() else []
    labels = Counter(line.split(" ", 1)[0] for line in lines if line and not line.startswith("#"))
    read = {"the client's parameters": bool(decoded.client_params), "the server's cipher": decoded.cipher is not None,
            "the server's parameters": bool(decoded.server_params)}
    return (f"the trace holds no 1-RTT packet: {decoded.undecrypted} short-header packets could not be decrypted; "
            + ", ".join(f"{what} {'read' if ok else 'not read'}" for what, ok in read.items())
            + "; the key log holds " + (", ".join(f"{n} {label}" for label, n in labels.items()) or "no secret"))


def own_qlog_share(qlog_dir: Path | None, points: list[Mapping], mss: int, omits: str | None) -> float | None:
    """The run's sender's own share at its window over its breakdown's span (qlog_window_share of its qlog, the
    span's ends from its trace ``points``, with what its stack's qlog leaves out added back, ``omits``: the
    stack's qlog_in_flight_omits), for holding the breakdown's against (limits.against_own_qlog)."""
    from replay.limits import span_packets

    return qlog_window_share(sender_qlog(qlog_dir), mss, span_packets(points), omits)


def sender_qlog(qlog_dir: Path | None) -> list[str]:
    """The lines of the server's qlog of the run (its largest file: the download's connection), or []."""
    files = sorted((f for f in Path(qlog_dir, "server").rglob("*") if f.is_file()), key=lambda f: f.stat().st_size) \
        if qlog_dir and Path(qlog_dir, "server").is_dir() else []
    return files[-1].read_text(errors="replace").splitlines() if files else []


def connection_qlog(qlog_dir: Path | None, cids: Iterable[str]) -> list[str]:
    """The lines of the server's qlog of one connection among several (a run of several clients), or []: the file
    whose name holds one of the connection's IDs as the capture saw them (``Decoded.cids``; the stacks name a
    connection's qlog by its original DCID, quic-go, quinn and aioquic, or by the server's own SCID, quiche), else
    the one whose opening (its header's common fields, quic-go's ODCID) holds one. Not by order or by size: the
    clients start together, and their connections' qlogs are alike."""
    files = sorted(f for f in Path(qlog_dir, "server").rglob("*") if f.is_file()) \
        if qlog_dir and Path(qlog_dir, "server").is_dir() else []
    cids = [cid for cid in cids if cid]
    named = [f for f in files if any(cid in f.name.lower() for cid in cids)]
    if not named:
        for f in files:
            with f.open(errors="replace") as opened:
                head = opened.read(4096).lower()
            if any(cid in head for cid in cids):
                named.append(f)
    return named[0].read_text(errors="replace").splitlines() if len(named) == 1 else []


def build_receiver_trace(run_id: str, decoded: Decoded, captured: dict,
                         receiver: Receiver = AT_SERVER) -> tuple[dict, list[dict]]:
    """The `traces` row and the `trace_points` rows of a transfer captured at its receiver (an upload's at the
    server, a two-host download's at the client): its sender's series as the receiver's capture can tell it
    (receiver_series); an upload's row holds the server's credit over time (receiver_credit) in ``upload_credit``."""
    points, summary = receiver_series(decoded.packets, decoded.client_params, decoded.server_params, receiver)
    kept = downsample(points)
    row = {"run_id": run_id, **summary, "packets": len(points), "points": len(kept),
           "undecrypted": decoded.undecrypted, "bursts_split": decoded.bursts_split, "cipher": decoded.cipher,
           "capture": json.dumps({**captured, "joined_datagrams": decoded.joined}),
           "client_params": json.dumps(decoded.client_params)}
    if receiver is AT_SERVER:
        row["upload_credit"] = json.dumps(receiver_credit(decoded.packets, decoded.server_params))
    return row, [{"run_id": run_id, "seq": i, **p} for i, p in enumerate(kept)]


def download_points(decoded: Decoded, qlog_lines: list[str] | None = None) -> tuple[list[dict], dict, bool]:
    """A download's sender series (sender_series), with the sender's congestion window from its qlog where it
    wrote one (attach_congestion_window: whether it could), every point kept."""
    points, summary = sender_series(decoded.packets, decoded.client_params, decoded.server_params)
    return points, summary, attach_congestion_window(points, *qlog_events(qlog_lines or []))


def build_trace(run_id: str, decoded: Decoded, captured: dict,
                qlog_lines: list[str] | None = None) -> tuple[dict, list[dict]]:
    """The `traces` row and the `trace_points` rows of one run; the sender's qlog, where it wrote one,
    adds its congestion window."""
    points, summary, windowed = download_points(decoded, qlog_lines)
    captured = {**captured, "cwnd_from_qlog": windowed}
    kept = downsample(points)
    row = {"run_id": run_id, **summary, "packets": len(points), "points": len(kept),
           "undecrypted": decoded.undecrypted, "bursts_split": decoded.bursts_split, "cipher": decoded.cipher,
           "capture": json.dumps({**captured, "joined_datagrams": decoded.joined}),
           "client_params": json.dumps(decoded.client_params)}
    return row, [{"run_id": run_id, "seq": i, **p} for i, p in enumerate(kept)]
