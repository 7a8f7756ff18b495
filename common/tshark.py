"""tshark, found and version-checked through pyshark, and the two waits every capture of ours needs: until
dumpcap keeps packets, and until the file holds everything sent so far. Both pipelines capture with it (qscan's
captures and browser runs, qreplay's traces and browser runs)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path


from tparams.errors import ToolError


# dumpcap's buffer, in MiB, for captures of a whole download: its default of 2 MiB overflowed under load (2,029
# of some 10,800 packets of a 14 MB download at 330 Mbit/s with both cores busy), and after a long gap tshark
# cannot recover a truncated packet number, so it fails to decrypt the packets that follow.
CAPTURE_BUFFER_MIB = 64


def tshark_path() -> str:
    from pyshark.tshark import tshark as pyshark_tshark  # (with asyncio) only where tshark runs: not at --help
    try:
        return pyshark_tshark.get_process_path()
    except pyshark_tshark.TSharkNotFoundException as exc:
        raise ToolError("tshark is not installed (Debian package 'tshark')") from exc


def wait_until_capturing(tshark: subprocess.Popen, log: Path, timeout: float = 20.0) -> None:
    """Return once ``tshark`` (its stdout and stderr going to ``log``) keeps packets.

    tshark says "Capturing on" before its dumpcap has opened the interface; dumpcap's own
    "Capture started" comes a few hundred ms later (seconds on a loaded machine), and only
    packets after it are in the file.
    """
    deadline = time.monotonic() + timeout
    while b"Capture started" not in log.read_bytes():
        if tshark.poll() is not None:
            raise ToolError(f"tshark could not capture: {log.read_text(errors='replace').strip()[-300:]}")
        if time.monotonic() > deadline:
            raise ToolError(f"tshark did not start capturing within {timeout:.0f} s")
        time.sleep(0.05)


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
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(marker, (address, 9))
    deadline = time.monotonic() + timeout
    while marker not in pcap.read_bytes():
        if time.monotonic() > deadline:
            raise ToolError(f"{pcap} did not catch up with the wire within {timeout:.0f} s")
        time.sleep(0.05)


def dropped_packets(log: Path) -> int | None:
    """The packets a stopped tshark (its stdout and stderr went to ``log``) said it dropped: its "N packets
    dropped from DEVICE" lines summed, 0 when it reported only what it captured, None when it reported nothing."""
    text = log.read_text(errors="replace")
    drops = [int(n) for n in re.findall(r"^(\d+) packets? dropped from ", text, re.MULTILINE)]
    if drops:
        return sum(drops)
    return 0 if re.search(r"^\d+ packets? captured", text, re.MULTILINE) else None


def tshark_version() -> str:
    from pyshark.tshark import tshark as pyshark_tshark
    return str(pyshark_tshark.get_tshark_version(tshark_path()))
