"""qscan pcap as a user runs it, beside tshark's own full decode of the same capture, on a capture of 2 GB.

    .venv/bin/python bench/bench_pcap.py [--gigabytes 2] [--other-packets 0] [--dir /tmp]

(--dir /dev/shm keeps the 2.3 GB of capture and store in memory where the disk is short of room.)

The capture is made from the real ClientHellos of datasets/captures/mixed-clients.pcapng (Chromium's over
two Initial packets, Firefox's two, ngtcp2's, aioquic's): each connection's first-flight Initials are opened,
given a new random Destination Connection ID, protected again under the Initial keys that DCID derives, and
sent from a new client address and port, round after round until the file holds --gigabytes. So every
connection costs a key derivation, as in a capture of many clients; the transport parameters inside, the
clients' own connection IDs included, repeat. --other-packets N adds N short-header packets of 1,200 random
bytes after each connection (traffic with no ClientHello, which both tools must still read); 0 is the worst
case for qscan, whose work is per ClientHello.

Both commands run as subprocesses under /usr/bin/time, tshark first (`tshark -n -M 100000 -r FILE`, its output
to /dev/null), then `qscan pcap FILE --out STORE`, then the same with
one worker process per core (--workers); the capture and the store are deleted afterwards. Printed: wall and CPU
seconds and peak memory of each, and the ratios of qscan's wall and CPU time to tshark's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
from aioquic.quic.crypto import CryptoPair
from aioquic.quic.packet import QuicPacketType

from common.tshark import tshark_path
from scanner.capture.extract import read_capture
from scanner.capture.frontend import CaptureDatagrams, Datagram, write_udp_pcap
from scanner.handshake.packets import initial_keys, long_packets

SOURCE = Path(__file__).resolve().parent.parent / "datasets" / "captures" / "mixed-clients.pcapng"
QSCAN = Path(sys.executable).parent / "qscan"
DCID_AT = 6  # first byte, 4 version bytes, DCID length
TSHARK_SESSION = 100_000


@dataclass(frozen=True)
class FirstFlight:
    """One connection's client Initials carrying its ClientHello, opened: (header, payload, packet number)."""

    version: int
    dcid_length: int
    packets: list[tuple[bytes, bytes, int]]


def first_flights() -> list[FirstFlight]:
    flights = []
    datagrams = list(CaptureDatagrams(SOURCE))
    for hello in read_capture(SOURCE).hellos:
        keys = initial_keys(hello.original_dcid, hello.quic_version, of_client=True)
        packets = []
        for datagram in datagrams:
            if not hello.first_frame <= datagram.frame <= hello.frame or (datagram.src_ip, datagram.src_port) != (hello.src_ip, hello.src_port):
                continue
            for packet in long_packets(datagram.payload):
                if packet.packet_type == QuicPacketType.INITIAL and packet.dcid == hello.original_dcid:
                    header, payload, number, _ = keys.decrypt_packet(packet.data, packet.pn_offset, 0)
                    packets.append((header, payload, number))
        flights.append(FirstFlight(hello.quic_version, len(hello.original_dcid), packets))
    return flights


def synthesise(path: Path, gigabytes: float, other_packets: int) -> int:
    """Write the capture; returns how many ClientHellos it holds."""
    flights = first_flights()
    target = gigabytes * 1e9
    connections = 0

    def datagrams() -> Iterator[Datagram]:
        nonlocal connections
        written = 24
        frame = 0
        while written < target:
            flight = flights[connections % len(flights)]
            dcid = os.urandom(flight.dcid_length)
            pair = CryptoPair()
            pair.setup_initial(cid=dcid, is_client=True, version=flight.version)
            client = f"10.{(connections >> 16) & 0xFF}.{(connections >> 8) & 0xFF}.{connections & 0xFF}"
            port = 1024 + connections % 60000
            when = 1_700_000_000 + connections / 1000
            for header, payload, number in flight.packets:
                header = header[:DCID_AT] + dcid + header[DCID_AT + len(dcid):]
                sealed = pair.encrypt_packet(header, payload, number)
                frame += 1
                written += 16 + 28 + len(sealed)
                yield Datagram(frame, when, client, port, "10.255.0.1", 443, sealed)
            for _ in range(other_packets):
                frame += 1
                written += 16 + 28 + 1200
                yield Datagram(frame, when, "10.255.0.1", 443, client, port, bytes([0x40]) + os.urandom(1199))
            connections += 1

    write_udp_pcap(path, datagrams())
    return connections


