"""The lab's qh3 servers."""

from __future__ import annotations

import sys
from typing import ClassVar

from tparams.paramset import ParamSet

from lab.kinds import LabContext, Launch, ServerKind, register_kind
from lab.topology import ServerSpec

STREAM_WINDOWS = ("initial_max_stream_data_bidi_local", "initial_max_stream_data_bidi_remote",
                  "initial_max_stream_data_uni")


@register_kind
class Qh3Kind(ServerKind):
    """qh3 (aioquic's fork, Rust core) behind lab/qh3_server.py, flow control
    from ``options["parameters"]``.

    qh3 has one setting for all three stream windows: the largest of those
    requested is sent in all three. The stream limits and the rest are fixed;
    ``transport_parameters`` reports what is really sent.
    """

    name = "qh3"
    library = "qh3"
    FLAGS: ClassVar[dict[str, str]] = {
        "max_idle_timeout": "--idle-timeout-ms={}",
        "initial_max_data": "--max-data={}",
    }
    # What qh3 2.1 sends by default (seen on the wire; its QuicConfiguration defaults).
    DEFAULTS: ClassVar[dict[str, int]] = {
        "max_idle_timeout": 30000,
        "initial_max_data": 15728640,
        **dict.fromkeys(STREAM_WINDOWS, 6291456),
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 103,
        "ack_delay_exponent": 3,
        "max_ack_delay": 25,
        "active_connection_id_limit": 8,
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
        return Launch([sys.executable, "-m", "lab.qh3_server", "--host", spec.ip, "--port", str(spec.port),
                       "--certificate", str(ctx.cert), "--private-key", str(ctx.key), *flags])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        return {**self.DEFAULTS, **self.configured(spec)}
