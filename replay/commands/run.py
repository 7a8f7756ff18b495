"""The experiment commands: the default one (`qreplay --set firefox --delay 30ms`), sweep, matrix, sets."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Optional, TYPE_CHECKING

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from replay.commands.link import register_doctor_rows
from common.cliapp import options_in_place_of, output_dir, output_file
from common.terminal import cli_console
from tparams.errors import ToolError
from tparams.knobs import KNOBS, Knob
from tparams.workloads import WORKLOADS
from tparams.paramset import PERFORMANCE_PARAMETERS

if TYPE_CHECKING:  # named in annotations only: built by the shared options, or imported where a command runs
    from replay import sets as sets_api
    from replay.commands.link import DoctorRow
    from replay.link import LinkConfig
    from replay.runner import Experiment
    from replay.stacks.base import RunOptions, Stack

# Where results go when --out is not given.
DEFAULT_RESULTS = Path("qreplay-results.duckdb")

# Options shared by every experiment command (declared once, used in each signature).
SetOpt = Annotated[str, typer.Option("--set", help="Client set: NAME (see `qreplay sets`), a set FILE, or "
                                                   "scan.duckdb:topN; aliases firefox, chrome, chromium.")]
ServerSetOpt = Annotated[Optional[str], typer.Option("--server-set", help="Server set (same forms as --set); "
                                                                          "default: the stack's own defaults.")]
ClientParamOpt = Annotated[Optional[list[str]], typer.Option("--client-param", metavar="NAME=VALUE",
                                                             help="Override one client parameter (repeatable).")]
ServerParamOpt = Annotated[Optional[list[str]], typer.Option("--server-param", metavar="NAME=VALUE",
                                                             help="Override one server parameter (repeatable).")]
DelayOpt = Annotated[str, typer.Option("--delay", help="One-way delay added server->client, e.g. 30ms.")]
DelayUpOpt = Annotated[str, typer.Option("--delay-up", help="One-way delay added client->server.")]
JitterOpt = Annotated[str, typer.Option("--jitter", help="Jitter of the server->client delay, e.g. 1ms "
                                                         "(packet order is kept).")]
LossOpt = Annotated[str, typer.Option("--loss", help="Random packet loss server->client, percent, e.g. 0.1%.")]
RateOpt = Annotated[Optional[str], typer.Option("--rate", help="Rate limit server->client, e.g. 1gbit "
                                                               "(default: unlimited).")]
RateUpOpt = Annotated[Optional[str], typer.Option("--rate-up", help="Rate limit client->server, e.g. 50mbit, its "
                                                                   "queue as --rate's (default: unlimited).")]
QueueOpt = Annotated[Optional[str], typer.Option("--queue", help="Queue limit of the rate limit, in packets or bytes "
                                                                 "(default: the testbed's, at least one BDP).")]
SizeOpt = Annotated[str, typer.Option("--size", help="Bytes each request moves (a download's size), e.g. 500MB "
                                                     "(decimal) or 64MiB.")]
RepsOpt = Annotated[int, typer.Option("--reps", min=1, help="Repetitions per condition.")]
StackOpt = Annotated[str, typer.Option("--stack", help="QUIC stack, by its library's name: ngtcp2, quic-go, "
                                                       "aioquic, quinn, quiche, s2n-quic, tquic, msquic or lsquic; "
                                                       "or a browser, whose parameters are its own: chromium, "
                                                       "firefox (h3), chromium-tcp, firefox-tcp (h2 on TCP) "
                                                       "(`qreplay doctor` says which run here).")]
ServerStackOpt = Annotated[Optional[str], typer.Option(
    "--server-stack", help="Download from another library's server (same application protocol). Default: the "
    "client stack's own; a browser's: ngtcp2's for h3, caddy's for h2.")]
LinkOpt = Annotated[str, typer.Option("--link", help="Link backend: auto, netem (kernel), relay (linkem), veth "
                                                     "(the namespaces, no emulation: the baseline) or loopback "
                                                     "(no namespaces, 127.0.0.1).")]
QlogOpt = Annotated[Optional[Path], typer.Option("--qlog", callback=output_dir,
                                                  help="Write qlog files of every run into this directory.")]
TraceOpt = Annotated[bool, typer.Option("--trace", help="Capture every run (tshark in the server's namespace, UDP "
                                          "segmentation offload off) and store its decrypted time series: bytes "
                                          "sent, acknowledged and in flight, flow-control credit, RTT samples "
                                          "(`qreplay plot --trace`), and what held the run back (`qreplay "
                                          "why`); of an upload the client's, as the server saw it, and what the "
                                          "server granted over time (traces.upload_credit); of a "
                                          "two-host download (--server-host) the server's, as the client "
                                          "saw it, captured on this host.")]
ProfileOpt = Annotated[bool, typer.Option("--profile", help="Sample both endpoints with call stacks during the "
                                            "transfer (perf; py-spy for Python endpoints) and store where the "
                                            "cycles go, by component (datasets/profile/components.csv), with the "
                                            "folded stacks (`qreplay plot --profile` draws flame graphs).")]
OutOpt = Annotated[Path, typer.Option("--out", callback=output_file, help="Results DuckDB file (appended to).")]
TimeoutOpt = Annotated[Optional[float], typer.Option("--timeout", help="Seconds before a run counts as failed "
                                                     "(default: long enough for 5 Mbit/s).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the summaries as JSON lines instead of a table.")]
UdpBufferOpt = Annotated[str, typer.Option(
    "--udp-buffer", help="UDP socket buffer size during the runs (net.core.rmem/wmem_default, at least as the "
    "maximum), e.g. 8MiB. Default: the Kempf thesis's 1664KiB. A receiver that cannot keep up drops what does not "
    "fit; each run counts those drops.")]
ShallowIdleOpt = Annotated[bool, typer.Option(
    "--shallow-idle/--deep-idle", help="Hold the CPUs in their shallowest idle state during the runs (PM QoS), as "
    "latency benchmarks do: waking from deep idle, or a VM's halted vCPU, makes the link's delays and the "
    "stacks' timers late by up to milliseconds. --deep-idle leaves power management alone.")]
ServerHostOpt = Annotated[Optional[str], typer.Option(
    "--server-host", metavar="ADDRESS", help="Run the server on another host, reached at ADDRESS over the real "
    "network (no emulation): started there by --launcher, the client here. The link's RTT, rate and path MTU are "
    "measured before the runs and stored with each (link_backend 'measured'). docs/scale.md, \"Client and server "
    "on two hosts\".")]
LauncherOpt = Annotated[Optional[str], typer.Option(
    "--launcher", metavar="KIND:WHERE", help="How --server-host's server is started: netns:NAMESPACE (a namespace "
    "standing for the host), ssh:[USER@]HOST, or srun:NODE (a Slurm step on the other node of a two-node "
    "allocation).")]


def two_hosts(server_host: str | None, launcher: str | None) -> dict:
    """Experiment's two-host arguments from --server-host and --launcher (the Experiment checks them)."""
    if not server_host and not launcher:
        return {}
    from common.launchers import get_launcher
    return {"server_host": server_host, "launcher": get_launcher(launcher) if launcher else None}


