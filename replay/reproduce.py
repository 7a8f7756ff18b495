"""The thesis's goodput experiments (figures 5.1-5.7) as one campaign, and a report beside the published figures.

Beside them one figure of issue 28: the stream-count parameter the scans find (the thesis's table 5.6), as the
server's limit on a client keeping many requests open at once, in requests per second.

A campaign is a list of figure plans; each plan runs as one ordinary qreplay
experiment per stack (round-robin repetitions, every run stored in the
results file, tagged with the campaign and the figure). The report reads a
campaign back from the results file and puts each figure and each headline
number of datasets/reference/goodput_headlines.csv beside the published one,
with the ratio, a verdict, the window model's prediction (replay.flowcontrol)
and what this machine measured about the receiver (its socket's drops).

    plans = plan_campaign(quick=True)
    campaign = run_campaign([get_stack("lsquic")], plans, "reproduce.duckdb")
    build_report("reproduce.duckdb", "report/", campaign)
"""

from __future__ import annotations

import csv
import datetime
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from common.markdown import markdown_table
from replay.flowcontrol import (
    UpdateRule, WindowBound, client_window_bound, receiver_window_bound, stream_credit_bound,
)
from replay.measured_rules import load_update_rules
from replay.impact import BROWSER_CWND, UPLOAD_PARAMETERS
from replay.figures import draw_band, legend_beside, markdown_page, pyplot, save_png
from replay.link import LinkConfig
from replay import statistics, store
from replay.runner import Condition, Experiment, run_experiment
from replay.sets import NamedSet, own_set, resolve_one, with_overrides
from replay.stacks import get_stack
from replay.stacks.base import REPO_ROOT, RunOptions, Stack, default_timeout_s
from tparams.errors import ToolError
from tparams.workloads import DOWNLOAD, REQUESTS, UPLOAD, Workload

HEADLINES_CSV = REPO_ROOT / "datasets" / "reference" / "goodput_headlines.csv"
MB = 1_000_000
from replay.grids.reproduce import (
    SAME_SET_BOTH_SIDES, SERVER_SETS, CLIENT_SETS, DELAYS_MS, LOSSES_PCT, LOSS_DELAY_MS, SWEEP_DELAY_MS,
    INITIAL_MAX_DATA_VALUES, BIDI_LOCAL_VALUES, STREAMS_FIGURE, STREAMS_PARAM, TABLE_5_6, STREAMS_VALUES,
    STREAMS_CONCURRENCY, STREAMS_RESPONSE_BYTES, SERVER_TWINS, SERVER_STREAMS_FIGURE, TWIN_BROWSERS, FIGURE_TITLES,
    PACKET_FIGURES, TWIN_FIGURES
)


@dataclass(frozen=True)
class FigurePlan:
    figure: str  # a key of FIGURE_TITLES
    conditions: tuple[Condition, ...]
    size: int
    reps: int
    workload: Workload = DOWNLOAD
    requests: int = 1
    concurrency: int = 1
    side: str = "client"  # whose set a sweep varies
    browsers: tuple[str, ...] = ()  # the clients where they are browsers (the stack is then the server only)

    @property
    def kind(self) -> str:
        return "sweep" if self.conditions[0].sweep_param else "matrix"

    def options(self) -> RunOptions:
        moved = self.workload.expected_bytes(self.size, self.requests, self.concurrency)
        return RunOptions(size=self.size, workload=self.workload, requests=self.requests,
                          concurrency=self.concurrency, timeout_s=default_timeout_s(moved))

    def refusal(self, stack: Stack) -> str | None:
        """Why ``stack`` cannot run this figure (its client speaks no such workload, or its side of a sweep
        cannot set the swept parameter, which would draw one value as many), else None."""
        from replay.commands.run import sweep_refusal

        param = self.conditions[0].sweep_param
        if param and (reason := sweep_refusal(stack, param, self.side)):
            return reason
        if not self.browsers:
            return stack.workload_refusal(self.options())
        if not (stack.serves_page and stack.serves("h3")):
            return f"{stack.name} has no h3 server a browser loads a page from"
        for browser in map(get_stack, self.browsers):
            if reason := browser.unavailable_reason() or stack.server_refusal(browser, self.options()):
                return reason
        return None


# The thesis ran configuration 4 with initial_max_data 4,294,967,295: LSQUIC keeps the value in 32 bits,
# and the scanned 34,359,738,368 left it without a connection window (section 5.2).
AS_THE_THESIS_RAN = {"config4": ["initial_max_data=4294967295"]}


def _thesis_set(name: str) -> NamedSet:
    """A thesis set as the thesis ran it, named as any set with overrides is (config4+initial_max_data=4294967295):
    the name a campaign file gives it too (replay/campaign.py), so that the report reads a campaign's runs of it."""
    named = resolve_one(name)
    return with_overrides(named, AS_THE_THESIS_RAN[name]) if name in AS_THE_THESIS_RAN else named


def _pair(name: str, role: str) -> tuple[NamedSet, NamedSet]:
    """(client set, server set) for one series of figures 5.1-5.3."""
    if name == "lsquic-defaults":
        return resolve_one("lsquic-client-default"), resolve_one("lsquic-server-default")
    if role == "same":
        return _thesis_set(name), _thesis_set(name)
    if role == "server":
        return resolve_one("lsquic-client-default"), _thesis_set(name)
    return _thesis_set(name), resolve_one("lsquic-server-default")


def _sets_figure(figure: str, names, role: str, links: list[LinkConfig], size: int, reps: int) -> FigurePlan:
    pairs = [_pair(name, role) for name in names]
    return FigurePlan(figure, tuple(Condition(c, s, link) for link in links for c, s in pairs), size, reps)


def _sweep_figure(figure: str, param: str, values, size: int, reps: int, side: str = "client",
                  **workload) -> FigurePlan:
    client, server = _pair("lsquic-defaults", "client")
    link = LinkConfig(delay_down_ms=SWEEP_DELAY_MS)

    def swept(named: NamedSet, role: str, v: int) -> NamedSet:
        return with_overrides(named, [f"{param}={v}"]) if role == side else named

    return FigurePlan(figure, tuple(Condition(swept(client, "client", v), swept(server, "server", v), link, param, v)
                                    for v in values), size, reps, side=side, **workload)


