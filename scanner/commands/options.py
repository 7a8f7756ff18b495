"""Options several qscan commands share, declared once so their names and help agree."""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Callable, Optional

import typer

from scanner.engine import ScanSettings

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
    options = {"timeout": (HandshakeTimeout, timeout), "handshake_rate": (HandshakeRate, rate),
               "concurrency": (Concurrency, concurrency), "workers": (Workers, workers)}

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def with_settings(**given):
            chosen = {name: given.pop(name) for name in options}
            settings = ScanSettings(timeout=chosen["timeout"], rate=chosen["handshake_rate"],
                                    concurrency=chosen["concurrency"], workers=chosen["workers"])
            return command(**given, settings=settings)

        # typer reads the options from the signature: the command's own, the four in place of ``settings``
        params = []
        for param in inspect.signature(command, eval_str=True).parameters.values():
            if param.name != "settings":
                params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))
                continue
            params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default)
                       for name, (kind, default) in options.items()]
        with_settings.__signature__ = inspect.Signature(params)
        with_settings.__annotations__ = {p.name: p.annotation for p in params}
        return with_settings

    return decorate