def make_link(delay: str, delay_up: str, jitter: str, loss: str, rate: str | None, queue: str | None,
              rate_up: str | None = None) -> LinkConfig:
    from replay.link import LinkConfig
    from replay.link import parse_duration_ms, parse_percent, parse_rate_bps
    return LinkConfig(delay_down_ms=parse_duration_ms(delay, "--delay"),
                      delay_up_ms=parse_duration_ms(delay_up, "--delay-up"),
                      jitter_ms=parse_duration_ms(jitter, "--jitter"), loss_pct=parse_percent(loss, "--loss"),
                      rate_bps=parse_rate_bps(rate) if rate else None, queue=queue,
                      rate_up_bps=parse_rate_bps(rate_up) if rate_up else None)


WorkloadOpt = Annotated[str, typer.Option("--workload", help="What each run asks of the connection: " + "; ".join(
    f"{w.name}: {w.help}" for w in WORKLOADS.values()) + ".")]
RequestsOpt = Annotated[int, typer.Option("--requests", min=1, help="Requests on the one connection (--workload "
                                                                   "requests).")]
ClientsOpt = Annotated[int, typer.Option("--clients", min=1, help="Clients at once against the one server, each "
                                                             "its own connection (QuicSand's many clients): each "
                                                             "run stores their mean goodput, each one's, Jain's "
                                                             "fairness index and the server's CPU and memory.")]
ConcurrencyOpt = Annotated[int, typer.Option("--concurrency", min=1, help="Requests open at once, each on its own "
                                                                         "stream (--workload requests).")]
BitrateOpt = Annotated[Optional[str], typer.Option("--bitrate", help="The rate a stream is paced and played at, e.g. "
                                                                    "2mbit (--workload stream, which needs it; "
                                                                    "--size sets its length).")]


