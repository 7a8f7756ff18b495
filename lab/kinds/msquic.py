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
    # Bound to the dual-stack wildcard it completes IPv6 handshakes but no IPv4 one (seen in the lab,
    # msquic 2.5.1): bound to its IPv4 address, IPv4 only.
    listens_ipv6 = False
    # QuicConnGenerateLocalTransportParameters sends these whatever their value.
    ALWAYS_SENT = frozenset({"initial_max_data", "initial_max_stream_data_bidi_local",
                             "initial_max_stream_data_bidi_remote", "initial_max_stream_data_uni",
                             "max_udp_payload_size", "max_ack_delay", "active_connection_id_limit"})

    def sends(self, name: str, value: int | bool) -> bool:
        return name in self.ALWAYS_SENT or super().sends(name, value)
