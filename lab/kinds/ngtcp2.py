"""The lab's ngtcp2 servers."""

from __future__ import annotations

from typing import ClassVar

from lab.kinds import LabContext, Launch, ServerKind, application_choices, asked_parameters, register_kind
from lab.topology import ServerSpec


@register_kind
class Ngtcp2Kind(ServerKind):
    """Debian's ngtcp2 example server, transport parameters from ``options["parameters"]``;
    ``options["groups"]``: GnuTLS's priority string for its key-exchange groups (e.g.
    ``-GROUP-ALL:+GROUP-SECP384R1``, a server that accepts P-384 only).

    gtlsserver has flags for seven of the twelve; the others it sends with
    ngtcp2 0.12's own values (omitting those equal to the RFC default), which
    ``transport_parameters`` reports instead of the requested ones.
    """

    name = "ngtcp2"
    # What gtlsserver lets its user choose of lab.kinds.APPLICATION_CHOICES, and how.
    APPLICATION_FLAGS: ClassVar[dict[str, str]] = {"preferred_address": "--preferred-ipv4-addr={}",
                                                   "retry": "--validate-addr"}
    FLAGS: ClassVar[dict[str, str]] = {
        "max_idle_timeout": "--timeout={}ms",
        "initial_max_data": "--max-data={}",
        "initial_max_stream_data_bidi_local": "--max-stream-data-bidi-local={}",
        "initial_max_stream_data_bidi_remote": "--max-stream-data-bidi-remote={}",
        "initial_max_stream_data_uni": "--max-stream-data-uni={}",
        "initial_max_streams_bidi": "--max-streams-bidi={}",
        "initial_max_streams_uni": "--max-streams-uni={}",
    }

    def configured(self, spec: ServerSpec) -> dict[str, int]:
        return {name: value for name, value in asked_parameters(spec).items() if name in self.FLAGS}

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        # "*": gtlsserver binds every local address, of both families (the namespace holds the two of this server).
        return Launch(self.server_argv(spec, ctx, "*"))

    def server_argv(self, spec: ServerSpec, ctx: LabContext, address: str) -> list[str]:
        """gtlsserver listening on ``address`` (the wildcard serves a whole range of local addresses)."""
        htdocs = ctx.workdir(spec) / "htdocs"
        htdocs.mkdir(exist_ok=True)
        (htdocs / "index.html").write_text(f"{spec.name}\n")
        flags = [self.FLAGS[name].format(value) for name, value in self.configured(spec).items()]
        flags += [self.APPLICATION_FLAGS[name].format(value)
                  for name, value in application_choices(spec, self.offered).items() if value is not False]
        if "groups" in spec.options:
            flags.append(f"--groups={spec.options['groups']}")
        # Auto-tuning off: the advertised windows stay the configured ones.
        return [self.descriptor.programs["lab-server"], "--quiet", f"--htdocs={htdocs}", "--max-window=0",
                "--max-stream-window=0", *flags, address, str(spec.port), str(ctx.key), str(ctx.cert)]

    def transport_parameters(self, spec: ServerSpec) -> dict[str, int | bool]:
        return {**self.descriptor.defaults, **self.configured(spec)}
