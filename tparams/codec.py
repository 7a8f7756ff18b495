"""Decoder and encoder of the ``quic_transport_parameters`` TLS extension.

The decoder keeps every parameter in wire order with its raw bytes and never
raises: whatever is wrong with the input (truncation, bad varints,
duplicates, over-long or wrong-length values, values out of range) becomes a
Finding on the result, because a malformed extension from a server is a
measurement, not an error.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Union

from tparams.registry import REGISTRY, ParamType, spec_for
from tparams.varint import VARINT_MAX, encode_varint, read_varint

Sender = Literal["client", "server"]

MAX_CONNECTION_ID_LENGTH = 20
STATELESS_RESET_TOKEN_LENGTH = 16

# Finding kinds: a small closed vocabulary so that findings can be counted in SQL.
TRUNCATED_ID = "truncated_id"
TRUNCATED_LENGTH = "truncated_length"
OVERLONG_LENGTH = "overlong_length"  # declared length runs past the extension
BAD_VARINT = "bad_varint"  # varint value that is not exactly one varint
DUPLICATE = "duplicate"
BAD_LENGTH = "bad_length"  # fixed-size or structured value of the wrong size
OUT_OF_RANGE = "out_of_range"
SERVER_ONLY = "server_only"  # a server-only parameter sent by a client


@dataclass(frozen=True)
class PreferredAddress:
    ipv4_address: str
    ipv4_port: int
    ipv6_address: str
    ipv6_port: int
    connection_id: bytes
    stateless_reset_token: bytes


@dataclass(frozen=True)
class VersionInformation:
    chosen_version: int
    available_versions: tuple[int, ...]


Value = Union[int, bool, bytes, PreferredAddress, VersionInformation, None]


class TransportParameter(NamedTuple):
    # A NamedTuple, not a dataclass: scans and captures build millions of these,
    # and a tuple is several times cheaper to create than a frozen dataclass.
    position: int
    id: int
    name: str
    raw: bytes
    value: Value  # None when the raw bytes do not decode as the registered type


class Finding(NamedTuple):
    kind: str
    detail: str
    position: int | None = None
    param_id: int | None = None


@dataclass(frozen=True)
class DecodedParameters:
    raw: bytes
    parameters: tuple[TransportParameter, ...]
    findings: tuple[Finding, ...] = field(default=())

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(p.id for p in self.parameters)

    @property
    def ok(self) -> bool:
        return not self.findings

    def get(self, name: str) -> Value:
        """The value of the first parameter called ``name`` (RFC 9000 forbids a second)."""
        for parameter in self.parameters:
            if parameter.name == name:
                return parameter.value
        return None

    def pairs(self) -> list[tuple[int, bytes]]:
        return [(p.id, p.raw) for p in self.parameters]


# Semantic limits of RFC 9000 18.2 on integer parameters: (minimum, maximum).
_RANGES = {
    "max_udp_payload_size": (1200, 65527),
    "ack_delay_exponent": (0, 20),
    "max_ack_delay": (0, (1 << 14) - 1),
    "active_connection_id_limit": (2, VARINT_MAX),
    "initial_max_streams_bidi": (0, 1 << 60),
    "initial_max_streams_uni": (0, 1 << 60),
}


def _decode_value(spec_type: ParamType, raw: bytes) -> tuple[Value, str | None, str | None]:
    """(value, finding kind, detail) for one parameter's raw bytes."""
    if spec_type is ParamType.VARINT:
        read = read_varint(raw, 0, len(raw))
        if read is None:
            return None, BAD_VARINT, f"value of {len(raw)} bytes holds no whole varint"
        if read[1] != len(raw):
            return None, BAD_VARINT, f"varint of {read[1]} bytes in a value of {len(raw)}"
        return read[0], None, None
    if spec_type is ParamType.FLAG:
        if raw:
            return None, BAD_LENGTH, f"flag carries {len(raw)} bytes, must be empty"
        return True, None, None
    if spec_type is ParamType.CONNECTION_ID:
        if len(raw) > MAX_CONNECTION_ID_LENGTH:
            return None, BAD_LENGTH, f"connection id of {len(raw)} bytes (max {MAX_CONNECTION_ID_LENGTH})"
        return raw, None, None
    if spec_type is ParamType.STATELESS_RESET_TOKEN:
        if len(raw) != STATELESS_RESET_TOKEN_LENGTH:
            return None, BAD_LENGTH, f"stateless reset token of {len(raw)} bytes (must be 16)"
        return raw, None, None
    if spec_type is ParamType.PREFERRED_ADDRESS:
        return _decode_preferred_address(raw)
    if spec_type is ParamType.VERSION_INFORMATION:
        if len(raw) < 4 or len(raw) % 4:
            return None, BAD_LENGTH, f"version_information of {len(raw)} bytes (4*n, n >= 1)"
        versions = [int.from_bytes(raw[i : i + 4], "big") for i in range(0, len(raw), 4)]
        return VersionInformation(versions[0], tuple(versions[1:])), None, None
    return raw, None, None