def _twin_figure(figure: str, param: str, values, size: int, reps: int, **workload) -> FigurePlan:
    """A server-side twin: each browser against the stack's server sending LSQUIC's default server set with
    ``param`` swept."""
    link = LinkConfig(delay_down_ms=SWEEP_DELAY_MS)
    return FigurePlan(figure, tuple(
        Condition(own_set(browser), _twin_server_set(param, v), link, param, v, stack=browser)
        for browser in map(get_stack, TWIN_BROWSERS) for v in values), size, reps, side="server",
        browsers=TWIN_BROWSERS, **workload)


def _twin_server_set(param: str, value: int) -> NamedSet:
    return with_overrides(resolve_one("lsquic-server-default"), [f"{param}={value}"])


def _twins(data_values, bidi_values, size: int, streams_values, requests: int, reps: int) -> list[FigurePlan]:
    return [_twin_figure("server-5.4", SERVER_TWINS["server-5.4"], data_values, size, reps, workload=UPLOAD),
            _twin_figure("server-5.6", SERVER_TWINS["server-5.6"], bidi_values, size, reps, workload=UPLOAD),
            _twin_figure(SERVER_STREAMS_FIGURE, STREAMS_PARAM, streams_values, STREAMS_RESPONSE_BYTES, reps,
                         workload=REQUESTS, requests=requests, concurrency=STREAMS_CONCURRENCY)]


def _streams_figure(values, requests: int, reps: int) -> FigurePlan:
    return _sweep_figure(STREAMS_FIGURE, STREAMS_PARAM, values, STREAMS_RESPONSE_BYTES, reps, "server",
                         workload=REQUESTS, requests=requests, concurrency=STREAMS_CONCURRENCY)


def plan_campaign(quick: bool = False, figures: set[str] | None = None, size: int | None = None,
                  reps: int | None = None) -> list[FigurePlan]:
    """The campaign: everything (sizes and repetitions chosen to finish in FULL_CAMPAIGN_TIME on two
    cores, where the thesis downloaded 500 MB 10-20 times), or ``quick``: the conditions of the
    headline numbers only, a few minutes. ``figures``, ``size`` and ``reps`` narrow it further."""
    delays = [LinkConfig(delay_down_ms=d) for d in DELAYS_MS]
    losses = [LinkConfig(delay_down_ms=LOSS_DELAY_MS, loss_pct=x) for x in LOSSES_PCT]
    if quick:
        plans = [
            _sets_figure("5.1a", ("lsquic-defaults", "alpha"), "same", [LinkConfig()], 20 * MB, 2),
            _sets_figure("5.3a", CLIENT_SETS[:2], "client", [LinkConfig(), LinkConfig(delay_down_ms=30)], 20 * MB, 2),
            _sets_figure("5.3b", CLIENT_SETS[:2], "client", losses[-1:], 5 * MB, 1),
            _sweep_figure("5.4", "initial_max_data", (196608, 15728640), 20 * MB, 2),
            _sweep_figure("5.6", "initial_max_stream_data_bidi_local", (131072, 12582912), 10 * MB, 2),
            _streams_figure((4, 16, 100, 128, 256), 400, 2),
            *_twins((196608, 1572864), (131072, 1048576), 2 * MB, (16, 100), 200, 1),
        ]
    else:
        plans = [
            _sets_figure("5.1a", SAME_SET_BOTH_SIDES, "same", delays, 20 * MB, 3),
            _sets_figure("5.1b", SAME_SET_BOTH_SIDES, "same", losses, 10 * MB, 2),
            _sets_figure("5.2a", SERVER_SETS, "server", delays, 50 * MB, 3),
            _sets_figure("5.2b", SERVER_SETS, "server", losses, 10 * MB, 2),
            _sets_figure("5.3a", CLIENT_SETS, "client", delays, 100 * MB, 5),
            _sets_figure("5.3b", CLIENT_SETS, "client", losses, 20 * MB, 3),
            _sweep_figure("5.4", "initial_max_data", INITIAL_MAX_DATA_VALUES, 100 * MB, 3),
            _sweep_figure("5.6", "initial_max_stream_data_bidi_local", BIDI_LOCAL_VALUES, 100 * MB, 3),
            _streams_figure(STREAMS_VALUES, 1000, 3),
            *_twins(INITIAL_MAX_DATA_VALUES, BIDI_LOCAL_VALUES, 10 * MB, TABLE_5_6, 400, 2),
        ]
    if figures:
        # The packet figures come out of their sweeps' runs: asking for one runs its sweep.
        figures = {{packets: sweep for sweep, packets in PACKET_FIGURES.items()}.get(f, f) for f in figures}
        unknown = figures - set(FIGURE_TITLES)
        if unknown:
            raise ToolError(f"--figures: no figure {', '.join(sorted(unknown))} (known: {', '.join(FIGURE_TITLES)})")
        plans = [p for p in plans if p.figure in figures]
        if not plans:
            raise ToolError(f"--figures: none of {', '.join(sorted(figures))} is in the "
                            f"{'quick' if quick else 'full'} campaign")
    # --size is a download's: the stream-count figure's requests keep their own small responses
    return [replace(p, size=(size if p.workload is DOWNLOAD else None) or p.size, reps=reps or p.reps)
            for p in plans]


def refused(plans: list[FigurePlan], stacks: list[Stack]) -> list[str]:
    """The figures asked of a stack that cannot run them (FigurePlan.refusal), one line each."""
    return [f"figure {p.figure} on {s.name} ({reason})" for p in plans for s in stacks if (reason := p.refusal(s))]


def run_campaign(stacks: list[Stack], plans: list[FigurePlan], results: str | Path, *, link_backend: str = "auto",
                 udp_buffer_bytes: int | None = None, mode: str = "full", command_line: str | None = None,
                 execute: Callable[[Experiment, Path], list[dict]] | None = None) -> str:
    """Run every plan on every stack that can run it (FigurePlan.refusal), figure by figure, into ``results``;
    returns the campaign id.

    ``execute`` runs one experiment (the CLI passes its progress-bar runner); by default
    runner.run_experiment. Each experiment's config carries the campaign, the figure, the mode and the
    machine's load when it started."""
    for stack in stacks:
        reason = stack.unavailable_reason()
        if reason:
            raise ToolError(f"stack {stack.name} is not usable here: {reason}")
    runnable = [(plan, stack) for plan in plans for stack in stacks if plan.refusal(stack) is None]
    not_run = refused(plans, stacks)  # in every experiment's config: the report names them
    if not runnable:
        raise ToolError("nothing to run: " + "; ".join(not_run))
    campaign = uuid.uuid4().hex[:12]
    execute = execute or run_experiment
    for plan, stack in runnable:
        # the figure as a campaign file's experiment is named (replay/campaign.py): the report reads either
        tags = {"campaign": campaign, FIGURE_TAG: plan.figure, "mode": mode, "not_run": not_run}
        if plan.browsers:  # the browsers are the clients, the stack their server
            execute(Experiment(plan.kind, get_stack(plan.browsers[0]), list(plan.conditions), plan.options(),
                               plan.reps, link_backend, command_line, udp_buffer_bytes=udp_buffer_bytes, tags=tags,
                               server_stack=stack), Path(results))
            continue
        execute(Experiment(plan.kind, stack, list(plan.conditions), plan.options(), plan.reps, link_backend,
                           command_line, udp_buffer_bytes=udp_buffer_bytes, tags=tags), Path(results))
    return campaign


