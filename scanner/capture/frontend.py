"""The capture front end: the UDP payloads of a pcap or pcapng file that may hold QUIC long-header packets,
read straight from the file by common/pcap.py's compiled capture reader (scanner/native/src/capture.rs).

tshark's own reading (a display filter on the first payload byte, the payload printed as hex) cost more than
tshark's whole decode of the file before Python saw a byte, and it refused a file cut short as a whole; reading
the records here streams files of any size and keeps what comes before a damaged record
(bench/bench_pcap.py times the whole command beside tshark).
"""

from __future__ import annotations

import socket
import struct
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from common import pcap
from common.tshark import tshark_path
from tparams.errors import ToolError
from tparams.paramset import PERFORMANCE_PARAMETERS



class Datagram(NamedTuple):
    """One UDP datagram of a capture: a tuple, as a frozen dataclass took 600 ns to build against 180 (measured
    2026-11-28 13:28), once a datagram; the compiled reader builds them as tuples of this class."""

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


class CaptureDatagrams:
    """Every UDP payload in a capture whose first byte has the long-header bit set, in capture order.

    ``ports`` keeps only datagrams from or to one of them. Iteration stops at the end of the file or at the
    first damaged or cut-short record; ``damage`` then says where, and every datagram before it has been
    yielded. A missing file or one that is no capture is a ToolError at once.
    """

    def __init__(self, path: Path | str, ports: tuple[int, ...] = ()) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ToolError(f"{self.path}: no such capture file")
        try:
            self.size = self.path.stat().st_size
            self._reader = pcap.CaptureReader.long_header_datagrams(self.path, Datagram, sorted(set(ports)))
        except pcap.CaptureFileError as exc:
            raise ToolError(f"cannot read capture {self.path}: {exc}") from None
        except OSError as exc:
            raise ToolError(f"cannot read capture {self.path}: {exc.strerror}") from None

    @property
    def damage(self) -> pcap.Damage | None:
        return pcap.Damage.of(self._reader)

    @property
    def offset(self) -> int:
        """Bytes of the file read so far."""
        return self._reader.offset

    @property
    def packets(self) -> int:
        """Packets of the file read so far (of any kind)."""
        return self._reader.packets

    def __iter__(self) -> Iterator[Datagram]:
        return self._reader


def long_header_datagrams(path: Path | str, ports: tuple[int, ...] = ()) -> Iterator[Datagram]:
    """CaptureDatagrams for callers that want all or nothing: a damaged capture raises ToolError after the
    datagrams before the damage have been yielded, so the caller decides what partial data is worth."""
    datagrams = CaptureDatagrams(path, ports)
    yield from datagrams
    if datagrams.damage is not None:
        raise ToolError(f"cannot read all of capture {datagrams.path}: {datagrams.damage}")


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