def _decode_preferred_address(raw: bytes) -> tuple[Value, str | None, str | None]:
    # 4 + 2 + 16 + 2 bytes of addresses, 1 length byte, the cid, 16 token bytes.
    if len(raw) < 41:
        return None, BAD_LENGTH, f"preferred_address of {len(raw)} bytes (min 41)"
    cid_length = raw[24]
    if len(raw) != 41 + cid_length or cid_length > MAX_CONNECTION_ID_LENGTH:
        return None, BAD_LENGTH, f"preferred_address of {len(raw)} bytes with a {cid_length}-byte cid"
    return (
        PreferredAddress(
            ipv4_address=str(ipaddress.IPv4Address(raw[0:4])),
            ipv4_port=int.from_bytes(raw[4:6], "big"),
            ipv6_address=str(ipaddress.IPv6Address(raw[6:22])),
            ipv6_port=int.from_bytes(raw[22:24], "big"),
            connection_id=raw[25 : 25 + cid_length],
            stateless_reset_token=raw[25 + cid_length :],
        ),
        None,
        None,
    )


def decode_transport_parameters(data: bytes, sender: Sender | None = None, sixteen_bit: bool = False) -> DecodedParameters:
    """Decode the extension body; never raises.

    ``sender`` enables the role checks (a client must not send server-only
    parameters). Parsing stops at the first structural break (a truncated id
    or length, or a length past the end) because nothing after it can be
    framed; everything before it is kept. ``sixteen_bit`` reads the framing of
    the drafts before 27 (a 16-bit length of the list, then 16-bit ids and
    lengths); the values are varints in both.
    """
    data = bytes(data)
    if sixteen_bit:
        return _decode_sixteen_bit(data, sender)
    parameters: list[TransportParameter] = []
    findings: list[Finding] = []
    seen: set[int] = set()
    offset = 0
    size = len(data)
    while offset < size:
        position = len(parameters)
        read = read_varint(data, offset, size)
        if read is None:
            findings.append(Finding(TRUNCATED_ID, f"varint at byte {offset} runs past the end", position))
            break
        param_id, after_id = read
        read = read_varint(data, after_id, size)
        if read is None:
            findings.append(
                Finding(TRUNCATED_LENGTH, f"length at byte {after_id} runs past the end", position, param_id)
            )
            break
        length, after_length = read
        end = after_length + length
        if end > size:
            findings.append(
                Finding(
                    OVERLONG_LENGTH,
                    f"length {length} at byte {after_id} but only {len(data) - after_length} bytes left",
                    position,
                    param_id,
                )
            )
            break
        _add_parameter(parameters, findings, seen, sender, param_id, data[after_length:end])
        offset = end
    return DecodedParameters(data, tuple(parameters), tuple(findings))