# --- reading a campaign back ---------------------------------------------------------------------

@dataclass
class ConditionSummary:
    stack: str
    figure: str
    client: str
    server: str | None
    delay_ms: float
    loss_pct: float
    sweep_param: str | None
    sweep_value: int | None
    size: int
    runs: int
    failed: int
    n: int
    mean: float | None  # of what the figure measures, in ``unit``
    stddev: float | None
    client_socket_drop_pct: float | None
    client_tx_packets: float | None
    server_tx_packets: float | None
    client_cpu_share: float | None  # CPU seconds per second of the download, client and server
    server_cpu_share: float | None
    bound: WindowBound | None  # the window model's prediction for this download, if any
    steady: WindowBound | None  # the same for an endless download: does the window bind at all?
    unit: str = "Mbit/s"  # goodput, or "requests/s" for a requests workload
    requests: int = 1
    concurrency: int = 1
    credit_bound: float | None = None  # requests/s the server's stream limit allows (stream_credit_bound)
    #: the row's other stored conditions (replay.statistics.conditions: the knobs as ran, the link's rate, ...)
    others: dict = field(default_factory=dict)

    @property
    def at_thesis_cc(self) -> bool:
        return self.others.get("cc", THESIS_CC) == THESIS_CC

    @property
    def on_thesis_link(self) -> bool:
        """Whether the thesis's figure has this row's link: a figure "a" without loss, a figure "b" at its delay, a
        sweep at its delay without loss. A campaign file may run more (full-grid.toml: three loss rates at every
        delay), which the report counts but does not draw."""
        if self.sweep_param:
            return self.delay_ms == SWEEP_DELAY_MS and not self.loss_pct
        return self.delay_ms == LOSS_DELAY_MS if self.figure.endswith("b") else not self.loss_pct

    @property
    def series(self) -> str:
        if self.client == "lsquic-client-default" and self.server == "lsquic-server-default":
            return "lsquic-defaults"
        if self.figure.startswith("5.2"):
            return self.server or "stack default"
        return self.client


@dataclass
class Campaign:
    campaign: str
    mode: str
    results: Path
    stacks: list[str]
    started_at: datetime.datetime
    finished_at: datetime.datetime | None
    loads: list[float]
    link_backends: list[str]
    udp_buffer_bytes: list[int]
    versions: dict[str, str]  # stack -> the version it named, where it names one
    not_run: list[str] = field(default_factory=list)  # figures asked of a stack that cannot run them, and why
    summaries: list[ConditionSummary] = field(default_factory=list)  # those on the thesis's grid
    off_grid: list[ConditionSummary] = field(default_factory=list)  # the campaign's other conditions

    def find(self, stack: str, figure: str | None = None, **where) -> list[ConditionSummary]:
        return [s for s in self.summaries if s.stack == stack and (figure is None or s.figure.startswith(figure))
                and all(getattr(s, k) == v for k, v in where.items())]


#: the thesis's congestion control (its testbed's, as the report's page says)
THESIS_CC = "cubic"
#: the stored conditions a ConditionSummary has fields for; the rest are its ``others``
SUMMARISED = ("stack", "server_stack", "set_name", "server_set_name", "delay_ms", "loss_pct", "sweep_param",
              "sweep_value", "size_bytes", "workload", "requests", "concurrency")
#: an experiment's figure: reproduce tags it as a campaign file tags its experiments' names (replay/campaign.py), so
#: that a campaign file's experiment named after a figure (datasets/campaign/full-grid.toml) is that figure's
FIGURE_TAG = "campaign_experiment"
#: the tag results written before 2026-11-29 gave the figure: still read
OLD_FIGURE_TAG = "figure"
#: reproduce's experiments among those tagged `campaign` (a replay campaign file's carry that tag too): those whose
#: figure is one of reproduce's
OWN = (f"coalesce(json_extract_string(config, '$.{FIGURE_TAG}'), "
       f"json_extract_string(config, '$.{OLD_FIGURE_TAG}')) IN ({', '.join(map(repr, FIGURE_TITLES))})")


def figure_of(config: dict) -> str:
    return config.get(FIGURE_TAG) or config[OLD_FIGURE_TAG]


