"""The lab's picoquic servers, through the aiopquic binding in its own virtual environment."""

from __future__ import annotations

from pathlib import Path

from tparams.program_cli import FLOW_CONTROL

from lab.kinds import LabContext, Launch, ServerKind, asked_parameters, register_kind, server_arguments
from lab.topology import ServerSpec

ROOT = Path(__file__).resolve().parents[2]
# aiopquic needs Python >= 3.12; scripts/setup.sh makes this environment for it alone.
PYTHON = ROOT / ".venv-picoquic" / "bin" / "python"


@register_kind
class PicoquicKind(ServerKind):
    """picoquic 1.1.53 as aiopquic 0.6.1 bundles it (lab/picoquic_server.py); one
    window for every stream, connection IDs of picoquic's own length."""

    name = "picoquic"
    role = "lab-server"

    def unavailable_reason(self) -> str | None:
        if not PYTHON.is_file():
            return f"{PYTHON} is missing (aiopquic's environment; run scripts/setup.sh)"
        return None

    def program(self) -> list[str]:
        return [str(PYTHON), str(ROOT / "lab" / "picoquic_server.py")]

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        return Launch([*self.program(), *server_arguments(spec, ctx, asked_parameters(spec), FLOW_CONTROL,
                                                          self.offered)])
