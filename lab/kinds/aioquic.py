"""The lab's aioquic servers."""

from __future__ import annotations

import sys
from typing import ClassVar

from tparams.paramset import ParamSet

from lab.kinds import LabContext, Launch, ServerKind, register_kind
from lab.topology import ServerSpec

STREAM_WINDOWS = ("initial_max_stream_data_bidi_local", "initial_max_stream_data_bidi_remote",
                  "initial_max_stream_data_uni")


@register_kind
class AioquicKind(ServerKind):
    """Our aioquic HTTP/3 server (lab/aioquic_server.py), flow control from
    ``options["parameters"]``.

    aioquic has one setting for all three stream windows: the largest of those
    requested is sent in all three. The stream limits and the rest are fixed;
    ``transport_parameters`` reports what is really sent.
    """

    name = "aioquic"
    library = "aioquic"
    module = "lab.aioquic_server"
    FLAGS: ClassVar[dict[str, str]] = {
        "max_idle_timeout": "--idle-timeout-ms={}",
        "initial_max_data": "--max-data={}",
    }

    def configured(self, spec: ServerSpec) -> dict[str, int]:
        params = ParamSet.from_mapping(spec.options.get("parameters", {})).as_sent()
        chosen = {name: params[name] for name in self.FLAGS if params.get(name) is not None}
        windows = [params[name] for name in STREAM_WINDOWS if params.get(name) is not None]
        if windows:
            chosen.update(dict.fromkeys(STREAM_WINDOWS, max(windows)))
        return chosen

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        configured = self.configured(spec)
        flags = [self.FLAGS[name].format(value) for name, value in configured.items() if name in self.FLAGS]
        if STREAM_WINDOWS[0] in configured:
            flags.append(f"--max-stream-data={configured[STREAM_WINDOWS[0]]}")
        return Launch([sys.executable, "-m", self.module, "--host", spec.ip, "--port", str(spec.port),
                       "--certificate", str(ctx.cert), "--private-key", str(ctx.key), *flags])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        from lab.aioquic_server import expected_transport_parameters

        configured = self.configured(spec)
        return expected_transport_parameters({
            "idle_timeout": configured.get("max_idle_timeout"), "max_data": configured.get("initial_max_data"),
            "max_stream_data": configured.get(STREAM_WINDOWS[0])})