def load_campaign(results: str | Path, campaign: str | None = None) -> Campaign:
    """A campaign's runs, summarised per stack and condition (the newest campaign in the file by default)."""
    import duckdb
    import polars as pl

    results = Path(results)
    con = store.open_read_only(results)
    try:
        campaign, chosen = store.campaign_experiments(con, results, "campaign", "qreplay reproduce", campaign, OWN)
        configs = {e[0]: e[4] for e in chosen}
        summary = statistics.summary(con).filter(pl.col("experiment_id").is_in([e[0] for e in chosen]))
    except duckdb.Error as exc:
        raise ToolError(f"{results} is not a qreplay results file: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    chosen_configs = [configs[e[0]] for e in chosen]
    # a server-side twin's experiment is its browser's, its stack the server: the campaign's stack is that
    twin = {e[0] for e in chosen if figure_of(configs[e[0]]) in TWIN_FIGURES}
    stack_of = {e[0]: configs[e[0]]["server_stack"] if e[0] in twin else e[1] for e in chosen}
    version_of = {e[0]: configs[e[0]].get("server_stack_version" if e[0] in twin else "stack_version")
                  for e in chosen}
    out = Campaign(campaign, chosen_configs[0].get("mode", "full"), results, sorted(set(stack_of.values())),
                   chosen[0][2], max((e[3] for e in chosen if e[3]), default=None),
                   [c["load_1min"] for c in chosen_configs if c.get("load_1min") is not None],
                   sorted(summary["link_backend"].drop_nulls().unique().to_list()),
                   sorted({c["udp_buffer_bytes"] for c in chosen_configs if c.get("udp_buffer_bytes")}),
                   {stack_of[e[0]]: version_of[e[0]] for e in chosen if version_of[e[0]]},
                   chosen_configs[0].get("not_run", []))
    rules = load_update_rules()
    found = []
    for s in summary.iter_rows(named=True):  # one experiment per figure and stack
        requested = json.loads(s["requested_client"] or "{}")
        rtt, loss, size = s["delay_ms"] + (s["delay_up_ms"] or 0), s["loss_pct"], s["size_bytes"]
        # a requests workload is measured in requests per second, which no window model predicts
        requests = s["workload"] == REQUESTS.name
        mean, stddev = ((s["mean_requests_per_s"], s["stddev_requests_per_s"]) if requests else
                        (s["mean_mbps"], s["stddev_mbps"]))
        windowed = not loss and not requests
        label, bound, steady = s["stack"], None, None
        if s["experiment_id"] in twin:
            label = f"{s['stack']} to {s['server_stack']}"
            if s["workload"] == UPLOAD.name and s["server_stack"] in rules and rtt:
                # the upload's receiver is the server: its windows, its rule, the browser's start as the sender
                rule = replace(rules[s["server_stack"]], initial_cwnd=BROWSER_CWND[s["stack"]][0])
                sent = _twin_server_set(s["sweep_param"], s["sweep_value"]).params.as_sent()
                bound, steady = (receiver_window_bound(sent, rtt, rule, UPLOAD_PARAMETERS, whole)
                                 for whole in (size, None))
        elif windowed:
            bound = client_window_bound(requested, rtt, s["stack"], size, rules)
            steady = client_window_bound(requested, rtt, s["stack"], rules=rules)
        found.append(ConditionSummary(
            label, figure_of(configs[s["experiment_id"]]), s["set_name"], s["server_set_name"], s["delay_ms"],
            loss, s["sweep_param"], s["sweep_value"], size, s["runs"], s["failed"], s["n"], mean, stddev,
            s["client_socket_drop_pct"], s["mean_client_tx_packets"], s["mean_server_tx_packets"],
            s["mean_client_cpu_share"], s["mean_server_cpu_share"],
            bound, steady,
            "requests/s" if requests else "Mbit/s", s["requests"] or 1, s["concurrency"] or 1,
            stream_credit_bound(s["sweep_value"], s["concurrency"], rtt)
            if requests and s["sweep_param"] == STREAMS_PARAM and rtt else None,
            {c: s[c] for c in statistics.conditions() if c in s and c not in SUMMARISED}))
    # Another congestion control than the thesis's is off its figure where the campaign also ran the thesis's
    # (full-grid.toml runs both); a stack without CUBIC (kwik's server runs NewReno) is drawn with what it ran.
    with_thesis_cc = {(s.stack, s.figure) for s in found if s.at_thesis_cc}
    for s in found:
        kept = s.on_thesis_link and (s.at_thesis_cc or (s.stack, s.figure) not in with_thesis_cc)
        (out.summaries if kept else out.off_grid).append(s)
    return out


# --- the published numbers beside ours -----------------------------------------------------------

REPRODUCED_WITHIN = 0.15  # a ratio within 1 +- this counts as reproduced
SOCKET_DROPS_MATTER_PCT = 0.5  # above this share the receiver's socket, not the path, sets the pace
WINDOW_TABLE_BELOW = 2000  # Mbit/s: windows allowing more never bind on one machine (nor on the thesis's 10 GbE)


@dataclass
class Headline:
    """One published number (a row of goodput_headlines.csv, or one derived from two) beside one stack's."""

    figure: str
    what: str
    thesis: float
    thesis_text: str
    stack: str
    measured: float | None = None
    measured_text: str = "not measured in this campaign"
    verdict: str = "not measured"
    why: str = ""
    bound: WindowBound | None = None

    @property
    def ratio(self) -> float | None:
        return self.measured / self.thesis if self.measured is not None and self.thesis else None

    @property
    def comparable(self) -> bool:
        """Whether this campaign's download could reach the published figure at all: a 500 MB download's
        goodput at a large window is beyond a short one's start (the window model, its start charged)."""
        return self.bound is None or self.thesis <= max(self.bound.span)


def read_headlines(path: Path = HEADLINES_CSV) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _stats_text(s: ConditionSummary) -> str:
    if s.n == 0:
        return f"no successful run of {s.runs}"
    sd = f" (sd {_fmt(s.stddev)})" if s.stddev is not None else ""
    failed = f", {s.failed} failed" if s.failed else ""
    return f"{_fmt(s.mean)}{sd}, n={s.n}{failed}"


def _why(s: ConditionSummary, thesis: float | None = None) -> str:
    """What this campaign measured about one condition that explains where it landed."""
    reasons = []
    if s.bound and s.mean is not None and s.bound.contains(s.mean):
        text = (f"window-limited ({s.bound.binding} {s.bound.window:,} at {s.bound.rtt_ms:g} ms): the model allows "
                f"{s.bound.text()} Mbit/s, the measurement lies at "
                f"{s.bound.position(s.mean):.2f} of that range")
        if thesis is not None and s.steady:
            text += (f"; the thesis (500 MB, as endless) at {s.steady.position(thesis):.2f} of "
                     f"{s.steady.text()}")
        reasons.append(text)
    elif s.bound and s.mean is not None and s.mean < s.bound.span[0]:
        reasons.append(f"below what the window allows ({_fmt(s.bound.span[0])} Mbit/s and more): "
                       "something else limits")
    if s.client_socket_drop_pct is not None and s.client_socket_drop_pct > SOCKET_DROPS_MATTER_PCT:
        reasons.append(f"the client's socket dropped {s.client_socket_drop_pct:.1f}% of the datagrams (a receiver "
                       "too slow for the bursts; the sender takes the drops as congestion)")
    if s.delay_ms == 0 and not s.loss_pct:
        busy = ""
        if s.client_cpu_share is not None and s.server_cpu_share is not None:
            busy = (f" (client {s.client_cpu_share:.0%}, server {s.server_cpu_share:.0%} of a core while it ran, "
                    "the link's relay beside them)")
        reasons.append("0 ms is CPU-bound: here two shared vCPUs carry client, server and link" + busy
                       + "; the thesis had two Xeon E5-1650 v3 hosts on 10 GbE")
    return "; ".join(reasons)


def _verdict(ratio: float) -> str:
    if abs(ratio - 1) <= REPRODUCED_WITHIN:
        return "reproduced"
    return f"{'higher' if ratio > 1 else 'lower'} ({ratio:.2f}x)"


def _absolute(h: Headline, found: list[ConditionSummary]) -> Headline:
    if not found or found[0].mean is None:
        return h
    s = found[0]
    h.measured, h.measured_text, h.bound = s.mean, _stats_text(s), s.bound
    h.verdict, h.why = _verdict(h.ratio), _why(s, h.thesis)
    return h


def evaluate_headlines(campaign: Campaign, rows: list[dict] | None = None) -> list[Headline]:
    """Every published headline beside every stack of the campaign, with ratio, verdict and cause."""
    out = []
    rows = rows or read_headlines()
    for stack in campaign.stacks:
        derived: dict[str, Headline] = {}
        for row in rows:
            key = (row["experiment"], row["setting"])
            value = row["goodput_mbit_s"]
            thesis = float(value.lstrip("+"))
            h = Headline("", f"{row['experiment']} {row['condition']} {row['setting']}", thesis,
                         f"{value} ({row['note']})" if row["note"] else value, stack)
            if key == ("defaults_both_sides", "lsquic_defaults"):
                h.figure = "5.1a"
                found = [s for s in campaign.find(stack, "5.1a", delay_ms=0, loss_pct=0)
                         if s.series == "lsquic-defaults"]
                out.append(_absolute(h, found))
            elif key == ("defaults_both_sides", "config1_alpha"):
                h.figure = "5.1a"
                out.append(_absolute(h, campaign.find(stack, "5.1a", client="alpha", delay_ms=0, loss_pct=0)))
            elif row["experiment"] in ("client_initial_max_data", "client_bidi_local"):
                h.figure = "5.4" if row["experiment"] == "client_initial_max_data" else "5.6"
                swept = int(row["setting"].removeprefix("default_"))
                out.append(_absolute(h, campaign.find(stack, h.figure, sweep_value=swept)))
                derived[row["setting"]] = out[-1]
            elif key == ("client_sets", "firefox_vs_chrome"):
                h.figure = "5.3a"
                out.append(_browser_difference(h, campaign, stack))
            elif key == ("loss", "all_sets"):
                h.figure = "5.1b-5.3b"
                out.append(_loss_convergence(h, campaign, stack))
            else:
                out.append(h)
        small, default = derived.get("196608"), derived.get("default_15728640")
        if small and default:
            out.append(_share(small, default, stack))
    return out


def _share(small: Headline, default: Headline, stack: str) -> Headline:
    """The thesis's "more than 90% below defaults": 196,608 as a share of the default window."""
    h = Headline("5.4", "client_initial_max_data 30ms 196608 as % of default_15728640",
                 100 * small.thesis / default.thesis, f"{100 * small.thesis / default.thesis:.1f}% (more than 90% "
                 "below defaults)", stack)
    if small.measured is None or default.measured is None:
        return h
    h.measured = 100 * small.measured / default.measured
    h.measured_text = f"{h.measured:.1f}%"
    h.verdict = "reproduced (more than 90% below)" if h.measured < 10 else f"not reproduced ({h.measured:.0f}%)"
    h.why = "the small window's goodput over the default's; see the two rows above for each"
    return h


def _browser_difference(h: Headline, campaign: Campaign, stack: str) -> Headline:
    """Firefox's set minus Chrome's, averaged over the delays of 20 ms and more (figure 5.3a)."""
    pairs = []
    for delay in sorted({s.delay_ms for s in campaign.find(stack, "5.3a") if s.delay_ms >= 20 and not s.loss_pct}):
        ff = campaign.find(stack, "5.3a", client="firefox-109", delay_ms=delay, loss_pct=0)
        ch = campaign.find(stack, "5.3a", client="chrome-109", delay_ms=delay, loss_pct=0)
        if ff and ch and ff[0].mean is not None and ch[0].mean is not None:
            pairs.append((delay, ff[0], ch[0]))
    if not pairs:
        return h
    differences = [ff.mean - ch.mean for _, ff, ch in pairs]
    h.measured = sum(differences) / len(differences)
    h.measured_text = "; ".join(f"{d:g} ms: {_fmt(ff.mean)} vs {_fmt(ch.mean)} ({ff.mean - ch.mean:+,.1f})"
                                for d, ff, ch in pairs) + f"; mean {h.measured:+,.1f}"
    if h.measured >= (1 - 2 * REPRODUCED_WITHIN) * h.thesis:
        h.verdict = "reproduced"
    elif h.measured > 0:
        h.verdict = f"same sign, smaller ({h.ratio:.2f}x)"
    else:
        h.verdict = "not reproduced (Firefox not ahead)"
    bound = pairs[0][2].bound
    reasons = []
    if bound:
        reasons.append(f"Chrome's windows bind only below {bound.text()} Mbit/s at "
                       f"{pairs[0][0]:g} ms ({bound.binding} {bound.window:,}, model)")
    drops = [(ff.client_socket_drop_pct, ch.client_socket_drop_pct) for _, ff, ch in pairs]
    if all(a is not None and b is not None for a, b in drops):
        reasons.append("client socket drops Firefox/Chrome: " + ", ".join(f"{a:.1f}/{b:.1f}%" for a, b in drops))
    h.why = "; ".join(reasons)
    return h


def _loss_convergence(h: Headline, campaign: Campaign, stack: str) -> Headline:
    """At 1% loss every set converges near the same goodput (CUBIC): the mean over sets, and their spread."""
    found = [s for s in campaign.find(stack) if s.loss_pct == 1.0 and s.mean is not None]
    if not found:
        return h
    means = [s.mean for s in found]
    h.measured = sum(means) / len(means)
    h.measured_text = (f"mean over {len(found)} set(s) {_fmt(h.measured)} (range {_fmt(min(means))}-"
                       f"{_fmt(max(means))})")
    converged = max(means) <= 1.3 * min(means)
    h.verdict = _verdict(h.ratio) + ("; sets converge" if converged else "; sets do not converge")
    h.why = "loss-bound: CUBIC halves its window at each loss, so the set's windows stop mattering"
    return h


# --- the report ----------------------------------------------------------------------------------

@dataclass
class ReportFiles:
    markdown: Path
    html: Path
    figures: list[Path]


def build_report(results: str | Path, out_dir: str | Path, campaign: str | None = None) -> ReportFiles:
    """Write report.md, report.html (self-contained) and one PNG per figure for a campaign."""
    data = load_campaign(results, campaign)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    headlines = evaluate_headlines(data)
    figures = _draw_figures(data, headlines, out_dir)
    markdown = _markdown(data, headlines, figures)
    md_path = out_dir / "report.md"
    md_path.write_text(markdown)
    html_path = out_dir / "report.html"
    html_path.write_text(markdown_page("qreplay reproduce", markdown, figures))
    return ReportFiles(md_path, html_path, [path for _, path in figures])


def _thesis_points(headlines: list[Headline], figure: str) -> dict[str, float]:
    """Published absolute numbers that belong on one figure: {what: Mbit/s}."""
    return {h.what: h.thesis for h in headlines if h.figure == figure and not h.thesis_text.startswith("+")
            and "%" not in h.what}


def _draw_figures(data: Campaign, headlines: list[Headline], out_dir: Path) -> list[tuple[str, Path]]:
    plt = pyplot()
    drawn = []
    for figure in FIGURE_TITLES:
        rows = [s for s in data.summaries if s.figure == figure and s.mean is not None]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(11, 4.8))
        sweep = rows[0].sweep_param
        x_of = (lambda s: s.sweep_value) if sweep else (lambda s: s.loss_pct) if figure.endswith("b") else \
            (lambda s: s.delay_ms)
        series, apart = {}, _apart(rows)
        for s in rows:
            series.setdefault((s.stack, "" if sweep else s.series, statistics.describe(s.others, apart)
                               if apart else ""), []).append(s)
        for (stack, name, more), group in series.items():
            group.sort(key=x_of)
            label = (f"{name} ({stack})" if name else stack) + (f", {more}" if more else "")
            draw_band(ax, [x_of(s) for s in group], [s.mean for s in group], [s.stddev for s in group], label)
            bounded = [s for s in group if s.bound and s.steady.high_mbps < WINDOW_TABLE_BELOW]
            if bounded:
                color = ax.get_lines()[-1].get_color()
                # one legend entry for the model, whose lines take each series' colour: not one a stack
                modelled = any(line.get_label().startswith("window model") for line in ax.get_lines())
                ax.plot([x_of(s) for s in bounded], [s.bound.low_mbps for s in bounded], "--", marker="v",
                        color=color, lw=1, label="_nolegend_" if modelled else
                        "window model, in each series' colour: bursts (v) .. whole window (^)")
                ax.plot([x_of(s) for s in bounded], [s.bound.high_mbps for s in bounded], ":", marker="^",
                        color=color, lw=1)
        credit = sorted({(x_of(s), s.credit_bound) for s in rows if s.credit_bound})  # the same for every stack
        if credit:
            ax.plot(*zip(*credit), "--", color="black", lw=1,
                    label="stream-credit model: min(limit / 2 RTT, concurrency / RTT)")
        points = _thesis_points(headlines, figure)
        out_of_reach = []
        for what, value in points.items():
            x = _thesis_x(what, figure)
            if x is None:
                continue
            reach = _reach(rows, x, x_of)
            if reach is not None and value > reach:  # drawn hollow: this campaign's downloads cannot get there
                out_of_reach.append((value, reach, max(s.mean for s in rows if x_of(s) == x)))
                ax.plot([x], [value], marker="*", markersize=14, markerfacecolor="none", color="grey",
                        linestyle="none")
                ax.annotate(f"thesis {value:g} (500 MB): out of reach", (x, value), textcoords="offset points",
                            xytext=(-150, 4), fontsize=8, color="grey")
            else:
                ax.plot([x], [value], marker="*", markersize=14, color="black", linestyle="none")
                ax.annotate(f"thesis {value:g}", (x, value), textcoords="offset points", xytext=(6, 4), fontsize=8)
        if out_of_reach:
            size = rows[0].size // MB
            thesis, model, fastest = max(out_of_reach, key=lambda point: point[0])
            fig.text(0.01, -0.02, f"Not comparable: {size} MB downloads are bound by their start (handshake, slow "
                     f"start). Where the thesis's 500 MB downloads made {thesis:g} Mbit/s, the window model with "
                     f"this download's start charged allows {model:,.0f} and the fastest stack here made "
                     f"{fastest:,.0f}: compare the small windows and the shape, or run the full campaign.",
                     fontsize=8, ha="left", va="top", wrap=True)
        top = max([s.mean + (s.stddev or 0) for s in rows] + list(points.values())
                  + [s.credit_bound for s in rows if s.credit_bound])
        if figure.endswith("b"):
            ax.set_xscale("log")
            ax.plot([1.0], [21], marker="*", markersize=14, color="black", linestyle="none")
            ax.annotate("thesis: all sets ~21", (1.0, 21), textcoords="offset points", xytext=(-90, 8), fontsize=8)
        if sweep:
            ax.set_xscale("log")
        if figure == STREAMS_FIGURE:
            ax.axvline(rows[0].concurrency, color="grey", linestyle=":", label=f"the client's {rows[0].concurrency} "
                       "requests at once")
        ax.set(xlabel=f"server {sweep} (streams)" if figure == STREAMS_FIGURE else f"client {sweep} (bytes)"
               if sweep else "loss (%)" if figure.endswith("b") else "added one-way delay, server to client (ms)",
               ylabel="requests per second" if rows[0].unit == "requests/s" else "goodput (Mbit/s)",
               title=f"Figure {figure}: {FIGURE_TITLES[figure]}")
        ax.set_ylim(0, 1.2 * top)  # model lines above the measurements run off the top
        legend_beside(ax)
        drawn.append((f"Figure {figure}", save_png(fig, out_dir / f"figure_{figure}.png")))
        if figure in PACKET_FIGURES:
            drawn.append(_draw_packets(rows, figure, sweep, out_dir))
    return drawn


