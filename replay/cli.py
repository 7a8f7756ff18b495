"""qreplay: replay QUIC transport-parameter sets through real stacks over an emulated link.

Each command group lives in its own module under replay/commands and exposes
``register(app)``; this file only assembles them.
"""

from __future__ import annotations

from common.cliapp import make_app, run

app = make_app(__doc__.splitlines()[0], "qreplay --set firefox --delay 30ms --size 5MB --reps 2 --out replay.duckdb")

# One entry per replay/commands module, each adding its commands to ``app``.
COMMAND_MODULES: tuple[str, ...] = ("run", "link", "plot", "reproduce", "pairs", "fidelity")

for _name in COMMAND_MODULES:
    __import__(f"replay.commands.{_name}", fromlist=["register"]).register(app)


def main() -> None:
    run(app, "qreplay")
