"""What the kinds of our own lab servers (lab/servers/, built by
scripts/setup.sh into build/bin) share: where the binary is, and one
command line for the flow-control values (lab/servers/common)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from tparams.paramset import PERFORMANCE_PARAMETERS, RFC9000_DEFAULTS

from lab.kinds import LabContext, Launch, ServerKind, application_flags, asked_parameters
from lab.topology import ServerSpec

BIN_DIR = Path(__file__).resolve().parents[2] / "build" / "bin"

# The parameters lab/servers/common takes as --<name with dashes>: the idle
# timeout and flow control, the twelve less what no lab server lets one set.
SETTABLE: tuple[str, ...] = tuple(
    name for name in PERFORMANCE_PARAMETERS
    if name not in ("max_udp_payload_size", "ack_delay_exponent", "max_ack_delay", "disable_active_migration",
                    "active_connection_id_limit")
)


class BuiltServerKind(ServerKind):
    """A server of lab/servers: ``build/bin/lab-<library>``, the values of
    ``options["parameters"]`` that it can set passed as flags."""

    # What the server sends when given no flags (as sent, absent = not sent).
    DEFAULTS: ClassVar[dict[str, int | bool]]

    @property
    def binary(self) -> str:
        return f"lab-{self.library}"

    def unavailable_reason(self) -> str | None:
        if not (BIN_DIR / self.binary).is_file():
            return f"lab server binary {BIN_DIR / self.binary} is missing; run scripts/setup.sh"
        return None

    def configured(self, spec: ServerSpec) -> dict[str, int]:
        return {name: value for name, value in asked_parameters(spec).items() if name in SETTABLE}

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        flags = [f"--{name.replace('_', '-')}={value}" for name, value in self.configured(spec).items()]
        return Launch([str(BIN_DIR / self.binary), f"{spec.ip}:{spec.port}",
                       f"--cert={ctx.cert}", f"--key={ctx.key}", *flags, *application_flags(spec, self.OFFERED)])

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        return {name: value for name, value in {**self.DEFAULTS, **self.configured(spec)}.items()
                if self.sends(name, value)}

    def sends(self, name: str, value: int | bool) -> bool:
        """Whether the library puts this value on the wire; most leave out the RFC 9000 default."""
        return value != RFC9000_DEFAULTS[name]