def link_options(delay: str) -> Callable[[Callable], Callable]:
    """Give a command the options of one link (--delay, --delay-up, --jitter, --loss, --rate, --rate-up, --queue;
    --delay defaulting to ``delay``) in place of its parameter ``link_config``, which receives them as one LinkConfig."""
    return options_in_place_of("link_config", {
        "delay": (DelayOpt, delay), "delay_up": (DelayUpOpt, "0ms"), "jitter": (JitterOpt, "0ms"),
        "loss": (LossOpt, "0%"), "rate": (RateOpt, None), "queue": (QueueOpt, None), "rate_up": (RateUpOpt, None)},
        make_link)


def make_options(size: str, qlog: Path | None, timeout: float | None, trace: bool = False, profile: bool = False,
                 knobs: dict[str, object] | None = None, workload: str = "download", requests: int = 1,
                 concurrency: int = 1, clients: int = 1, bitrate: str | None = None) -> RunOptions:
    from replay.stacks.base import RunOptions
    from replay.link import parse_rate_bps, parse_size
    from replay.profile import unavailable_reason as profile_reason
    from replay.stacks.base import default_timeout_s
    if profile and (reason := profile_reason()):
        raise ToolError(f"--profile: {reason}")
    if workload not in WORKLOADS:
        raise ToolError(f"--workload takes {', '.join(WORKLOADS)}, not {workload!r}")
    size_bytes = parse_size(size)
    chosen = WORKLOADS[workload]
    if chosen.paced and bitrate is None:
        raise ToolError(f"--workload {chosen.name} needs --bitrate (the rate its stream is paced and played at)")
    if bitrate is not None and not chosen.paced:
        raise ToolError(f"--bitrate is for a stream (--workload {', '.join(w.name for w in WORKLOADS.values() if w.paced)}), "
                        f"not {chosen.name}")
    bps = parse_rate_bps(bitrate) if bitrate is not None else None
    moved = chosen.expected_bytes(size_bytes, requests, concurrency)
    # a stream lasts its length at its bitrate, however fast the link
    timeout_s = default_timeout_s(moved) + (moved * 8 / bps if bps else 0)
    return RunOptions(size=size_bytes, knobs=knobs or {}, workload=chosen, requests=requests,
                      concurrency=concurrency, clients=clients, bitrate=bps, qlog_dir=qlog, trace=trace,
                      profile=profile, timeout_s=timeout or timeout_s)


def _knob_option(knob: Knob) -> tuple[object, object]:
    """(the typer annotation, the default) of a knob's command-line option."""
    if knob.kind == "switch":
        return Annotated[bool, typer.Option(f"{knob.option}/--no-{knob.option[2:]}", help=f"{knob.help}.")], \
            bool(knob.default)
    shown = {"choice": "|".join(knob.choices), "integer": "N"}.get(knob.kind, "on|off")
    default = f" Default: {knob.default}." if knob.default is not None else ""
    return Annotated[Optional[str], typer.Option(knob.option, metavar=shown, help=f"{knob.help}.{default} "
                                                 "Refused in one line by a stack that cannot set it "
                                                 "(`qreplay doctor` lists who sets what).")], knob.default


def run_options(size: str = "500MB") -> Callable[[Callable], Callable]:
    """Give a command the options of a run (--size, --workload, --requests, --concurrency, --qlog, --timeout,
    --trace, --profile and every knob of tparams.knobs) in place of its parameter ``options``, which receives
    them as one RunOptions."""
    from replay.stacks.base import RunOptions

    def build(**chosen) -> RunOptions:
        knobs = {}
        for knob in KNOBS.values():
            value = chosen.pop(knob.name)
            try:
                knobs[knob.name] = value if isinstance(value, bool) or value is None else knob.parse(value)
            except ValueError as error:
                raise ToolError(str(error)) from None
        return make_options(knobs=knobs, **chosen)

    return options_in_place_of("options", {
        "size": (SizeOpt, size), "workload": (WorkloadOpt, "download"), "requests": (RequestsOpt, 1),
        "concurrency": (ConcurrencyOpt, 1), "clients": (ClientsOpt, 1), "bitrate": (BitrateOpt, None),
        "qlog": (QlogOpt, None),
        "timeout": (TimeoutOpt, None),
        "trace": (TraceOpt, False), "profile": (ProfileOpt, False),
        **{knob.name: _knob_option(knob) for knob in KNOBS.values()}}, build)


def server_set(spec: str | None, overrides: list[str] | None) -> sets_api.NamedSet | None:
    from replay import sets as sets_api
    if spec is None and not overrides:
        return None
    from tparams.paramset import ParamSet

    base = sets_api.resolve_one(spec) if spec else sets_api.NamedSet("stack-default", ParamSet(), "stack defaults")
    warn_if_client_set(base, f"--server-set {spec}")
    return sets_api.with_overrides(base, overrides or [])


