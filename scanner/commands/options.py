"""Options several qscan commands share, declared once so their names and help agree."""

from __future__ import annotations

from typing import Annotated, Callable, Optional

import typer

from common.cliapp import options_in_place_of

HandshakeTimeout = Annotated[float, typer.Option("--timeout", help="Seconds to wait for each handshake.")]
HandshakeRate = Annotated[float, typer.Option("--handshake-rate", help="New handshakes per second (0 = unlimited).")]
Concurrency = Annotated[int, typer.Option("--concurrency", help="Handshakes in flight at once.")]
Workers = Annotated[int, typer.Option("--workers", help="Handshake worker processes.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]
JsonOutcome = Annotated[bool, typer.Option("--json", help="Print the outcome as one JSON object.")]
Strict = Annotated[bool, typer.Option("--strict", help="Reject the whole file if any line is malformed (default: "
                                                     "skip it, one warning a line).")]
Netns = Annotated[Optional[str], typer.Option("--netns", help="Run inside this network namespace (default: where "
                                              "qscan runs), e.g. the lab's client namespace.")]


def handshake_options(timeout: float = 5.0, rate: float = 100.0, concurrency: int = 1000,
                      workers: int = 1) -> Callable[[Callable], Callable]:
    """Give a command the handshake options (--timeout, --handshake-rate, --concurrency, --workers), with
    these defaults, in place of its parameter ``settings``, which receives them as one ScanSettings."""
    def settings(timeout: float, handshake_rate: float, concurrency: int, workers: int):
        from scanner.engine import ScanSettings  # the engine (aioquic's TLS) where a scan runs, not at --help
        return ScanSettings(timeout=timeout, rate=handshake_rate, concurrency=concurrency, workers=workers)

    return options_in_place_of("settings", {
        "timeout": (HandshakeTimeout, timeout), "handshake_rate": (HandshakeRate, rate),
        "concurrency": (Concurrency, concurrency), "workers": (Workers, workers)}, settings)
