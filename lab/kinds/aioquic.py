"""The lab's aioquic servers."""

from __future__ import annotations

import sys

from lab.aioquic_server import SETTABLE, expected_transport_parameters
from lab.kinds import LabContext, Launch, ServerKind, asked_parameters, register_kind, server_arguments
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
    role = "lab-server"

    def program(self) -> list[str]:
        return [sys.executable, "-m", self.descriptor.programs["lab-server"]]

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        return Launch([*self.program(), *server_arguments(spec, ctx, asked_parameters(spec), SETTABLE, self.offered)])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        return expected_transport_parameters(asked_parameters(spec))
