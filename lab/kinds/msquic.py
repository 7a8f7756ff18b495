"""The lab's msquic servers."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class MsquicKind(BuiltServerKind):
    """msquic 2.5.1 with quictls, from the msquic crate (lab/servers/msquic).
    Its stream windows must be powers of two; its peer stream counts default
    to 0, so our server allows 100 bidirectional and 3 unidirectional (HTTP/3's three)."""

    name = "msquic"
    library = "msquic"
    # Bound to the dual-stack wildcard it completes IPv6 handshakes but no IPv4 one (seen in the lab,
    # msquic 2.5.1): bound to its IPv4 address, IPv4 only.
    listens_ipv6 = False
    # Its connection IDs are 9 bytes, or 14 with the server's address in them (lab/servers/msquic).
    OFFERED = ("alpn", "cid_length", "datagrams")
    # msquic 2.5.1's defaults (quicdef.h; ack_delay_exponent 8, max_ack_delay
    # 25 + its 1 ms timer resolution) and our two stream counts.
    DEFAULTS = {
        "max_idle_timeout": 30000,
        "max_udp_payload_size": 1472,
        "initial_max_data": 16777216,
        "initial_max_stream_data_bidi_local": 65536,
        "initial_max_stream_data_bidi_remote": 65536,
        "initial_max_stream_data_uni": 65536,
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 3,
        "ack_delay_exponent": 8,
        "max_ack_delay": 26,
        "active_connection_id_limit": 4,
    }
    # QuicConnGenerateLocalTransportParameters sends these whatever their value.
    ALWAYS_SENT = frozenset({"initial_max_data", "initial_max_stream_data_bidi_local",
                             "initial_max_stream_data_bidi_remote", "initial_max_stream_data_uni",
                             "max_udp_payload_size", "max_ack_delay", "active_connection_id_limit"})

    def sends(self, name: str, value: int | bool) -> bool:
        return name in self.ALWAYS_SENT or super().sends(name, value)