def _reach(rows: list[ConditionSummary], x: float, x_of: Callable) -> float | None:
    """The most the window model allows any of this campaign's downloads at ``x``, their start charged: a
    published point above it (a 500 MB download's) is out of a short download's reach, not a miss
    (Headline.comparable, for one stack). None where no model applies."""
    bounds = [max(s.bound.span) for s in rows if x_of(s) == x and s.bound]
    return max(bounds) if bounds else None


def _thesis_x(what: str, figure: str) -> float | None:
    """Where a published headline sits on its figure's x axis."""
    if figure in ("5.4", "5.6"):
        return float(what.split()[-1].removeprefix("default_"))
    return 0.0 if figure == "5.1a" else None


def _draw_packets(rows: list[ConditionSummary], figure: str, sweep: str, out_dir: Path) -> tuple[str, Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 4.2))
    for stack in sorted({s.stack for s in rows}):
        group = sorted((s for s in rows if s.stack == stack), key=lambda s: s.sweep_value)
        for side, style in (("client", "o-"), ("server", "s--")):
            ax.plot([s.sweep_value for s in group], [getattr(s, f"{side}_tx_packets") or 0 for s in group], style,
                    label=f"sent by {side} ({stack})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel=f"client {sweep} (bytes)", ylabel="packets per download (mean)",
           title=f"Figure {PACKET_FIGURES[figure]}: packets sent, {sweep} at {SWEEP_DELAY_MS} ms")
    legend_beside(ax)
    return f"Figure {PACKET_FIGURES[figure]}", save_png(fig, out_dir / f"figure_{PACKET_FIGURES[figure]}.png")


