"""qscan pcap throughput: 100,000 client Initials, against plain pyshark per-packet iteration.

    .venv/bin/python bench/bench_pcap.py [--packets 100000] [--baseline-packets 2000]

The capture is synthesised from a real Initial (datasets/captures/gtlsclient.pcapng):
its ClientHello is re-protected under a new Destination Connection ID per
packet and sent from a new client address/port, so every packet is a new
connection and costs a key derivation, as in a capture of many clients. The
baseline is what the brief calls slow: pyshark.FileCapture with a display filter,
include_raw and JSON, touching each packet's UDP payload. It is timed on the
first --baseline-packets packets and reported per packet and extrapolated.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyshark
from aioquic.quic.crypto import CryptoPair

from scanner.capture.extract import read_capture
from scanner.capture.frontend import LONG_HEADER_FILTER, Datagram, long_header_datagrams, write_udp_pcap
from scanner.handshake.packets import initial_keys, long_packets

SOURCE = Path(__file__).resolve().parent.parent / "datasets" / "captures" / "gtlsclient.pcapng"


def synthesise(path: Path, count: int) -> None:
    datagram = next(long_header_datagrams(SOURCE))
    packet = next(long_packets(datagram.payload))
    keys = initial_keys(packet.dcid, packet.version, of_client=True)
    plain_header, plaintext, packet_number, _ = keys.decrypt_packet(packet.data, packet.pn_offset, 0)
    header = bytearray(plain_header)
    dcid_at = 6  # first byte, 4 version bytes, DCID length

    def datagrams() -> Iterator[Datagram]:
        for i in range(count):
            dcid = os.urandom(len(packet.dcid))
            header[dcid_at : dcid_at + len(dcid)] = dcid
            pair = CryptoPair()
            pair.setup_initial(cid=dcid, is_client=True, version=packet.version)
            payload = pair.encrypt_packet(bytes(header), plaintext, packet_number)
            src = f"10.{(i >> 16) & 0xFF}.{(i >> 8) & 0xFF}.{i & 0xFF}"
            yield Datagram(i + 1, 1_700_000_000 + i / 1000, src, 1024 + i % 60000, "10.255.0.1", 443, payload)

    write_udp_pcap(path, datagrams())


def _cpu_seconds() -> tuple[float, float]:
    """(this process, finished children = tshark) user+system CPU seconds: wall time on a
    shared machine says more about the neighbours than about the code."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pyshark_baseline(path: Path, limit: int) -> float:
    """Seconds per packet for pyshark's own per-packet iteration."""
    capture = pyshark.FileCapture(str(path), display_filter=LONG_HEADER_FILTER, include_raw=True, use_json=True)
    start = time.perf_counter()
    seen = 0
    try:
        for packet in capture:
            bytes.fromhex(packet.udp.payload.replace(":", ""))
            seen += 1
            if seen >= limit:
                break
    finally:
        capture.close()
    return (time.perf_counter() - start) / max(seen, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=100_000)
    parser.add_argument("--baseline-packets", type=int, default=2_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pcap-") as scratch:
        path = Path(scratch) / "initials.pcap"
        start = time.perf_counter()
        synthesise(path, args.packets)
        print(f"synthesised {args.packets:,} Initials ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - start:.1f} s")

        start, cpu_before = time.perf_counter(), _cpu_seconds()
        result = read_capture(path)
        ours = time.perf_counter() - start
        cpu = tuple(after - before for after, before in zip(_cpu_seconds(), cpu_before))
        assert len(result.hellos) == args.packets, f"found {len(result.hellos)} ClientHellos, expected {args.packets}"

        per_packet = pyshark_baseline(path, min(args.baseline_packets, args.packets))
        baseline = per_packet * args.packets
        print(f"qscan pcap extraction : {ours:7.1f} s for {args.packets:,} Initials ({args.packets / ours:,.0f}/s), "
              f"{len(result.hellos):,} ClientHellos  [goal: < 60 s]")
        print(f"  CPU time            : {cpu[0]:7.1f} s Python + {cpu[1]:.1f} s tshark (they overlap: tshark streams); "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"pyshark per packet    : {per_packet * 1e3:7.2f} ms/packet over {min(args.baseline_packets, args.packets):,} packets, "
              f"{baseline:,.0f} s extrapolated to {args.packets:,}")
        print(f"speed-up              : {baseline / ours:7.1f}x")


if __name__ == "__main__":
    main()
