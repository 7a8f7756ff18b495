"""LSQUIC, the thesis's stack, through the user's own build of its example programs.

LSQUIC is packaged by no registry, so this stack runs where the user points
qreplay at a build of LSQUIC's http_client and http_server (docs/qreplay.md says
how to build one):

    export QREPLAY_LSQUIC_CLIENT=/path/to/lsquic/bin/http_client
    export QREPLAY_LSQUIC_SERVER=/path/to/lsquic/bin/http_server

Settings follow the thesis's run-client.sh (listing 4.3): transport
parameters as ``-o`` engine settings; congestion control on both sides
(``cc_algo``: the server is the sender of a download), fixed to the chosen
algorithm because LSQUIC's default picks BBR above 1.5 ms RTT. Window growth
is LSQUIC's own auto-tuning, capped by ``max_cfcw``/``max_sfcw``; 0 keeps the
windows at the advertised values.

LSQUIC fixes some parameters in code (``gen_trans_params()``); a request equal
to the fixed value is what the peer sees, so it counts as applied, any other
as not applied. An ``-o`` name a build does not know makes it exit 1 without a
word, which ``explain_exit`` turns into a sentence.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from functools import cache
from pathlib import Path

from lab.kinds.lsquic import ENGINE_SETTINGS, MAX_IDLE_TIMEOUT_S, SERVER_ENV, configured_program, idle_timeout_seconds
from replay.stacks.base import Applied, ClientPlan, RunOptions, Stack, ensure_certificate, free_udp_port
from tparams.libraries import library
from tparams.paramset import ParamSet

# Transport parameter -> LSQUIC -o engine setting: the lab's, and the inverted migration switch
# (allow_migration=0 sends disable_active_migration), which only a client's command line needs.
SETTINGS = {**ENGINE_SETTINGS, "disable_active_migration": "allow_migration"}
# The largest value each engine setting holds (C unsigned int; max_udp_payload_size_rx is a short).
MAX_SETTING = {"max_udp_payload_size": 2**16 - 1}
MAX_UNSIGNED = 2**32 - 1
# Ceilings of --autotune, the same as the other stacks' (quic-go's bulk.go, ngtcp2's client defaults).
AUTOTUNE_MAX_CFCW = 24 << 20
AUTOTUNE_MAX_SFCW = 16 << 20
CC_ALGO = {"cubic": 1, "bbr": 2}
ENV = {"client": "QREPLAY_LSQUIC_CLIENT", "server": SERVER_ENV}
PROGRAM = {role: library("lsquic").programs[f"replay-{role}"] for role in ("client", "server")}
HOW_TO = ("build LSQUIC (github.com/litespeedtech/lsquic; docs/qreplay.md says how) and point the two variables at its "
          "bin/http_client and bin/http_server")
HOST = "qreplay.lab"
PROBE_TIMEOUT_S = 10.0


class Lsquic(Stack):
    name = "lsquic"
    protocol = "h3"
    serves_page = True
    settable = {"client": frozenset(SETTINGS) - {"initial_max_streams_uni"}, "server": frozenset(SETTINGS)}

    def binary(self, role: str) -> str | None:
        return configured_program(ENV[role])

    def unavailable_reason(self) -> str | None:
        missing = [f"{ENV[role]}={os.environ[ENV[role]]} is not an executable" if os.environ.get(ENV[role])
                   else f"{ENV[role]} is not set" for role in ENV if not self.binary(role)]
        if missing:
            return f"{'; '.join(missing)}: {HOW_TO}"
        for role in ENV:
            wrong = _not_lsquic(self.binary(role), PROGRAM[role])
            if wrong:
                return f"{ENV[role]}={os.environ[ENV[role]]} is not LSQUIC's {PROGRAM[role]}: {wrong}"
        return None

    def version(self) -> str | None:
        """The LSQUIC version, as its server names itself in a response (``server: lsquic/X.Y.Z``)."""
        if self.unavailable_reason():
            return None
        return _server_version(self.binary("client"), self.binary("server"))

    def explain_exit(self, role: str, status: int | None, stderr_tail: str) -> str | None:
        if status == 1 and not stderr_tail:
            return (f"{PROGRAM[role]} exited 1 without a word, which LSQUIC does for an -o setting this build "
                    f"does not know (check its bin/test_common.c)")
        return None

    def _settings(self, params: ParamSet | None, opts: RunOptions, role) -> Applied:
        settable, not_settable = self.split(params, role)
        out = Applied()
        fixed_values = self.library.fixed_for(role)
        for name, value in not_settable.items():
            fixed = fixed_values.get(name)
            (out.applied if value == fixed else out.not_applied)[name] = value
        for name, value in settable.items():
            sent = value
            if name == "disable_active_migration":
                sent = 0 if value else 1
            elif name == "max_idle_timeout":
                sent = idle_timeout_seconds(value)
                if sent * 1000 != value:
                    out.notes.append(f"max_idle_timeout={value} sent as {sent} s (LSQUIC counts whole seconds, "
                                     f"at most {MAX_IDLE_TIMEOUT_S})")
                    out.not_applied[name] = value
            elif value > MAX_SETTING.get(name, MAX_UNSIGNED):
                sent = MAX_SETTING.get(name, MAX_UNSIGNED)
                out.notes.append(f"{name}={value} sent as {sent}, the largest value LSQUIC's setting holds")
                out.not_applied[name] = value
            elif name == "max_udp_payload_size" and value == 0:
                out.notes.append("max_udp_payload_size=0 makes LSQUIC send no max_udp_payload_size")
                out.not_applied[name] = value
            if name not in out.not_applied:
                out.applied[name] = value
            out.flags += ["-o", f"{SETTINGS[name]}={sent}"]
        if opts.autotune:
            out.flags += ["-o", f"max_cfcw={AUTOTUNE_MAX_CFCW}", "-o", f"max_sfcw={AUTOTUNE_MAX_SFCW}"]
            out.notes.append(f"LSQUIC's window auto-tuning may grow the windows to {AUTOTUNE_MAX_CFCW} "
                             f"(connection) and {AUTOTUNE_MAX_SFCW} (stream)")
        else:
            out.flags += ["-o", "max_cfcw=0", "-o", "max_sfcw=0"]  # LSQUIC's default, spelled out: no growth
        out.flags += ["-o", f"cc_algo={CC_ALGO[opts.cc]}"]
        return out

    def server_command(self, params, opts, ip, port, workdir):
        key, cert = ensure_certificate(workdir)
        docroot = workdir / "htdocs"  # a browser's page goes there too (serves_page)
        docroot.mkdir(exist_ok=True)
        for name in ("payload", str(opts.size)):  # LSQUIC's client asks for /payload, a browser's page for /<size>
            with open(docroot / name, "wb") as payload:
                payload.truncate(opts.size)  # sparse: the size costs no disk
        applied = self._settings(params, opts, "server")
        # -s ip:port, an IPv6 address unbracketed: LSQUIC's parser splits at the last colon and looks a bracketed
        # address up as a host name
        argv = [self.binary("server") or PROGRAM["server"], "-c", f"{HOST},{cert},{key}", "-s", f"{ip}:{port}",
                "-r", str(docroot), *applied.flags]
        return argv, applied

    def client_command(self, params, opts, server_ip, port, workdir):
        applied = self._settings(params, opts, "client")
        download = workdir / "download"
        download.mkdir(exist_ok=True)
        # -B hands the response headers to the program (printed on stdout) instead of prefixing the
        # body with an HTTP/1.1 header block; -7 writes the body alone to download/payload, which the
        # runner makes a FIFO. As the Interop Runner ran it.
        argv = [self.binary("client") or PROGRAM["client"], "-H", HOST, "-s", f"{server_ip}:{port}",
                "-p", "/payload", "-B", "-7", str(download), *applied.flags]
        if opts.keylog:
            # -G also switches LSQUIC's loss bits off, which ql_bits=2 undoes: a traced run sends what a plain one does
            argv += ["-G", str(_keylog_dir(opts.keylog)), "-o", "ql_bits=2"]
        return ClientPlan(argv, body_fifo=download / "payload"), applied

    def gather_keylog(self, keylog: Path) -> None:
        # LSQUIC's programs know no SSLKEYLOGFILE: -G DIR writes one key log a connection, DIR/<its CID>.keys.
        logs = sorted(_keylog_dir(keylog).glob("*.keys"))
        if logs:
            keylog.write_bytes(b"".join(log.read_bytes() for log in logs))


def _keylog_dir(keylog: Path) -> Path:
    return keylog.with_name(keylog.name + ".d")


@cache
def _not_lsquic(binary: str, program: str) -> str | None:
    """Why ``binary`` is not LSQUIC's ``program`` (its -h must start with LSQUIC's usage line), or None."""
    try:
        done = subprocess.run([binary, "-h"], capture_output=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{binary} -h` failed: {exc}"
    usage = (done.stdout + done.stderr).decode(errors="replace").strip()
    if usage.startswith(f"Usage: {program} "):
        return None
    printed = repr(usage.splitlines()[0][:80]) if usage else f"nothing (exit status {done.returncode})"
    return f"`{binary} -h` printed {printed}, not LSQUIC's 'Usage: {program} [opts]'"


@cache
def _server_version(client: str, server: str) -> str | None:
    """Ask the server for its index page on loopback and read its ``server`` header: without a
    document root, LSQUIC's server answers with its own handlers, which name the version."""
    with tempfile.TemporaryDirectory(prefix="qreplay-lsquic-") as tmp:
        key, cert = ensure_certificate(Path(tmp))
        port = free_udp_port()
        server_process = subprocess.Popen([server, "-c", f"{HOST},{cert},{key}", "-s", f"127.0.0.1:{port}"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
        try:
            time.sleep(0.2)  # let it bind; an Initial sent before that would only be resent later
            done = subprocess.run([client, "-H", HOST, "-s", f"127.0.0.1:{port}", "-p", "/", "-B"],
                                  capture_output=True, timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None
        finally:
            os.killpg(server_process.pid, signal.SIGKILL)
            server_process.wait()
    found = re.search(rb"^server\b[^:\n]*: lsquic/(\S+)$", done.stdout, re.MULTILINE)
    return found.group(1).decode() if found else None


STACK = Lsquic()