def warn_if_client_set(server: sets_api.NamedSet, where: str) -> None:
    """A client's set given as a server's is allowed (the thesis's figure 5.1 does it) but more often a slip: said
    once, where it was named."""
    if server.role == "client":
        cli_console(stderr=True).print(f"[yellow]warning:[/] {where}: {server.name} is a client's set; "
                                       "the server advertises its values")


def refuse_sweep(param: str, side: str, stacks: list, spelled: Callable[[str], str] = lambda key: f"--{key}") -> None:
    """A sweep's parameter and side checked, `qreplay sweep`'s and a campaign's (``spelled``: an option's name as
    its caller's user writes it): one line each (ToolError)."""
    if param not in PERFORMANCE_PARAMETERS:
        raise ToolError(f"{spelled('param')}: {param!r} is not one of {', '.join(PERFORMANCE_PARAMETERS)}")
    if side not in ("client", "server"):
        raise ToolError(f"{spelled('side')} must be client or server, not {side!r}")
    if side == "client" and (browsers := [s.name for s in stacks if s.own_parameters]):
        raise ToolError(f"a browser's parameters are its own: {', '.join(browsers)} can sweep only "
                        f"{spelled('side')} server")


def sweep_refusal(stack: Stack, param: str, side: str) -> str | None:
    """Why ``stack``'s ``side`` cannot sweep ``param``: it cannot set it, so each value's runs would be the same
    condition drawn as many; else None. `qreplay sweep`'s, a campaign's sweeps and `qreplay reproduce`'s figures."""
    if param not in stack.settable.get(side, frozenset()):
        return f"{stack.name}'s {side} cannot set {param}"
    return None


def refuse_unsweepable(param: str, side: str, pairs: Iterable[tuple[Stack, Stack]]) -> None:
    """A sweep of ``param`` on ``side`` refused in one line (ToolError) where a (client, server) stack pair's side
    cannot set it (sweep_refusal)."""
    for client, server in pairs:
        if reason := sweep_refusal(server if side == "server" else client, param, side):
            raise ToolError(f"{reason}, which the sweep varies: each value's runs would be the same")


def swept(client: sets_api.NamedSet, server: sets_api.NamedSet | None, param: str, value: object,
          side: str) -> tuple[sets_api.NamedSet, sets_api.NamedSet | None, int]:
    """A sweep's (client set, server set, swept value) at ``value``: ``side``'s set with ``param`` at it (a server
    without a set: its stack's defaults with it), and the value as the set holds it. `qreplay sweep`'s and a
    campaign's sweeps (replay/campaign.py) both."""
    from replay import sets as sets_api
    override = [f"{param}={value}"]
    swept_value = int(getattr(sets_api.with_overrides(client, override).params, param))
    if side == "client":
        return sets_api.with_overrides(client, override), server, swept_value
    return client, sets_api.with_overrides(server, override) if server else server_set(None, override), swept_value


def given(ctx: typer.Context, parameter: str) -> bool:
    """Whether the command line gave ``parameter`` (by its Python name), rather than leaving its default."""
    source = ctx.get_parameter_source(parameter)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def refuse_sets(ctx: typer.Context, stacks: list[Stack], set_parameter: str, client_param: list[str] | None) -> None:
    """A set or a parameter given where every client is a browser: one line, exit 2."""
    if all(s.own_parameters for s in stacks) and (given(ctx, set_parameter) or client_param):
        raise ToolError("; ".join(dict.fromkeys(s.no_set_reason for s in stacks))
                        + ": no --set, --sets or --client-param with " + ", ".join(s.name for s in stacks))


def optional_stack(name: str | None) -> Stack | None:
    from replay.stacks import get_stack
    return get_stack(name) if name else None


