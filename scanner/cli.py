"""qscan: find QUIC servers and clients and store the transport parameters they send.

Each command group lives in its own module under scanner/commands and exposes
``register(app)``; this file only assembles them.
"""

from __future__ import annotations

from common.cliapp import make_app, run

app = make_app(__doc__.splitlines()[0], "qscan targets hosts.txt --out scan.duckdb")

# One entry per scanner/commands module, each adding its commands to ``app``.
COMMAND_MODULES: tuple[str, ...] = ("lab", "scan", "capture", "discover", "campaign", "diff")

for _name in COMMAND_MODULES:
    __import__(f"scanner.commands.{_name}", fromlist=["register"]).register(app)


def main() -> None:
    run(app, "qscan")
