"""Experiments: conditions x repetitions, each run a real workload (a download by default) through a stack
over the testbed.

A *condition* is one (client set, server set, link) point; an experiment is
a list of conditions, each repeated ``reps`` times, in rounds of one run per
condition. Every run is a row in the results file, failed ones included (a
timeout or a crash is data, as in the thesis), written one round per batch so
that an interrupted experiment keeps what it measured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from common.launchers.base import Launcher
from common.process import ExitedEarly, NotListening, Process, ns_command, wait_listening
from common.signals import signals_deferred
from replay import limits, profile, store, trace
from replay.cpuidle import ShallowIdle
from replay.link import LinkConfig, select_backend
from replay.sets import NamedSet
from replay.stacks import get_stack
from replay.stacks.base import TRANSPORTS, ClientPlan, ClientResult, RunOptions, Stack, free_udp_port
from tparams.errors import ToolError
from tparams.knobs import KNOBS
from tparams.workloads import UPLOAD, workload_metrics

SERVER_PORT = 4433
SERVER_READY_TIMEOUT_S = 10.0
# How long a client may still take to finish once its server has exited: a server that dies
# mid-run leaves the client waiting out its idle timeout, which is no measurement.
SERVER_EXIT_GRACE_S = 1.0


@dataclass(frozen=True)
class Condition:
    client: NamedSet
    server: NamedSet | None
    link: LinkConfig
    sweep_param: str | None = None
    sweep_value: int | None = None
    stack: Stack | None = None  # the client's stack where conditions differ in it (matrix --stacks), else None
    #: knobs where conditions differ in them (qreplay fidelity's autotune), beside the options'
    knobs: Mapping[str, object] = field(default_factory=dict, hash=False)


@dataclass
class Experiment:
    kind: str  # single | sweep | matrix | pairs
    stack: Stack  # the client's; the server's too unless server_stack is given
    conditions: list[Condition]
    options: RunOptions
    reps: int = 10
    link_backend: str = "auto"  # auto | netem | relay | veth | loopback
    command_line: str | None = None
    shallow_idle: bool = True  # hold the CPUs out of deep idle during the runs (cpuidle.ShallowIdle)
    udp_buffer_bytes: int | None = None  # the testbed's socket buffer size; None: testbed.BUFFER_BYTES
    tags: dict[str, object] = field(default_factory=dict)  # stored in the config, e.g. a campaign's figure
    experiment_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    server_stack: Stack | None = None  # another library's server (both must speak the same protocol)
    #: a two-host run (replay/twohost.py): the server's address, and the launcher that starts it on its host
    server_host: str | None = None
    launcher: Launcher | None = None

    def __post_init__(self) -> None:
        if bool(self.server_host) != (self.launcher is not None):
            raise ToolError("--server-host and --launcher go together: the server's address, and how to start it there")
        if self.server_host:
            self.server_host = server_address(self.server_host)
        for client, server in {self.stacks(c) for c in self.conditions} or {self.stacks(None)}:
            if not server.serves(client.protocol) and client.needs_page:
                why = server.library.no_h3_server if server.library and client.protocol == "h3" else None
                raise ToolError(f"{server.name}'s server speaks {server.protocol}, not {client.protocol}: it has no "
                                f"{client.protocol} server here for {client.name} to load a page from"
                                + (f" ({why})" if why else ""))
            if not server.serves(client.protocol):
                raise ToolError(f"{client.name}'s client speaks {client.protocol}, {server.name}'s server "
                                f"{server.protocol}: no download between them")
            if client.needs_page and not server.serves_page:
                raise ToolError(f"{server.name}'s server serves no page for {client.name} to load")
        refused = [line for c in self.conditions or [None] for client, server in [self.stacks(c)]
                   for options in [self.options.asking(c.knobs if c else {})]
                   for line in (*client.refusals(options, "client"), *server.refusals(options, "server"),
                                *filter(None, [server.server_refusal(client, options)]))]
        if self.options.clients > 1:
            refused += [f"{s.name}'s client runs one at a time here (its programs share the run's directory)"
                        for s in {self.stacks(c)[0].name: self.stacks(c)[0] for c in self.conditions}.values()
                        if not s.many_clients]
            # a capture tells its clients' connections apart (runner._trace); a profile samples one client
            if self.options.profile:
                refused.append(f"--profile reads one client's run, not {self.options.clients} clients'")
        if self.server_host:
            if self.options.profile:
                refused.append("--profile needs the testbed's server namespace; a two-host run's server is on "
                               "another host")
            # a two-host run's capture is taken on the client's host (trace.capture): a QUIC download's receiver
            if self.options.trace and self.options.workload is UPLOAD:
                refused.append("--trace of a two-host upload: its receiver, the server, is on another host, where "
                               "no capture is taken (the client's host captures a download's receiver)")
            if self.options.trace and any(TRANSPORTS[self.stacks(c)[0].protocol] == "tcp"
                                          for c in self.conditions or [None]):
                refused.append("--trace of a two-host TCP run: its series is read from the sender's capture, the "
                               "server's, on another host (a QUIC download's is read at the client's)")
            if any(c.link != LinkConfig() for c in self.conditions):
                refused.append("a two-host run emulates nothing: drop --delay, --delay-up, --jitter, --loss, --rate, "
                               "--rate-up and --queue (the link's own are measured and stored)")
        if self.options.trace and self.options.workload.direction != "down" and self.options.workload is not UPLOAD:
            refused.append(f"--trace reads a download (the server the sender) or an upload (what the server "
                           f"granted), not the {self.options.workload.name} workload")
        if refused:
            raise ToolError("; ".join(dict.fromkeys(refused)))

    def stacks(self, condition: Condition | None) -> tuple[Stack, Stack]:
        """(client, server) of a condition: a browser, being no server, downloads from its default server."""
        client = condition.stack if condition and condition.stack else self.stack
        if self.server_stack:
            return client, self.server_stack
        return client, get_stack(client.default_server) if client.default_server else client


def server_address(server_host: str) -> str:
    """A two-host run's server address in its one spelling. An address, not a name: the link is probed and the
    servers listen at it (an IPv6 one bracketed as ip:port), and a name resolving elsewhere on the other host would
    be another link than the one measured. Checked where an Experiment is made, so the command line, a campaign
    file and a notebook get the same line."""
    try:
        return str(ipaddress.ip_address(server_host))
    except ValueError:
        raise ToolError(f"--server-host {server_host!r} is not an IP address (give the server host's address, "
                        "e.g. 198.18.0.2 or 2001:2::2)") from None


class Loopback:
    """Both ends on 127.0.0.1 in the current namespace: no emulation, for quick checks of a stack."""

    client_ns = server_ns = None
    client_ip = server_ip = "127.0.0.1"
    backend = "loopback"
    buffer_bytes = None  # the machine's own socket buffers, untouched

    def __init__(self) -> None:
        self.idle = ShallowIdle()

    def queue_applied(self, link: LinkConfig) -> None:
        return None

    def reconfigure(self, link: LinkConfig) -> None:
        if link != LinkConfig():
            raise ToolError("--link loopback cannot emulate delay, loss or rate; use auto, netem or relay")

    def interface_counters(self) -> dict:
        return {}


@contextmanager
def open_path(backend: str, first: LinkConfig, shallow_idle: bool = True,
              udp_buffer_bytes: int | None = None, server_host: str | None = None,
              launcher: Launcher | None = None) -> Iterator[object]:
    """The testbed for the conditions of one path kind; they change its link in place (cheaper than
    rebuilding). ``auto`` with nothing to emulate is a plain veth pair (link.select_backend). With
    ``server_host``: the two hosts, the link between them measured (replay/twohost.py)."""
    if server_host:
        from replay.twohost import TwoHosts
        with TwoHosts(server_host, launcher, shallow_idle) as hosts:
            yield hosts
        return
    if backend == "loopback":
        path = Loopback()
        path.reconfigure(first)
        with path.idle if shallow_idle else nullcontext():
            yield path
        return
    from replay.testbed import BUFFER_BYTES, Testbed

    with Testbed(link=first, backend=backend, shallow_idle=shallow_idle,
                 buffer_bytes=udp_buffer_bytes or BUFFER_BYTES) as testbed:
        yield testbed


# --- one run -------------------------------------------------------------------------------------

PIPE_BYTES = 1 << 20  # Linux's pipe-max-size default


class _FifoDrain:
    """Reads a client's response body from a FIFO: counts bytes, notes when the last one came."""

    def __init__(self, path: Path):
        self.path = path
        os.mkfifo(path)
        self.bytes = 0
        self.last_byte: float | None = None
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        # Spliced into /dev/null, never copied into Python, through a pipe of 1 MiB instead
        # of 64 KiB: at gigabits a second the reading took a quarter of the two cores from
        # the stacks it measures (2.5-2.8 s of qreplay's CPU a gigabyte with read()).
        with open(self.path, "rb", buffering=0) as fifo, open(os.devnull, "wb") as sink:
            with contextlib.suppress(OSError):  # a smaller pipe only costs wake-ups
                fcntl.fcntl(fifo, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            while moved := os.splice(fifo.fileno(), sink.fileno(), PIPE_BYTES):
                self.bytes += moved
                self.last_byte = time.monotonic()

    def finish(self) -> None:
        if self._thread.is_alive():
            try:  # the client never opened its output: release the reader blocked in open()
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        self._thread.join(5)


def _exit_text(stack: Stack, role: str, process: Process) -> str:
    """How a stack process ended, in words: its status or signal, then its last stderr lines or the
    stack's reading of a silent exit."""
    status, killed_by = process.status, process.killed_by()
    how = f"was killed by {killed_by}" if killed_by else f"exited with status {status}"
    tail = process.stderr_tail()
    return f"{role} {how}: {stack.explain_exit(role, status, tail) or tail or 'no output'}"


def _wait_listening(client: Stack, server_stack: Stack, ns: str | None, port: int, server: Process) -> None:
    """Until the server listens for ``client``: on TCP for an h2 client (a server such as Caddy listens on
    both, UDP first), else on UDP."""
    transport = TRANSPORTS[client.protocol]
    try:
        wait_listening(ns, port, transport, SERVER_READY_TIMEOUT_S, server)
    except ExitedEarly:
        raise RuntimeError(f"{_exit_text(server_stack, 'server', server)} (before it listened)") from None
    except NotListening:
        raise RuntimeError(f"server did not listen on {transport.upper()} port {port} "
                           f"within {SERVER_READY_TIMEOUT_S:.0f} s") from None


@contextmanager
def namespace_sysctls(ns: str | Launcher | None, sysctls: Mapping[str, str]) -> Iterator[None]:
    """``sysctls`` set in namespace ``ns`` (a name, or a launcher into one) for the block, each restored after
    it; RuntimeError (the run fails, saying why) without a namespace: a host's own settings are never changed."""
    if not sysctls:
        yield
        return
    if not isinstance(ns, str):
        ns = ns.namespace if ns else None
    if ns is None:
        raise RuntimeError(f"{', '.join(sysctls)} needs the testbed's namespaces; --link loopback has none, nor "
                           "does a two-host run outside them")
    before = {}
    try:
        for name, value in sysctls.items():
            read = subprocess.run(ns_command(ns, ["sysctl", "-n", name]), capture_output=True, text=True)
            if read.returncode:
                raise RuntimeError(f"cannot read {name} in {ns}: {read.stderr.strip()}")
            before[name] = read.stdout.strip()
            written = subprocess.run(ns_command(ns, ["sysctl", "-q", "-w", f"{name}={value}"]), capture_output=True,
                                     text=True)
            if written.returncode:
                raise RuntimeError(f"cannot set {name}={value} in {ns}: {written.stderr.strip()}")
        yield
    finally:
        for name, value in before.items():
            subprocess.run(ns_command(ns, ["sysctl", "-q", "-w", f"{name}={value}"]), check=False)


@contextmanager
def _run_workdir() -> Iterator[Path]:
    """A scratch directory for one run, removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="qreplay-run-"))
    try:
        yield workdir
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _counter_delta(before, after, prefix: str = "") -> dict[str, int]:
    """Flattened numeric differences of two (nested) counter snapshots: {'client_tx_packets': 12, ...}."""
    delta = {}
    if isinstance(after, dict):
        for key, value in after.items():
            delta.update(_counter_delta((before or {}).get(key) if isinstance(before, dict) else None, value,
                                        f"{prefix}{key}_"))
    elif isinstance(after, (int, float)) and not isinstance(after, bool):
        delta[prefix.rstrip("_")] = after - (before if isinstance(before, (int, float)) else 0)
    return delta


COUNTER_COLUMNS = tuple(f"{side}_{way}_{unit}" for side in ("client", "server")
                        for way in ("tx", "rx") for unit in ("packets", "bytes"))


def run_once(stack: Stack, path, condition: Condition, options: RunOptions, rep: int,
             experiment_id: str, backend: str, server_stack: Stack | None = None, run_id: str | None = None) -> dict:
    """One run of the options' workload (a download by default) by ``options.clients`` of ``stack``'s clients
    against ``server_stack``'s server (default: ``stack``'s); always returns a row, with status ok | timeout |
    failed."""
    server_stack = server_stack or stack
    options = options.asking(condition.knobs)
    workload = options.workload
    requests, concurrency = workload.asked(options.requests, options.concurrency)
    row: dict = {
        "experiment_id": experiment_id, "run_id": run_id or uuid.uuid4().hex,
        "started_at": datetime.datetime.now(), "set_name": condition.client.name,
        "set_fingerprint": condition.client.params.fingerprint(),
        "server_set_name": condition.server.name if condition.server else None,
        "stack": stack.name, "server_stack": server_stack.name, "link_backend": getattr(path, "backend", backend),
        "delay_ms": condition.link.delay_down_ms, "delay_up_ms": condition.link.delay_up_ms,
        "jitter_ms": condition.link.jitter_ms, "loss_pct": condition.link.loss_pct,
        "rate_bps": condition.link.rate_bps, "rate_up_bps": condition.link.rate_up_bps,
        "queue": path.queue_applied(condition.link),
        "queue_requested": condition.link.queue,
        "sweep_param": condition.sweep_param, "sweep_value": condition.sweep_value,
        "rep": rep, "size_bytes": options.size, "workload": workload.name, "requests": requests,
        "concurrency": concurrency, "clients": options.clients, "udp_buffer_bytes": path.buffer_bytes,
        "bitrate_bps": options.bitrate,
        **getattr(path, "measured", {}),  # two hosts: the link as measured, in place of the emulation asked for
    }
    warnings: list[str] = []
    for knob in KNOBS.values():  # what ran, decided by the end the knob names; what was asked beside it
        asked = options.knob(knob.name)
        decider = stack if knob.decided_by == "client" else server_stack
        ran = decider.knob_ran(knob, asked, stack.protocol)
        row.update(zip(knob.columns, (ran, asked)))
        if ran is not None and ran != asked and (note := decider.knob_note(knob, asked, ran, stack.protocol)):
            warnings.append(note)
    port = SERVER_PORT if path.server_ns else free_udp_port()
    with _run_workdir() as workdir:
        if options.trace:
            # The sender's qlog, where its stack writes one, gives the trace its congestion window.
            options = dataclasses.replace(options, keylog=workdir / "keylog",
                                          qlog_dir=options.qlog_dir or (workdir / "qlog" if server_stack.writes_qlog
                                                                        and server_stack.qlog_when_traced else None))
        server_params = condition.server.params if condition.server else None
        server_argv, server_applied = server_stack.server_command(server_params, options, path.server_ip, port,
                                                                  workdir)
        plan, client_applied = stack.client_command(condition.client.params, options, path.server_ip, port, workdir)
        # several clients only of stacks whose command lines share nothing (many_clients): one plan serves all,
        # but for a traced run's key log, one a client (_gather_keylogs)
        keylogs = [workdir / f"keylog-{i + 1}" for i in range(1, options.clients)] if options.trace else []
        plans = [plan] + [stack.client_command(condition.client.params, dataclasses.replace(options, keylog=each),
                                               path.server_ip, port, workdir)[0] for each in keylogs] \
            if keylogs else [plan] * options.clients
        for role, applied in (("client", client_applied), ("server", server_applied)):
            row[f"requested_{role}"] = json.dumps({**applied.applied, **applied.not_applied})
            row[f"applied_{role}"] = json.dumps(applied.applied)
            row[f"not_applied_{role}"] = json.dumps(applied.not_applied)
            if applied.not_applied:
                warnings.append(f"{(stack if role == 'client' else server_stack).name} {role} could not apply: "
                                + ", ".join(f"{k}={v}" for k, v in applied.not_applied.items()))
            warnings += [f"{role}: {note}" for note in applied.notes]
        row["warnings"] = json.dumps(warnings)
        server_stdout = open(workdir / "server.stdout", "w+b")
        server: Process | None = None
        client = result = None
        clients: list[_Client] = []
        tracing, captured = contextlib.ExitStack(), None
        profiling = profile.Profiling(workdir) if options.profile else None
        settings = contextlib.ExitStack()
        try:
            with signals_deferred():  # held by the finally below before a SIGTERM can unwind past it
                server = Process(path.server_ns, server_argv, workdir / "server.usage", stdout=server_stdout)
            row["server_argv"] = json.dumps(server.popen.args)
            # a knob's kernel settings, before the client starts: its sockets, and those the server accepts
            for ns, sysctls in ((path.client_ns, client_applied.sysctls), (path.server_ns, server_applied.sysctls)):
                settings.enter_context(namespace_sysctls(ns, sysctls))
            _wait_listening(stack, server_stack, path.server_ns, port, server)
            if profiling:  # attached before the client starts, so the server's part is sampled whole
                profiling.attach("server", server_stack.name, profile.executable_of(server_argv), server.program_pid())
            if options.trace:  # started before the client, stopped after it (and the server)
                captured = tracing.enter_context(trace.capture(path, workdir / "trace.pcapng",
                                                               TRANSPORTS[stack.protocol]))
            before = path.interface_counters()
            gated = bool(profiling) and profile.gated(plan.argv)
            with signals_deferred():
                for i, each in enumerate(plans):
                    clients.append(_Client.start(path.client_ns, each, workdir, i, gated))
            client = clients[0].process
            row["client_argv"] = json.dumps(client.popen.args)
            if profiling:
                profiling.attach("client", stack.name, profile.executable_of(plan.argv),
                                 None if gated else client.program_pid())
            if gated:
                client.release()
                profiling.identify("client", client.program_pid())
            finished, server_gone = _await_clients([c.process for c in clients], server, options.timeout_s)
            if profiling:  # the transfer is over: nothing after it is sampled
                profiling.stop()
            for each in clients:
                if not finished:
                    each.process.stop(stack.stop_grace_s)
                each.finish()
            after = path.interface_counters()
            counters = _counter_delta(before, after)
            row["counters"] = json.dumps(counters)
            row.update({k: v for k, v in counters.items() if k in COUNTER_COLUMNS})
            row["wall_s"] = max((c.process.ended or time.monotonic()) - c.process.started for c in clients)
            results = [_client_result(stack, c.stdout_text, c.drain, c.process) for c in clients]
            result = results[0]
            if all(results):
                row.update(_clients_row(results))
            # A server that exits just after the last byte still served a whole download.
            whole = [bool(r) and c.process.status == 0 and workload.succeeded(
                {**r.extra, "bytes": r.bytes}, options.size, options.requests, options.concurrency)
                for c, r in zip(clients, results)]
            failed = next((i for i, ok in enumerate(whole) if not ok), 0)
            client, result_failed = clients[failed].process, results[failed]
            received = f"moved {result_failed.bytes if result_failed else 0} of {options.expected_bytes} bytes" + (
                f" (client {failed + 1} of {len(clients)})" if len(clients) > 1 else "")
            if finished and all(whole):
                row["status"] = "ok"
            elif server_gone:
                row["status"] = "failed"
                row["error"] = (f"{_exit_text(server_stack, 'server', server)} "
                                f"({server.ended - client.started:.1f} s into the run; {received})")
            elif not finished:
                row["status"], row["error"] = "timeout", f"no completion within {options.timeout_s:.0f} s"
            elif client.status != 0:
                row["status"], row["error"] = "failed", f"{_exit_text(stack, 'client', client)} ({received})"
            else:
                row["status"], row["error"] = "failed", received
        except (RuntimeError, OSError, ValueError) as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            row["status"], row["error"] = "failed", f"{exc} ({Path(where.filename).name}:{where.lineno})"[:400]
        finally:
            if profiling:
                profiling.stop()
            for each in clients:
                each.process.stop(stack.stop_grace_s)
            if clients:  # summed over the clients: what they cost the machine together
                usages = [c.process.usage() for c in clients]
                row["client_cpu_s"], row["client_maxrss_kb"] = (
                    None if any(u[k] is None for u in usages) else sum(u[k] for u in usages) for k in (0, 1))
            if server is not None:
                server.stop()
                row["server_cpu_s"], row["server_maxrss_kb"] = server.usage()
            settings.close()
            server_stdout.seek(0)
            sender = server_stack.parse_server_output(server_stdout.read().decode(errors="replace"))
            server_stdout.close()
            if sender and row.get("counters"):
                # The sender's own loss count: drops the link never saw (a receiver too slow
                # to take its packets) appear only here.
                row["counters"] = json.dumps({**json.loads(row["counters"]), **sender})
        if result and len(clients) == 1:
            stack.complete_row(row, result)
        if captured is not None:
            _gather_keylogs(stack, options.keylog, keylogs)
            row["trace"], more = _trace(row, tracing, captured, workdir, path.server_ip, options.qlog_dir)
            if row["trace"]:
                facts = limits.RunFacts.from_run(row)
                if more:  # one connection a client: each end's CPU a client's share of the clients' sum
                    facts = dataclasses.replace(facts, client_cpu_s=facts.client_cpu_s / len(clients)
                                                if facts.client_cpu_s is not None else None)
                row.update(limits.as_columns(limits.merged(
                    [limits.breakdown(points, facts) for points in [row["trace"][1], *more]])))
            if row.get("limited_by") is None:
                row["no_breakdown"] = "its trace holds no transfer (the run's warnings say why)"
        row["no_breakdown"] = no_breakdown(row["link_backend"], row["workload"]) or \
            row.get("no_breakdown")
        if profiling and row["status"] == "ok":
            row["profile"] = _profile(row, profiling)
    if row["status"] != "ok":
        row["goodput_mbps"] = None  # a failed run is kept, but never averaged in
    return row


@contextmanager
def captured_run(stack: Stack, path, condition: Condition, options: RunOptions, experiment_id: str,
                 server_stack: Stack) -> Iterator[tuple[dict, Path, Path]]:
    """One run of ``stack`` against ``server_stack`` with the path captured in the server's namespace and the
    client's TLS key log: yields (the run's row, the capture, the key log), in a scratch directory that lives
    until the block ends, for a script to read the frames it asks about (scripts/upload_senders.py, ...)."""
    with tempfile.TemporaryDirectory() as scratch:
        keylog, pcap = Path(scratch) / "keylog", Path(scratch) / "trace.pcap"
        with trace.capture(path, pcap):
            row = run_once(stack, path, condition, dataclasses.replace(options, keylog=keylog), 1, experiment_id,
                           "auto", server_stack)
        yield row, pcap, keylog


def no_breakdown(link_backend: str | None, workload: str | None = None) -> str | None:
    """Why a run has no limit breakdown however traced (runs.no_breakdown), or None: a two-host upload, whose
    receiver, the server, is on another host, and `qreplay why` says so rather than suggest --trace. A two-host
    download has one (its capture at the client, its receiver: trace.receiver_series); several clients, over TCP
    or QUIC, have one (their connections' merged: runner._trace)."""
    from replay import twohost
    if link_backend == twohost.BACKEND and workload == UPLOAD.name:
        return ("a two-host upload: its receiver, the server, is on another host, where no capture is taken "
                "(--trace captures on the client's host, a download's receiver)")
    return None


def _trace(row: dict, tracing: contextlib.ExitStack, captured: dict, workdir: Path, server_ip: str,
           qlog_dir: Path | None) -> tuple[tuple[dict, list[dict]] | None, list[list[dict]]]:
    """The run's trace (traces row, trace_points rows), and the series of its other connections (several clients:
    the stored trace is the first client's, the breakdown all of theirs merged); a capture that cannot be read is a
    warning on the run, not a failed run. TCP's headers are in the clear: nothing to decrypt. Several QUIC clients'
    connections are decrypted with one key log holding all their secrets (_gather_keylogs) and told apart by their
    client ports (trace.decrypt_connections), each download's matched to its qlog by its connection IDs
    (trace.connection_qlog)."""
    tcp = captured["transport"] == "tcp"
    upload = row["workload"] == UPLOAD.name
    # the end the capture was taken at, where it is the receiver's: an upload's server, a two-host download's client
    receiver = trace.AT_SERVER if upload else trace.AT_CLIENT if captured.get("namespace") == "client" else None
    several = not tcp and (row.get("clients") or 1) > 1
    try:
        tracing.close()
        # HTTP/2's streams (decrypting the capture, seconds for a large one) only where a stream limit can bind
        read = trace.read_tcp(workdir / "trace.pcapng", server_ip, upload,
                              workdir / "keylog" if (row.get("requests") or 1) > 1 else None) if tcp else \
            (trace.decrypt_connections if several else trace.decrypt)(workdir / "trace.pcapng", workdir / "keylog",
                                                                      server_ip)
    except ToolError as exc:
        row["warnings"] = json.dumps([*json.loads(row["warnings"]), f"no trace: {exc}"])
        return None, []
    more, notes = [], []
    if tcp:
        read, *others = read or [trace.tcp_series([], server_ip)]
        more = [points for points, _ in others]
    elif several:
        found = read
        read, more, qlog_lines, notes = _connections(found, receiver, qlog_dir, row["clients"])
        captured = {**captured, "connections": len(more) + 1, "client_port": read.client_port}
    # the capture's, over all its connections (the stored trace's row counts its own)
    every = [] if tcp else found if several else [read]
    undecrypted = sum(c.undecrypted for c in every)
    joined = {end: sum(c.joined[end] for c in every) for end in ("client", "server")}
    notes += [f"the trace's capture dropped {captured['dropped']} packets (its buffer was full): the trace misses "
              "them" + ("" if tcp else f", and tshark could not decrypt {undecrypted} packets after the gaps")] \
        if captured.get("dropped") else []
    notes += [f"the {end} sent {n} datagrams holding a short-header packet after another, which no receiver can "
              "decrypt: lost on the wire" for end, n in joined.items() if n]
    if tcp:
        built = trace.build_tcp_trace(row["run_id"], *read, captured)
    else:
        built = trace.build_receiver_trace(row["run_id"], read, captured, receiver) if receiver else \
            trace.build_trace(row["run_id"], read, captured, qlog_lines if several else trace.sender_qlog(qlog_dir))
        if not built[1]:  # no breakdown without points: the run says why rather than lacking one silently
            notes.append(trace.no_packets_note(read, workdir / "keylog"))
    if notes:
        row["warnings"] = json.dumps([*json.loads(row["warnings"]), *notes])
    return built, more


def _connections(found: list[trace.Decoded], receiver: trace.Receiver | None, qlog_dir: Path | None,
                 clients: int) -> tuple[trace.Decoded, list[list[dict]], list[str], list[str]]:
    """Several QUIC clients' connections as the capture decrypted them (trace.decrypt_connections): (the first's
    packets, the others' series, the server's qlog of the first, notes for the run's warnings). A download's series
    captured at its sender takes its window from the server's qlog of it (trace.connection_qlog); one captured at
    its ``receiver`` (an upload's, whose sender is the client, whose qlog a trace does not read; a two-host
    download's, whose server's qlog is on the other host) is the receiver's view (trace.receiver_series). A
    connection without 1-RTT packets has no series: the note says how many had."""
    at_receiver = receiver is not None
    connections = [c for c in found if c.packets] or found[:1] or [trace.Decoded()]
    qlogs = [[] if at_receiver else trace.connection_qlog(qlog_dir, c.cids) for c in connections]
    notes = []
    if len(connections) != clients:
        notes.append(f"the capture holds {len(connections)} connections with 1-RTT packets for the run's {clients} "
                     "clients: the breakdown is theirs")
    written = qlog_dir is not None and Path(qlog_dir, "server").is_dir() and any(Path(qlog_dir, "server").iterdir())
    if written and not at_receiver and (unmatched := [i + 1 for i, lines in enumerate(qlogs) if not lines]):
        notes.append(f"no one server qlog names connection {', '.join(map(str, unmatched))}'s IDs: its series has no "
                     "congestion window")
    first, *others = connections
    more = [trace.receiver_series(c.packets, c.client_params, c.server_params, receiver)[0] if at_receiver else
            trace.download_points(c, lines)[0] for c, lines in zip(others, qlogs[1:])]
    return first, more, qlogs[0], notes


def _gather_keylogs(stack: Stack, keylog: Path, others: list[Path]) -> None:
    """Each client's TLS key log gathered into ``keylog`` (the first client's), from which tshark decrypts all their
    connections at once. Several clients each write their own (runner: one path a client), so that nothing rests on
    how each program appends to a file others append to at the same moment (whole lines in one write each, or not;
    a stack's own, LSQUIC's, one file a connection): their handshakes run together."""
    stack.gather_keylog(keylog)
    for other in others:
        stack.gather_keylog(other)
        if other.is_file():
            with keylog.open("ab") as gathered:
                gathered.write(other.read_bytes())


def _profile(row: dict, profiling: profile.Profiling) -> tuple[list[dict], list[dict]] | None:
    """The run's (profiles rows, profile_stacks rows); samples that cannot be read are a warning on the
    run, not a failed run."""
    try:
        profiles, stacks = [], []
        for endpoint in profiling.results({"client": row.get("client_cpu_s"), "server": row.get("server_cpu_s")}):
            rows = endpoint.rows(row["run_id"], profile.Sorter(endpoint.library), row["bytes"])
            profiles += rows[0]
            stacks += rows[1]
        return profiles, stacks
    except ToolError as exc:
        row["warnings"] = json.dumps([*json.loads(row["warnings"]), f"no profile: {exc}"])
        return None


def _await_clients(clients: list[Process], server: Process, timeout_s: float) -> tuple[bool, bool]:
    """(whether every client finished within ``timeout_s``, whether their server exited before they did)."""
    deadline = time.monotonic() + timeout_s
    for client in clients:
        while not client.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                return False, False
            if server.wait(0):
                return all(c.wait(SERVER_EXIT_GRACE_S) for c in clients), True
    return True, False


@dataclass
class _Client:
    """One client process of a run, its output and (for clients that print no result) its body's drain."""

    process: Process
    stdout: object
    drain: _FifoDrain | None
    stdout_text: str = ""

    @classmethod
    def start(cls, ns: str | None, plan: ClientPlan, workdir: Path, index: int, gated: bool) -> "_Client":
        name = "client" if index == 0 else f"client-{index + 1}"
        drain = _FifoDrain(plan.body_fifo) if plan.body_fifo else None
        stdout = open(workdir / f"{name}.stdout", "w+b")
        return cls(Process(ns, plan.argv, workdir / f"{name}.usage", stdout=stdout, gated=gated), stdout, drain)

    def finish(self) -> None:
        if self.drain:
            self.drain.finish()
        self.stdout.seek(0)
        self.stdout_text = self.stdout.read().decode(errors="replace")
        self.stdout.close()


def _clients_row(results: list[ClientResult]) -> dict:
    """What a run stores of its clients' results: one client's as it reported them; of several, the bytes they
    moved together, the mean of their goodputs, each one's, Jain's fairness index over them, and the request
    metrics of all their requests pooled."""
    goodputs = [r.bytes * 8 / r.duration_s / 1e6 if r.duration_s and r.duration_s > 0 else None for r in results]
    first = results[0]
    row = {"bytes": sum(r.bytes for r in results), "duration_s": max((r.duration_s or 0) for r in results) or None,
           "timing": first.extra.get("timing", "request to last byte (client)")}
    pooled: dict = {"duration_s": row["duration_s"],
                    "latencies_s": [x for r in results for x in r.extra.get("latencies_s") or []]}
    if any("requests" in r.extra for r in results):  # only clients of the replay protocol count their requests
        pooled["requests"] = sum(int(r.extra.get("requests", 1)) for r in results)
    if results[0].extra.get("stalls") is not None:  # a stream's playback (tparams.workloads.Player), summed
        pooled |= {"stalls": sum(int(r.extra.get("stalls") or 0) for r in results),
                   "stall_s": sum(float(r.extra.get("stall_s") or 0) for r in results)}
        startups = [float(r.extra["startup_s"]) for r in results if r.extra.get("startup_s") is not None]
        pooled["startup_s"] = sum(startups) / len(startups) if startups else None
    ttfbs = [r.extra["ttfb_s"] for r in results if r.extra.get("ttfb_s") is not None]
    if ttfbs:
        pooled["ttfb_s"] = sum(ttfbs) / len(ttfbs)
    row.update(workload_metrics(pooled))
    if len(results) == 1:
        row["goodput_mbps"] = goodputs[0]
        return row
    if None not in goodputs:
        row["goodput_mbps"] = sum(goodputs) / len(goodputs)
        row["fairness"] = sum(goodputs) ** 2 / (len(goodputs) * sum(g * g for g in goodputs))
    row["client_goodputs_mbps"] = json.dumps(goodputs)
    return row


def _client_result(stack: Stack, stdout: str, drain: _FifoDrain | None, client: Process) -> ClientResult | None:
    if drain:
        if drain.last_byte is None:
            return ClientResult(drain.bytes, None)
        # No request timestamp is printed by such clients: time from client start, handshake included,
        # as the interop runner's goodput test (the thesis's) times the whole client.
        return ClientResult(drain.bytes, drain.last_byte - client.started,
                            {"timing": "client start to last byte (runner)"})
    try:
        return stack.parse_client_output(stdout)
    except (ValueError, KeyError, IndexError, TypeError):  # a client's malformed output is a failed run's data
        return None


# --- experiments ---------------------------------------------------------------------------------

def run_order(conditions: list[Condition], reps: int) -> list[tuple[Condition, int]]:
    """(condition, rep) in the order they run: per link, round-robin over the conditions.

    Running one condition's repetitions back to back lets slow drift on a shared
    machine (other jobs starting or ending, CPU frequency) land on one condition and
    pass for a difference between sets; a round of one run per condition spreads it
    over all of them. Conditions sharing a link stay together, so the link is
    reconfigured once per link, not once per run.
    """
    links: dict[LinkConfig, list[Condition]] = {}
    for condition in conditions:
        links.setdefault(condition.link, []).append(condition)
    return [(condition, rep) for group in links.values() for rep in range(1, reps + 1) for condition in group]


def run_experiment(experiment: Experiment, results: str | Path,
                   on_run: Callable[[dict], None] | None = None,
                   planned: list[tuple[Condition, int, str]] | None = None) -> list[dict]:
    """Run every condition ``reps`` times in round-robin order, storing each round as one batch.

    ``planned``: (condition, rep, run id) in the order to run them instead (a campaign shard's share,
    replay/campaign.py); each run is then stored on its own, with its traces, in one transaction under its
    plan's run id, so a shard killed at any moment holds whole runs only and resumes by their ids."""
    # from here: the stacks' checks and opening the results file are the experiment's time too (a campaign's
    # projection counts an experiment's set-up from its start to its first run)
    started = datetime.datetime.now()
    server_stack = experiment.stacks(None)[1]
    used = {s.name: s for c in experiment.conditions for s in experiment.stacks(c)}
    # a campaign shard needs the stacks of its own runs only: a host without LSQUIC runs the other stacks' runs of
    # an experiment that has LSQUIC's too (another host runs those)
    needed = ({s.name: s for c, _, _ in planned for s in experiment.stacks(c)} if planned is not None else
              {experiment.stack.name: experiment.stack, server_stack.name: server_stack, **used})
    for stack in needed.values():
        reason = stack.unavailable_reason()
        if reason:
            raise ToolError(f"stack {stack.name} is not usable: {reason}")
    con = store.connect(results)
    record = {
        "experiment_id": experiment.experiment_id, "kind": experiment.kind,
        "started_at": started, "stack": experiment.stack.name,
        "link_backend": experiment.link_backend, "size_bytes": experiment.options.size,
        "reps": experiment.reps, "workload": experiment.options.workload.name,
        "knobs": json.dumps({name: experiment.options.knob(name) for name in KNOBS}),
        "command_line": experiment.command_line,
    }
    config = {**experiment.tags, "conditions": [_describe(c) for c in experiment.conditions],
              "stack_version": experiment.stack.version(), "server_stack": server_stack.name,
              "server_stack_version": server_stack.version(),
              **({"stack_versions": {name: s.version() for name, s in used.items()}}
                 if len(used) > 2 else {}),
              "timeout_s": experiment.options.timeout_s, "qlog_dir": str(experiment.options.qlog_dir or ""),
              "requests": experiment.options.requests, "concurrency": experiment.options.concurrency,
              "clients": experiment.options.clients,
              # beside the run times (a campaign's projection says at which load they were measured); and at the
              # end, below
              "load_1min": round(os.getloadavg()[0], 2)}
    record["config"] = json.dumps(config)
    store.upsert_experiment(con, record)
    rows: list[dict] = []
    batch: list[dict] = []
    path, path_link = None, None
    try:
        with contextlib.ExitStack() as held:
            try:
                order = planned if planned is not None else [
                    (condition, rep, None) for condition, rep in run_order(experiment.conditions, experiment.reps)]
                for condition, rep, run_id in order:
                    if condition.link != path_link or (batch and rep != batch[-1]["rep"]):
                        store.insert(con, "runs", batch)  # a finished round is kept even if the next fails
                        rows += batch
                        batch = []
                    if path is None or (_path_kind(experiment.link_backend, condition.link)
                                        != _path_kind(experiment.link_backend, path_link)):
                        held.close()
                        path = held.enter_context(open_path(experiment.link_backend, condition.link,
                                                            experiment.shallow_idle, experiment.udp_buffer_bytes,
                                                            experiment.server_host, experiment.launcher))
                        if path_link is None:
                            record["config"] = json.dumps({**config, "cpu_idle": path.idle.state,
                                                           "udp_buffer_bytes": path.buffer_bytes,
                                                           **({"link_measured": path.facts}
                                                              if experiment.server_host else {})})
                            store.upsert_experiment(con, record)
                    elif condition.link != path_link:
                        path.reconfigure(condition.link)
                    path_link = condition.link
                    client_stack, condition_server = experiment.stacks(condition)
                    row = run_once(client_stack, path, condition, experiment.options, rep,
                                   experiment.experiment_id, experiment.link_backend, condition_server, run_id)
                    with store.transaction(con) if run_id else nullcontext():
                        if traced := row.pop("trace", None):
                            store.insert(con, "traces", [traced[0]])
                            store.insert(con, "trace_points", traced[1])
                        if profiled := row.pop("profile", None):
                            store.insert(con, "profiles", profiled[0])
                            store.insert(con, "profile_stacks", profiled[1])
                        if run_id:
                            store.insert(con, "runs", [row])
                            rows.append(row)
                        else:
                            batch.append(row)
                    if on_run:
                        on_run(row)
            finally:
                # A Ctrl-C can land between a round's insert and the emptying of its batch.
                store.insert(con, "runs", batch, skip_stored=True)
                rows += batch
        record["finished_at"] = datetime.datetime.now()
    finally:
        try:  # an interrupted experiment keeps its load at the end too
            record["config"] = json.dumps({**json.loads(record["config"]),
                                           "load_1min_end": round(os.getloadavg()[0], 2)})
            store.upsert_experiment(con, record)
        finally:
            con.close()
    return rows


def _path_kind(backend: str, link: LinkConfig) -> str:
    """The path a link takes: the backend asked for, except that ``auto`` chooses by the link."""
    return backend if backend in ("loopback", "measured") else select_backend(backend, link).name


def _describe(condition: Condition) -> dict:
    return {"set": condition.client.name, "server_set": condition.server.name if condition.server else None,
            "link": condition.link.describe(), "sweep_param": condition.sweep_param,
            "sweep_value": condition.sweep_value,
            **({"knobs": dict(condition.knobs)} if condition.knobs else {})}
