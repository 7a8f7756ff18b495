"""What the kinds of our own lab servers (lab/servers/, built by
scripts/setup.sh into build/bin) share: where the binary is, and the
lab-server command line (tparams.program_cli; lab/servers/common, lab/servers/golab)."""

from __future__ import annotations

from pathlib import Path
from tparams.paramset import RFC9000_DEFAULTS
from tparams.program_cli import FLOW_CONTROL

from lab.kinds import LabContext, Launch, ServerKind, asked_parameters, server_arguments
from lab.topology import ServerSpec

BIN_DIR = Path(__file__).resolve().parents[2] / "build" / "bin"

# The parameters the lab passes to these servers: the idle timeout and flow control.
SETTABLE = FLOW_CONTROL


class BuiltServerKind(ServerKind):
    """A server of lab/servers: ``build/bin/lab-<library>``, the values of
    ``options["parameters"]`` that it can set passed as flags."""

    role = "lab-server"

    @property
    def binary(self) -> str:
        return self.descriptor.programs["lab-server"]

    def unavailable_reason(self) -> str | None:
        if not (BIN_DIR / self.binary).is_file():
            return f"lab server binary {BIN_DIR / self.binary} is missing; run scripts/setup.sh"
        return None

    def configured(self, spec: ServerSpec) -> dict[str, int]:
        return {name: value for name, value in asked_parameters(spec).items() if name in SETTABLE}

    def program(self) -> list[str]:
        return [str(BIN_DIR / self.binary)]

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        return Launch([*self.program(), *server_arguments(spec, ctx, asked_parameters(spec), SETTABLE, self.offered)])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        """What the library sends given no flags (its descriptor's defaults and fixed values), under what the
        spec sets, as far as the library puts it on the wire."""
        library = self.descriptor
        return {name: value for name, value in {**library.defaults, **library.fixed, **self.configured(spec)}.items()
                if self.sends(name, value)}

    def sends(self, name: str, value: int | bool) -> bool:
        """Whether the library puts this value on the wire; most leave out the RFC 9000 default."""
        return value != RFC9000_DEFAULTS[name]
