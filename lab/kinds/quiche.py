"""The lab's quiche servers."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class QuicheKind(BuiltServerKind):
    """quiche 0.30 with its bundled BoringSSL (lab/servers/quiche)."""

    name = "quiche"

    def sends(self, name: str, value: int | bool) -> bool:
        # quiche 0.30 (transport_params.rs) leaves out zeros, not RFC defaults,
        # and of those only active_connection_id_limit 2.
        return value not in (0, False) and not (name == "active_connection_id_limit" and value == 2)
