"""aioquic through our own bulk client and server (replay/aioquic_endpoints): every one of the twelve
parameters can be set, bidi_local, bidi_remote and uni separately. Python-speed: expect far lower
goodput than the C and Go stacks; it is here for parameter coverage, not for speed."""

from __future__ import annotations

import importlib.metadata
import sys

from replay.stacks.base import Applied, ClientPlan, RunOptions, Stack, ensure_certificate
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet


class Aioquic(Stack):
    name = "aioquic"
    settable = {"client": frozenset(PERFORMANCE_PARAMETERS), "server": frozenset(PERFORMANCE_PARAMETERS)}
    cc_names = frozenset({"cubic"})  # (and Reno, aioquic's default, which qreplay does not offer)

    def unavailable_reason(self) -> str | None:
        try:
            import aioquic  # noqa: F401
        except ImportError:
            return "aioquic is not installed: pip install aioquic==1.7.2 into the qreplay environment"
        return None

    def version(self) -> str | None:
        try:
            return importlib.metadata.version("aioquic")
        except importlib.metadata.PackageNotFoundError:
            return None

    def _flags(self, params: ParamSet | None, opts: RunOptions, role) -> Applied:
        settable, not_settable = self.split(params, role)
        applied = Applied(applied=settable, not_applied=not_settable)
        applied.flags = [f"--{name}={str(value).lower()}" for name, value in settable.items()]
        if opts.autotune:
            applied.flags.append("--autotune")
        applied.flags.append(f"--cc={self.congestion_control(opts.cc)}")
        applied.notes += self.cc_note(opts.cc)
        if opts.qlog_dir:
            applied.notes.append("qlog is not wired for the aioquic endpoints")
        if opts.keylog and role == "client":
            applied.flags.append(f"--keylog={opts.keylog}")
        return applied

    def server_command(self, params, opts, ip, port, workdir):
        key, cert = ensure_certificate(workdir)
        applied = self._flags(params, opts, "server")
        return [sys.executable, "-m", "replay.aioquic_endpoints.server", f"--host={ip}", f"--port={port}",
                f"--cert={cert}", f"--key={key}", *applied.flags], applied

    def client_command(self, params, opts, server_ip, port, workdir):
        applied = self._flags(params, opts, "client")
        return ClientPlan([sys.executable, "-m", "replay.aioquic_endpoints.client", f"--host={server_ip}",
                           f"--port={port}", f"--size={opts.size}", f"--timeout={opts.timeout_s}",
                           *applied.flags]), applied


STACK = Aioquic()