@dataclass(frozen=True)
class Timed:
    wall: float
    cpu: float
    peak_mib: float
    stdout: str


def timed(command: list[str], keep_output: bool = True) -> Timed:
    """Run ``command`` under /usr/bin/time: wall and user+system seconds, peak resident memory, and its
    output (or none: tshark's text of every packet goes to /dev/null)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        start = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", "-o", report.name, *command], text=True, check=False,
                              stdout=subprocess.PIPE if keep_output else subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{command[0]} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        user, system, peak_kib = report.read().split()[-3:]
    return Timed(wall, float(user) + float(system), int(peak_kib) / 1024, done.stdout or "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=2.0)
    parser.add_argument("--other-packets", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the capture is made (deleted after)")
    args = parser.parse_args()
    if not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: no such directory")
    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="bench-pcap-", dir=args.dir) as scratch:
        capture, store = Path(scratch) / "clients.pcap", Path(scratch) / "clients.duckdb"
        start = time.perf_counter()
        hellos = synthesise(capture, args.gigabytes, args.other_packets)
        size = capture.stat().st_size
        print(f"capture     : {size / 1e9:.2f} GB, {hellos:,} ClientHellos, {args.other_packets} other packets after each "
              f"(made in {time.perf_counter() - start:.0f} s)")

        # -n: no name resolution (the addresses are made up, and no lookup may leave the machine). -M: tshark
        # keeps every connection it dissected, 14 KB each (1.4 GB for 100,000 Initials), so 2 GB of them would
        # not fit this machine's 23 GB; it starts afresh every TSHARK_SESSION packets, still decoding each.
        tshark = timed([tshark_path(), "-n", "-M", str(TSHARK_SESSION), "-r", str(capture)], keep_output=False)
        print(f"tshark -r   : {tshark.wall:7.1f} s wall, {tshark.cpu:7.1f} s CPU, peak {tshark.peak_mib:,.0f} MiB")
        qscan = timed([str(QSCAN), "pcap", str(capture), "--out", str(store)])
        with duckdb.connect(str(store), read_only=True) as con:
            stored = con.execute("SELECT count(*) FROM client_hellos").fetchone()[0]
        print(f"qscan pcap  : {qscan.wall:7.1f} s wall, {qscan.cpu:7.1f} s CPU, peak {qscan.peak_mib:,.0f} MiB (its largest "
              f"process), {stored:,} ClientHellos stored ({hellos / qscan.wall:,.0f}/s)")
        print(f"ratio       : {qscan.wall / tshark.wall:.2f} (qscan / tshark, wall) [goal: <= 1], CPU {qscan.cpu / tshark.cpu:.2f}; "
              f"load average now {os.getloadavg()[0]:.1f}")
        print("qscan's summary, as printed:\n" + "\n".join(qscan.stdout.splitlines()[:8]))
        assert stored == hellos, f"stored {stored} ClientHellos of {hellos}"
        store.unlink()
        # The same with one worker process per core, each following its share of the connections.
        cores = str(os.cpu_count() or 1)
        parallel = timed([str(QSCAN), "pcap", str(capture), "--out", str(store), "--workers", cores])
        print(f"--workers {cores} : {parallel.wall:7.1f} s wall, {parallel.cpu:7.1f} s CPU, peak {parallel.peak_mib:,.0f} MiB (its largest process): "
              f"ratio to tshark {parallel.wall / tshark.wall:.2f}; load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
