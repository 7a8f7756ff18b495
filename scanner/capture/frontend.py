"""The capture front end: tshark (common/tshark.py) yields the raw UDP payloads that may
hold QUIC long-header packets.

pyshark's per-packet objects cost about a millisecond each (it parses
tshark's JSON/PDML in Python), far too slow for 100,000 Initials. So the
selection happens inside tshark with a display filter on the first payload
byte, tshark prints only the few fields needed, and Python just reads lines
(bench/bench_pcap.py measures both ways).
"""

from __future__ import annotations

import binascii
import socket
import struct
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from common import pcap
from common.tshark import tshark_path
from tparams.errors import ToolError
from tparams.paramset import PERFORMANCE_PARAMETERS

# Long header bit set. The QUIC dissector is switched off: its heuristics cost
# time, and tshark 4.0 drops packets whose QUIC bit is greased (RFC 9287).
LONG_HEADER_FILTER = "udp.payload[0] & 0x80"
_FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "ip.src",
    "ipv6.src",
    "udp.srcport",
    "ip.dst",
    "ipv6.dst",
    "udp.dstport",
    "udp.payload",
)


@dataclass(frozen=True)
class Datagram:
    frame: int
    time: float
    src_ip: str
    src_port: int
    dst_ip: str
    dst_port: int
    payload: bytes


def write_udp_pcap(path: Path | str, datagrams: Iterable[Datagram]) -> None:
    """A classic pcap of IPv4/UDP datagrams (``frame`` is ignored; no checksums, which tshark does not
    check): the captures the project writes itself, from test vectors and for benchmarks."""
    def frames() -> Iterator[tuple[float, bytes]]:
        for datagram in datagrams:
            udp = struct.pack("!HHHH", datagram.src_port, datagram.dst_port, 8 + len(datagram.payload), 0) + datagram.payload
            addresses = socket.inet_aton(datagram.src_ip) + socket.inet_aton(datagram.dst_ip)
            yield datagram.time, struct.pack("!BBHHHBBH8s", 0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0,
                                             addresses) + udp

    pcap.write(path, pcap.LINKTYPE_RAW, frames())


def tshark_command(path: Path | str, display_filter: str, fields: tuple[str, ...]) -> list[str]:
    command = [tshark_path(), "-n", "-r", str(path), "--disable-protocol", "quic", "-Y", display_filter]
    command += ["-T", "fields", "-E", "separator=/t", "-E", "occurrence=l"]
    for field in fields:
        command += ["-e", field]
    return command


def long_header_datagrams(path: Path | str, ports: tuple[int, ...] = ()) -> Iterator[Datagram]:
    """Every UDP payload in the capture whose first byte has the long-header bit set.

    ``ports`` narrows the selection (either end) inside tshark. A missing,
    unreadable, or truncated capture raises ToolError after the packets before
    the damage have been yielded, so the caller decides what partial data is worth.
    """
    path = Path(path)
    if not path.is_file():
        raise ToolError(f"{path}: no such capture file")
    display_filter = LONG_HEADER_FILTER
    if ports:
        display_filter += " && udp.port in {" + " ".join(str(p) for p in ports) + "}"
    process = subprocess.Popen(
        tshark_command(path, display_filter, _FIELDS), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        # Bytes, not text: the payload column is most of the output, and unhexlify reads bytes.
        for line in process.stdout:
            columns = line.rstrip(b"\n").split(b"\t")
            if len(columns) != len(_FIELDS) or not columns[8]:
                continue
            frame, when, src4, src6, sport, dst4, dst6, dport, payload = columns
            yield Datagram(
                int(frame),
                float(when),
                (src4 or src6).decode(),
                int(sport),
                (dst4 or dst6).decode(),
                int(dport),
                binascii.unhexlify(payload),
            )
        stderr = process.stderr.read().decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    if process.returncode != 0:
        problem = next(
            (line.removeprefix("tshark: ") for line in stderr.splitlines() if line.startswith("tshark:")),
            f"tshark exited with status {process.returncode}",
        )
        raise ToolError(f"cannot read capture {path}: {problem}")


# Integer parameters tshark 4.0 names with a field of their own (tls.quic.parameter.<name>).
TSHARK_NAMED = tuple(name for name in PERFORMANCE_PARAMETERS if name != "disable_active_migration")


def tshark_client_hellos(capture: Path | str) -> dict[int, dict[str, list[int]]]:
    """tshark's own reading of the client transport parameters, the cross-check for ours.

    frame -> {"type": ids in wire order, "length": value lengths, <name>: [value]}
    for every ClientHello tshark decodes (it decodes none of a browser's GSO batch).
    """
    fields = ["frame.number", "tls.quic.parameter.type", "tls.quic.parameter.length"]
    fields += [f"tls.quic.parameter.{name}" for name in TSHARK_NAMED]
    command = [tshark_path(), "-n", "-r", str(capture), "-Y", "tls.handshake.type == 1", "-T", "fields"]
    command += ["-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for field in fields:
        command += ["-e", field]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolError(f"tshark cannot read {capture}: {done.stderr.strip().splitlines()[-1:]}")
    decoded = {}
    for line in done.stdout.splitlines():
        frame, types, lengths, *values = line.split("\t")
        entry = {"type": [int(v) for v in types.split(",") if v], "length": [int(v) for v in lengths.split(",") if v]}
        for name, value in zip(TSHARK_NAMED, values):
            if value:
                entry[name] = [int(v) for v in value.split(",")]
        decoded[int(frame)] = entry
    return decoded
