"""The lab's aioquic servers."""

from __future__ import annotations

import sys

from lab.kinds import LabContext, Launch, ServerKind, register_kind
from lab.topology import ServerSpec


@register_kind
class AioquicKind(ServerKind):
    """Our aioquic HTTP/3 server (lab/aioquic_server.py)."""

    name = "aioquic"
    library = "aioquic"

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        return Launch([sys.executable, "-m", "lab.aioquic_server", "--host", spec.ip,
                       "--port", str(spec.port), "--certificate", str(ctx.cert), "--private-key", str(ctx.key)])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        from lab.aioquic_server import expected_transport_parameters

        return expected_transport_parameters()