def _decode_sixteen_bit(data: bytes, sender: Sender | None) -> DecodedParameters:
    parameters: list[TransportParameter] = []
    findings: list[Finding] = []
    seen: set[int] = set()
    size = len(data)
    if size < 2:
        return DecodedParameters(data, (), (Finding(TRUNCATED_LENGTH, f"list length needs 2 bytes, {size} present"),))
    declared = int.from_bytes(data[:2], "big")
    if declared != size - 2:
        findings.append(Finding(BAD_LENGTH, f"list length {declared} but {size - 2} bytes follow"))
        size = min(size, 2 + declared)
    offset = 2
    while offset < size:
        position = len(parameters)
        if offset + 4 > size:
            findings.append(Finding(TRUNCATED_LENGTH, f"id and length at byte {offset} run past the end", position))
            break
        param_id = int.from_bytes(data[offset : offset + 2], "big")
        length = int.from_bytes(data[offset + 2 : offset + 4], "big")
        end = offset + 4 + length
        if end > size:
            findings.append(
                Finding(OVERLONG_LENGTH, f"length {length} at byte {offset + 2} but only {size - offset - 4} bytes left", position, param_id)
            )
            break
        _add_parameter(parameters, findings, seen, sender, param_id, data[offset + 4 : end])
        offset = end
    return DecodedParameters(data, tuple(parameters), tuple(findings))


def _add_parameter(
    parameters: list[TransportParameter], findings: list[Finding], seen: set[int], sender: Sender | None, param_id: int, raw: bytes
) -> None:
    """Decode one parameter's value by its registered type and note what is wrong with it."""
    position = len(parameters)
    known = _KNOWN.get(param_id)
    if known is None:
        spec = spec_for(param_id)
        known = (spec.name, spec.type, _RANGES.get(spec.name), spec.server_only)
    name, spec_type, limits, server_only = known
    # A varint whose first byte says it fills the value is the whole value (most parameters): read here
    if spec_type is ParamType.VARINT and raw and len(raw) == 1 << (raw[0] >> 6):
        value: Value = int.from_bytes(raw, "big") & ~(0xC0 << ((len(raw) - 1) * 8))
        kind = None
    else:
        value, kind, detail = _decode_value(spec_type, raw)
    if kind:
        findings.append(Finding(kind, f"{name}: {detail}", position, param_id))
    elif limits is not None and type(value) is int and not limits[0] <= value <= limits[1]:
        findings.append(Finding(OUT_OF_RANGE, f"{name}={value} outside [{limits[0]}, {limits[1]}]", position, param_id))
    if param_id in seen:
        findings.append(Finding(DUPLICATE, f"{name} sent again", position, param_id))
    if server_only and sender == "client":
        findings.append(Finding(SERVER_ONLY, f"{name} sent by a client", position, param_id))
    seen.add(param_id)
    parameters.append(TransportParameter(position, param_id, name, raw, value))


# What decoding a registered parameter takes, looked up once per parameter rather than rebuilt
_KNOWN = {i: (spec.name, spec.type, _RANGES.get(spec.name), spec.server_only) for i, spec in REGISTRY.items()}


def encode_value(param_id: int, value: Value) -> bytes:
    """The raw bytes of one parameter value, by the registered type of ``param_id``."""
    spec_type = spec_for(param_id).type
    if spec_type is ParamType.VARINT:
        return encode_varint(int(value))  # type: ignore[arg-type]
    if spec_type is ParamType.FLAG:
        if value is not True:
            raise ValueError(f"a flag parameter is sent as True, not {value!r}")
        return b""
    if isinstance(value, PreferredAddress):
        return (
            ipaddress.IPv4Address(value.ipv4_address).packed
            + value.ipv4_port.to_bytes(2, "big")
            + ipaddress.IPv6Address(value.ipv6_address).packed
            + value.ipv6_port.to_bytes(2, "big")
            + bytes([len(value.connection_id)])
            + value.connection_id
            + value.stateless_reset_token
        )
    if isinstance(value, VersionInformation):
        versions = (value.chosen_version, *value.available_versions)
        return b"".join(v.to_bytes(4, "big") for v in versions)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise ValueError(f"cannot encode {value!r} for parameter {param_id:#x}")


def encode_transport_parameters(parameters: Iterable[tuple[int, bytes]]) -> bytes:
    """Frame (id, raw value) pairs in the given order; the inverse of decoding."""
    return b"".join(
        encode_varint(param_id) + encode_varint(len(raw)) + bytes(raw) for param_id, raw in parameters
    )
