"""The installed browsers as client stacks: Debian's Chromium and Firefox ESR, over HTTP/3 (``chromium``,
``firefox``) and over HTTP/2 on TLS 1.3 on kernel TCP (``chromium-tcp``, ``firefox-tcp``).

A browser is the reference a replayed set stands in for, so its parameters are its own: it takes no set,
and each run stores what it sent (its ClientHello, captured in the run). It has no server: the h3 variants
download from ngtcp2's server by default, the TCP ones from caddy's (or from ``--server-stack``), which serve
the measurement page beside the download. The client process is replay/browser_driver.py, run in the
client namespace like every other client; it prints the run as one JSON line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from replay.browser_driver import BROWSERS, PROTOCOLS, write_page
from replay.stacks.base import Applied, ClientPlan, ClientResult, Stack
from tparams.errors import ToolError
from tparams.program_cli import address

# Debian packages behind each thing a browser run needs.
PACKAGES = {"chromium": "chromium", "firefox-esr": "firefox-esr", "certutil": "libnss3-tools", "tshark": "tshark"}


class Browser(Stack):
    roles = frozenset({"client"})
    own_parameters = True
    needs_page = True
    # the page's fetch() makes each workload (browser_driver.PAGE), over h3 and h2 alike
    replay_protocol = frozenset({"down", "up", "many", "paced"})
    settable = {"client": frozenset(), "server": frozenset()}
    # the driver's own grace for the browser's tree (5 s) and its capture's end (up to 20 s)
    stop_grace_s = 30.0

    def __init__(self, browser: str, transport: str = "quic", trusts_server: bool = True):
        self.browser, self.transport, self.trusts_server = browser, transport, trusts_server
        self.name = browser if transport == "quic" else f"{browser}-tcp"
        self.protocol = PROTOCOLS[transport]
        self.default_server = "ngtcp2" if transport == "quic" else "caddy"

    def unavailable_reason(self) -> str | None:
        needed = [BROWSERS[self.browser], "tshark"] + (["certutil"] if self.browser == "firefox" else [])
        missing = [binary for binary in needed if not shutil.which(binary)]
        if missing:
            return (f"{' and '.join(missing)} not found: apt-get install "
                    + " ".join(PACKAGES[binary] for binary in missing))
        if self.browser == "firefox":
            try:
                import websockets  # noqa: F401  (WebDriver BiDi's transport)
            except ImportError:
                return "the Python package websockets is missing: run scripts/setup.sh"
        return None

    def version(self) -> str | None:
        """The Debian package's version (asking the browser itself would start it, and it would write into
        HOME); each run stores the exact version the running browser reports."""
        done = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", BROWSERS[self.browser]], capture_output=True,
                              text=True)
        return (done.stdout.strip() or None) if done.returncode == 0 else None

    def autotunes(self, requested: bool, protocol: str | None = None) -> bool:
        return True  # a browser's windows are as it was built (it may grow them), whatever qreplay asks

    def capabilities(self) -> str:
        return (f"client only, over {self.protocol}: sets none of the 12 (a browser's parameters are its own; each "
                "run records its ClientHello), and its windows follow the browser's own rule, --autotune or not "
                "(traced: datasets/flowcontrol/rules.csv); "
                "its page downloads, uploads (a PUT, answered with the count read), makes many requests and plays a "
                "stream (from a server that paces one); "
                f"from {self.default_server}'s server unless --server-stack")

    def server_command(self, params, opts, ip, port, workdir):
        raise ToolError(f"{self.name} is a client only: give a --server-stack that serves {self.protocol}")

    def client_command(self, params, opts, server_ip, port, workdir):
        if params is not None and any(v is not None for v in params.as_sent().values()):
            raise ToolError(f"a browser's parameters are its own: {self.name} takes no --set or --client-param")
        write_page(workdir / "htdocs")  # the server stacks that serve a page serve this directory
        argv = [sys.executable, "-m", "replay.browser_driver", self.browser, f"--server={address(server_ip, port)}",
                f"--size={opts.size}", f"--transport={self.transport}", f"--cert={workdir / 'cert.pem'}",
                f"--ca={workdir / 'ca.pem'}", f"--workdir={workdir / 'browser'}",
                # the runner's own deadline stops the driver later; the driver's leaves time to end the browser
                f"--timeout-s={max(10.0, opts.timeout_s - 10):g}"]
        argv += [f"--{name}={value}" for name, value in
                 opts.workload.client_options(opts.size, opts.requests, opts.concurrency).items()]
        if opts.workload.paced:  # a stream: the page plays it back (browser_driver's qreplayStream)
            argv.append(f"--bitrate={opts.bitrate}")
        if not self.trusts_server:
            argv.append("--no-trust")
        if opts.keylog:
            argv.append(f"--keylog={opts.keylog}")
        notes = ([] if not opts.autotune else [f"--autotune: {self.name}'s windows follow the browser's own rule, "
                                                "asked or not"])
        # only into a directory the user asked for (--qlog): a traced run's own one, inside the run's directory, is
        # for the server's qlog, and writing Firefox's would cost the measured browser CPU nobody asked for
        if opts.qlog_dir and not Path(opts.qlog_dir).is_relative_to(workdir):
            if self.browser == "firefox" and self.transport == "quic":
                argv.append(f"--qlog-dir={Path(opts.qlog_dir, 'client')}")
            else:
                notes.append(f"{self.name} writes no qlog")
        return ClientPlan(argv), Applied(notes=notes)

    def complete_row(self, row: dict, result: ClientResult) -> None:
        data = result.extra
        row.update({key: data.get(key) for key in ("browser_version", "protocol_seen", "handshake_s")})
        for key in ("client_cpu_s", "client_maxrss_kb"):  # the browser's whole process tree, not the driver's
            if data.get(key) is not None:
                row[key] = data[key]
        row["transport_seen"] = _json(data.get("transport_seen"))
        row["client_sent"] = _json(data.get("client_sent"))
        if data.get("client_sent_fingerprint"):
            row["set_fingerprint"] = data["client_sent_fingerprint"]
        row["resource_timing"] = _json(data.get("resource_timing"))


def _json(value) -> str | None:
    return None if value is None else json.dumps(value)


STACKS = [Browser(browser, transport) for browser in BROWSERS for transport in PROTOCOLS]
