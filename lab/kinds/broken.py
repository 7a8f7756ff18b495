"""The lab's deliberately broken servers (one mode each)."""

from __future__ import annotations

import sys

from tparams import program_cli
from tparams.errors import ToolError

from lab.kinds import LabContext, Launch, ServerKind, register_kind
from lab.topology import ServerSpec


@register_kind
class BrokenKind(ServerKind):
    """Our deliberately broken server (lab/broken_server.py); ``options["mode"]``."""

    name = "broken"
    library = "broken"
    role = "broken-server"
    # Its garbage mode answers from an IPv4 socket (IP_PKTINFO picks the reply's source): IPv4 only.
    listens_ipv6 = False

    def program(self) -> list[str]:
        return [sys.executable, "-m", "lab.broken_server"]

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        from lab.broken_server import MODES

        mode = spec.options.get("mode")
        if mode not in MODES:
            raise ToolError(f"lab server {spec.name}: mode must be one of {', '.join(MODES)}, not {mode!r}")
        return Launch(self.argv(program_cli.address(spec.ip, spec.port), ctx, mode))

    def argv(self, listen: str, ctx: LabContext, mode: str) -> list[str]:
        return [*self.program(), *program_cli.arguments(
            "broken-server", {"listen": listen, "cert": ctx.cert, "key": ctx.key, "mode": mode})]
