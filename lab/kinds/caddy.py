"""The lab's caddy servers."""

from __future__ import annotations

from lab.kinds import LabContext, Launch, ServerKind, register_kind
from lab.topology import ServerSpec


@register_kind
class CaddyKind(ServerKind):
    """Debian's caddy 2.6 (HTTP/3 via quic-go): HTTP/3 on UDP and HTTPS on TCP,
    advertising h3 in Alt-Svc; its own HOME, admin API off."""

    name = "caddy"
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
            f"https://{spec.server_name}:{spec.port}, https://{spec.ip}:{spec.port}, https://[{spec.ip6}]:{spec.port} {{\n"
            f"\tbind {spec.ip} {spec.ip6}\n"
            f"\ttls {ctx.cert} {ctx.key}\n"
            f'\trespond "{spec.name}\n" 200\n'
            "}\n"
        )
        env = {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config")}
        return Launch(["caddy", "run", "--config", str(caddyfile), "--adapter", "caddyfile"], env=env, cwd=home)
