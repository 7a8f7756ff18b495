"""The lab's LSQUIC servers: the user's own build of LSQUIC's example http_server.

No registry packages LSQUIC, so the lab runs it only where the user points at
a build, with the variable qreplay's lsquic stack uses for the same program:

    export QREPLAY_LSQUIC_SERVER=/path/to/lsquic/build/bin/http_server

Without it the lab simply has no LSQUIC server (``default_topology`` leaves it out).
"""

from __future__ import annotations

import os
import shutil

from tparams.libraries import library
from tparams.paramset import RFC9000_DEFAULTS

from lab.kinds import LabContext, Launch, ServerKind, asked_parameters, register_kind
from lab.topology import ServerSpec

SERVER_ENV = library("lsquic").packages[0].name  # QREPLAY_LSQUIC_SERVER
# LSQUIC's engine setting (`-o NAME=VALUE`) for each transport parameter it lets a program set.
ENGINE_SETTINGS = {
    "initial_max_data": "init_max_data",
    "initial_max_stream_data_bidi_local": "init_max_stream_data_bidi_local",
    "initial_max_stream_data_bidi_remote": "init_max_stream_data_bidi_remote",
    "initial_max_stream_data_uni": "init_max_stream_data_uni",
    "initial_max_streams_bidi": "init_max_streams_bidi",
    "initial_max_streams_uni": "init_max_streams_uni",
    "max_idle_timeout": "idle_timeout",  # LSQUIC counts seconds
    "max_udp_payload_size": "max_udp_payload_size_rx",
}


MAX_IDLE_TIMEOUT_S = 600  # lsquic_engine_check_settings() refuses more


def idle_timeout_seconds(milliseconds: int) -> int:
    """LSQUIC's idle_timeout setting for a max_idle_timeout: whole seconds, at most 600; a
    nonzero timeout never rounds to 0, which would mean none at all."""
    if not milliseconds:
        return 0
    return min(max(1, round(milliseconds / 1000)), MAX_IDLE_TIMEOUT_S)


def configured_program(variable: str) -> str | None:
    """The executable an environment variable names (how users point at their LSQUIC build), or None."""
    configured = os.environ.get(variable)
    return shutil.which(configured) if configured else None


def server_binary() -> str | None:
    return configured_program(SERVER_ENV)


@register_kind
class LsquicKind(ServerKind):
    """LSQUIC's http_server (tested with 4.9.3, a build of the user's own), flow control from
    ``options["parameters"]`` as engine settings. LSQUIC counts the idle
    timeout in seconds and leaves out parameters at the RFC default (the
    bidi_local window is 0 unless set); ack_delay_exponent, max_ack_delay and
    active_connection_id_limit are fixed. http_server completes only
    handshakes whose SNI is its server name: without SNI, or with another
    name, it closes with TLS alert 80 (internal_error).
    """

    name = "lsquic"
    # http_server binds the one address of -s (no wildcard dual-stack socket): IPv4 only.
    listens_ipv6 = False

    def unavailable_reason(self) -> str | None:
        if server_binary() is None:
            return (f"{SERVER_ENV} is not set to an executable (LSQUIC's http_server: no registry packages it; "
                    "build it and point the variable at it)")
        return None

    def requested(self, spec: ServerSpec) -> dict[str, int]:
        asked = {name: value for name, value in asked_parameters(spec).items() if name in ENGINE_SETTINGS}
        if "max_idle_timeout" in asked:
            asked["max_idle_timeout"] = idle_timeout_seconds(asked["max_idle_timeout"]) * 1000
        return asked

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        docroot = ctx.workdir(spec) / "www"
        docroot.mkdir(exist_ok=True)
        (docroot / "index.html").write_text(f"{spec.name}\n")
        flags = []
        for name, value in self.requested(spec).items():
            flags += ["-o", f"{ENGINE_SETTINGS[name]}={idle_timeout_seconds(value) if name == 'max_idle_timeout' else value}"]
        return Launch([server_binary() or self.descriptor.programs["lab-server"], "-c", f"{spec.server_name},{ctx.cert},{ctx.key}",
                       "-s", f"{spec.ip}:{spec.port}", "-r", str(docroot), "-L", "warn", *flags])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        # LSQUIC leaves out what is at the RFC default, its fixed values too.
        lsquic = self.descriptor
        fixed = {name: value for name, value in lsquic.fixed.items() if value != RFC9000_DEFAULTS[name]}
        return {**lsquic.defaults, **fixed, **self.requested(spec)}
