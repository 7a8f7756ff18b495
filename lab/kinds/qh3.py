"""The lab's qh3 servers."""

from __future__ import annotations

from lab.aioquic_server import SETTABLE, STREAM_WINDOWS
from lab.kinds import asked_parameters, register_kind
from lab.kinds.aioquic import AioquicKind
from lab.topology import ServerSpec


@register_kind
class Qh3Kind(AioquicKind):
    """qh3 2.1 (aioquic's fork, Rust core) behind lab/qh3_server.py; flow
    control set as aioquic's (one window for the three stream directions).

    Seen here: with aioquic 1.7 clients (our scanner's, the tests') qh3 2.1.0
    completes the handshake, then every send fails in its Rust core
    ("packet builder capacity exhausted", a traceback per attempt in the
    server's log), so an HTTP/3 request from aioquic gets no answer; qh3's
    own client is served. Handshakes, and so the scans, are unaffected.
    """

    name = "qh3"

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        asked = {name: value for name, value in asked_parameters(spec).items() if name in SETTABLE}
        windows = [asked.pop(name) for name in STREAM_WINDOWS if name in asked]
        return {**self.descriptor.defaults, **asked, **(dict.fromkeys(STREAM_WINDOWS, max(windows)) if windows else {})}
