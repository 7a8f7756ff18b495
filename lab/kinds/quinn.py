"""The lab's quinn servers."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class QuinnKind(BuiltServerKind):
    """quinn 0.11 with rustls and ring (lab/servers/quinn). quinn has one
    window for all streams: the three initial_max_stream_data_* must agree."""

    name = "quinn"
    library = "quinn"
    OFFERED = ("alpn", "cid_length", "datagrams", "disable_active_migration", "preferred_address", "retry")
    # quinn-proto 0.11's TransportConfig and EndpointConfig defaults.
    DEFAULTS = {
        "max_idle_timeout": 30000,
        "max_udp_payload_size": 1472,
        "initial_max_data": (1 << 62) - 1,
        "initial_max_stream_data_bidi_local": 1250000,
        "initial_max_stream_data_bidi_remote": 1250000,
        "initial_max_stream_data_uni": 1250000,
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 100,
        "active_connection_id_limit": 5,
    }
