"""Knobs: what a qreplay run sets besides the transport parameters, each declared once.

A knob's declaration is everything about it: its name (``RunOptions.knobs``' key, the runs column of what
ran, ``<name>_requested`` beside it for what was asked, the CLI's ``--<name with dashes>``, and our programs'
option of the same spelling, tparams.program_cli), its values, which end's stack decides what ran, and which
stacks can set it and how each renders it. A stack it does not name is refused in one line (exit 2) when
the knob is asked for, before any run.

``cc`` and ``autotune`` predate the declarations: each stack's own code says what it runs of them
(Stack.congestion_control, Stack.autotunes), so their ``stacks`` is None (every stack; none refused).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from tparams.libraries import LIBRARIES, Crypto

Role = Literal["client", "server"]
Kind = Literal["choice", "switch", "boolean", "integer"]

CIPHER_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
#: their codes on the wire (RFC 8446, B.4)
CIPHER_SUITE_NAMES = {0x1301: "TLS_AES_128_GCM_SHA256", 0x1302: "TLS_AES_256_GCM_SHA384",
                      0x1303: "TLS_CHACHA20_POLY1305_SHA256"}


@dataclass(frozen=True)
class Rendering:
    """How one stack's programs take a knob's value. With nothing given: our programs' own option
    (``--<name>=<value>``), on both ends."""

    #: the options of our programs (tparams.program_cli) carrying ``value`` for ``role``
    options: Callable[[object, Role], dict[str, object]] | None = None
    #: words a program not of ours takes (appended to its command line)
    argv: Callable[[object, Role], list[str]] | None = None
    #: environment variables the program reads
    env: Callable[[object, Role], dict[str, str]] | None = None
    #: kernel settings of the end's network namespace (sysctl name -> value), set for the run and restored
    sysctl: Callable[[object, Role], dict[str, str]] | None = None

    def program_options(self, name: str, value: object, role: Role) -> dict[str, object]:
        if self.options:
            return self.options(value, role)
        return {} if self.argv or self.env or self.sysctl else {name: value}


@dataclass(frozen=True)
class Knob:
    name: str  # snake_case; the CLI's --<name with dashes>
    help: str
    kind: Kind = "choice"
    choices: tuple[str, ...] = ()
    #: what is asked when the command line says nothing; None: each stack's own choice (no option rendered)
    default: object = None
    #: whose stack decides what ran: the client's (the receiver of a download) or the server's (its sender)
    decided_by: Role = "server"
    #: whether the other end must set it too (an extension both ends speak), else it is refused as well
    both_ends: bool = False
    #: stack name -> how it renders the knob; None: every stack, through its own code (cc, autotune), whose
    #: method ``ran_by`` says what it runs when a value is asked
    stacks: Mapping[str, Rendering] | None = field(default_factory=dict)
    ran_by: str | None = None
    #: stack name -> why it cannot set the knob (the refusal's reason; otherwise a generic one)
    cannot: Mapping[str, str] = field(default_factory=dict)
    #: whether our programs take it as an option (tparams.program_cli); False for a knob that reaches a library
    #: or the kernel without them (an environment variable the crypto library reads, a namespace's sysctl)
    program_option: bool = True
    #: the warning of a run whose stack ran another value than asked ({stack}, {asked}, {ran}); None: the
    #: stacks' own notes say why (a knob of ``ran_by``)
    fallback_note: str | None = None

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def sql_type(self) -> str:
        return {"choice": "VARCHAR", "integer": "BIGINT"}.get(self.kind, "BOOLEAN")

    @property
    def columns(self) -> tuple[str, str]:
        """The runs columns: what ran, what was asked."""
        return self.name, f"{self.name}_requested"

    def parse(self, text: str) -> object:
        """A command line's value, ValueError (one line) if it is none of the knob's."""
        if self.kind == "choice":
            if text not in self.choices:
                raise ValueError(f"{self.option} takes {', '.join(self.choices)}, not {text!r}")
            return text
        if self.kind == "integer":
            if not text.isdigit() or int(text) < 1:
                raise ValueError(f"{self.option} takes a whole number of at least 1, not {text!r}")
            return int(text)
        if text not in ("on", "off", "true", "false"):
            raise ValueError(f"{self.option} takes on or off, not {text!r}")
        return text in ("on", "true")

    def refusal(self, stack: str, value: object) -> str | None:
        """Why ``stack`` cannot run ``value`` (one line), or None when it can (or nothing is asked)."""
        if value is None or value == self.default or self.stacks is None:
            return None
        rendering = self.stacks.get(stack)
        if rendering is None:
            reason = self.cannot.get(stack, "it has no way to set it here")
            return f"{stack} cannot set {self.option}: {reason}"
        return None


def _ngtcp2_cipher(value: object, role: Role) -> list[str]:
    # a GnuTLS priority string (gtlsclient/gtlsserver --ciphers): TLS 1.3 with the one AEAD alone
    aead = {"TLS_AES_128_GCM_SHA256": "AES-128-GCM", "TLS_AES_256_GCM_SHA384": "AES-256-GCM",
            "TLS_CHACHA20_POLY1305_SHA256": "CHACHA20-POLY1305"}[str(value)]
    return [f"--ciphers=NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+{aead}"]


CC = Knob("cc", "congestion control of the sender (the server of a download)", choices=("cubic", "bbr"),
          default="cubic", stacks=None, ran_by="congestion_control",
          fallback_note="{stack} has no {asked}: it ran {ran}")
AUTOTUNE = Knob("autotune", "let flow-control windows grow; off: they stay at the advertised values",
                kind="switch", default=False, decided_by="client", stacks=None, ran_by="autotunes")
CIPHER = Knob(
    "cipher", "the TLS 1.3 cipher suite: the client offers only this one (default: each stack's own list)",
    choices=CIPHER_SUITES, decided_by="client",
    stacks={"aioquic": Rendering(), "quinn": Rendering(), "msquic": Rendering(),
            "ngtcp2": Rendering(argv=_ngtcp2_cipher),
            # curl 7.88 takes the option's value as the next word only
            "curl": Rendering(argv=lambda value, role: ["--tls13-ciphers", str(value)] if role == "client" else [])},
    cannot={"quic-go": "Go's crypto/tls chooses the TLS 1.3 suite itself (tls.Config.CipherSuites is TLS 1.2's)",
            "quiche": "BoringSSL has no setting for TLS 1.3 suites", "tquic": "BoringSSL has no setting for TLS 1.3 "
            "suites", "s2n-quic": "its rustls provider is not given a suite list by our program",
            "chromium": "a browser's TLS offer is its own", "firefox": "a browser's TLS offer is its own",
            "chromium-tcp": "a browser's TLS offer is its own", "firefox-tcp": "a browser's TLS offer is its own"})
GSO = Knob(
    "gso", "UDP generic segmentation offload of the sender's sends, on or off (default: each stack's own)",
    kind="boolean",
    stacks={"quic-go": Rendering(), "quinn": Rendering(), "s2n-quic": Rendering()},
    cannot={"aioquic": "aioquic sends one datagram a system call",
            "quiche": "our quiche program sends one datagram a send_to", "tquic": "our tquic program sends one "
            "datagram a send_to", "msquic": "msquic 2.5 has no setting for it"})
GRO = Knob(
    "gro", "UDP generic receive offload of the receiver's socket (UDP_GRO), on or off (default: each stack's own)",
    kind="boolean", decided_by="client", stacks={"s2n-quic": Rendering()},
    cannot={"quinn": "quinn-udp turns GRO on wherever the kernel has it, with no switch",
            "quic-go": "quic-go 0.65 does not use GRO (it reads batches with recvmmsg)",
            "aioquic": "aioquic reads one datagram a system call",
            "tcp-h2": "TCP's receive offload is the kernel's", "curl": "TCP's receive offload is the kernel's"})
ACK_FREQUENCY = Knob(
    "ack_frequency", "ack-eliciting packets the receiver may take before it must acknowledge (RFC 9000: 2); the "
    "sender asks it with ACK_FREQUENCY frames (draft-ietf-quic-ack-frequency), which both ends must speak",
    kind="integer", both_ends=True, stacks={"quinn": Rendering()},
    cannot={"quic-go": "quic-go 0.65 does not speak the ACK frequency extension",
            "aioquic": "aioquic 1.7 does not speak the ACK frequency extension",
            "ngtcp2": "ngtcp2 0.12 does not speak the ACK frequency extension",
            "quiche": "quiche 0.30 does not speak the ACK frequency extension",
            "tquic": "tquic 1.6 can set only how it acknowledges itself, not what it asks of its peer",
            "s2n-quic": "s2n-quic 1.91 acknowledges every 10th packet, a fixed value",
            "msquic": "msquic 2.5 chooses its ACK_FREQUENCY frames itself, with no setting",
            "tcp-h2": "TCP's delayed ACKs are the kernel's", "curl": "TCP's delayed ACKs are the kernel's"})



def _aes_off(crypto: Crypto) -> Callable[[object, Role], dict[str, str]]:
    return lambda value, role: dict(crypto.aes_off) if value is False and role == "server" else {}


AES_NI = Knob(
    "aes_ni", "the CPU's AES instructions (AES-NI, and carry-less multiply with them) in the sender's crypto "
    "library; off: its own CPU-feature mask turns them off (the library's descriptor holds it), default on",
    kind="boolean", program_option=False,
    stacks={library.name: Rendering(env=_aes_off(library.crypto)) for library in LIBRARIES if library.crypto},
    cannot={"quinn": "ring, rustls's provider in our quinn program, has no CPU-feature mask it reads",
            "s2n-quic": "no CPU-feature mask of its crypto provider is known here"})


def _tcp_rmem(value: object, role: Role) -> dict[str, str]:
    # min, default, max: the buffer starts at the value and auto-tuning can grow it no further
    return {"net.ipv4.tcp_rmem": f"4096 {int(value)} {int(value)}"} if role == "client" else {}


TCP_RECEIVE_BUFFER = Knob(
    "tcp_receive_buffer", "the receiver's TCP receive buffer in bytes, auto-tuning capped there (its "
    "namespace's net.ipv4.tcp_rmem, for the run; default: the kernel's)",
    kind="integer", decided_by="client", program_option=False,
    stacks={name: Rendering(sysctl=_tcp_rmem) for name in ("tcp-h2", "curl")},
    cannot={name: "a QUIC stack's receive buffer is its UDP socket's (--udp-buffer)" for name in (
        "ngtcp2", "quic-go", "aioquic", "quinn", "quiche", "s2n-quic", "tquic", "msquic", "lsquic", "chromium",
        "firefox")})

KNOBS: dict[str, Knob] = {knob.name: knob for knob in (CC, AUTOTUNE, CIPHER, GSO, GRO, ACK_FREQUENCY, AES_NI,
                                                       TCP_RECEIVE_BUFFER)}
