"""Server kinds: how to start each sort of lab server, one small class per kind.

To add a kind (a quic-go server, a DNS server, ...): subclass ServerKind in
your own module, decorate it with ``@register_kind``, and append the module's
name to ``KIND_MODULES`` below; then put a ``ServerSpec(kind=<name>, ...)`` in
a Topology. The lab core never needs to know the kind.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tparams.errors import ToolError
from tparams.paramset import ParamSet

from lab.topology import ServerSpec

# Modules that register kinds when imported (append-only, like COMMAND_MODULES).
KIND_MODULES: tuple[str, ...] = ("lab.kinds",)

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
    library: ClassVar[str]  # the QUIC implementation, for identification tests
    # Readiness: the lab waits until the server answers a UDP datagram on its
    # port (a Version Negotiation probe) and, if set, accepts TCP on it.
    serves_tcp: ClassVar[bool] = False

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        raise NotImplementedError

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool] | None:
        """The performance parameters the server sends, as sent (absent = not
        sent), where known; None where the lab cannot know them."""
        return None


def register_kind(cls: type[ServerKind]) -> type[ServerKind]:
    _KINDS[cls.name] = cls()
    return cls


def kind_for(name: str) -> ServerKind:
    for module in KIND_MODULES:
        importlib.import_module(module)
    if name not in _KINDS:
        raise ToolError(f"unknown lab server kind {name!r} (known: {', '.join(sorted(_KINDS))})")
    return _KINDS[name]


@register_kind
class Ngtcp2Kind(ServerKind):
    """Debian's ngtcp2 example server, transport parameters from ``options["parameters"]``.

    gtlsserver has flags for seven of the twelve; the others it sends with
    ngtcp2 0.12's own values (omitting those equal to the RFC default), which
    ``transport_parameters`` reports instead of the requested ones.
    """

    name = "ngtcp2"
    library = "ngtcp2"
    FLAGS: ClassVar[dict[str, str]] = {
        "max_idle_timeout": "--timeout={}ms",
        "initial_max_data": "--max-data={}",
        "initial_max_stream_data_bidi_local": "--max-stream-data-bidi-local={}",
        "initial_max_stream_data_bidi_remote": "--max-stream-data-bidi-remote={}",
        "initial_max_stream_data_uni": "--max-stream-data-uni={}",
        "initial_max_streams_bidi": "--max-streams-bidi={}",
        "initial_max_streams_uni": "--max-streams-uni={}",
    }
    # What gtlsserver 0.12 sends without flags (its --help defaults, and
    # active_connection_id_limit seen in gtlsclient's log of the server's parameters).
    DEFAULTS: ClassVar[dict[str, int]] = {
        "max_idle_timeout": 30000,
        "initial_max_data": 1 << 20,
        "initial_max_stream_data_bidi_local": 256 << 10,
        "initial_max_stream_data_bidi_remote": 256 << 10,
        "initial_max_stream_data_uni": 256 << 10,
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 3,
        "active_connection_id_limit": 7,
    }

    def configured(self, spec: ServerSpec) -> dict[str, int]:
        params = ParamSet.from_mapping(spec.options.get("parameters", {})).as_sent()
        return {name: params[name] for name in self.FLAGS if params.get(name) is not None}

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        htdocs = ctx.workdir(spec) / "htdocs"
        htdocs.mkdir(exist_ok=True)
        (htdocs / "index.html").write_text(f"{spec.name}\n")
        flags = [self.FLAGS[name].format(value) for name, value in self.configured(spec).items()]
        # Auto-tuning off: the advertised windows stay the configured ones.
        return Launch(["gtlsserver", "--quiet", f"--htdocs={htdocs}", "--max-window=0",
                       "--max-stream-window=0", *flags, spec.ip, str(spec.port), str(ctx.key), str(ctx.cert)])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        return {**self.DEFAULTS, **self.configured(spec)}


@register_kind
class CaddyKind(ServerKind):
    """Debian's caddy 2.6 (HTTP/3 via quic-go): HTTP/3 on UDP and HTTPS on TCP,
    advertising h3 in Alt-Svc; its own HOME, admin API off."""

    name = "caddy"
    library = "quic-go"
    serves_tcp = True

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        home = ctx.workdir(spec)
        caddyfile = home / "Caddyfile"
        caddyfile.write_text(
            "{\n"
            "\tadmin off\n"
            "\tauto_https disable_redirects\n"
            "\tskip_install_trust\n"
            f"\tdefault_sni {spec.server_name}\n"
            f"\tstorage file_system {home / 'data'}\n"
            "\tservers {\n\t\tprotocols h1 h2 h3\n\t}\n"
            "}\n"
            f"https://{spec.server_name}:{spec.port}, https://{spec.ip}:{spec.port} {{\n"
            f"\tbind {spec.ip}\n"
            f"\ttls {ctx.cert} {ctx.key}\n"
            f'\trespond "{spec.name}\n" 200\n'
            "}\n"
        )
        env = {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config")}
        return Launch(["caddy", "run", "--config", str(caddyfile), "--adapter", "caddyfile"], env=env, cwd=home)


@register_kind
class AioquicKind(ServerKind):
    """Our aioquic HTTP/3 server (lab/aioquic_server.py)."""

    name = "aioquic"
    library = "aioquic"

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        return Launch([sys.executable, "-m", "lab.aioquic_server", "--host", spec.ip,
                       "--port", str(spec.port), "--certificate", str(ctx.cert), "--private-key", str(ctx.key)])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        from lab.aioquic_server import expected_transport_parameters

        return expected_transport_parameters()


@register_kind
class BrokenKind(ServerKind):
    """Our deliberately broken server (lab/broken_server.py); ``options["mode"]``."""

    name = "broken"
    library = "broken"

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        from lab.broken_server import MODES

        mode = spec.options.get("mode")
        if mode not in MODES:
            raise ToolError(f"lab server {spec.name}: mode must be one of {', '.join(MODES)}, not {mode!r}")
        return Launch([sys.executable, "-m", "lab.broken_server", "--mode", mode, "--host", spec.ip,
                       "--port", str(spec.port), "--certificate", str(ctx.cert), "--private-key", str(ctx.key)])


def known_kinds() -> Mapping[str, ServerKind]:
    kind_for("ngtcp2")  # imports KIND_MODULES
    return dict(_KINDS)
