"""The lab's kwik servers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from lab.builds import JarServerKind
from lab.kinds import register_kind
from lab.topology import ServerSpec
from tparams.libraries import described

# flupke's HTTP/3 settings, which kwik merges over the server's own once ALPN
# picks h3: uni stream windows pinned to 1024, at most 3 uni streams, bidi
# windows at least 5120 (kwik's ApplicationProtocolSettings default).
H3_UNI_WINDOW = 1024
H3_MAX_UNI_STREAMS = 3
MIN_BIDI_WINDOW = 5120
BIDI_WINDOWS = ("initial_max_stream_data_bidi_local", "initial_max_stream_data_bidi_remote")


@register_kind
class KwikKind(JarServerKind):
    """kwik 0.10.8 (QUIC in Java) with flupke 0.9.4 (HTTP/3), lab/servers/kwik,
    flow control from ``options["parameters"]``.

    kwik has one window for both bidi directions (the larger asked for is
    sent in both) and starts a server with no peer streams at all, so unless
    asked otherwise the lab's server allows 100 bidi and 3 uni streams (what
    HTTP/3 needs). ``transport_parameters`` applies flupke's limits (above)
    and kwik's rule that the connection window is at least each stream window.
    """

    name = "kwik"
    SETTABLE = frozenset({"max_idle_timeout", "initial_max_data", *BIDI_WINDOWS,
                          "initial_max_streams_bidi", "initial_max_streams_uni"})
    ASKED_BY_DEFAULT: ClassVar[dict[str, int]] = {"initial_max_streams_bidi": 100, "initial_max_streams_uni": 3}

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        return sent_parameters(self.asked(spec))


def sent_parameters(asked: Mapping[str, int | bool]) -> dict[str, int | bool]:
    """What the kwik server (lab/servers/kwik) sends when its command line asks ``asked`` (transport
    parameters by name; the two stream counts given): kwik's own values, flupke's limits above, one bidi
    window (the larger asked) and a connection window at least as large (kwik refuses a smaller one)."""
    bidi = max([MIN_BIDI_WINDOW, *(int(asked[name]) for name in BIDI_WINDOWS if name in asked)])
    kwik = described("kwik")
    return {
        **kwik.defaults,
        "initial_max_stream_data_uni": H3_UNI_WINDOW,
        **kwik.fixed,
        **{name: asked[name] for name in ("max_idle_timeout",) if name in asked},
        "initial_max_data": max(int(asked.get("initial_max_data", 0)), bidi, H3_UNI_WINDOW),
        **dict.fromkeys(BIDI_WINDOWS, bidi),
        "initial_max_streams_bidi": asked["initial_max_streams_bidi"],
        "initial_max_streams_uni": min(int(asked["initial_max_streams_uni"]), H3_MAX_UNI_STREAMS),
    }
