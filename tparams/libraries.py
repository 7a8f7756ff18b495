"""Every QUIC library we run, described once (pure data; no I/O).

A library's facts used to live beside each of its users (its lab kind, its replay stack, identification)
and could drift apart. Here each is written once, and the lab kinds (lab/kinds), the replay stacks
(replay/stacks) and identification (scanner/identify.py) read them:

- where its version comes from (``packages``; common.versions reads them) and the line a signatures
  file records of what ran (``software``);
- what it sends whatever an application asks (``fixed``: a replay request for exactly that value is what
  the peer sees, so it counts as applied) and what its lab server sends given no settings (``defaults``);
- what it lets an application choose beside flow control (``offered``, of program_cli.APPLICATION: the
  lab refuses the rest) and its held-out configuration (``held_out``, identification's test of those
  choices);
- its programs, by role.

How a library's *command line* carries each parameter stays with its stack or kind (flag spellings,
units, clamping): that is code, not a fact to look up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Registry = Literal["cargo", "go", "dpkg", "pip", "maven", "aiopquic", "build"]


@dataclass(frozen=True)
class Package:
    """One thing whose version says what runs, and where that version is read."""

    #: cargo: lab/servers/Cargo.lock; go: go.mod; dpkg: the installed Debian package; pip: the installed
    #: distribution (of ``where``, a virtual environment under the repository, else qreplay's own); maven: the
    #: pom of lab/servers/<where>; aiopquic: the picoquic version aiopquic's build bundles (in ``where``); build:
    #: a user's own build, named by the environment variable ``name`` (no version of its own to read)
    registry: Registry
    name: str
    label: str = ""  # how a software line names it, if not by ``name``
    where: str = ""

    @property
    def shown(self) -> str:
        return self.label or self.name


@dataclass(frozen=True)
class Crypto:
    """The crypto library a QUIC library's TLS and packet protection run on, and what turns the CPU's AES
    instructions off in it: the environment it reads when the program starts (its own CPU-feature mask)."""

    name: str
    #: AES-NI off, and carry-less multiply with it (AES-GCM's GHASH runs on it beside AES-NI): the Kempf
    #: thesis's case, software AES
    aes_off: Mapping[str, str]


# OpenSSL's documented example mask: bit 57 (AES-NI) and bit 33 (PCLMULQDQ) of the first word cleared;
# BoringSSL and quictls keep OpenSSL's variable and syntax
_IA32CAP = {"OPENSSL_ia32cap": "~0x200000200000000"}
OPENSSL, BORINGSSL, QUICTLS = Crypto("OpenSSL", _IA32CAP), Crypto("BoringSSL", _IA32CAP), Crypto("quictls", _IA32CAP)
# GnuTLS's mask lists what stays on (x86: 0x2 AES-NI, 0x4 SSSE3, 0x8 PCLMUL, 0x10 AVX, 0x20 SHA-NI)
GNUTLS = Crypto("GnuTLS", {"GNUTLS_CPUID_OVERRIDE": "0x34"})
# Go's runtime reads its CPU features' switches from GODEBUG (internal/cpu's options)
GO_CRYPTO = Crypto("Go crypto", {"GODEBUG": "cpu.aes=off,cpu.pclmulqdq=off"})


@dataclass(frozen=True)
class Library:
    """One library as we run it; ``name`` is its lab kind's and its replay stack's."""

    name: str
    identified_as: str  # identification's name for it (caddy runs quic-go)
    packages: tuple[Package, ...]  # the first is the library itself (a replay stack's version)
    #: the line a signatures file records (scanner.identify.software): ``{versions}`` is every package as
    #: "name version", ``{0}``, ``{1}``... each package's version alone
    software: str
    #: what its lab server sends given no settings, as sent (absent: not sent), beside ``fixed``
    defaults: Mapping[str, int | bool] = field(default_factory=dict)
    #: transport parameters it sends whatever an application asks (by both roles)
    fixed: Mapping[str, int | bool] = field(default_factory=dict)
    #: ... and by its client alone
    client_fixed: Mapping[str, int | bool] = field(default_factory=dict)
    #: what it lets an application choose of program_cli.APPLICATION (the lab refuses the rest)
    offered: tuple[str, ...] = ()
    #: identification's held-out configuration of its lab server (lab ServerSpec options: "application",
    #: "parameters"); None: an application can choose nothing of it, the server is left out
    held_out: Mapping[str, Mapping[str, object]] | None = None
    #: its programs by program_cli role ("lab-server", "replay-server", "replay-client"): a file of build/bin,
    #: a Python module, or a command on PATH
    programs: Mapping[str, str] = field(default_factory=dict)
    #: why the project has no HTTP/3 server of it for a browser (checked where the library's h3 layer would be)
    no_h3_server: str | None = None
    #: the crypto library it runs on, where its CPU-feature mask is known (None: none it can be told)
    crypto: Crypto | None = None

    def fixed_for(self, role: Literal["client", "server"]) -> dict[str, int | bool]:
        """What its ``role`` sends whatever it is told."""
        return {**self.fixed, **(self.client_fixed if role == "client" else {})}


# The held-out configurations: every choice an application may make (as far as the library lets it), each
# unlike the learned one and as odd as the library allows, and flow control and idle timeout unlike any
# default. Never learned from.
_ALPN = ["hq-interop", "h3", "x-held-out"]  # the scanner offers h3 alone: the server still takes it
# A port: the server's own address at it (gtlsserver listens there too; the scanner never moves).
_PREFERRED_ADDRESS = 4433
_FLOW = {"initial_max_data": 1_234_567, "initial_max_stream_data_bidi_local": 65_537,
         "initial_max_stream_data_bidi_remote": 300_001, "initial_max_stream_data_uni": 7_777,
         "initial_max_streams_bidi": 7, "initial_max_streams_uni": 5}


def _every_stream_window(size: int) -> dict[str, int]:
    """_FLOW with one window for all three stream kinds (what a library with one window sends)."""
    return {**_FLOW, **{name: size for name in _FLOW if name.startswith("initial_max_stream_data_")}}


_ONE_WINDOW = _every_stream_window(300_001)
_POWER_OF_TWO_WINDOWS = _every_stream_window(131_072)  # msquic takes powers of two only


def _built(name: str, lab_server: str | None = None) -> dict[str, str]:
    """The programs of a library built from lab/servers: its lab server and its replay program."""
    return {"lab-server": lab_server or f"lab-{name}", "replay-server": f"replay-{name}",
            "replay-client": f"replay-{name}"}


def _crates(*crates: str) -> tuple[Package, ...]:
    return tuple(Package("cargo", crate) for crate in crates)


# In identification's order of held-out configurations (the evaluation file records them so).
LIBRARIES: tuple[Library, ...] = (
    Library(
        "quiche", "quiche", _crates("quiche"), "{versions} (lab/servers/quiche)",
        # quiche's flow-control defaults are 0; without flags our server takes those of quiche's example
        # server (apps/), the rest are quiche's own.
        defaults={"max_idle_timeout": 30000, "max_udp_payload_size": 65527, "initial_max_data": 10000000,
                  "initial_max_stream_data_bidi_local": 1000000, "initial_max_stream_data_bidi_remote": 1000000,
                  "initial_max_stream_data_uni": 1000000, "initial_max_streams_bidi": 100,
                  "initial_max_streams_uni": 100, "ack_delay_exponent": 3, "max_ack_delay": 25,
                  "active_connection_id_limit": 2},
        offered=("alpn", "cid_length", "datagrams", "disable_active_migration", "active_connection_id_limit"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 16, "datagrams": True,
                                  "disable_active_migration": True, "active_connection_id_limit": 5},
                  "parameters": {**_FLOW, "max_idle_timeout": 0}},
        programs={**_built("quiche"), "replay-stream-client": "replay-quiche"},
        crypto=BORINGSSL,  # boring-sys
    ),
    Library(
        "ngtcp2", "ngtcp2", (Package("dpkg", "ngtcp2-server", "Debian ngtcp2-server"),),
        "ngtcp2 gtlsserver, {versions}",
        # What gtlsserver 0.12 sends without flags (its --help defaults, and active_connection_id_limit seen
        # in gtlsclient's log of the server's parameters).
        defaults={"max_idle_timeout": 30000, "initial_max_data": 1 << 20,
                  "initial_max_stream_data_bidi_local": 256 << 10, "initial_max_stream_data_bidi_remote": 256 << 10,
                  "initial_max_stream_data_uni": 256 << 10, "initial_max_streams_bidi": 100,
                  "initial_max_streams_uni": 3, "active_connection_id_limit": 7},
        offered=("preferred_address", "retry"),
        held_out={"application": {"preferred_address": _PREFERRED_ADDRESS, "retry": True},
                  "parameters": {**_FLOW, "max_idle_timeout": 7_000}},
        programs={"lab-server": "gtlsserver", "replay-server": "gtlsserver", "replay-client": "gtlsclient"},
        crypto=GNUTLS,  # the examples of Debian's ngtcp2 built on GnuTLS (gtls*)
    ),
    Library(
        "quinn", "quinn", _crates("quinn", "quinn-proto"), "{versions} (lab/servers/quinn)",
        # quinn-proto 0.11's TransportConfig and EndpointConfig defaults.
        defaults={"max_idle_timeout": 30000, "max_udp_payload_size": 1472, "initial_max_data": (1 << 62) - 1,
                  "initial_max_stream_data_bidi_local": 1250000, "initial_max_stream_data_bidi_remote": 1250000,
                  "initial_max_stream_data_uni": 1250000, "initial_max_streams_bidi": 100,
                  "initial_max_streams_uni": 100},
        # quinn-proto (transport_parameters.rs, cid_queue.rs).
        fixed={"ack_delay_exponent": 3, "max_ack_delay": 25, "active_connection_id_limit": 5},
        offered=("alpn", "cid_length", "datagrams", "disable_active_migration", "preferred_address", "retry"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 13, "datagrams": False,
                                  "disable_active_migration": True, "preferred_address": _PREFERRED_ADDRESS,
                                  "retry": True},
                  "parameters": {**_ONE_WINDOW, "max_idle_timeout": 0}},
        programs={**_built("quinn"), "replay-stream-client": "replay-quinn"},
    ),
    Library(
        "s2n-quic", "s2n-quic", _crates("s2n-quic"), "{versions} (lab/servers/s2n-quic)",
        # s2n-quic 1.91: Limits::new() (the RECOMMENDED values), and the endpoint's own
        # active_connection_id_limit (peer_id_registry::ACTIVE_CONNECTION_ID_LIMIT), which overwrites the
        # setting (the replay stack still reports a request for 3 not applied, as it always has).
        defaults={"max_idle_timeout": 30000, "initial_max_data": 3750000,
                  "initial_max_stream_data_bidi_local": 3750000, "initial_max_stream_data_bidi_remote": 3750000,
                  "initial_max_stream_data_uni": 3750000, "initial_max_streams_bidi": 100,
                  "initial_max_streams_uni": 100, "active_connection_id_limit": 3},
        offered=("alpn", "cid_length", "disable_active_migration"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 11, "disable_active_migration": True},
                  "parameters": {**_FLOW, "max_idle_timeout": 12_345}},
        programs={**_built("s2n-quic"), "replay-stream-client": "replay-s2n-quic"},
        no_h3_server="its h3 crate (s2n-quic-h3, in the s2n-quic repository) is not published on crates.io "
                     "(`cargo info s2n-quic-h3`, 2026-11-28), so no h3 server of it builds from pinned crates",
    ),
    Library(
        "tquic", "tquic", _crates("tquic"), "{versions} (lab/servers/tquic)",
        # tquic 1.6's Config::new() and TransportParams defaults (idle timeout off).
        defaults={"max_udp_payload_size": 65527, "initial_max_data": 10485760,
                  "initial_max_stream_data_bidi_local": 5242880, "initial_max_stream_data_bidi_remote": 2097152,
                  "initial_max_stream_data_uni": 1048576, "initial_max_streams_bidi": 200,
                  "initial_max_streams_uni": 100, "ack_delay_exponent": 3, "max_ack_delay": 25,
                  "active_connection_id_limit": 2},
        offered=("alpn", "cid_length", "active_connection_id_limit", "retry"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 5, "active_connection_id_limit": 7, "retry": True},
                  "parameters": {**_FLOW, "max_idle_timeout": 0}},
        programs=_built("tquic"),
        crypto=BORINGSSL,
    ),
    Library(
        "msquic", "msquic", _crates("msquic"), "{versions} (lab/servers/msquic)",
        # msquic 2.5.1's defaults (quicdef.h; max_ack_delay 25 + its 1 ms timer resolution) and our server's
        # two stream counts (msquic's are 0).
        defaults={"max_idle_timeout": 30000, "max_udp_payload_size": 1472, "initial_max_data": 16777216,
                  "initial_max_stream_data_bidi_local": 65536, "initial_max_stream_data_bidi_remote": 65536,
                  "initial_max_stream_data_uni": 65536, "initial_max_streams_bidi": 100,
                  "initial_max_streams_uni": 3, "max_ack_delay": 26},
        # quicdef.h: QUIC_ACK_DELAY_EXPONENT, QUIC_ACTIVE_CONNECTION_ID_LIMIT.
        fixed={"ack_delay_exponent": 8, "active_connection_id_limit": 4},
        # Its connection IDs are 9 bytes, or 14 with the server's address in them (lab/servers/msquic).
        offered=("alpn", "cid_length", "datagrams"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 14, "datagrams": True},
                  "parameters": {**_POWER_OF_TWO_WINDOWS, "max_idle_timeout": 0}},
        programs=_built("msquic"),
        no_h3_server="msquic is QUIC alone; HTTP/3 over it comes from other projects (msh3, C, in vcpkg; the crate "
                     "msquic-h3, hyperium's h3 on msquic, 0.0.x and experimental), neither built here",
        crypto=QUICTLS,  # the msquic crate builds msquic on its quictls
    ),
    Library(
        "kwik", "kwik", (Package("maven", "kwik", where="kwik"), Package("maven", "flupke", where="kwik")),
        "{versions} (lab/servers/kwik)",
        defaults={"max_idle_timeout": 30000},  # (seen on the wire, as all of kwik's below)
        # What kwik 0.10.8 sends by itself; an application chooses none of it.
        fixed={"max_udp_payload_size": 1500, "ack_delay_exponent": 3, "max_ack_delay": 25,
               "disable_active_migration": True, "active_connection_id_limit": 3},
        offered=("alpn", "cid_length", "retry"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 6, "retry": True},
                  "parameters": {**_FLOW, "max_idle_timeout": 77_000}},
        # Its h3 server for the browsers is the same jar (replay/stacks/kwik.py): kwik's API sets one window for
        # both bidi directions, and none of ``fixed``.
        programs={"lab-server": "kwik"},  # a jar built from lab/servers/kwik
    ),
    Library(
        "netty", "netty", (Package("maven", "netty-incubator-codec-quic", where="netty"),),
        "{versions} (lab/servers/netty)",
        # quiche (inside) leaves out every window, stream limit and idle timeout at 0, its default.
        # What it sends by itself (seen on the wire), ack_delay_exponent although it is the RFC default.
        fixed={"max_udp_payload_size": 65527, "ack_delay_exponent": 3, "max_ack_delay": 25},
        offered=("alpn", "cid_length", "datagrams", "disable_active_migration"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 12, "datagrams": True,
                                  "disable_active_migration": True},
                  "parameters": {**_FLOW, "max_idle_timeout": 0}},
        programs={"lab-server": "netty"},  # a jar built from lab/servers/netty
        no_h3_server="its lab server runs netty-incubator-codec-quic alone; netty's HTTP/3 codec (io.netty:netty-"
                     "codec-http3 in Netty 4.2, on Maven Central) is not built here",
    ),
    Library(
        "aioquic", "aioquic", (Package("pip", "aioquic"),), "{versions} (lab/aioquic_server.py)",
        # (its lab kind asks aioquic itself what it sends)
        offered=("alpn", "cid_length", "datagrams", "retry"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 12, "datagrams": True, "retry": True},
                  "parameters": {**_ONE_WINDOW, "max_idle_timeout": 600_000}},
        programs={"lab-server": "lab.aioquic_server", "replay-server": "replay.aioquic_endpoints.server",
                  "replay-client": "replay.aioquic_endpoints.client",
                  "replay-stream-client": "replay.aioquic_endpoints.stream_client"},
        crypto=OPENSSL,  # cryptography's wheel, which bundles its OpenSSL
    ),
    Library(
        "qh3", "qh3", (Package("pip", "qh3"),), "{versions} (lab/qh3_server.py)",
        # qh3 2.1's QuicConfiguration defaults (seen on the wire).
        defaults={"max_idle_timeout": 30000, "initial_max_data": 15728640,
                  "initial_max_stream_data_bidi_local": 6291456, "initial_max_stream_data_bidi_remote": 6291456,
                  "initial_max_stream_data_uni": 6291456, "initial_max_streams_bidi": 100,
                  "initial_max_streams_uni": 103, "ack_delay_exponent": 3, "max_ack_delay": 25,
                  "active_connection_id_limit": 8},
        offered=("alpn", "cid_length", "datagrams", "active_connection_id_limit", "retry"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 10, "datagrams": True,
                                  "active_connection_id_limit": 3, "retry": True},
                  "parameters": {**_ONE_WINDOW, "max_idle_timeout": 90_000}},
        programs={"lab-server": "lab.qh3_server"},
        no_h3_server="qh3 has its own h3 layer (qh3.h3, aioquic's) and its lab server (lab/qh3_server.py) answers "
                     "h3 with 200 and a short body, but no replay stack of qh3 serves the page or counts an upload's "
                     "body",
    ),
    Library(
        "quic-go", "quic-go", (Package("go", "github.com/quic-go/quic-go", "quic-go"),),
        "{versions} (lab/servers/quic-go)",
        # What our server sends given no flags (seen on the wire, quic-go v0.65's Config defaults).
        defaults={"max_idle_timeout": 30000, "max_udp_payload_size": 1452, "initial_max_data": 786432,
                  "initial_max_stream_data_bidi_local": 524288, "initial_max_stream_data_bidi_remote": 524288,
                  "initial_max_stream_data_uni": 524288, "initial_max_streams_bidi": 100,
                  "initial_max_streams_uni": 100, "max_ack_delay": 26, "active_connection_id_limit": 4},
        offered=("alpn", "cid_length", "datagrams", "retry"),
        held_out={"application": {"alpn": _ALPN, "cid_length": 17, "datagrams": True, "retry": True},
                  "parameters": {**_ONE_WINDOW, "max_idle_timeout": 45_000}},
        programs={"lab-server": "quic-go", "replay-server": "qgserver", "replay-client": "qgclient",
                  "replay-stream-client": "qgstream"},
        crypto=GO_CRYPTO,
    ),
    Library(
        "x-net-quic", "x/net/quic", (Package("go", "golang.org/x/net"),), "{versions} (lab/servers/x-net-quic)",
        # What it sends given no flags (seen on the wire, x/net v0.56): no idle timeout.
        defaults={"max_udp_payload_size": 1472, "initial_max_data": 1048576,
                  "initial_max_stream_data_bidi_local": 1048576, "initial_max_stream_data_bidi_remote": 1048576,
                  "initial_max_stream_data_uni": 1048576, "initial_max_streams_bidi": 100,
                  "initial_max_streams_uni": 100},
        fixed={"disable_active_migration": True},  # an application cannot allow migration
        offered=("alpn", "retry"),
        held_out={"application": {"alpn": _ALPN, "retry": True},
                  "parameters": {**_ONE_WINDOW, "max_idle_timeout": 0}},
        programs={"lab-server": "x-net-quic"},
        no_h3_server="x/net's HTTP/3 is golang.org/x/net/internal/http3, an internal package (a work in progress, "
                     "its doc says): no program outside x/net can import it",
    ),
    Library(
        "picoquic", "picoquic",
        (Package("aiopquic", "picoquic", where=".venv-picoquic"), Package("pip", "aiopquic", where=".venv-picoquic")),
        "picoquic {0} in aiopquic=={1} (lab/picoquic_server.py)",
        offered=("alpn", "datagrams", "retry"),
        held_out={"application": {"alpn": _ALPN, "datagrams": False, "retry": True},
                  "parameters": {**_ONE_WINDOW, "max_idle_timeout": 120_000}},
        programs={"lab-server": "lab/picoquic_server.py"},
        no_h3_server="aiopquic 0.6.1, through which the lab runs picoquic, exposes picoquic's h3zero only to "
                     "WebTransport sessions (an H3 CONNECT at a registered path); a GET and PUT server through it "
                     "not checked",
    ),
    Library(
        "lsquic", "lsquic", (Package("build", "QREPLAY_LSQUIC_SERVER", "LSQUIC"),), "{0} (example http_server)",
        # What http_server sends without -o settings (seen on the wire); it leaves out RFC defaults.
        defaults={"max_idle_timeout": 30000, "initial_max_data": 1572864,
                  "initial_max_stream_data_bidi_remote": 1048576, "initial_max_stream_data_uni": 12288,
                  "initial_max_streams_bidi": 100, "initial_max_streams_uni": 3},
        # gen_trans_params(); the HTTP client hard-codes its initial_max_streams_uni too
        # (lsquic_full_conn_ietf.c): -o init_max_streams_uni only reaches a server's.
        fixed={"ack_delay_exponent": 3, "max_ack_delay": 25, "active_connection_id_limit": 8},
        client_fixed={"initial_max_streams_uni": 3},
        programs={"lab-server": "http_server", "replay-server": "http_server", "replay-client": "http_client"},
    ),
    Library(
        "caddy", "quic-go", (Package("dpkg", "caddy", "Debian caddy"),), "caddy (quic-go), {versions}",
        programs={"lab-server": "caddy", "replay-server": "caddy"},
        crypto=GO_CRYPTO,  # caddy runs quic-go
    ),
    # TCP's reference (replay/tcp/h2): Go's standard library, so the toolchain's version is what runs
    Library("tcp-h2", "net/http", (Package("go", "go", "Go"),), "{versions} net/http (replay/tcp/h2)",
            programs={"replay-server": "h2", "replay-client": "h2"}, crypto=GO_CRYPTO),
)

_BY_NAME = {library.name: library for library in LIBRARIES}


def no_h3_server(identified_as: str) -> str | None:
    """Why the project has no HTTP/3 server of the library identification names ``identified_as`` (its
    descriptor's ``no_h3_server``), or None where no descriptor gives a reason."""
    return next((library.no_h3_server for library in LIBRARIES
                 if library.identified_as == identified_as and library.no_h3_server), None)


def library(name: str) -> Library:
    """The descriptor of the library a lab kind or replay stack named ``name`` runs (KeyError: none)."""
    return _BY_NAME[name]


def described(name: str) -> Library | None:
    return _BY_NAME.get(name)


#: identification's held-out configuration of every library that has one, by lab kind
HELD_OUT: Mapping[str, Mapping[str, Mapping[str, object]]] = {
    library.name: library.held_out for library in LIBRARIES if library.held_out is not None}
