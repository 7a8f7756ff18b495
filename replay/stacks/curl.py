"""Debian's curl as the TCP reference client: HTTP/2 over TLS 1.3 on kernel TCP (nghttp2, OpenSSL), downloading
from caddy through the same link as the QUIC stacks, so a QUIC figure can show TCP beside it as the QUIC on the
Highway paper and the Kempf thesis do.

The kernel is both ends' transport: the sender's congestion control is the server namespace's
(caddy sets it from --cc), the receiver's window grows by the kernel's own rule (tcp_moderate_rcvbuf), and
there are no transport parameters to set.
"""

from __future__ import annotations

import json
import subprocess

from replay.stacks.base import SERVER_NAME, Applied, ClientPlan, ClientResult, Stack, which
from tparams.errors import ToolError


class Curl(Stack):
    name = "curl"
    protocol = "h2"
    roles = frozenset({"client"})
    own_parameters = True
    no_set_reason = "curl speaks TCP: it has no QUIC transport parameters to set"
    default_server = "caddy"
    settable = {"client": frozenset(), "server": frozenset()}

    def unavailable_reason(self) -> str | None:
        return None if which("curl") else "curl not found: apt-get install curl"

    def version(self) -> str | None:
        done = subprocess.run(["curl", "--version"], capture_output=True, text=True)
        return done.stdout.split()[1] if done.returncode == 0 and done.stdout else None

    def autotunes(self, requested: bool, protocol: str | None = None) -> bool:
        return True  # the kernel grows a TCP receive window whatever qreplay asks (tcp_moderate_rcvbuf)

    def capabilities(self) -> str:
        return ("client only, HTTP/2 on TLS 1.3 over kernel TCP: no transport parameters; the sender's congestion "
                f"control is the server namespace's (--cc); downloads from {self.default_server}'s server unless "
                "--server-stack")

    def server_command(self, params, opts, ip, port, workdir):
        raise ToolError(f"{self.name} is a client only: give a --server-stack that serves {self.protocol}")

    def client_command(self, params, opts, server_ip, port, workdir):
        if params is not None and any(v is not None for v in params.as_sent().values()):
            raise ToolError(f"{self.no_set_reason}: no --set or --client-param with {self.name}")
        applied = Applied(env={"SSLKEYLOGFILE": str(opts.keylog)} if opts.keylog else {})
        applied.add_knobs(self, opts, "client")  # curl's own words for a knob (--tls13-ciphers)
        argv = [which("curl") or "curl", "--http2", "--tlsv1.3", "--silent", "--show-error", "--fail",
                "--cacert", str(workdir / "ca.pem"), "--resolve", f"{SERVER_NAME}:{port}:{server_ip}",
                "--max-time", f"{opts.timeout_s:g}", "--output", "/dev/null", "--write-out", "%{json}\n",
                *applied.flags, f"https://{SERVER_NAME}:{port}/{opts.size}"]
        return ClientPlan(applied.command(argv)), applied

    def parse_client_output(self, stdout: str) -> ClientResult:
        """curl's --write-out JSON: request to last byte is the total less the time until the request could go
        (connect and TLS handshake: pretransfer)."""
        data = json.loads(stdout.strip().splitlines()[-1])
        if data.get("http_version") != "2":
            raise ValueError(f"curl spoke HTTP/{data.get('http_version')}, not HTTP/2")
        return ClientResult(int(data["size_download"]), data["time_total"] - data["time_pretransfer"],
                            {"timing": "request to last byte (curl: time_total - time_pretransfer)",
                             "handshake_s": data["time_appconnect"] - data["time_connect"]})

    def complete_row(self, row: dict, result: ClientResult) -> None:
        row["handshake_s"] = result.extra.get("handshake_s")
        row["protocol_seen"] = "h2"


STACK = Curl()
