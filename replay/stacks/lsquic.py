"""LSQUIC through the user's own build of its example programs (http_client/http_server).

LSQUIC is not packaged by Debian or PyPI and cannot be built here, so this
stack only runs where the user points qreplay at their build:

    export QREPLAY_LSQUIC_CLIENT=/path/to/lsquic/build/bin/http_client
    export QREPLAY_LSQUIC_SERVER=/path/to/lsquic/build/bin/http_server

Settings follow the thesis's run-client.sh (listing 4.3): transport
parameters as ``-o`` engine settings, CUBIC (``cc_algo=1``) because LSQUIC
picks BBR above 1.5 ms RTT otherwise. LSQUIC's initial windows are its fixed
windows (no auto-tuning switch), so --autotune is reported as not applied.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lab.kinds.lsquic import ENGINE_SETTINGS as SETTINGS
from lab.kinds.lsquic import SERVER_ENV, idle_timeout_seconds
from replay.stacks.base import Applied, ClientPlan, RunOptions, Stack, ensure_certificate
from tparams.paramset import ParamSet

CC_ALGO = {"cubic": 1, "bbr": 2}
ENV = {"client": "QREPLAY_LSQUIC_CLIENT", "server": SERVER_ENV}
HOW_TO = ("LSQUIC is not obtainable here (no Debian or PyPI package); build it (github.com/litespeedtech/lsquic) "
          "and set QREPLAY_LSQUIC_CLIENT and QREPLAY_LSQUIC_SERVER to its http_client and http_server")


class Lsquic(Stack):
    name = "lsquic"
    settable = {"client": frozenset(SETTINGS), "server": frozenset(SETTINGS)}

    def binary(self, role: str) -> str | None:
        configured = os.environ.get(ENV[role])
        return shutil.which(configured) if configured else None

    def unavailable_reason(self) -> str | None:
        missing = [ENV[role] for role in ENV if not self.binary(role)]
        return f"{', '.join(missing)} not set to an executable: {HOW_TO}" if missing else None

    def _settings(self, params: ParamSet | None, opts: RunOptions, role) -> Applied:
        settable, not_settable = self.split(params, role)
        out = Applied(applied=settable, not_applied=not_settable)
        for name, value in settable.items():
            if name == "max_idle_timeout":
                value = idle_timeout_seconds(value)
                out.notes.append(f"max_idle_timeout sent as {value} s (LSQUIC's unit)")
            out.flags += ["-o", f"{SETTINGS[name]}={value}"]
        out.flags += ["-o", f"cc_algo={CC_ALGO[opts.cc]}"]
        if opts.autotune:
            out.notes.append("LSQUIC has no window auto-tuning switch: windows stayed at the advertised values")
        return out

    def server_command(self, params, opts, ip, port, workdir):
        key, cert = ensure_certificate(workdir)
        docroot = workdir / "www"
        docroot.mkdir(exist_ok=True)
        with open(docroot / "payload", "wb") as payload:
            payload.truncate(opts.size)  # sparse: the size costs no disk
        applied = self._settings(params, opts, "server")
        argv = [self.binary("server") or "http_server", "-c", f"qreplay.lab,{cert},{key}", "-s", f"{ip}:{port}",
                "-r", str(docroot), *applied.flags]
        return argv, applied

    def client_command(self, params, opts, server_ip, port, workdir):
        applied = self._settings(params, opts, "client")
        argv = [self.binary("client") or "http_client", "-H", "qreplay.lab", "-s", f"{server_ip}:{port}",
                "-p", "/payload", *applied.flags]
        return ClientPlan(argv, body_fifo=Path(workdir, "body"), body_on_stdout=True), applied


STACK = Lsquic()