def _markdown(data: Campaign, headlines: list[Headline], figures: list[tuple[str, Path]]) -> str:
    loads = f"{min(data.loads):g}-{max(data.loads):g}" if data.loads else "not recorded"
    sizes = sorted({(s.figure, f"{s.size // MB} MB" if s.unit == "Mbit/s" else
                     f"{s.requests:,} requests of {s.size:,} B, {s.concurrency} at once") for s in data.summaries})
    parts = [
        "# The thesis's goodput figures, reproduced",
        "",
        f"Campaign `{data.campaign}` ({data.mode}), stack(s) "
        + ", ".join(f"{stack} ({data.versions[stack]})" if stack in data.versions else stack for stack in data.stacks)
        + ", results "
        f"`{data.results}`, {data.started_at:%Y-%m-%d %H:%M}"
        + (f" to {data.finished_at:%H:%M}" if data.finished_at else "")
        + f". Link: {', '.join(data.link_backends) or '-'}; UDP buffers "
        + (", ".join(f"{b // 1024} KiB" for b in data.udp_buffer_bytes) or "the machine's")
        + f"; 1-minute load at the start of each experiment {loads}. Each run: "
        + ", ".join(f"{figure} {size}" for figure, size in sizes) + "."
        + (f" Not run: {'; '.join(data.not_run)}." if data.not_run else "")
        + _off_grid_text(data.off_grid),
        "",
        "The thesis: LSQUIC on two hosts (Xeon E5-1650 v3) over 10 GbE, CUBIC, enlarged UDP receive buffers, "
        "500 MB downloads repeated 10 (figures 5.1-5.3) or 20 times (5.4-5.7), delay and loss by netem on an "
        "IFB carrying the client's ingress (30 ms delay = +30 ms RTT). Here: one machine, two network "
        "namespaces, the delay on the server-to-client direction as there, smaller downloads.",
        "",
        "## Headline numbers",
        "",
        f"Verdict: reproduced within {REPRODUCED_WITHIN:.0%}, else the ratio; *why* is what this campaign "
        "measured about the condition (window model, the client's socket drops).",
        "",
        markdown_table(["figure", "published number", "thesis (Mbit/s)", "stack", "measured (Mbit/s)", "ratio", "verdict",
                "why"],
               [[h.figure, h.what, h.thesis_text, h.stack, h.measured_text,
                 "-" if h.ratio is None else f"{h.ratio:.2f}", h.verdict, h.why] for h in headlines]),
        "",
        "## Window-limited conditions: model, measurement, thesis",
        "",
        "A fixed window allows between (1 - f) x window and a whole window per round trip, f being the share "
        "of the window the receiver lets be read before it re-opens it (replay/flowcontrol.py). The rules:",
        "",
    ]
    rules = load_update_rules()
    parts += [f"- {stack}: f = {rules[stack].consumed_fraction:g}; {rules[stack].source}"
              for stack in data.stacks if stack in rules]
    parts += [f"- {stack}: no rule known, no prediction" for stack in data.stacks if stack not in rules]
    thesis_by_point = {(h.figure, h.what.split()[-1].removeprefix("default_")): h.thesis for h in headlines
                       if h.figure in ("5.4", "5.6") and "%" not in h.what}
    # A window can only be the limit below what the stack reached somewhere in the campaign; figure 5.2's
    # client is always LSQUIC's default one, whose rows figure 5.3 already has.
    reached = {stack: max((s.mean for s in data.summaries if s.stack == stack and s.mean and s.unit == "Mbit/s"),
                          default=0) for stack in data.stacks}
    bounded = [s for s in data.summaries if s.bound and s.mean is not None and not s.figure.startswith("5.2")
               and s.stack in reached and s.steady.low_mbps < min(reached[s.stack], WINDOW_TABLE_BELOW)]
    parts += ["", markdown_table(
        ["figure", "stack", "condition", "binding window", "model (Mbit/s)", "measured (Mbit/s)", "position",
         "thesis", "client socket drops", "verdict"],
        [[s.figure, s.stack, _condition(s, _apart(bounded)), f"{s.bound.binding} {s.bound.window:,}",
          f"{s.bound.text()}", _stats_text(s),
          f"{s.bound.position(s.mean):.2f}" if s.bound.contains(s.mean) else "-",
          _fmt(thesis_by_point.get((s.figure, str(s.sweep_value))), 2) if s.sweep_value else "-",
          "-" if s.client_socket_drop_pct is None else f"{s.client_socket_drop_pct:.2f}%",
          "as the model predicts" if s.bound.contains(s.mean) else
          "below the window's bound: something else limits" if s.mean < s.bound.span[0] else "above the model"]
         for s in bounded]) if bounded else
        "No condition of this campaign has a window that binds below what its stack reached."]
    parts += _across_implementations(data, thesis_by_point, rules)
    for title, path in figures:
        figure = title.split()[-1]
        parts += ["", f"## {title}: {FIGURE_TITLES.get(figure) or _packets_title(figure)}", "",
                  f"![{title}]({path.name})", ""]
        rows = [s for s in data.summaries if s.figure == figure or PACKET_FIGURES.get(s.figure) == figure]
        apart = _apart(rows)
        if figure in (STREAMS_FIGURE, SERVER_STREAMS_FIGURE):
            parts += _streams_section(rows)
        elif figure in PACKET_FIGURES.values():
            parts.append(markdown_table(["stack", "condition", "client packets", "server packets", "goodput"],
                                [[s.stack, _condition(s, apart), _fmt(s.client_tx_packets, 0), _fmt(s.server_tx_packets, 0),
                                  _fmt(s.mean)] for s in rows]))
        else:
            parts.append(markdown_table(["stack", "series", "condition", "runs", "goodput mean (sd), n", "client socket drops",
                                 "model (Mbit/s)"],
                                [[s.stack, s.series, _condition(s, apart), str(s.runs), _stats_text(s),
                                  "-" if s.client_socket_drop_pct is None else f"{s.client_socket_drop_pct:.2f}%",
                                  f"{s.bound.text()}" if s.bound else "-"]
                                 for s in rows]))
    return "\n".join(parts) + "\n"


