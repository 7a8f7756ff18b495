"""Options several qscan commands share, declared once so their names and help agree."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

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
