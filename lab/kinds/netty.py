"""The lab's netty servers."""

from __future__ import annotations

from typing import ClassVar

from lab.builds import JarServerKind
from lab.kinds import register_kind
from lab.topology import ServerSpec


@register_kind
class NettyKind(JarServerKind):
    """netty-incubator-codec-quic 0.0.20.Final, lab/servers/netty: quiche
    (Cloudflare's QUIC in Rust, as of late 2021) inside, driven by netty over JNI.

    Named ``netty``, not quiche: netty decides much of what the wire shows
    (it builds quiche's configuration, and its only token handler sends a
    Retry for every new connection, its token starting with ASCII "netty"),
    and its quiche is years older than the quiche crate's. What quiche itself
    decides (parameter order, 20-byte connection IDs, the bare 0x178 close)
    may well match a quiche server's; if identification cannot tell the two
    apart without a Retry, that is its finding to report, not a reason to
    rename the lab's server.

    All seven flow-control parameters are settable; quiche leaves out those
    at 0 (its default for every window and stream limit, and for the idle
    timeout). Unless asked otherwise the lab's server uses the values of
    netty's QuicServerExample.
    """

    name = "netty"
    SETTABLE = frozenset({"max_idle_timeout", "initial_max_data", "initial_max_stream_data_bidi_local",
                          "initial_max_stream_data_bidi_remote", "initial_max_stream_data_uni",
                          "initial_max_streams_bidi", "initial_max_streams_uni"})
    ASKED_BY_DEFAULT: ClassVar[dict[str, int]] = {
        "max_idle_timeout": 5000,
        "initial_max_data": 10000000,
        "initial_max_stream_data_bidi_local": 1000000,
        "initial_max_stream_data_bidi_remote": 1000000,
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 100,
    }

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        asked = self.asked(spec)
        return {**self.descriptor.fixed, **{name: value for name, value in asked.items() if name in self.SETTABLE and value}}
