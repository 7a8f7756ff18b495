"""Judging what came back from a probe: a Version Negotiation packet, or not.

Pure: no I/O. An answer is only trusted when it is a well-formed Version
Negotiation packet (RFC 9000 17.2.1) for *our* probe: it echoes our source
connection ID as its destination and our destination ID as its source (the
echo proves it answers the probe, not some stray datagram), lists at least one
version, and does not list the reserved version we sent (6.1: a client
discards such a packet). Anything else is counted by its reason, never stored
as a server.
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
    if probe.version in header.supported_versions:
        return Judgement(invalid_reason="lists-probe-version")
    return Judgement(versions=tuple(header.supported_versions))


def format_version(version: int) -> str:
    """The one textual form of a version everywhere (tables, CLI): 0x%08x."""
    return f"0x{version:08x}"
