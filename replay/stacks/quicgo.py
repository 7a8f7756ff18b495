"""quic-go through our own bulk client and server (replay/quicgo, built to build/bin by scripts/setup.sh).

quic-go advertises a single stream window for every stream type, so each
side sets the one that governs the download (the client's bidi_local, the
server's bidi_remote) and reports the other two as not applied.

Its server paces a stream at the bitrate asked (tparams.workloads' stream, aioquic's rule); its stream client
(qgstream) records when the bytes arrive and qreplay plays them (tparams.workloads.played).
"""

from __future__ import annotations

from pathlib import Path

from common import versions
from replay.stacks.base import GO_BIN_DIR, ReplayProgram

COMMON = ("max_idle_timeout", "initial_max_data", "initial_max_streams_bidi", "initial_max_streams_uni")
STREAM_WINDOW = {"client": "initial_max_stream_data_bidi_local", "server": "initial_max_stream_data_bidi_remote"}


class QuicGo(ReplayProgram):
    name = "quic-go"
    replay_protocol = frozenset({"down", "up", "many", "paced"})
    writes_qlog = True
    settable = {role: frozenset((*COMMON, window)) for role, window in STREAM_WINDOW.items()}
    cc_names = frozenset({"cubic"})  # quic-go's only congestion control

    def __init__(self, bin_dir: Path = GO_BIN_DIR):
        self.binaries = {role: bin_dir / self.library.programs[f"replay-{role}"]
                         for role in ("client", "server", "stream-client")}

    def command(self, role) -> list[str]:
        return [str(self.binaries[role])]

    def version(self) -> str | None:
        """quic-go's version in go.mod, which set-up builds the programs with (without go.mod's "v")."""
        found = versions.version(self.library.packages[0])
        return found.removeprefix("v") if found else None

    def unavailable_reason(self) -> str | None:
        missing = [p.name for p in self.binaries.values() if not p.exists()]
        return f"{' and '.join(missing)} not built: run scripts/setup.sh (needs Go)" if missing else None


STACK = QuicGo()
