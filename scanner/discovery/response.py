"""Judging what came back from a probe: a Version Negotiation packet, or not.

Pure: no I/O. An answer is only trusted when it is a well-formed Version
Negotiation packet (RFC 9000 17.2.1) for *our* probe: it echoes our source
connection ID as its destination and our destination ID as its source (the
echo proves it answers the probe, not some stray datagram) and lists at least one
version. Anything else is counted by its reason, never stored as a server.

It may list the reserved version we sent. Servers grease their list with a
reserved version of their own (RFC 9000 6.3): ngtcp2's is a hash of the
client's address, port and version cut to 0x?a?a?a?a, 16 random bits like our
probe's, so 1 answer in 65,536 lists exactly our version (measured against the
lab's gtlsserver: the hash matched all 4,096 answers of a campaign, and a probe
from a port and version chosen to collide was answered so every time). 6.1's
discard rule guards the version a client selected to connect with; a reserved
one never is, and discarding dropped a real server (expected in 6% of scans of
4,096 ngtcp2 servers: 1 - (1 - 2**-16)**4096).
"""

from __future__ import annotations

from dataclasses import dataclass

from aioquic.buffer import Buffer, BufferReadError
from aioquic.quic.packet import QuicPacketType, pull_quic_header

from tparams.probe import Probe


@dataclass(frozen=True)
class Judgement:
    versions: tuple[int, ...] = ()
    invalid_reason: str | None = None

    @property
    def valid(self) -> bool:
        return self.invalid_reason is None


def judge_response(data: bytes, probe: Probe) -> Judgement:
    """Versions of a valid Version Negotiation answer, or why it is not one."""
    if not data:
        return Judgement(invalid_reason="empty")
    if not data[0] & 0x80:
        return Judgement(invalid_reason="short-header")
    if len(data) < 5 or int.from_bytes(data[1:5], "big") != 0:
        return Judgement(invalid_reason="not-version-negotiation")
    try:
        header = pull_quic_header(Buffer(data=data))
    except (BufferReadError, ValueError):
        return Judgement(invalid_reason="malformed")
    assert header.packet_type == QuicPacketType.VERSION_NEGOTIATION
    if header.destination_cid != probe.source_cid or header.source_cid != probe.destination_cid:
        return Judgement(invalid_reason="connection-id-mismatch")
    if not header.supported_versions:
        return Judgement(invalid_reason="no-versions")
    return Judgement(versions=tuple(header.supported_versions))


def format_version(version: int) -> str:
    """The one textual form of a version everywhere (tables, CLI): 0x%08x."""
    return f"0x{version:08x}"
