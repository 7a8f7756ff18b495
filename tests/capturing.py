"""Waiting for a running tshark capture to hold what was sent: its file lags the wire."""

from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from lab import netns
from scanner.capture.frontend import wait_until_capturing


def wait_until_in_capture(pcap: Path, address: str, timeout: float = 30.0) -> None:
    """Return once every packet sent before this call is in ``pcap``.

    dumpcap writes packets in the order they pass and flushes its file every half second or so
    (a datagram reached the file 0.7 s after it was sent at load 5), so a fixed wait before
    stopping it can lose the last packets. Instead a datagram is sent now to a closed port at
    ``address`` (through the captured interface; call this in the namespace that reaches it) and
    awaited in the file; once it is there, so is everything before it. Its first byte has the
    long-header bit set, so captures filtered to QUIC long headers keep it too.
    """
    marker = b"\xc0" + os.urandom(15)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(marker, (address, 9))
    deadline = time.monotonic() + timeout
    while marker not in pcap.read_bytes():
        assert time.monotonic() < deadline, f"{pcap} did not catch up with the wire within {timeout:.0f} s"
        time.sleep(0.05)


@contextmanager
def captured_handshakes(ns: str, pcap: Path, log: Path):
    """tshark in ``ns`` for the block's duration; long-header packets only (the handshake), so the
    capture stays small whatever the download's size."""
    tshark = netns.start_process(ns, ["tshark", "-i", "any", "-q", "-w", str(pcap), "-f", "udp and udp[8] & 0x80 != 0"],
                                 log)
    try:
        wait_until_capturing(tshark, log)
        yield
        with netns.in_namespace(ns):
            wait_until_in_capture(pcap, "127.0.0.1")
    finally:
        netns.stop_process(tshark.pid)
