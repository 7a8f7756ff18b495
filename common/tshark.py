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


def dumpcap_path() -> str:
    """The dumpcap beside tshark, the one tshark captures with: a capture that only writes a file runs it alone,
    without tshark's start-up (its dissectors: 0.35 s of CPU against dumpcap's 0.02 s, 2026-11-28)."""
    return str(Path(tshark_path()).with_name("dumpcap"))


# What dumpcap reports once its interface is open, its filter set and its file made (packets from then on are
# in the file): its "File: <path>" line; tshark passes that report on as "Capture started." (before its own
# "File:" line). Their "Capturing on" lines come earlier, a few hundred ms (seconds on a loaded machine).
_CAPTURING = re.compile(rb"Capture started|^File: ", re.MULTILINE)


def wait_until_capturing(capture: subprocess.Popen, log: Path, timeout: float = 20.0) -> None:
    """Return once ``capture``, a tshark or dumpcap (its stdout and stderr going to ``log``), keeps packets."""
    deadline = time.monotonic() + timeout
    while not _CAPTURING.search(log.read_bytes()):
        if capture.poll() is not None:
            raise ToolError(f"the capture could not start: {log.read_text(errors='replace').strip()[-300:]}")
        if time.monotonic() > deadline:
            raise ToolError(f"the capture did not start within {timeout:.0f} s")
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
