"""aioquic through our own bulk client and server (replay/aioquic_endpoints): every one of the twelve
parameters can be set, bidi_local, bidi_remote and uni separately. Python-speed: expect far lower
goodput than the C and Go stacks; it is here for parameter coverage, not for speed.

Its server speaks HTTP/3 beside hq-interop (aioquic's own h3 layer, chosen by the client's ALPN), so a
browser loads its page, downloads and uploads through aioquic configured with any set. Its server paces a
stream at the bitrate asked (tparams.workloads' stream), over hq-interop and h3, and its stream client plays
one back. qlog: aioquic's own QuicFileLogger, one JSON file a connection (its recovery metrics carry cwnd and
bytes_in_flight), written when the connection ends or the program does (common.QlogFiles), under --qlog
only: a traced run without it has no window from aioquic's qlog."""

from __future__ import annotations

import sys

from replay.stacks.base import ReplayProgram
from tparams.paramset import PERFORMANCE_PARAMETERS


class Aioquic(ReplayProgram):
    name = "aioquic"
    replay_protocol = frozenset({"down", "up", "many", "paced"})
    settable = {"client": frozenset(PERFORMANCE_PARAMETERS), "server": frozenset(PERFORMANCE_PARAMETERS)}
    cc_names = frozenset({"cubic"})  # (and Reno, aioquic's default, which qreplay does not offer)
    writes_qlog = True
    # in Python it costs: 20 MB at 0 ms took 4.0-4.3 CPU s at the server and 4.4-4.6 at the client with qlog,
    # 1.7 and 1.9-2.1 without (goodput 33-63 against 50-88 Mbit/s; 2026-11-29, load 5): a trace leaves it off
    qlog_when_traced = False
    serves_page = True  # over h3: the files of workdir/htdocs (QREPLAY_HTDOCS)
    page_protocol = frozenset({"down", "up", "many", "paced"})

    def command(self, role) -> list[str]:
        return [sys.executable, "-m", self.library.programs[f"replay-{role}"]]

    def unavailable_reason(self) -> str | None:
        try:
            import aioquic  # noqa: F401
        except ImportError:
            return "aioquic is not installed: pip install aioquic==1.7.2 into the qreplay environment"
        return None


STACK = Aioquic()
