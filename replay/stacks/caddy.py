"""Debian's caddy as a server for the browsers: HTTP/3 (quic-go inside caddy 2.6) and HTTP/2 on TLS 1.3 on
kernel TCP from one process, serving the measurement page and a file of the download's size, and answering
an upload (PUT or POST) with the count of body bytes read: caddy reverse-proxies it to replay/upload_counter.py
on the server namespace's loopback (caddy 2.6 has no directive that counts a body), so the upload's QUIC flow
control is still quic-go's.

A server only, with nothing to set: it serves the browsers' TCP variants (chromium-tcp, firefox-tcp), and
the h3 browsers too when asked (--server-stack caddy), so a browser's h3 and h2 runs can share one server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from replay.stacks.base import SERVER_NAME, TRANSPORTS, Applied, PageServer, ensure_certificate, which
from replay.upload_counter import PORT_ENV


class Caddy(PageServer):
    name = "caddy"
    no_client = ("caddy is a server only here: its clients are curl and the browsers (chromium-tcp, firefox-tcp over "
                 "h2)")
    settable = {"client": frozenset(), "server": frozenset()}
    # quic-go's congestion control for h3 (its only one); for h2 the kernel's, which the server namespace sets
    cc_names = frozenset({"cubic"})

    def congestion_control(self, requested: str, protocol: str | None = None) -> str:
        if TRANSPORTS.get(protocol or "") == "tcp":
            default, allowed = kernel_tcp_congestion_control()
            return requested if requested in allowed else default
        return super().congestion_control(requested, protocol)

    def knob_note(self, knob, asked, ran, protocol=None) -> str | None:
        if knob.name != "cc" or TRANSPORTS.get(protocol or "") != "tcp":
            return super().knob_note(knob, asked, ran, protocol)
        _, allowed = kernel_tcp_congestion_control()
        return (f"kernel TCP runs {ran}, not {asked}, over h2: a namespace may choose only "
                f"{', '.join(sorted(allowed))} (net.ipv4.tcp_allowed_congestion_control on the host)")

    def serves(self, protocol: str) -> bool:
        return protocol in ("h3", "h2")

    def unavailable_reason(self) -> str | None:
        return None if which("caddy") else "caddy not found: apt-get install caddy"

    def version(self) -> str | None:
        done = subprocess.run(["caddy", "version"], capture_output=True, text=True)
        return (done.stdout.split() or [None])[0] if done.returncode == 0 else None

    def capabilities(self) -> str:
        return ("server only (h3 and h2 on TLS 1.3 from one process; uploads counted by a loopback backend): sets "
                "none of the 12; --cc sets kernel TCP's (h2), h3 runs quic-go's cubic")

    def server_command(self, params, opts, ip, port, workdir):
        key, cert = ensure_certificate(workdir)
        htdocs = workdir / "htdocs"
        htdocs.mkdir(exist_ok=True)
        with open(htdocs / str(opts.size), "wb") as body:  # sparse: the download costs no disk
            os.truncate(body.fileno(), opts.size)
        home = workdir / "caddy"
        home.mkdir(exist_ok=True)
        caddyfile = home / "Caddyfile"
        caddyfile.write_text(
            "{\n\tadmin off\n\tauto_https disable_redirects\n\tskip_install_trust\n"
            f"\tstorage file_system {home / 'data'}\n\tservers {{\n\t\tprotocols h1 h2 h3\n\t}}\n}}\n"
            f"https://{SERVER_NAME}:{port} {{\n\tbind {ip}\n"
            f"\ttls {cert} {key} {{\n\t\tprotocols tls1.3\n\t}}\n"
            f"\t@upload method PUT POST\n\treverse_proxy @upload 127.0.0.1:{{${PORT_ENV}}}\n"
            f"\troot * {htdocs}\n\tfile_server\n}}\n")
        applied = Applied(not_applied={k: v for k, v in (params.as_sent() if params else {}).items() if v is not None})
        applied.add_knobs(self, opts, "server")  # a knob's environment (its crypto's CPU-feature mask)
        env = [f"HOME={home}", f"XDG_DATA_HOME={home / 'data'}", f"XDG_CONFIG_HOME={home / 'config'}",
               *(f"{name}={value}" for name, value in applied.env.items())]
        # The namespace's TCP congestion control is the h2 sender's (a per-namespace sysctl, set for every run).
        tcp_cc = f"net.ipv4.tcp_congestion_control={self.congestion_control(opts.cc, 'h2')}"
        return ["sh", "-c", 'sysctl -qw "$0" && exec "$@"', tcp_cc, "env", *env, sys.executable, "-m",
                "replay.upload_counter", "--", which("caddy") or "caddy", "run", "--config", str(caddyfile),
                "--adapter", "caddyfile"], applied


def kernel_tcp_congestion_control() -> tuple[str, frozenset[str]]:
    """(the default a new network namespace starts with, the ones a namespace may choose): the host's
    tcp_congestion_control and, with it, tcp_allowed_congestion_control (a namespace is refused any other)."""
    sysctl = Path("/proc/sys/net/ipv4")
    default = (sysctl / "tcp_congestion_control").read_text().strip()
    return default, frozenset((sysctl / "tcp_allowed_congestion_control").read_text().split()) | {default}


STACK = Caddy()
