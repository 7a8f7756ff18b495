"""QUIC stacks qreplay can drive. Each module here defines one ``STACK``; adding a stack is adding a file."""

from __future__ import annotations

import importlib
import pkgutil

from replay.stacks.base import Stack
from tparams.errors import ToolError


# Names a stack was once known by (the library's own name is the stack's name now).
ALIASES = {"quicgo": "quic-go"}


def all_stacks() -> dict[str, Stack]:
    stacks = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            stack = importlib.import_module(f"{__name__}.{info.name}").STACK
            stacks[stack.name] = stack
    return dict(sorted(stacks.items()))


def get_stack(name: str) -> Stack:
    stacks = all_stacks()
    name = ALIASES.get(name, name)
    if name not in stacks:
        raise ToolError(f"unknown stack {name!r} (known: {', '.join(stacks)})")
    return stacks[name]
