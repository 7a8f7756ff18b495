"""Every QUIC transport parameter IANA lists, with the type of its value.

Source: IANA "QUIC Transport Parameters" registry (permanent and provisional
entries) and the documents it cites. Ids that are not listed decode as
opaque ``unknown_0x..`` so that nothing a peer sends is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ParamType(Enum):
    VARINT = "varint"
    FLAG = "flag"  # zero-length value; presence is the information
    CONNECTION_ID = "connection_id"
    STATELESS_RESET_TOKEN = "stateless_reset_token"
    PREFERRED_ADDRESS = "preferred_address"
    VERSION_INFORMATION = "version_information"
    OPAQUE = "opaque"


@dataclass(frozen=True)
class ParamSpec:
    id: int
    name: str
    type: ParamType
    status: str  # "permanent", "provisional", "grease" or "unknown"
    reference: str
    # Only a server may send it (RFC 9000, 18.2); a client sending it is a finding.
    server_only: bool = False


_V, _F, _C = ParamType.VARINT, ParamType.FLAG, ParamType.CONNECTION_ID

REGISTRY: dict[int, ParamSpec] = {
    spec.id: spec
    for spec in (
        ParamSpec(0x00, "original_destination_connection_id", _C, "permanent", "RFC 9000", True),
        ParamSpec(0x01, "max_idle_timeout", _V, "permanent", "RFC 9000"),
        ParamSpec(0x02, "stateless_reset_token", ParamType.STATELESS_RESET_TOKEN, "permanent", "RFC 9000", True),
        ParamSpec(0x03, "max_udp_payload_size", _V, "permanent", "RFC 9000"),
        ParamSpec(0x04, "initial_max_data", _V, "permanent", "RFC 9000"),
        ParamSpec(0x05, "initial_max_stream_data_bidi_local", _V, "permanent", "RFC 9000"),
        ParamSpec(0x06, "initial_max_stream_data_bidi_remote", _V, "permanent", "RFC 9000"),
        ParamSpec(0x07, "initial_max_stream_data_uni", _V, "permanent", "RFC 9000"),
        ParamSpec(0x08, "initial_max_streams_bidi", _V, "permanent", "RFC 9000"),
        ParamSpec(0x09, "initial_max_streams_uni", _V, "permanent", "RFC 9000"),
        ParamSpec(0x0A, "ack_delay_exponent", _V, "permanent", "RFC 9000"),
        ParamSpec(0x0B, "max_ack_delay", _V, "permanent", "RFC 9000"),
        ParamSpec(0x0C, "disable_active_migration", _F, "permanent", "RFC 9000"),
        ParamSpec(0x0D, "preferred_address", ParamType.PREFERRED_ADDRESS, "permanent", "RFC 9000", True),
        ParamSpec(0x0E, "active_connection_id_limit", _V, "permanent", "RFC 9000"),
        ParamSpec(0x0F, "initial_source_connection_id", _C, "permanent", "RFC 9000"),
        ParamSpec(0x10, "retry_source_connection_id", _C, "permanent", "RFC 9000", True),
        ParamSpec(0x11, "version_information", ParamType.VERSION_INFORMATION, "permanent", "RFC 9368"),
        ParamSpec(0x20, "max_datagram_frame_size", _V, "permanent", "RFC 9221"),
        ParamSpec(0x173E, "discard", ParamType.OPAQUE, "provisional", "IANA provisional (K. Oku)"),
        ParamSpec(0x26AB, "google_handshake_message", ParamType.OPAQUE, "provisional", "Google"),
        ParamSpec(0x2AB2, "grease_quic_bit", _F, "permanent", "RFC 9287"),
        ParamSpec(0x3127, "initial_rtt", _V, "provisional", "Google"),
        ParamSpec(0x3128, "google_connection_options", ParamType.OPAQUE, "provisional", "Google"),
        ParamSpec(0x3129, "user_agent", ParamType.OPAQUE, "provisional", "Google"),
        ParamSpec(0x4752, "google_version", ParamType.OPAQUE, "provisional", "Google"),
        ParamSpec(0x7157, "enable_time_stamp", _V, "provisional", "draft-huitema-quic-ts-02"),
        ParamSpec(0x7158, "enable_time_stamp_v2", _V, "provisional", "draft-huitema-quic-ts-05"),
        ParamSpec(0xDE1A, "min_ack_delay_draft_delayed_ack_00", _V, "provisional", "draft-iyengar-quic-delayed-ack-00"),
        ParamSpec(0xFF73DB, "version_information_draft", ParamType.VERSION_INFORMATION, "provisional", "draft-ietf-quic-version-negotiation"),
        ParamSpec(0xFF02DE1A, "min_ack_delay_draft_delayed_ack_02", _V, "provisional", "draft-iyengar-quic-delayed-ack-02"),
        ParamSpec(0xFF03DE1A, "min_ack_delay_draft_ack_frequency_00", _V, "provisional", "draft-ietf-quic-ack-frequency-00"),
        ParamSpec(0xFF04DE1A, "min_ack_delay", _V, "provisional", "draft-ietf-quic-ack-frequency"),
        ParamSpec(0xFF04DE1B, "min_ack_delay_draft_ack_frequency_07", _V, "provisional", "draft-ietf-quic-ack-frequency-07"),
        ParamSpec(0x0F739BBC1B666D05, "enable_multipath", ParamType.OPAQUE, "provisional", "draft-ietf-quic-multipath-05"),
        ParamSpec(0x0F739BBC1B666D06, "enable_multipath_06", ParamType.OPAQUE, "provisional", "draft-ietf-quic-multipath-06"),
        ParamSpec(0x17F7586D2CB571, "reset_stream_at", _F, "provisional", "draft-ietf-quic-reliable-stream-reset"),
    )
}

_BY_NAME = {spec.name: spec.id for spec in REGISTRY.values()}


def has_grease_form(param_id: int) -> bool:
    """Of the reserved form 31*N+27 (RFC 9000, 18.1), registered or not."""
    return param_id >= 27 and (param_id - 27) % 31 == 0


# Registered ids that happen to have the reserved form keep their names: Firefox's
# min_ack_delay 0xff02de1a is 31*N+27 and is no GREASE.
REGISTERED_GREASE_FORM = frozenset(param_id for param_id in REGISTRY if has_grease_form(param_id))


def is_grease(param_id: int) -> bool:
    """An unregistered id of the reserved form 31*N+27: a peer's GREASE, to be ignored.

    The one definition: the scan store names every other id in its
    ``parameter_names`` table, and the SQL views name an id GREASE only
    when that table does not list it.
    """
    return has_grease_form(param_id) and param_id not in REGISTRY


def spec_for(param_id: int) -> ParamSpec:
    spec = REGISTRY.get(param_id)
    if spec is not None:
        return spec
    if is_grease(param_id):
        return ParamSpec(param_id, "GREASE", ParamType.OPAQUE, "grease", "RFC 9000, 18.1")
    return ParamSpec(param_id, f"unknown_{param_id:#x}", ParamType.OPAQUE, "unknown", "")


def id_for(name: str) -> int:
    """The id of a registered parameter name; KeyError for anything else."""
    return _BY_NAME[name]
