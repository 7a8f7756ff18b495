"""The twelve performance-relevant transport parameters of the thesis, as a set.

A ParamSet keeps the values *as sent* (None = the peer did not send it) and
derives the *effective* values (RFC 9000 defaults filled in). Two
fingerprints identify deployments: one of the values, one of the wire order
of parameter ids (libraries differ in the order they serialise, which later
identifies them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from tparams.codec import DecodedParameters, encode_value
from tparams.errors import ToolError
from tparams.registry import id_for, is_grease
from tparams.varint import VARINT_MAX

PERFORMANCE_PARAMETERS: tuple[str, ...] = (
    "max_idle_timeout",
    "max_udp_payload_size",
    "initial_max_data",
    "initial_max_stream_data_bidi_local",
    "initial_max_stream_data_bidi_remote",
    "initial_max_stream_data_uni",
    "initial_max_streams_bidi",
    "initial_max_streams_uni",
    "ack_delay_exponent",
    "max_ack_delay",
    "disable_active_migration",
    "active_connection_id_limit",
)

# RFC 9000, 18.2: the value an endpoint assumes when the peer sends nothing.
RFC9000_DEFAULTS: dict[str, int | bool] = {
    "max_idle_timeout": 0,  # no idle timeout
    "max_udp_payload_size": 65527,
    "initial_max_data": 0,
    "initial_max_stream_data_bidi_local": 0,
    "initial_max_stream_data_bidi_remote": 0,
    "initial_max_stream_data_uni": 0,
    "initial_max_streams_bidi": 0,
    "initial_max_streams_uni": 0,
    "ack_delay_exponent": 3,
    "max_ack_delay": 25,
    "disable_active_migration": False,
    "active_connection_id_limit": 2,
}


class ParamSetError(ToolError, ValueError):
    """A parameter name or value that cannot be part of a ParamSet."""


@dataclass(frozen=True)
class ParamSet:
    max_idle_timeout: int | None = None
    max_udp_payload_size: int | None = None
    initial_max_data: int | None = None
    initial_max_stream_data_bidi_local: int | None = None
    initial_max_stream_data_bidi_remote: int | None = None
    initial_max_stream_data_uni: int | None = None
    initial_max_streams_bidi: int | None = None
    initial_max_streams_uni: int | None = None
    ack_delay_exponent: int | None = None
    max_ack_delay: int | None = None
    disable_active_migration: bool | None = None
    active_connection_id_limit: int | None = None

    def __post_init__(self) -> None:
        # getattr, not asdict: asdict deep-copies every field, a tenth of qscan pcap's time on bench_pcap's
        # capture (py-spy)
        for name in PERFORMANCE_PARAMETERS:
            _check_value(name, getattr(self, name))

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> "ParamSet":
        unknown = sorted(set(values) - set(PERFORMANCE_PARAMETERS))
        if unknown:
            raise ParamSetError(
                f"not one of the twelve parameters: {', '.join(unknown)} "
                f"(known: {', '.join(PERFORMANCE_PARAMETERS)})"
            )
        return cls(**{name: _coerce(name, value) for name, value in values.items()})

    @classmethod
    def from_decoded(cls, decoded: DecodedParameters) -> "ParamSet":
        """The twelve as a peer sent them; a value that did not decode counts as not sent
        (the decoder's findings say why)."""
        values: dict[str, object] = {}
        for parameter in decoded.parameters:
            if parameter.name in PERFORMANCE_PARAMETERS and parameter.name not in values:
                values[parameter.name] = parameter.value
        checked = {}
        for name, value in values.items():
            try:
                checked[name] = _coerce(name, value)
            except ParamSetError:
                checked[name] = None
        return cls(**checked)

    def as_sent(self) -> dict[str, int | bool | None]:
        return {name: getattr(self, name) for name in PERFORMANCE_PARAMETERS}

    def effective(self) -> dict[str, int | bool]:
        return {
            name: RFC9000_DEFAULTS[name] if value is None else value
            for name, value in self.as_sent().items()
        }

    def with_overrides(self, **values: object) -> "ParamSet":
        overrides = ParamSet.from_mapping(values)
        return replace(self, **{name: getattr(overrides, name) for name in values})

    def fingerprint(self) -> str:
        """16 hex digits over the values as sent; 'not sent' differs from a sent default."""
        return _digest(";".join(f"{name}={_canonical(value)}" for name, value in self.as_sent().items()))

    def transport_parameters(self) -> list[tuple[int, bytes]]:
        """(id, raw) pairs of the parameters that are sent, in the registry's order."""
        pairs = []
        for name, value in self.as_sent().items():
            if value is None or value is False:
                continue
            pairs.append((id_for(name), encode_value(id_for(name), value)))
        return pairs


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _canonical(value: int | bool | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _coerce(name: str, value: object) -> int | bool | None:
    """Accept the spellings set files and command lines use: ints, numeric strings, booleans."""
    if value is None:
        return None
    if name == "disable_active_migration":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"true", "1", "yes"}:
            return True
        if text in {"false", "0", "no"}:
            return False
        raise ParamSetError(f"disable_active_migration must be true or false, not {value!r}")
    if isinstance(value, bool):
        raise ParamSetError(f"{name} takes an integer, not {value!r}")
    try:
        text = str(value).strip()
        number = value if isinstance(value, int) else int(text, 16 if text.lower().startswith("0x") else 10)
    except ValueError:
        raise ParamSetError(f"{name} takes an integer, not {value!r}") from None
    _check_value(name, number)
    return number


def _check_value(name: str, value: object) -> None:
    if value is None:
        return
    if name == "disable_active_migration":
        if not isinstance(value, bool):
            raise ParamSetError(f"disable_active_migration must be a boolean, not {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= VARINT_MAX:
        raise ParamSetError(f"{name} must be an integer in [0, 2^62-1], not {value!r}")


def order_signature(param_ids: Iterable[int]) -> str:
    """The wire order as readable text, e.g. '04-11-05-G-0f'.

    GREASE ids are random per connection, so each becomes 'G': the position of
    the GREASE parameter is a library trait, its id is not.
    """
    return "-".join("G" if is_grease(pid) else f"{pid:02x}" for pid in param_ids)


def order_fingerprint(param_ids: Iterable[int]) -> str:
    return _digest(order_signature(param_ids))