class RunWarnings:
    """The runs' warnings, each said once per stack and set however many runs repeat it: a sweep's runs that
    could not apply one parameter, each at its own value, are one warning. A command (or the demo) keeps one
    across all its experiments; :meth:`add` answers what a run says that is new, :meth:`grouped` the new
    warnings since it was last asked, one line per stack and kind with the sets that gave it."""

    _VALUE = re.compile(r"=[^,;\s]+")
    #: the runner's warning for a set's parameters a stack's command line cannot give (replay/runner.py)
    _NOT_APPLIED = re.compile(r"^\S+ (?P<role>client|server) could not apply: (?P<parameters>.*)$")

    def __init__(self) -> None:
        self._seen: set[tuple[str, str, str]] = set()  # (stack, set, kind)
        self._unreported: dict[tuple[str, str], list[str]] = {}  # (stack, kind) -> sets, in order seen

    def add(self, row: dict) -> list[str]:
        new = []
        stack, named = row.get("stack") or "", re.sub(r"\+.*$", "", row.get("set_name") or "")
        for line in json.loads(row.get("warnings") or "[]"):
            kind = self._VALUE.sub("", line)  # the parameter, not the value each run of a sweep asked
            if (stack, named, kind) not in self._seen:
                self._seen.add((stack, named, kind))
                self._unreported.setdefault((stack, kind), []).append(named)
                new.append(line)
        return new

    def grouped(self) -> list[str]:
        """One short line a stack, the new warnings since last asked: what its runs could not apply, by role,
        and its other notes (each in full where ``add`` answered them, e.g. in a log), with the sets."""
        by_stack: dict[str, tuple[dict[str, dict[str, None]], dict[str, None], dict[str, None]]] = {}
        for (stack, kind), sets in self._unreported.items():
            refused, notes, named = by_stack.setdefault(stack, ({}, {}, {}))
            named.update(dict.fromkeys(sets))
            if not_applied := self._NOT_APPLIED.match(kind):
                refused.setdefault(not_applied["role"], {}).update(
                    dict.fromkeys(not_applied["parameters"].split(", ")))
            else:
                notes[kind] = None
        self._unreported.clear()
        lines = []
        for stack, (refused, notes, named) in by_stack.items():
            parts = [f"{role} could not apply " + (", ".join(names) if len(names) <= 3 else f"{len(names)} parameters")
                     for role, names in refused.items()]
            parts += list(notes) if len(notes) == 1 else [f"{len(notes)} notes"] if notes else []
            sets = ", ".join(named) if len(named) <= 3 else f"{len(named)} sets"
            lines.append(f"{stack}: {'; '.join(parts)} ({sets})")
        return lines


def execute(experiment: Experiment, out: Path, json_output: bool, title: str | None = None,
            summary: bool = True, warnings: RunWarnings | None = None) -> list[dict]:
    """Run with one live progress line (the newest run's result on it, each warning printed once per stack
    and set of ``warnings``, which a campaign of many experiments shares), then print the per-condition
    summaries (a table headed ``title``, or JSON lines) unless ``summary`` is off. Ctrl-C keeps the finished
    runs and says so."""
    from replay.runner import run_experiment
    console = cli_console(stderr=True)
    warnings = warnings if warnings is not None else RunWarnings()
    reason = experiment.stack.unavailable_reason()
    if reason:
        raise ToolError(f"stack {experiment.stack.name} is not usable here: {reason}")
    for named in {c.client.name: c.client for c in experiment.conditions}.values() if summary else ():
        console.print(f"set: {named.name} ({named.source})")
    total = len(experiment.conditions) * experiment.reps
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        what = f"{experiment.kind} on {experiment.stack.name}"
        task = progress.add_task(what, total=total)

        def on_run(row: dict) -> None:
            for line in warnings.add(row):
                progress.console.print(f"[yellow]warning:[/] {line}")
            goodput = f"{row['goodput_mbps']:.1f} Mbit/s" if row.get("goodput_mbps") else row.get("error", "")
            dropped = json.loads(row.get("counters") or "{}").get("client_udp_rcvbuf_errors")
            if dropped:
                goodput += f" (the client's full socket buffer dropped {dropped} datagrams)"
            progress.update(task, advance=1, description=f"{what}: last {row['set_name']} delay {row['delay_ms']:g} "
                            f"ms loss {row['loss_pct']:g}% rep {row['rep']}: {row['status']} {goodput}"[:160])

        try:
            rows = run_experiment(experiment, out, on_run)
        except KeyboardInterrupt:
            progress.stop()
            runs = int(experiment_summary(out, experiment.experiment_id)["runs"].sum() or 0)
            console.print(f"interrupted: {runs} of {total} runs finished and are kept in {out} (experiment "
                          f"{experiment.experiment_id}); the run under way was dropped. `qreplay plot {out}` "
                          "draws what is there; run the command again for the rest (a new experiment).",
                          soft_wrap=True)
            raise typer.Exit(130) from None
    if summary:
        show_summaries(experiment_summary(out, experiment.experiment_id), json_output, title)
        console.print(f"results: {out} (experiment {experiment.experiment_id})")
    return rows


def experiment_summary(results: Path, experiment_id: str):
    """The experiment's per-condition statistics, as stored (replay/statistics.py)."""
    from replay import statistics, store
    con = store.open_read_only(results)
    try:
        return statistics.summary(con, experiment_id)
    finally:
        con.close()


