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


def read_varint(data: bytes, offset: int, size: int) -> tuple[int, int] | None:
    """decode_varint without the exception, for the first ``size`` bytes of ``data``: None where
    the integer does not fit. The codec's hot path runs this per id and length."""
    if offset >= size:
        return None
    first = data[offset]
    if first < 0x40:
        return first, offset + 1
    end = offset + (1 << (first >> 6))
    if end > size:
        return None
    return int.from_bytes(data[offset:end], "big") & ~(0xC0 << ((end - offset - 1) * 8)), end


def decode_varint(data: bytes, offset: int = 0) -> tuple[int, int]:
    """Read one varint at ``offset``; return (value, offset after it).

    Raises ValueError when the buffer ends inside the integer: callers that
    must never raise (the codec) turn that into a finding.
    """
    found = read_varint(data, offset, len(data))
    if found is not None:
        return found
    if offset >= len(data):
        raise ValueError("varint starts past the end of the buffer")
    raise ValueError(f"varint needs {1 << (data[offset] >> 6)} bytes, {len(data) - offset} left")
