"""QUIC variable-length integers (RFC 9000, section 16)."""

from __future__ import annotations

VARINT_MAX = (1 << 62) - 1


def encode_varint(value: int) -> bytes:
    """The shortest encoding of ``value``."""
    if value < 0 or value > VARINT_MAX:
        raise ValueError(f"varint out of range: {value}")
    if value < 1 << 6:
        return value.to_bytes(1, "big")
    if value < 1 << 14:
        return (value | 0x4000).to_bytes(2, "big")
    if value < 1 << 30:
        return (value | 0x8000_0000).to_bytes(4, "big")
    return (value | 0xC000_0000_0000_0000).to_bytes(8, "big")


def decode_varint(data: bytes, offset: int = 0) -> tuple[int, int]:
    """Read one varint at ``offset``; return (value, offset after it).

    Raises ValueError when the buffer ends inside the integer: callers that
    must never raise (the codec) turn that into a finding.
    """
    if offset >= len(data):
        raise ValueError("varint starts past the end of the buffer")
    first = data[offset]
    length = 1 << (first >> 6)
    end = offset + length
    if end > len(data):
        raise ValueError(f"varint needs {length} bytes, {len(data) - offset} left")
    value = first & 0x3F
    for byte in data[offset + 1 : end]:
        value = (value << 8) | byte
    return value, end
