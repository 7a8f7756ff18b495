"""qscan: find QUIC servers and clients and store the transport parameters they send."""

from __future__ import annotations

from common.cliapp import make_app, run

# One entry per scanner/commands module (a command group), each adding its commands to ``app``.
app = make_app(__doc__.splitlines()[0], "qscan targets hosts.txt --out scan.duckdb",
               "scanner.commands", ("lab", "scan", "capture", "discover", "campaign", "diff"))


def main() -> None:
    run(app, "qscan")
