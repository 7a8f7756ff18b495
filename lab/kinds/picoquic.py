"""The lab's picoquic servers, through the aiopquic binding in its own virtual environment."""

from __future__ import annotations

from pathlib import Path

from lab.kinds import LabContext, Launch, ServerKind, application_flags, asked_parameters, parameter_flags, register_kind
from lab.topology import ServerSpec

ROOT = Path(__file__).resolve().parents[2]
# aiopquic needs Python >= 3.12; scripts/setup.sh makes this environment for it alone.
PYTHON = ROOT / ".venv-picoquic" / "bin" / "python"
SETTABLE = ("max_idle_timeout", "initial_max_data", "initial_max_stream_data_bidi_local",
            "initial_max_stream_data_bidi_remote", "initial_max_stream_data_uni", "initial_max_streams_bidi",
            "initial_max_streams_uni")


@register_kind
class PicoquicKind(ServerKind):
    """picoquic 1.1.53 as aiopquic 0.6.1 bundles it (lab/picoquic_server.py); one
    window for every stream, connection IDs of picoquic's own length."""

    name = "picoquic"
    library = "picoquic"
    OFFERED = ("alpn", "datagrams", "retry")

    def unavailable_reason(self) -> str | None:
        if not PYTHON.is_file():
            return f"{PYTHON} is missing (aiopquic's environment; run scripts/setup.sh)"
        return None

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        return Launch([str(PYTHON), str(ROOT / "lab" / "picoquic_server.py"), "--host", spec.ip,
                       "--port", str(spec.port), "--certificate", str(ctx.cert), "--private-key", str(ctx.key),
                       *parameter_flags(asked_parameters(spec), SETTABLE), *application_flags(spec, self.OFFERED)])
