"""qreplay: replay QUIC transport-parameter sets through real stacks over an emulated link."""

from __future__ import annotations

from common.cliapp import make_app, run

# One entry per replay/commands module (a command group), each adding its commands to ``app``.
app = make_app(__doc__.splitlines()[0], "qreplay --set firefox --delay 30ms --size 5MB --reps 2 --out replay.duckdb",
               "replay.commands", ("run", "link", "plot", "reproduce", "pairs", "fidelity", "impact", "why", "campaign"))


def main() -> None:
    run(app, "qreplay")