#: the summary's request columns (label -> (summary column, the runs' metric a workload declares))
REQUEST_COLUMNS = {"requests/s": ("mean_requests_per_s", "requests_per_s"), "TTFB ms": ("mean_ttfb_ms", "ttfb_ms"),
                   "p50 ms": ("mean_latency_p50_ms", "latency_p50_ms"),
                   "p99 ms": ("mean_latency_p99_ms", "latency_p99_ms")}


def _extra_columns(shown) -> dict[str, str]:
    """The columns beside goodput that mean something for what ran (label -> summary column): a request
    metric where a workload that ran declares it (a download's one request has a rate and a TTFB too, which
    say nothing), fairness where several clients ran."""
    declared = {m for name in shown["workload"].unique() if name in WORKLOADS for m in WORKLOADS[name].metrics}
    extra = {label: column for label, (column, metric) in REQUEST_COLUMNS.items()
             if metric in declared and shown[column].drop_nulls().len()}
    if shown["mean_fairness"].drop_nulls().len() and (shown["clients"] > 1).any():
        extra["fairness"] = "mean_fairness"
    return extra


def show_summaries(frame, json_output: bool, title: str | None = None) -> None:
    """A table naming every condition that differs among the rows (a swept set by its base name, the
    value in its own column), or JSON lines carrying every condition."""
    from replay import statistics
    if json_output:
        for row in frame.iter_rows(named=True):
            typer.echo(json.dumps(row, default=str))
        return
    import polars as pl

    shown = frame.with_columns(pl.col("set_name").str.replace(r"\+[^+]*$", "")
                               if frame["sweep_param"].drop_nulls().len() else pl.col("set_name"))
    keys = statistics.varying(shown) or ["set_name"]
    extra = _extra_columns(shown)
    measured = "goodput (Mbit/s)" + (f" and {', '.join(extra)} (means)" if extra else "")
    table = Table(title=f"{title + ': ' if title else ''}{measured}; failed runs excluded from the statistics",
                  caption=f"all: {statistics.shared(shown)}")
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    # (label, cell of a row); the spread and the socket drops only where some row has them (one run has none)
    cells = {"n": lambda s: str(s["n"]), "failed": lambda s: str(s["failed"]), "mean": lambda s: fmt(s["mean_mbps"])}
    if shown["stddev_mbps"].drop_nulls().len():
        cells["stddev"] = lambda s: fmt(s["stddev_mbps"])
        cells["95% CI"] = lambda s: "-" if s["ci95_low"] is None else f"{s['ci95_low']:.1f} to {s['ci95_high']:.1f}"
    if shown["client_socket_drop_pct"].drop_nulls().len():
        drops = "client_socket_drop_pct"
        cells["client socket drops %"] = lambda s: "-" if s[drops] is None else f"{s[drops]:.2f}"
    for label, column in extra.items():
        cells[label] = (lambda s, c=column: f"{s[c]:.3f}" if c == "mean_fairness" and s[c] is not None
                        else fmt(s[c]))
    for key in keys:
        table.add_column(key, overflow="fold")
    for label in cells:
        table.add_column(label, justify="right", no_wrap=True)
    for s in shown.iter_rows(named=True):
        table.add_row(*(statistics.describe(s, [key]) for key in keys), *(cell(s) for cell in cells.values()))
    cli_console().print(table)


def current_command_line() -> str:
    return shlex.join(["qreplay", *sys.argv[1:]])


