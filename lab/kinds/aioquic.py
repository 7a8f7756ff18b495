"""The lab's aioquic servers."""

from __future__ import annotations

import sys

from lab.kinds import LabContext, Launch, ServerKind, application_flags, asked_parameters, parameter_flags, register_kind
from lab.topology import ServerSpec


@register_kind
class AioquicKind(ServerKind):
    """Our aioquic HTTP/3 server (lab/aioquic_server.py), flow control from
    ``options["parameters"]``.

    aioquic has one setting for all three stream windows: the largest of those
    asked for is sent in all three. The stream limits and the rest are fixed;
    ``transport_parameters`` reports what is really sent.
    """

    name = "aioquic"
    library = "aioquic"
    module = "lab.aioquic_server"
    OFFERED = ("alpn", "cid_length", "datagrams", "retry")

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        from lab.aioquic_server import SETTABLE

        return Launch([sys.executable, "-m", self.module, "--host", spec.ip, "--port", str(spec.port),
                       "--certificate", str(ctx.cert), "--private-key", str(ctx.key),
                       *parameter_flags(asked_parameters(spec), SETTABLE), *application_flags(spec, self.OFFERED)])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        from lab.aioquic_server import expected_transport_parameters

        return expected_transport_parameters(asked_parameters(spec))
