"""Where the server side of a two-host run starts: one module a kind (``netns``, ``ssh``, ``srun``), each
defining one ``LAUNCHER`` class; adding a kind is adding a file.

A launcher turns a command line into the command line that runs it on the server's host, so everything
that starts, waits for or stops a server (common.process) works through it unchanged.
"""

from __future__ import annotations

import importlib
import pkgutil

from common.launchers.base import Launcher
from tparams.errors import ToolError


def every_kind() -> dict[str, type[Launcher]]:
    kinds = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            launcher = importlib.import_module(f"{__name__}.{info.name}").LAUNCHER
            kinds[launcher.kind] = launcher
    return dict(sorted(kinds.items()))


def get_launcher(spec: str) -> Launcher:
    """A launcher from ``KIND:WHERE`` (``netns:NAMESPACE``, ``ssh:[USER@]HOST``, ``srun:NODE``)."""
    kinds = every_kind()
    kind, _, where = spec.partition(":")
    if kind not in kinds or not where:
        raise ToolError(f"--launcher {spec!r}: give KIND:WHERE, KIND one of {', '.join(kinds)} "
                        "(e.g. netns:NAMESPACE, ssh:HOST, srun:NODE)")
    return kinds[kind](where)
