"""The lab's quinn servers."""

from __future__ import annotations

from lab.kinds import register_kind
from lab.kinds.built import BuiltServerKind


@register_kind
class QuinnKind(BuiltServerKind):
    """quinn 0.11 with rustls and ring (lab/servers/quinn). quinn has one
    window for all streams: the three initial_max_stream_data_* must agree."""

    name = "quinn"