def _off_grid_text(rows: list[ConditionSummary]) -> str:
    """What the campaign ran beyond the thesis's conditions (load_campaign's Campaign.off_grid), in a sentence."""
    if not rows:
        return ""
    other_cc = sorted({str(s.others.get("cc")) for s in rows if s.on_thesis_link and not s.at_thesis_cc})
    return (f" Beyond the thesis's conditions the campaign ran {len(rows):,} more (" + "; ".join(
        [f"congestion control {', '.join(other_cc)}"] * bool(other_cc)
        + ["other loss rates or delays than the figure's own"] * any(not s.on_thesis_link for s in rows))
            + "): the headlines, tables and figures below hold the thesis's; `qreplay plot` and `qreplay why` "
            "read them all.")


def _streams_section(rows: list[ConditionSummary]) -> list[str]:
    """The stream-count figure's words and table: each limit's requests per second beside the stream-credit
    model."""
    return [f"The server's {STREAMS_PARAM} at the values servers advertise most in the thesis's scans (table "
            f"5.6: {', '.join(map(str, TABLE_5_6))}) and around the client's concurrency, each request a "
            "bidirectional stream of its own. The model: a request holds its stream a round trip and the stream's credit "
            "(MAX_STREAMS) comes back a round trip after the response's ACK, so the limit binds up to twice "
            "the concurrency; above, the concurrency, the congestion window and the CPU do. Table 5.7's "
            "initial_max_streams_uni cannot matter here: the replay protocol opens no unidirectional stream.", "",
            markdown_table(["stack", "condition", "runs", "requests/s mean (sd), n", "model (requests/s)",
                            "measured / model"],
                           [[s.stack, _condition(s, _apart(rows)), str(s.runs), _stats_text(s), _fmt(s.credit_bound),
                             f"{s.mean / s.credit_bound:.2f}" if s.mean is not None and s.credit_bound else "-"]
                            for s in sorted(rows, key=lambda s: (s.stack, s.sweep_value))])]


