"""The lab's own quic-go servers (caddy runs quic-go too, an older one, with no settings to speak of)."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class QuicGoKind(BuiltServerKind):
    """quic-go (the version go.mod pins) behind lab/servers/quic-go, built by
    scripts/setup.sh into build/bin/quic-go. One window for every stream."""

    name = "quic-go"
    library = "quic-go"
    OFFERED = ("alpn", "cid_length", "datagrams", "retry")
    # What it sends given no flags (seen on the wire, quic-go v0.65's Config defaults).
    DEFAULTS = {
        "max_idle_timeout": 30000,
        "max_udp_payload_size": 1452,
        "initial_max_data": 786432,
        "initial_max_stream_data_bidi_local": 524288,
        "initial_max_stream_data_bidi_remote": 524288,
        "initial_max_stream_data_uni": 524288,
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 100,
        "max_ack_delay": 26,
        "active_connection_id_limit": 4,
    }

    @property
    def binary(self) -> str:
        return "quic-go"
