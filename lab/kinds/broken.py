"""The lab's deliberately broken servers (one mode each)."""

from __future__ import annotations

import sys

from tparams.errors import ToolError

from lab.kinds import LabContext, Launch, ServerKind, register_kind
from lab.topology import ServerSpec


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
