"""Server kinds: how to start each sort of lab server, one small class per kind.

To add a kind: one file in this package that subclasses ServerKind and
decorates it with ``@register_kind`` (every module here is imported before a
kind is looked up); then put a ``ServerSpec(kind=<name>, ...)`` in a
Topology. A kind defined elsewhere registers when its module is imported.
The lab core never needs to know the kind.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tparams import program_cli
from tparams.errors import ToolError
from tparams.libraries import Library, described
from tparams.paramset import ParamSet

from lab.topology import ServerSpec, Topology

_KINDS: dict[str, "ServerKind"] = {}


@dataclass(frozen=True)
class LabContext:
    """What a kind may use: the lab's certificate and a private directory."""

    state_dir: Path
    cert: Path
    key: Path

    def workdir(self, spec: ServerSpec) -> Path:
        path = self.state_dir / "servers" / spec.name
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str] | None = None
    cwd: Path | None = None


class ServerKind:
    name: ClassVar[str]
    # Readiness: the lab waits until the server answers a UDP datagram on its
    # port (a Version Negotiation probe) and, if set, accepts TCP on it.
    serves_tcp: ClassVar[bool] = False
    # A server program of ours: its role in tparams.program_cli, whose command line it takes
    # (tests/test_program_cli.py holds it to that); None for another's program (caddy, ngtcp2).
    role: ClassVar[str | None] = None
    # The lab is dual-stack: a kind that answers on its server's IPv6 address too (its program
    # binds the dual-stack wildcard, or both addresses) says True; docs/lab.md lists those that do not.
    listens_ipv6: ClassVar[bool] = True

    @property
    def descriptor(self) -> Library | None:
        """What it runs (tparams.libraries); None for a server that runs no library (the broken ones). A kind
        derived from another (the discovery lab's ngtcp2-range) runs its parent's library."""
        return next((described(kind.name) for kind in type(self).__mro__
                     if described(getattr(kind, "name", "")) is not None), None)

    @property
    def library(self) -> str:
        """The QUIC implementation it runs, as identification names it (a kind of no library says its own)."""
        return self.descriptor.identified_as

    @property
    def offered(self) -> tuple[str, ...]:
        """The APPLICATION_CHOICES (below) its library lets an application make."""
        return self.descriptor.offered if self.descriptor is not None else ()

    def program(self) -> list[str]:
        """A server program of ours: how to start it, before its arguments."""
        raise NotImplementedError

    def unavailable_reason(self) -> str | None:
        """Why this kind's server cannot run on this machine (not installed,
        not built), or None; checked before the lab creates anything."""
        return None

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        raise NotImplementedError

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool] | None:
        """The performance parameters the server sends, as sent (absent = not
        sent), where known; None where the lab cannot know them."""
        return None


def asked_parameters(spec: ServerSpec, defaults: Mapping[str, int] | None = None) -> dict[str, int | bool]:
    """The transport parameters ``options["parameters"]`` asks for, as sent, over ``defaults``."""
    params = ParamSet.from_mapping(spec.options.get("parameters", {})).as_sent()
    return {**(defaults or {}), **{name: value for name, value in params.items() if value is not None}}


# What an application chooses beside flow control, ``options["application"]``:
# library identification must not key on any of it (scanner/identify.py runs every
# library once more with other choices). The lab's own server programs take it as
# options of their command line; each kind names the ones its library offers.
APPLICATION_CHOICES = program_cli.APPLICATION


def application_choices(spec: ServerSpec, offered: Iterable[str]) -> Mapping[str, Any]:
    """``options["application"]``, a choice the kind's library does not offer refused
    here, before the lab starts anything."""
    choices = spec.options.get("application", {})
    for name in choices:
        if name not in offered:
            raise ToolError(f"lab server {spec.name}: {spec.kind} lets no application choose {name} "
                            f"(it offers: {', '.join(offered) or 'nothing'})")
    return choices


def server_arguments(spec: ServerSpec, ctx: LabContext, asked: Mapping[str, int | bool], settable: Iterable[str],
                     offered: Iterable[str]) -> list[str]:
    """The command line of a lab server of ours (tparams.program_cli, role lab-server): the
    dual-stack wildcard at its port where its kind listens on IPv6 (the namespace holds the server's two
    addresses only), else its IPv4 address; the lab's certificate, the ``settable`` transport parameters of ``asked`` and the application's
    choices of ``spec``."""
    settable = frozenset(settable)
    return program_cli.arguments("lab-server", {
        "listen": program_cli.address(DUAL_STACK_WILDCARD if kind_for(spec.kind).listens_ipv6 else spec.ip,
                                      spec.port), "cert": ctx.cert, "key": ctx.key,
        **{name: value for name, value in asked.items() if name in settable},
        **application_choices(spec, offered)})


# One IPv6 socket bound to it receives IPv4 too (as IPv4-mapped addresses; Linux's default
# net.ipv6.bindv6only=0, which no lab namespace changes).
DUAL_STACK_WILDCARD = "::"


def register_kind(cls: type[ServerKind]) -> type[ServerKind]:
    _KINDS[cls.name] = cls()
    return cls


def _import_kinds() -> None:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def kind_for(name: str) -> ServerKind:
    _import_kinds()
    if name not in _KINDS:
        raise ToolError(f"unknown lab server kind {name!r} (known: {', '.join(sorted(_KINDS))})")
    return _KINDS[name]


def known_kinds() -> Mapping[str, ServerKind]:
    _import_kinds()
    return dict(_KINDS)


def runnable(topology: Topology) -> Topology:
    """``topology`` without its optional servers whose kind cannot run on this machine."""
    return dataclasses.replace(topology, servers=tuple(
        spec for spec in topology.servers if not spec.optional or kind_for(spec.kind).unavailable_reason() is None))