def _across_implementations(data: Campaign, thesis_by_point: dict[tuple[str, str], float],
                            rules: dict[str, UpdateRule]) -> list[str]:
    """Figures 5.4 and 5.6 with the stacks side by side: each cell the measured mean and, in brackets, what
    the window model predicts with that stack's update rule (burst bound to a whole window a round trip)."""
    parts: list[str] = []
    for figure in ("5.4", "5.6"):
        rows = [s for s in data.summaries if s.figure == figure and s.sweep_value is not None]
        if len({s.stack for s in rows}) < 2:
            continue
        stacks = sorted({s.stack for s in rows})
        table = []
        for value in sorted({s.sweep_value for s in rows}):
            cells = []
            for stack in stacks:
                found = next((s for s in rows if s.stack == stack and s.sweep_value == value), None)
                if found is None or found.mean is None:
                    cells.append("-" if found is None else "failed")
                    continue
                model = f" ({found.bound.text()})" if found.bound else ""
                cells.append(f"{_fmt(found.mean)}{model}")
            table.append([f"{value:,}", _fmt(thesis_by_point.get((figure, str(value))), 2), *cells])
        parts += ["", f"## Across implementations: figure {figure}, {FIGURE_TITLES[figure]}", "",
                  "Mean goodput in Mbit/s, and in brackets the window model with that stack's update rule; the "
                  "thesis's column is LSQUIC on its testbed.", "",
                  markdown_table([rows[0].sweep_param, "thesis (LSQUIC)", *stacks], table)]
        smallest = min(s.sweep_value for s in rows)
        checked = [s for s in rows if s.sweep_value == smallest and s.bound and s.mean is not None]
        if checked:
            parts += ["", f"Each stack at {rows[0].sweep_param} {smallest:,} against its own prediction (the burst "
                      f"bound: whole updates of its measured share f, as many as fit inside a window a round trip, "
                      f"the download's start charged):", "",
                      markdown_table(["stack", "f", "predicted (Mbit/s)", "measured (Mbit/s)", "ratio", "verdict"],
                                     [[s.stack, f"{rules[s.stack].consumed_fraction:.3f}" if s.stack in rules else "-",
                                       _fmt(s.bound.low_mbps), _stats_text(s), f"{s.mean / s.bound.low_mbps:.2f}",
                                       "within 15%" if abs(s.mean / s.bound.low_mbps - 1) <= REPRODUCED_WITHIN
                                       else "misses by more than 15%: a finding (docs/results.md)"]
                                      for s in sorted(checked, key=lambda s: s.stack)])]
    return parts


def _packets_title(figure: str) -> str:
    source = next(k for k, v in PACKET_FIGURES.items() if v == figure)
    return f"packets sent by each side, the sweep of figure {source}"


def _apart(rows: list[ConditionSummary]) -> list[str]:
    """The other stored conditions that differ among one stack's rows of a figure (replay.statistics.varying's
    rule: a figure never averages over, nor joins into one line, conditions it does not show)."""
    return [c for c in statistics.conditions()
            if any(len({s.others.get(c) for s in rows if s.stack == stack}) > 1 for stack in {s.stack for s in rows})]


def _condition(s: ConditionSummary, apart: list[str] | None = None) -> str:
    parts = [f"{s.delay_ms:g} ms"] + ([f"loss {s.loss_pct:g}%"] if s.loss_pct else [])
    if s.sweep_param:
        parts.insert(0, f"{s.sweep_param}={s.sweep_value:,}")
    elif s.server:
        parts.insert(0, f"{s.client} / {s.server}")
    if apart:
        parts.append(statistics.describe(s.others, apart))
    return ", ".join(parts)