def comma_list(text: str, what: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ToolError(f"{what}: give a comma-separated list")
    return items


def what_it_runs(stack: Stack) -> str:
    """The knobs a stack sets (tparams.knobs declaring it) and the workloads its client runs, in words."""
    from replay.stacks.base import RunOptions
    knobs = [knob.option for knob in KNOBS.values() if knob.stacks and stack.name in knob.stacks]
    workloads = [w.name for w in WORKLOADS.values()
                 if "client" in stack.roles and stack.workload_refusal(RunOptions(1, workload=w, requests=2)) is None]
    return (f"knobs: {', '.join(knobs) or 'none'} (besides --cc, --autotune); "
            f"workloads: {', '.join(workloads) or 'none (a server)'}")


def stack_doctor_rows() -> list[DoctorRow]:
    """One `qreplay doctor` row per stack: usable here, and which parameters each side can set."""
    from replay.commands.link import DoctorRow
    from replay.stacks import every_stack
    rows = []
    for name, stack in every_stack().items():
        reason = stack.unavailable_reason()
        detail = reason or f"{stack.capabilities()}; {what_it_runs(stack)}"
        version = None if reason else stack.version()
        if version:
            detail = f"version {version}; {detail}"
        rows.append(DoctorRow("stack", name, reason is None, detail))
    return rows


register_doctor_rows(stack_doctor_rows)


def register(app: typer.Typer) -> None:
    @app.callback(invoke_without_command=True)
    @run_options()
    @link_options(delay="0ms")
    def replay(
        ctx: typer.Context,
        set_spec: SetOpt = "firefox", server_set_spec: ServerSetOpt = None,
        client_param: ClientParamOpt = None, server_param: ServerParamOpt = None,
        link_config: LinkConfig = None, reps: RepsOpt = 10,
        stack: StackOpt = "ngtcp2", link: LinkOpt = "auto", options: RunOptions = None,
        out: OutOpt = DEFAULT_RESULTS, json_output: JsonOpt = False,
        shallow_idle: ShallowIdleOpt = True, udp_buffer: UdpBufferOpt = "1664KiB", server_stack: ServerStackOpt = None,
        server_host: ServerHostOpt = None, launcher: LauncherOpt = None,
    ) -> None:
        """Download through a QUIC stack over an emulated link with a client parameter set, REPS times.

        Without a subcommand: one experiment, e.g. `qreplay --set firefox --delay 30ms`; with --server-host and
        --launcher, its server on another host over a real, measured link.
        """
        if ctx.invoked_subcommand is not None:  # this runs before every subcommand: none pays for the imports below
            return
        from replay import sets as sets_api
        from replay.sets import own_set
        from replay.link import parse_size
        from replay.runner import Condition, Experiment
        from replay.stacks import get_stack
        the_stack = get_stack(stack)
        refuse_sets(ctx, [the_stack], "set_spec", client_param)
        clients = ([own_set(the_stack)] if the_stack.own_parameters else
                   [sets_api.with_overrides(s, client_param or []) for s in sets_api.resolve(set_spec)])
        server = server_set(server_set_spec, server_param)
        remote = two_hosts(server_host, launcher)
        if remote and given(ctx, "link"):
            raise ToolError("--link chooses how a path is emulated; a two-host run's is the real network, measured")
        experiment = Experiment("single", the_stack, [Condition(c, server, link_config) for c in clients],
                                options, reps, "measured" if remote else link, current_command_line(), shallow_idle,
                                parse_size(udp_buffer, "--udp-buffer"), server_stack=optional_stack(server_stack),
                                **remote)
        execute(experiment, out, json_output)

    @app.command("sweep", epilog="Example: qreplay sweep --param initial_max_data --values 196608,1048576,15728640 --delay 30ms")
    @run_options()
    @link_options(delay="30ms")
    def sweep(
        ctx: typer.Context,
        param: Annotated[str, typer.Option("--param", help="The parameter to vary, e.g. initial_max_data.")],
        values: Annotated[str, typer.Option("--values", help="Comma-separated values, e.g. 196608,1048576.")],
        side: Annotated[str, typer.Option("--side", help="Whose parameter to vary: client or server.")] = "client",
        set_spec: SetOpt = "lsquic-client-default", server_set_spec: ServerSetOpt = None,
        client_param: ClientParamOpt = None, server_param: ServerParamOpt = None,
        link_config: LinkConfig = None, reps: RepsOpt = 10,
        stack: StackOpt = "ngtcp2", link: LinkOpt = "auto", options: RunOptions = None,
        out: OutOpt = DEFAULT_RESULTS, json_output: JsonOpt = False,
        shallow_idle: ShallowIdleOpt = True, udp_buffer: UdpBufferOpt = "1664KiB", server_stack: ServerStackOpt = None,
    ) -> None:
        """Vary one parameter, all else fixed (the thesis's figures 5.4 and 5.6); default 30 ms, LSQUIC client set.
        A stack whose --side cannot set --param is refused in one line (its values' runs would be the same)."""
        from replay import sets as sets_api
        from replay.sets import own_set
        from replay.link import parse_size
        from replay.runner import Condition, Experiment
        from replay.stacks import get_stack
        the_stack = get_stack(stack)
        refuse_sweep(param, side, [the_stack])
        refuse_sets(ctx, [the_stack], "set_spec", client_param)
        client = (own_set(the_stack) if the_stack.own_parameters else
                  sets_api.with_overrides(sets_api.resolve_one(set_spec), client_param or []))
        server = server_set(server_set_spec, server_param)
        conditions = [Condition(c, s, link_config, param, v) for c, s, v in
                      (swept(client, server, param, value, side) for value in comma_list(values, "--values"))]
        experiment = Experiment("sweep", the_stack, conditions, options, reps, link,
                                current_command_line(),
                                shallow_idle, parse_size(udp_buffer, "--udp-buffer"),
                                server_stack=optional_stack(server_stack))
        refuse_unsweepable(param, side, [experiment.stacks(conditions[0])])
        execute(experiment, out, json_output)

    @app.command("matrix", epilog="Example: qreplay matrix --stacks chromium,firefox,ngtcp2 --sets firefox,chrome "
                                  "--delays 10,30 --size 20MB")
    @run_options()
    def matrix(
        ctx: typer.Context,
        sets: Annotated[str, typer.Option("--sets", help="Comma-separated client sets (any --set form).")]
        = "firefox,chrome,lsquic-client-default",
        delays: Annotated[str, typer.Option("--delays", help="Comma-separated one-way delays, e.g. 0,10,20,30 "
                                                               "(ms when no unit).")] = "0,10,20,30,40,50",
        losses: Annotated[str, typer.Option("--losses", help="Comma-separated loss percentages.")] = "0",
        server_set_spec: ServerSetOpt = None, client_param: ClientParamOpt = None, server_param: ServerParamOpt = None,
        delay_up: DelayUpOpt = "0ms", jitter: JitterOpt = "0ms", rate: RateOpt = None, queue: QueueOpt = None,
        rate_up: RateUpOpt = None, reps: RepsOpt = 10, stack: StackOpt = "ngtcp2", link: LinkOpt = "auto",
        options: RunOptions = None,
        out: OutOpt = DEFAULT_RESULTS, json_output: JsonOpt = False, shallow_idle: ShallowIdleOpt = True,
        udp_buffer: UdpBufferOpt = "1664KiB", server_stack: ServerStackOpt = None,
        stacks: Annotated[Optional[str], typer.Option(
            "--stacks", help="Comma-separated client stacks instead of --stack, their runs interleaved round by "
            "round; the sets go to the replay stacks, each browser runs its own.")] = None,
    ) -> None:
        """Every set under every delay and loss (the thesis's figures 5.1-5.3)."""
        from replay import sets as sets_api
        from replay.sets import own_set
        from replay.link import parse_size
        from replay.runner import Condition, Experiment
        from replay.stacks import get_stack
        chosen = [get_stack(name) for name in comma_list(stacks, "--stacks")] if stacks else [get_stack(stack)]
        refuse_sets(ctx, chosen, "sets", client_param)
        clients = [sets_api.with_overrides(s, client_param or [])
                   for spec in comma_list(sets, "--sets") for s in sets_api.resolve(spec)]
        server = server_set(server_set_spec, server_param)
        links = [make_link(d, delay_up, jitter, x, rate, queue, rate_up)
                 for d in comma_list(delays, "--delays") for x in comma_list(losses, "--losses")]
        conditions = [Condition(c, server, lk, stack=s if stacks else None) for lk in links for s in chosen
                      for c in ([own_set(s)] if s.own_parameters else clients)]
        experiment = Experiment("matrix", chosen[0], conditions, options, reps, link,
                                current_command_line(),
                                shallow_idle, parse_size(udp_buffer, "--udp-buffer"),
                                server_stack=optional_stack(server_stack))
        execute(experiment, out, json_output)

    @app.command("sets", epilog="Example: qreplay sets --scan scan.duckdb --top 5")
    def sets_command(json_output: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
                     scan: Annotated[Optional[Path], typer.Option("--scan", help="Also list this scan's top sets.")]
                     = None,
                     top: Annotated[int, typer.Option("--top", min=1, help="How many scan sets.")] = 10) -> None:
        """List built-in sets, what the browser aliases mean now, and (with --scan) a scan's most common sets."""
        from replay import sets as sets_api
        rows = sets_api.list_sets()
        if scan:
            rows += [{"name": s.name, "role": "scan", "description": s.source,
                      "parameters": {k: v for k, v in s.params.as_sent().items() if v is not None}}
                     for s in sets_api.top_sets(scan, top)]
        for row in rows:
            if row["role"] == "damaged":
                print(f"qreplay: warning: {row['description']}; listed as damaged, the other sets as read", file=sys.stderr)
        if json_output:
            for row in rows:
                typer.echo(json.dumps(row))
            return
        table = Table(title="parameter sets (use with --set / --sets)")
        for column in ("name", "role", "description"):
            table.add_column(column)
        for row in rows:
            table.add_row(row["name"], row["role"] or "", row["description"])
        cli_console().print(table)


