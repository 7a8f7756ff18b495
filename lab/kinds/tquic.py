"""The lab's tquic servers."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class TquicKind(BuiltServerKind):
    """tquic 1.6 with its bundled BoringSSL (lab/servers/tquic)."""

    name = "tquic"

    def sends(self, name: str, value: int | bool) -> bool:
        # tquic 1.6 (trans_param.rs) leaves out zeros, not RFC defaults.
        return value not in (0, False)
