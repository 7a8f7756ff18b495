"""The lab's s2n-quic servers."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class S2nQuicKind(BuiltServerKind):
    """s2n-quic 1.91 with its default TLS, s2n-tls (lab/servers/s2n-quic)."""

    name = "s2n-quic"
