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
