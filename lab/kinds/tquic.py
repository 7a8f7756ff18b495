"""The lab's tquic servers."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class TquicKind(BuiltServerKind):
    """tquic 1.6 with its bundled BoringSSL (lab/servers/tquic)."""

    name = "tquic"
    library = "tquic"
    OFFERED = ("alpn", "cid_length", "active_connection_id_limit", "retry")
    # tquic 1.6's Config::new() and TransportParams defaults (idle timeout off).
    DEFAULTS = {
        "max_udp_payload_size": 65527,
        "initial_max_data": 10485760,
        "initial_max_stream_data_bidi_local": 5242880,
        "initial_max_stream_data_bidi_remote": 2097152,
        "initial_max_stream_data_uni": 1048576,
        "initial_max_streams_bidi": 200,
        "initial_max_streams_uni": 100,
        "ack_delay_exponent": 3,
        "max_ack_delay": 25,
        "active_connection_id_limit": 2,
    }

    def sends(self, name: str, value: int | bool) -> bool:
        # tquic 1.6 (trans_param.rs) leaves out zeros, not RFC defaults.
        return value not in (0, False)
