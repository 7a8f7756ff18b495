"""The lab's quiche servers."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class QuicheKind(BuiltServerKind):
    """quiche 0.30 with its bundled BoringSSL (lab/servers/quiche)."""

    name = "quiche"
    library = "quiche"
    OFFERED = ("alpn", "cid_length", "datagrams", "disable_active_migration", "active_connection_id_limit")
    # quiche's flow-control defaults are 0; without flags our server takes
    # those of quiche's example server (apps/), the rest are quiche's own.
    DEFAULTS = {
        "max_idle_timeout": 30000,
        "max_udp_payload_size": 65527,
        "initial_max_data": 10000000,
        "initial_max_stream_data_bidi_local": 1000000,
        "initial_max_stream_data_bidi_remote": 1000000,
        "initial_max_stream_data_uni": 1000000,
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 100,
        "ack_delay_exponent": 3,
        "max_ack_delay": 25,
        "active_connection_id_limit": 2,
    }

    def sends(self, name: str, value: int | bool) -> bool:
        # quiche 0.30 (transport_params.rs) leaves out zeros, not RFC defaults,
        # and of those only active_connection_id_limit 2.
        return value not in (0, False) and not (name == "active_connection_id_limit" and value == 2)
