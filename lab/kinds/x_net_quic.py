"""The lab's servers of Go's own QUIC, golang.org/x/net/quic."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class XNetQuicKind(BuiltServerKind):
    """golang.org/x/net/quic (the x/net version go.mod pins) behind
    lab/servers/x-net-quic, built by scripts/setup.sh into build/bin/x-net-quic.
    It shares crypto/tls with quic-go; an application picks neither its
    connection-ID length nor datagrams nor migration."""

    name = "x-net-quic"
    library = "x/net/quic"
    OFFERED = ("alpn", "retry")
    # What it sends given no flags (seen on the wire, x/net v0.56): no idle timeout.
    DEFAULTS = {
        "max_udp_payload_size": 1472,
        "initial_max_data": 1048576,
        "initial_max_stream_data_bidi_local": 1048576,
        "initial_max_stream_data_bidi_remote": 1048576,
        "initial_max_stream_data_uni": 1048576,
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 100,
        "disable_active_migration": True,
    }

    @property
    def binary(self) -> str:
        return "x-net-quic"
