"""The lab's s2n-quic servers."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class S2nQuicKind(BuiltServerKind):
    """s2n-quic 1.91 with its default TLS, s2n-tls (lab/servers/s2n-quic)."""

    name = "s2n-quic"
    library = "s2n-quic"
    OFFERED = ("alpn", "cid_length", "disable_active_migration")
    # s2n-quic 1.91: Limits::new() (the RECOMMENDED values), and the endpoint's
    # own active_connection_id_limit (peer_id_registry::ACTIVE_CONNECTION_ID_LIMIT).
    DEFAULTS = {
        "max_idle_timeout": 30000,
        "initial_max_data": 3750000,
        "initial_max_stream_data_bidi_local": 3750000,
        "initial_max_stream_data_bidi_remote": 3750000,
        "initial_max_stream_data_uni": 3750000,
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 100,
        "active_connection_id_limit": 3,
    }
