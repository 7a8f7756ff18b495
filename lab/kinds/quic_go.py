"""The lab's own quic-go servers (caddy runs quic-go too, an older one, with no settings to speak of)."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class QuicGoKind(BuiltServerKind):
    """quic-go (the version go.mod pins) behind lab/servers/quic-go, built by
    scripts/setup.sh into build/bin/quic-go. One window for every stream."""

    name = "quic-go"
