"""The one interface every QUIC stack implements, so adding a stack is one file.

A stack turns (parameter set, options) into two command lines, a server and a
bulk-download client, and says which of the twelve parameters its command
lines can actually carry. The runner executes the commands inside the
testbed's namespaces; the stack never starts processes itself, so the runner
alone owns timing, CPU/RSS accounting and clean-up.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from common import versions
from tparams import program_cli
from tparams.errors import ToolError
from tparams.knobs import KNOBS, Knob
from tparams.libraries import Library, described
from tparams.paramset import ParamSet
from tparams.workloads import DOWNLOAD, Workload, played

Role = Literal["client", "server"]
#: the transport each application protocol runs over
TRANSPORTS: dict[str, Literal["udp", "tcp"]] = {"h3": "udp", "hq-interop": "udp", "h2": "tcp"}
REPO_ROOT = Path(__file__).resolve().parents[2]
GO_BIN_DIR = REPO_ROOT / "build" / "bin"


@dataclass(frozen=True)
class RunOptions:
    """Everything about one run that is not a transport parameter."""

    size: int  # bytes each request moves
    #: the knobs asked for (tparams.knobs), by name; a knob absent is asked at its default
    knobs: Mapping[str, object] = field(default_factory=dict, hash=False)
    workload: Workload = DOWNLOAD
    requests: int = 1  # for a workload that leaves the number of requests to the command line
    concurrency: int = 1  # likewise, how many are open at once
    bitrate: int | None = None  # bits/s a stream (a paced workload) is sent and played at
    clients: int = 1  # client processes at once, each its own connection to the one server
    qlog_dir: Path | None = None
    timeout_s: float = 600.0
    #: where the client appends its TLS secrets (NSS key log format), for decrypting a capture
    keylog: Path | None = None
    #: capture and decrypt each run, storing the sender's time series (replay/trace.py)
    trace: bool = False
    #: sample both endpoints with call stacks during the transfer, storing where the cycles go (replay/profile.py)
    profile: bool = False

    def knob(self, name: str) -> object:
        """The value asked of knob ``name``."""
        return self.knobs.get(name, KNOBS[name].default)

    @property
    def cc(self) -> str:
        return str(self.knob("cc"))

    @property
    def autotune(self) -> bool:
        return bool(self.knob("autotune"))

    def asking(self, knobs: Mapping[str, object]) -> "RunOptions":
        """These options with ``knobs`` asked besides (a condition's own)."""
        return dataclasses.replace(self, knobs={**self.knobs, **knobs}) if knobs else self

    @property
    def expected_bytes(self) -> int:
        return self.workload.expected_bytes(self.size, self.requests, self.concurrency)


def default_timeout_s(size: int) -> float:
    """How long a download of ``size`` bytes may take: 30 s plus the time at 5 Mbit/s."""
    return 30 + size * 8 / 5e6


def free_udp_port() -> int:
    """A UDP port free on loopback now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Applied:
    """What a command line carries: requested values it applied, and the ones it could not."""

    flags: list[str] = field(default_factory=list)
    applied: dict[str, int | bool] = field(default_factory=dict)
    not_applied: dict[str, int | bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: environment variables the program is started with (a knob's rendering, a key log's path)
    env: dict[str, str] = field(default_factory=dict)
    #: kernel settings of the end's namespace for the run (a knob's rendering), which the runner sets and restores
    sysctls: dict[str, str] = field(default_factory=dict)

    def add_knobs(self, stack: "Stack", opts: "RunOptions", role: Role) -> dict[str, object]:
        """Take the knobs ``stack`` renders for ``role`` (its words and environment); return the options of our
        programs among them."""
        options, words, env, sysctls = stack.knob_renderings(opts, role)
        self.flags += words
        self.env |= env
        self.sysctls |= sysctls
        return options

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` started with this environment (through env(1), so that the stored command line shows it)."""
        return ["env", *(f"{k}={v}" for k, v in self.env.items()), *argv] if self.env else argv


@dataclass
class ClientPlan:
    """How to run the client and where its result comes from.

    ``body_fifo``: the client writes the response body (nothing else) to this
    path, which the runner creates as a FIFO and drains, counting bytes and
    timing the last one (for clients that print no result of their own).
    Otherwise the client prints one JSON object on stdout with ``bytes`` and
    ``duration_s``.
    """

    argv: list[str]
    body_fifo: Path | None = None


@dataclass
class ClientResult:
    bytes: int
    duration_s: float | None  # request to last byte; None: the runner uses its own clock
    extra: dict = field(default_factory=dict)


class Stack(ABC):
    name: str  # the library's name, as the lab and identification call it
    #: the application protocol its client and server speak; a client downloads from any server of the same
    protocol: Literal["h3", "hq-interop", "h2"] = "hq-interop"
    #: whether its server writes qlog into RunOptions.qlog_dir (a trace takes the congestion window from it)
    writes_qlog: bool = False
    #: whether a traced run has its server write qlog unasked, for the window (False: only under --qlog, where
    #: writing it would cost the measured endpoints' CPU)
    qlog_when_traced: bool = True
    #: what its qlog's bytes in flight leave out, which trace.qlog_window_share adds back to hold them against
    #: a breakdown: "probe", an MTU probe until the next metrics update; "sent", the packet an update is logged
    #: right after; None, nothing
    qlog_in_flight_omits: str | None = None
    #: parameters each role's command line can set; the rest are reported as not applied
    settable: dict[Role, frozenset[str]]
    #: the --cc values the stack can run; asked for another, it runs ``cc_fallback`` (and the run stores that)
    cc_names: frozenset[str] = frozenset({"cubic", "bbr"})
    cc_fallback: str = "cubic"
    #: None: --autotune reaches the stack; else the sentence saying why it cannot (the run stores it pinned)
    autotune_note: str | None = None
    #: what it can be: a replay stack is both; a browser only a client, caddy only a server
    roles: frozenset[Role] = frozenset({"client", "server"})
    #: a client whose transport parameters are its own (a browser): it takes no set and each run records what
    #: it sent; being no server, it downloads from ``default_server``'s server unless told another
    own_parameters: bool = False
    no_set_reason: str = "a browser's parameters are its own"
    default_server: str | None = None
    #: whether its server serves the files of ``workdir/htdocs`` too (a browser needs its page served)
    serves_page: bool = False
    #: whether its client loads a page before it downloads (a browser), from a server that serves one
    needs_page: bool = False
    #: what its program speaks of the replay protocol (tparams.workloads): down (GET), up (PUT), many (several
    #: requests on one connection), paced (a stream: its server paces a GET at a bitrate, its client plays it
    #: back); a workload needing another is refused in one line, of its client (workload_refusal) and of its
    #: server (server_refusal, through answers)
    replay_protocol: frozenset[str] = frozenset({"down"})
    #: what its HTTP server answers of the same (a page's fetch(), curl's GET; ReplayProgram: its library's h3
    #: layer): GETs of /<size>, many at once, and a PUT answered with the count of body bytes read
    #: (tests/test_replay_browsers.py checks each)
    page_protocol: frozenset[str] = frozenset({"down", "many"})
    #: why its server lacks a primitive, where it is known (else PRIMITIVES_MISSING says): its HTTP server's, mostly
    #: (a program's own server lacks only what its client lacks too)
    page_missing: Mapping[str, str] = {}
    #: whether several of its clients can run at once against one server (their command lines share nothing)
    many_clients: bool = False
    #: how long its client may take to end what it started once told to stop (SIGTERM) before all of it is
    #: killed: a browser's driver ends the browser's tree and its capture, and only then may its files go
    stop_grace_s: float = 3.0

    @property
    def library(self) -> Library | None:
        """What it runs (tparams.libraries): its version's source, its fixed values, its programs; None for a
        browser."""
        return described(self.name)

    def congestion_control(self, requested: str, protocol: str | None = None) -> str:
        """The congestion control the stack runs when ``requested`` is asked for, on a connection speaking
        ``protocol`` (its own by default; a server of two transports may run another on each)."""
        return requested if requested in self.cc_names else self.cc_fallback

    def knob_note(self, knob: Knob, asked: object, ran: object, protocol: str | None = None) -> str | None:
        """The warning a run carries when this stack ran ``ran`` of ``knob`` where ``asked`` was asked (the
        knob's fallback_note), or None where the stack's own notes say why (autotune)."""
        return knob.fallback_note.format(stack=self.name, asked=asked, ran=ran) if knob.fallback_note else None

    def autotunes(self, requested: bool, protocol: str | None = None) -> bool:
        """Whether the stack's windows may grow when --autotune is ``requested``."""
        return requested and self.autotune_note is None

    def knob_ran(self, knob: Knob, value: object, protocol: str | None = None) -> object:
        """What this stack runs of ``knob`` when ``value`` is asked, on a connection speaking ``protocol``
        (a refusal is the experiment's, before any run): the asked value where it renders the knob; None (its
        own choice) where it does not."""
        if knob.ran_by:
            return getattr(self, knob.ran_by)(value, protocol)
        return value if knob.stacks and self.name in knob.stacks else None

    def knob_renderings(self, opts: RunOptions, role: Role
                        ) -> tuple[dict[str, object], list[str], dict[str, str], dict[str, str]]:
        """The knobs asked in ``opts`` that this stack renders (tparams.knobs), for ``role``: (our programs'
        options, words for a program not of ours, environment variables, the namespace's sysctls)."""
        options: dict[str, object] = {}
        words: list[str] = []
        env: dict[str, str] = {}
        sysctls: dict[str, str] = {}
        for knob in KNOBS.values():
            value = opts.knob(knob.name)
            rendering = knob.stacks.get(self.name) if knob.stacks else None
            if rendering is None or value is None or value == knob.default:
                continue
            options |= rendering.program_options(knob.name, value, role)
            words += rendering.argv(value, role) if rendering.argv else []
            env |= rendering.env(value, role) if rendering.env else {}
            sysctls |= rendering.sysctl(value, role) if rendering.sysctl else {}
        return options, words, env, sysctls

    def refusals(self, opts: RunOptions, role: Role) -> list[str]:
        """Why this stack, as ``role``, cannot run what ``opts`` asks (one line each): a knob it decides and
        cannot set, a workload its client does not speak."""
        lines = [line for knob in KNOBS.values() if knob.decided_by == role or knob.both_ends
                 if (line := knob.refusal(self.name, opts.knob(knob.name)))]
        if role == "client" and (line := self.workload_refusal(opts)):
            lines.append(line)
        return lines

    def workload_refusal(self, opts: RunOptions) -> str | None:
        """Why its client cannot run ``opts``' workload, or None. By default a client downloads, once."""
        if workload_needs(opts) <= self.replay_protocol:
            return None
        return f"{self.name}'s client speaks only the download workload, not {opts.workload.name}"

    def answers(self, client: "Stack") -> frozenset[str]:
        """The primitives of the replay protocol (replay_protocol's) its server answers ``client``: an HTTP
        server's page_protocol, to whoever asks (a browser's page, curl, an h3 client)."""
        return self.page_protocol

    def server_refusal(self, client: "Stack", opts: RunOptions) -> str | None:
        """Why its server cannot answer what ``client`` asks in ``opts``' workload, or None: the primitives the
        workload needs (workload_needs) that the server does not answer it (answers), each with its reason, and
        the servers that would answer it all."""
        if not (missing := (needs := workload_needs(opts)) - self.answers(client)):
            return None
        others = [f"{s.name}'s" for s in answering_servers(client, needs)]
        answering = (f"{', '.join(others[:-1])} and {others[-1]} servers answer it" if len(others) > 1
                     else f"{others[0]} server answers it" if others else "no server here answers it")
        return (f"{self.name}'s server cannot answer {client.name}'s {opts.workload.name} workload: "
                + "; ".join(self.page_missing.get(need, PRIMITIVES_MISSING[need]).format(server=self.name)
                            for need in sorted(missing)) + f"; {answering}")

    def serves(self, protocol: str) -> bool:
        """Whether its server answers a client speaking ``protocol``."""
        return "server" in self.roles and protocol == self.protocol

    def capabilities(self) -> str:
        """What it can set, for `qreplay doctor`."""
        return "; ".join(f"{role} sets {len(params)} of 12" for role, params in self.settable.items())

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when the stack can run here, else one line saying why and how to fix it."""

    @abstractmethod
    def server_command(self, params: ParamSet | None, opts: RunOptions, ip: str, port: int, workdir: Path) -> tuple[list[str], Applied]:
        ...

    @abstractmethod
    def client_command(self, params: ParamSet | None, opts: RunOptions, server_ip: str, port: int, workdir: Path) -> tuple[ClientPlan, Applied]:
        ...

    def version(self) -> str | None:
        """The stack's version as the stack itself reports it, where it can; None otherwise."""
        return None

    def explain_exit(self, role: Role, status: int | None, stderr_tail: str) -> str | None:
        """A sentence for an exit the stack's own output leaves unexplained (e.g. a silent refusal), else None."""
        return None

    def complete_row(self, row: dict, result: ClientResult) -> None:
        """Add what only this stack's client reports to its run's row (a browser: its version, the protocol
        seen, what it sent, its process tree's CPU and memory); nothing by default."""

    def gather_keylog(self, keylog: Path) -> None:
        """After a traced run, leave the client's TLS key log at ``keylog`` (``RunOptions.keylog``), where the
        trace is decrypted from. Nothing by default: a client told that path wrote it there itself."""

    def parse_client_output(self, stdout: str) -> ClientResult:
        """Default: the last JSON line of stdout, as our own clients print it; a stream client's arrivals
        (one that does not play them itself) played by tparams.workloads.Player, in their place."""
        data = last_json_line(stdout)
        if data is None:
            raise ValueError("client printed no result JSON")
        if "arrivals" in data:
            data |= played(int(data["bitrate"]), int(data["bytes"]), data.pop("arrivals"))
        return ClientResult(int(data["bytes"]), data.get("duration_s"), data)

    def parse_server_output(self, stdout: str) -> dict[str, float]:
        """The sender's statistics of the run's connection, for servers that print them
        (the last JSON line; its numeric ``sender_*`` fields); {} for servers that do not."""
        try:
            data = last_json_line(stdout) or {}
        except ValueError:  # a server's stray output is no reason to fail a run
            return {}
        return {k: v for k, v in data.items()
                if k.startswith("sender_") and isinstance(v, (int, float)) and not isinstance(v, bool)}

    def split(self, params: ParamSet | None, role: Role) -> tuple[dict, dict]:
        """Requested values (those the set sends) split into settable and not settable here."""
        requested = {k: v for k, v in (params.as_sent() if params else {}).items() if v is not None}
        can = self.settable[role]
        return ({k: v for k, v in requested.items() if k in can},
                {k: v for k, v in requested.items() if k not in can})


def workload_needs(opts: RunOptions) -> set[str]:
    """What ``opts``' workload asks of the replay protocol's primitives (Stack.replay_protocol)."""
    requests, concurrency = opts.workload.asked(opts.requests, opts.concurrency)
    return ({opts.workload.direction} | ({"many"} if max(requests, concurrency) > 1 else set())
            | ({"paced"} if opts.workload.paced else set()))


def answering_servers(client: Stack, needs: set[str]) -> list[Stack]:
    """The stacks whose server ``client`` reaches (its protocol; a page where it needs one) and answers every
    primitive of ``needs``: what a refusal names instead."""
    from replay.stacks import every_stack  # the registry imports this module

    return [s for s in every_stack().values() if "server" in s.roles and s.serves(client.protocol)
            and (s.serves_page or not client.needs_page) and needs <= s.answers(client)]


#: why a server does not answer a primitive (Stack.answers), for the one line refusing it
PRIMITIVES_MISSING = {
    "up": "{server} is not known to answer an upload with the count of body bytes it read",
    "many": "{server} answers one request a connection",
    "down": "{server} serves no /<size>",
    "paced": "{server} cannot pace a stream at a bitrate (it sends a GET's body as fast as flow and congestion "
             "control let it)",
}


def last_json_line(stdout: str) -> dict | None:
    """The last line of ``stdout`` that is a JSON object (ValueError if it is malformed), else None."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def which(binary: str) -> str | None:
    return shutil.which(binary)


#: the directory whose files a replay program's HTTP/3 side serves (a browser's page), by environment variable
HTDOCS_ENV = "QREPLAY_HTDOCS"

SERVER_NAME = "qreplay.lab"  # the server's name in its certificate (a browser maps it to the server's address)


def ensure_certificate(workdir: Path) -> tuple[Path, Path]:
    """A throw-away key and certificate for the server, signed by a throw-away CA (``workdir/ca.pem``):
    the stacks' clients do not verify, a browser trusts that CA (Firefox) or pins the key (Chromium)."""
    key_path, cert_path = workdir / "key.pem", workdir / "cert.pem"
    if not (key_path.exists() and cert_path.exists()):
        from common.certs import write_signed_certificate  # cryptography: where a run needs one, not at qreplay's start

        workdir.mkdir(parents=True, exist_ok=True)
        write_signed_certificate(cert_path, key_path, workdir / "ca.pem", [SERVER_NAME], [])
    return key_path, cert_path


class PageServer(Stack):
    """A server only, for the browsers: HTTP/3 serving the page and its fetches (GET /<size>, a PUT or POST answered
    with the count of body bytes read). ``no_client`` says why it runs no client."""

    protocol = "h3"
    roles = frozenset({"server"})
    serves_page = True
    page_protocol = frozenset({"down", "up", "many"})
    no_client: str

    def client_command(self, params, opts, server_ip, port, workdir):
        raise ToolError(self.no_client)

    def workload_refusal(self, opts: RunOptions) -> str | None:
        return self.no_client


class ReplayProgram(Stack):
    """A library driven through our own client and server: programs that take the replay-server and
    replay-client command lines of tparams.program_cli (the twelve parameters as ``--<name with dashes>``)
    and speak hq-interop. By default one binary lab/servers/replay-<library> (built by scripts/setup.sh)
    with ``server``/``client`` subcommands (lab/servers/common/src/replay.rs); ``command`` says otherwise.

    A library file says which parameters each role can carry, and what it does with --autotune, --cc and
    --qlog-dir (``autotune_note``, ``cc_names``, ``writes_qlog``). What the library sends whatever it is told
    (its descriptor's ``fixed``): a request for exactly that value is what the peer sees, so it counts as applied
    (any other as not applied)."""

    many_clients = True

    def serves(self, protocol: str) -> bool:
        """Its program's server speaks its protocol, and HTTP/3 too (the library's own h3 layer, chosen by the
        client's ALPN) where it serves a browser's page."""
        return super().serves(protocol) or (self.serves_page and protocol == "h3")

    def answers(self, client: Stack) -> frozenset[str]:
        """Its program's replay protocol to a client speaking it, several requests a connection whatever its own
        client makes (every program's server answers each stream's request: one request a connection is its
        client's limit); its library's h3 layer's page_protocol to a client speaking h3 (serves)."""
        if client.protocol == self.protocol:
            return self.replay_protocol | {"many"}
        return self.page_protocol

    def workload_refusal(self, opts: RunOptions) -> str | None:
        if workload_needs(opts) <= self.replay_protocol:
            return None
        return (f"{self.name}'s client does not speak the {opts.workload.name} workload "
                f"(its program speaks {', '.join(sorted(self.replay_protocol))} of the replay protocol)")

    @property
    def binary(self) -> Path:
        return GO_BIN_DIR / self.library.programs["replay-server"]

    def version(self) -> str | None:
        """The library's version the program was built with (its lock or go.mod; set-up builds --locked)."""
        return versions.version(self.library.packages[0])

    def unavailable_reason(self) -> str | None:
        if not self.binary.is_file():
            return f"{self.binary} is not built: run scripts/setup.sh (needs cargo)"
        return None

    def command(self, role: Role) -> list[str]:
        """The program of ``role``, before its arguments."""
        return [str(self.binary), role]

    def options(self, params: ParamSet | None, opts: RunOptions, role: Role) -> tuple[dict, Applied]:
        """The values of the options both roles take (tparams.program_cli.REPLAY, by name) for a run,
        and what it applies of the set."""
        settable, not_settable = self.split(params, role)
        out = Applied(applied=dict(settable), not_applied=not_settable)
        for name, fixed in self.library.fixed_for(role).items():
            if out.not_applied.get(name) == fixed:
                out.applied[name] = out.not_applied.pop(name)
        values = {**settable, "cc": self.congestion_control(opts.cc)}
        if opts.autotune:
            if self.autotune_note:
                out.notes.append(self.autotune_note)
            else:
                values["autotune"] = True
        if opts.qlog_dir:
            if self.writes_qlog:
                values["qlog_dir"] = Path(opts.qlog_dir, role)
                values["qlog_dir"].mkdir(parents=True, exist_ok=True)
            else:
                out.notes.append(f"{self.name} writes no qlog")
        if opts.keylog and role == "client":
            values["keylog"] = opts.keylog
        if role == "client":
            values |= opts.workload.client_options(opts.size, opts.requests, opts.concurrency)
        return values, out

    def flags(self, params: ParamSet | None, opts: RunOptions, role: Role) -> Applied:
        values, out = self.options(params, opts, role)
        knob_options = out.add_knobs(self, opts, role)  # a rendering's own words follow the contract's options
        out.flags = [*program_cli.arguments(f"replay-{role}", values | knob_options), *out.flags]
        return out

    def server_command(self, params, opts, ip, port, workdir):
        key, cert = ensure_certificate(workdir)
        applied = self.flags(params, opts, "server")
        if self.serves_page:
            (workdir / "htdocs").mkdir(exist_ok=True)
            applied.env[HTDOCS_ENV] = str(workdir / "htdocs")
        return applied.command([*self.command("server"), *program_cli.arguments("replay-server", {
            "listen": program_cli.address(ip, port), "cert": cert, "key": key}), *applied.flags]), applied

    def client_command(self, params, opts, server_ip, port, workdir):
        applied = self.flags(params, opts, "client")
        role = opts.workload.client_role  # a stream's client is a program of its own (tparams.workloads)
        asked = {"connect": program_cli.address(server_ip, port), "size": opts.size, "timeout_s": opts.timeout_s}
        if opts.workload.paced:
            asked["bitrate"] = opts.bitrate
        return ClientPlan(applied.command([*self.command(role.removeprefix("replay-")),
                                           *program_cli.arguments(role, asked), *applied.flags])), applied

