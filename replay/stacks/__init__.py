"""QUIC stacks qreplay can drive. Each module here defines one ``STACK`` (or several, as ``STACKS``); adding a
stack is adding a file."""

from __future__ import annotations

import importlib
import pkgutil

from replay.stacks.base import Stack
from tparams.errors import ToolError


# Names a stack was once known by (the library's own name is the stack's name now).
ALIASES = {"quicgo": "quic-go"}


def every_stack() -> dict[str, Stack]:
    """Every stack: the replay stacks, the browsers (clients whose parameters are their own) and the
    servers that serve them only (caddy)."""
    stacks = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            module = importlib.import_module(f"{__name__}.{info.name}")
            for stack in getattr(module, "STACKS", None) or [module.STACK]:
                stacks[stack.name] = stack
    return dict(sorted(stacks.items()))


def all_stacks() -> dict[str, Stack]:
    """The stacks that replay a parameter set: a client and a server of one library."""
    return {name: stack for name, stack in every_stack().items()
            if stack.roles == {"client", "server"} and not stack.own_parameters}


def get_stack(name: str) -> Stack:
    stacks = every_stack()
    name = ALIASES.get(name, name)
    if name not in stacks:
        raise ToolError(f"unknown stack {name!r} (known: {', '.join(stacks)})")
    return stacks[name]
