"""The demo: the whole pipeline on the built-in lab, start to finish, told in one screen and one page.

Brings the lab up, scans every lab server from the client namespace (naming each one's library, as `qscan
targets --identify` does), tears the lab down whatever happens,
replays the browsers' client sets through a real QUIC stack over the emulated link, replays a small part of
the thesis's campaign on every stack usable here, LSQUIC too where a build is configured (`qreplay reproduce
--quick`, figures 5.3a, 5.4 and 5.6, with its report beside the published numbers), traces one run per stack
at the smallest connection window, downloads across every pair of those stacks at 30 ms (`qreplay pairs`, a
heat map), holds both browsers against their own sets replayed on two stacks (`qreplay fidelity --quick`,
where the browsers are installed), runs QuicSand's workloads (request-response, upload) on a Rust, a Go and a
Python stack beside TCP's reference, predicts what every scanned server set does to a browser's upload and page
load and spot-checks a few with the real browsers through each set's own library (`qreplay impact --check`),
and renders the analysis notebooks over both result files.

The terminal gets one line a step with its headline result (and each warning once per stack and set); every
table, progress line and tool message goes to the log (demo.log), and index.html beside it links every
report, figure, results file and notebook with a sentence on each: the page to open first. ``quick`` runs
the same steps small (two stacks, one repetition, a few MB), in a couple of minutes.
"""

from __future__ import annotations

import contextlib
import datetime
import html
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tparams.errors import ToolError

DEMO_DIR = Path("out/demo")


@dataclass(frozen=True)
class DemoPlan:
    """How much each step runs."""

    name: str
    replay_size: int  # the browsers' sets on ngtcp2 at REPLAY_DELAYS_MS
    replay_reps: int
    reproduce_figures: frozenset[str]
    reproduce_size: int
    reproduce_reps: int
    stacks: tuple[str, ...] | None  # the stacks of reproduce, traces and pairs; None: every one usable here
    trace_size: int
    pairs_size: int
    fidelity: dict = field(default_factory=dict)  # plan_fidelity's arguments beside quick=True
    workload_stacks: tuple[str, ...] = ("quinn", "quic-go", "aioquic", "tcp-h2")
    workload_requests: int = 200
    upload_size: int = 5_000_000
    # qreplay impact's spot checks: candidates (most endpoints, worst), browsers, upload, page objects
    impact_candidates: tuple[int, int] = (3, 3)
    impact_browsers: tuple[str, ...] = ("chromium", "firefox")
    impact_upload: int = 2_000_000
    impact_objects: int = 20


REPLAY_SETS = ("firefox", "chrome")
REPLAY_DELAYS_MS = (0.0, 30.0)
# Why figure 5.4's smallest window comes out as it does, per stack: one traced run each.
TRACE_WINDOW = 196_608
PAIRS_DELAY_MS = 30.0
WORKLOAD_DELAY_MS = 30.0
WORKLOAD_CONCURRENCY, WORKLOAD_REQUEST_SIZE = 16, 10_000

FULL = DemoPlan("full", replay_size=20_000_000, replay_reps=2, reproduce_figures=frozenset({"5.3a", "5.4", "5.6"}),
                reproduce_size=5_000_000, reproduce_reps=1, stacks=None, trace_size=2_000_000,
                pairs_size=5_000_000)
# Small enough for a test: two stacks (a C and a Go one), one repetition, figure 5.6 only, one browser (Chromium)
# for the fidelity step and the spot checks: Firefox's two page loads there took 8-10 s of the quick demo's 46 s of
# CPU (2026-11-29), and tests/test_fidelity.py holds Firefox beside its set.
QUICK = DemoPlan("quick", replay_size=2_000_000, replay_reps=1, reproduce_figures=frozenset({"5.6"}),
                 reproduce_size=2_000_000, reproduce_reps=1, stacks=("ngtcp2", "quic-go"), trace_size=1_000_000,
                 pairs_size=2_000_000,
                 fidelity={"browsers": ["chromium"], "delays_ms": [30.0], "reps": 1, "size": 2_000_000},
                 workload_stacks=("quic-go", "tcp-h2"), workload_requests=50, upload_size=1_000_000,
                 impact_candidates=(1, 1), impact_browsers=("chromium",), impact_upload=1_000_000, impact_objects=10)


def _mb(size: int) -> str:
    return f"{size / 1_000_000:g} MB"


class Story:
    """The demo's two outputs. Inside :meth:`details` everything written to stdout and stderr, by this
    process and every program it starts, goes to the log; :meth:`say` writes a headline to the terminal
    (and the log). The runs' warnings are kept once per stack and set (replay.commands.run.RunWarnings):
    the log has each, the terminal one line a stack and kind, naming the sets."""

    def __init__(self, log: Path):
        from replay.commands.run import RunWarnings

        self.log_path = log
        self.log = open(log, "w", buffering=1)
        self.terminal = sys.stdout
        self.warnings = RunWarnings()
        self.said: list[str] = []

    def say(self, line: str) -> None:
        print(line, file=self.terminal, flush=True)
        print(f"== {line}", file=self.log, flush=True)
        self.said.append(line)

    def warn(self) -> None:
        """The step's new warnings, a line a stack (each in full is in the log already)."""
        for line in self.warnings.grouped():
            self.say(f"  warning: {line}")

    @contextlib.contextmanager
    def details(self):
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        self.terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1)
        try:
            os.dup2(self.log.fileno(), 1)
            os.dup2(self.log.fileno(), 2)
            yield self
        except BaseException:  # Ctrl-C or a failed step: its own message is in the log, where it was printed
            self.say(f"stopped; what finished is kept, the step's own message is at the end of {self.log_path}")
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            self.terminal.close()
            self.terminal = sys.stdout

    def execute(self, experiment, out: Path, title: str | None = None, summary: bool = True) -> list[dict]:
        """One experiment as the qreplay commands run it, its progress and table into the log, its warnings
        kept once per stack and set across the whole demo."""
        from replay.commands.run import execute

        return execute(experiment, out, False, title=title, summary=summary, warnings=self.warnings)


@dataclass
class Entry:
    """One file the index page links, and what it holds."""

    path: Path
    sentence: str


def _replay_path(scan: Path) -> Path:
    return scan.with_name(f"{scan.stem}-replay.duckdb")


def run_demo(out: Path | None, fmt: str = "table", html_dir: Path | None = None, replay: bool = True,
             quick: bool = False, lab_instance: str | None = None) -> Path:
    """Run the demo; returns its index page. The scan goes to ``out`` (refused if it exists) or else to
    DEMO_DIR/scan.duckdb, which each demo replaces; the replay beside it as ``<stem>-replay.duckdb``, the log
    and the index page in the same directory; notebooks go to ``html_dir`` when given. ``lab_instance`` names
    the lab (default: qscan's own, which must not be up)."""
    if out is None:
        out = DEMO_DIR / "scan.duckdb"
        for previous in (out, _replay_path(out)):
            previous.unlink(missing_ok=True)
    for kept in (out, _replay_path(out)):
        if kept.exists():
            raise ToolError(f"{kept} exists; the demo writes fresh results")
    out.parent.mkdir(parents=True, exist_ok=True)
    plan = QUICK if quick else FULL
    story = Story(out.parent / "demo.log")
    entries = [Entry(story.log_path, "Everything the steps printed: each table, progress line and warning in "
                                     "full, the tools' own messages.")]
    started = datetime.datetime.now(datetime.timezone.utc)
    with story.details():
        entries += _scan(story, out, fmt, lab_instance)
        if replay:
            replay_path = _replay_path(out)
            entries.append(Entry(replay_path, "The replay results (DuckDB): every run of every step below, with "
                                              "its conditions, warnings and counters; `qreplay plot` draws it."))
            entries += _replay(story, plan, replay_path)
            stacks = _usable_stacks(story, plan)
            entries += _reproduce(story, plan, replay_path, stacks)
            _traces(story, plan, replay_path, stacks)
            entries += _pairs(story, plan, replay_path.with_name(f"{replay_path.stem}-pairs"), stacks)
            entries += _fidelity(story, plan, replay_path)
            entries += _workloads(story, plan, replay_path)
        entries += _impact(story, plan, out, replay)
        if html_dir is not None:
            entries += _notebooks(story, out, html_dir, _replay_path(out) if replay else None)
    index = write_index(out.parent / "index.html", entries, plan, started, story.said)
    story.say(f"open {index} (every report, figure and results file, a sentence on each); the details: "
              f"{story.log_path}")
    return index


def _scan(story: Story, out: Path, fmt: str, instance: str | None) -> list[Entry]:
    from lab import Lab
    from lab.core import DEFAULT_INSTANCE
    from scanner.engine import ScanSettings
    from scanner.identify import identify_into, load_signatures
    from scanner.report import build_report, render
    from scanner.scan import scan_into
    from scanner.targets import Target

    story.say("bringing up the lab and scanning every lab server ...")
    with Lab.up(instance=instance or DEFAULT_INSTANCE) as lab:
        targets = [Target(s.ip, s.port, s.sni) for s in lab.servers]
        settings, records = ScanSettings(timeout=3.0), []
        with lab.in_client():
            outcome = scan_into(out, targets, settings, kind="demo", on_batch=records.extend)
            # each server's library named, as `qscan targets --identify` does: qreplay impact needs whose rule
            identify_into(out, targets, settings, load_signatures(), records)
    report = build_report(out, top=10)
    text = render(report, fmt)
    print(text)
    written = out.with_name(f"{out.stem}-report.{ {'table': 'txt', 'markdown': 'md'}.get(fmt, fmt)}")
    written.write_text(text.rstrip("\n") + "\n")
    top = report.sets.row(0, named=True) if report.sets.height else None
    story.say(f"1 scan: {outcome.ok} of {outcome.attempted} lab servers answered; the commonest set "
              + (f"{top['set_fingerprint'][:12]} on {top['endpoints']} ({top['share_pct']:g}%), initial_max_data "
                 f"{top['initial_max_data']}" if top else "none (no handshake completed)"))
    return [Entry(out, "The scan (DuckDB): every lab server's handshake and the transport parameters it sent, "
                       "raw and decoded, in wire order."),
            Entry(written, "The popularity report of that scan (`qscan report`): the commonest sets and values.")]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _mbps(value: float | None) -> str:
    return "failed" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _replay(story: Story, plan: DemoPlan, results: Path) -> list[Entry]:
    """qreplay's matrix, small: the browsers' newest captured client sets on ngtcp2."""
    from replay.link import LinkConfig
    from replay.runner import Condition, Experiment
    from replay.sets import resolve_one
    from replay.stacks import get_stack
    from replay.stacks.base import RunOptions

    clients = [resolve_one(name) for name in REPLAY_SETS]
    conditions = [Condition(client, None, LinkConfig(delay_down_ms=delay)) for delay in REPLAY_DELAYS_MS
                  for client in clients]
    rows = story.execute(Experiment("matrix", get_stack("ngtcp2"), conditions, RunOptions(size=plan.replay_size,
                         timeout_s=60.0), plan.replay_reps, command_line="quictp-demo"), results)
    parts = []
    for client in clients:
        means = [_mbps(_mean([r["goodput_mbps"] for r in rows if r["set_name"] == client.name
                              and r["delay_ms"] == delay and r["status"] == "ok"])) for delay in REPLAY_DELAYS_MS]
        parts.append(f"{client.name} {' / '.join(means)}")
    story.say(f"2 browsers' sets on ngtcp2, {_mb(plan.replay_size)} x {plan.replay_reps}, Mbit/s at "
              f"{' / '.join(f'{d:g}' for d in REPLAY_DELAYS_MS)} ms: {'; '.join(parts)}")
    story.warn()
    return []


def _usable_stacks(story: Story, plan: DemoPlan) -> list:
    from replay.stacks import all_stacks

    usable, missing = [], []
    for stack in all_stacks().values():
        if plan.stacks is not None and stack.name not in plan.stacks:
            continue
        reason = stack.unavailable_reason()
        if reason:
            missing.append(stack.name)
            print(f"not replaying on {stack.name}: {reason}")
        else:
            usable.append(stack)
    if missing:
        story.say(f"  not usable here (why: the log): {', '.join(missing)}")
    return usable


def _reproduce(story: Story, plan: DemoPlan, results: Path, stacks: list) -> list[Entry]:
    """`qreplay reproduce --quick`, a part of it, on every usable stack into the replay file (the notebook
    shows it) and its report beside it: the stacks side by side, beside the thesis."""
    from replay.reproduce import (PACKET_FIGURES, build_report, evaluate_headlines, load_campaign, plan_campaign,
                                  run_campaign)

    plans = plan_campaign(quick=True, figures=set(plan.reproduce_figures), size=plan.reproduce_size,
                          reps=plan.reproduce_reps)
    run_campaign(stacks, plans, results, mode="quick", command_line="quictp-demo",
                 execute=lambda experiment, out: story.execute(experiment, out))
    report = build_report(results, results.with_name(f"{results.stem}-reproduce"))
    story.say(f"3 the thesis's figures {', '.join(sorted(plan.reproduce_figures))}, {_mb(plan.reproduce_size)} "
              "downloads, measured / published Mbit/s (out of reach: the thesis's 500 MB beyond such a download):")
    headlines = evaluate_headlines(load_campaign(results))
    for stack in stacks:
        measured = [h for h in headlines if h.stack == stack.name and h.measured is not None and "%" not in h.what
                    and not h.thesis_text.startswith("+")]
        story.say(f"  {stack.name}: " + "; ".join(
            f"{h.figure} at {int(h.what.split()[-1].removeprefix('default_')):,}: {_mbps(h.measured)} / {h.thesis:g}"
            + ("" if h.comparable else " (out of reach)") for h in measured[:4]))
    story.warn()
    return [Entry(report.html, "The thesis's figures on each stack beside the published numbers, with the window "
                               "model's prediction and why each point lands where it does (self-contained page)."),
            Entry(report.markdown, "The same report as Markdown.")] + [
        Entry(figure, f"{figure.stem.replace('_', ' ').capitalize()}: "
                      + ("packets each side sent a download, every stack." if figure.stem.removeprefix("figure_") in
                         PACKET_FIGURES.values() else "every stack's curve, the thesis's points as stars (hollow "
                         "where a download this short cannot reach them)."))
        for figure in report.figures]


def _traces(story: Story, plan: DemoPlan, results: Path, stacks: list) -> None:
    """One traced run per usable stack at the thesis's smallest connection window (initial_max_data 196,608,
    30 ms): the notebook draws why each stack's figure 5.4 point comes out as it does."""
    from replay.link import LinkConfig
    from replay.runner import Condition, Experiment
    from replay.sets import resolve_one, with_overrides
    from replay.stacks.base import RunOptions

    client = with_overrides(resolve_one("lsquic-client-default"), [f"initial_max_data={TRACE_WINDOW}"])
    found = []
    for stack in stacks:
        condition = Condition(client, None, LinkConfig(delay_down_ms=30.0), "initial_max_data", TRACE_WINDOW)
        rows = story.execute(Experiment("sweep", stack, [condition], RunOptions(size=plan.trace_size, timeout_s=60.0,
                             trace=True), 1, command_line="quictp-demo"), results)
        found += [f"{stack.name} {_mbps(r['goodput_mbps'] if r['status'] == 'ok' else None)}" for r in rows]
    story.say(f"4 one traced run a stack at initial_max_data {TRACE_WINDOW:,}, 30 ms (the notebook draws them), "
              f"Mbit/s: {', '.join(found)}")
    story.warn()


def _pairs(story: Story, plan: DemoPlan, out_dir: Path, stacks: list) -> list[Entry]:
    """`qreplay pairs` at 30 ms over every usable stack: the heat map of client x server goodput."""
    from replay.link import LinkConfig
    from replay.pairs import read_pairs, run_pairs, write_pairs_report
    from replay.sets import resolve_one
    from replay.stacks.base import RunOptions

    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "pairs.duckdb"
    run_pairs(stacks, resolve_one("firefox"), [LinkConfig(delay_down_ms=PAIRS_DELAY_MS)],
              RunOptions(size=plan.pairs_size, timeout_s=60.0), 1, results, command_line="quictp-demo",
              execute=lambda experiment, out: story.execute(experiment, out, summary=False))
    written = write_pairs_report(results, out_dir)
    cells = sorted((c for c in read_pairs(results)[1] if c.mean_mbps is not None), key=lambda c: c.mean_mbps)
    extremes = (f"slowest {cells[0].client} from {cells[0].server} {_mbps(cells[0].mean_mbps)}, fastest "
                f"{cells[-1].client} from {cells[-1].server} {_mbps(cells[-1].mean_mbps)} Mbit/s") if cells else \
        "no pair succeeded"
    story.say(f"5 every client x server of {len(stacks)} stacks at {PAIRS_DELAY_MS:g} ms, {_mb(plan.pairs_size)}: "
              f"{extremes}")
    story.warn()
    return [Entry(written.html, "Every client against every server (the implementation pairs), a heat map of "
                                "goodput a delay."),
            Entry(results, "The pairs' runs (DuckDB).")] + [
        Entry(heatmap, "The heat map alone: clients as rows, servers as columns, Mbit/s.")
        for heatmap in written.heatmaps]


def _fidelity(story: Story, plan: DemoPlan, results: Path) -> list[Entry]:
    """`qreplay fidelity --quick` into the replay file (the notebook shows it) and its report beside it: each
    browser beside the set its own ClientHello sent, replayed on ngtcp2 and quic-go."""
    from replay.fidelity import closest, load_fidelity, plan_fidelity, run_fidelity, write_fidelity_report

    try:
        fidelity = plan_fidelity(quick=True, **plan.fidelity)
    except ToolError as exc:
        story.say(f"6 fidelity not run: {exc}")
        return []
    run_fidelity(fidelity, results, command_line="quictp-demo",
                 execute=lambda experiment, out: story.execute(experiment, out, summary=False))
    written = write_fidelity_report(results, results.with_name(f"{results.stem}-fidelity"))
    campaign = load_fidelity(results)
    best = []
    for browser in campaign.browsers:
        ranked = closest(campaign, browser)
        if ranked:
            (stack, mode), distance = ranked[0]
            best.append(f"{browser}: {stack} {mode} ({distance:.2f}x off)")
    story.say(f"6 which stack stands in best for each browser, {_mb(fidelity.size)} at "
              f"{' and '.join(f'{link.delay_down_ms:g}' for link in fidelity.links)} ms: "
              + ("; ".join(best) or "no comparison succeeded"))
    story.warn()
    return [Entry(written.html, "Each browser beside its own set replayed on the stacks: which stands in best "
                                "(goodput ratio nearest 1), and why the others differ."),
            Entry(written.markdown, "The same report as Markdown."),
            Entry(written.figure, "Browser against replay, goodput by delay.")]


def _workloads(story: Story, plan: DemoPlan, results: Path) -> list[Entry]:
    """Requests per second of many small requests on one connection, and an upload, beside tcp-h2 (TCP)."""
    from replay.link import LinkConfig
    from replay.runner import Condition, Experiment
    from replay.sets import own_set, resolve_one
    from replay.stacks import get_stack
    from replay.stacks.base import RunOptions
    from tparams.workloads import REQUESTS, UPLOAD

    stacks = [get_stack(name) for name in plan.workload_stacks if not get_stack(name).unavailable_reason()]
    link = LinkConfig(delay_down_ms=WORKLOAD_DELAY_MS)
    conditions = [Condition(own_set(s) if s.own_parameters else resolve_one("firefox"), None, link, stack=s)
                  for s in stacks]
    said = []
    for options, metric, unit in (
            (RunOptions(size=WORKLOAD_REQUEST_SIZE, timeout_s=60.0, workload=REQUESTS,
                        requests=plan.workload_requests, concurrency=WORKLOAD_CONCURRENCY), "requests_per_s",
             f"{plan.workload_requests} requests of {WORKLOAD_REQUEST_SIZE // 1000} kB, {WORKLOAD_CONCURRENCY} at "
             "once, requests/s"),
            (RunOptions(size=plan.upload_size, timeout_s=60.0, workload=UPLOAD), "goodput_mbps",
             f"{_mb(plan.upload_size)} upload, Mbit/s")):
        rows = story.execute(Experiment("matrix", stacks[0], conditions, options, 1, command_line="quictp-demo"),
                             results, title=options.workload.name)
        said.append(f"{unit} " + ", ".join(
            f"{s.name} {_mbps(_mean([r[metric] for r in rows if r['stack'] == s.name and r['status'] == 'ok']))}"
            for s in stacks))
    story.say(f"7 workloads at {WORKLOAD_DELAY_MS:g} ms: {'; '.join(said)}")
    story.warn()
    return []


def _impact(story: Story, plan: DemoPlan, scan: Path, check: bool) -> list[Entry]:
    """`qreplay impact` on the scan: what the lab's server sets do to the browsers' uploads and page loads,
    predicted for every set, and (with the replay) spot-checked with real browsers through each set's library."""
    import polars as pl

    from replay.impact import LINK
    from replay.impact_check import CheckOptions
    from replay.impact_report import ImpactOptions, run_impact

    out_dir = scan.with_name(f"{scan.stem}-impact")
    top, worst = plan.impact_candidates
    options = ImpactOptions(top=top, worst=worst, check=CheckOptions(
        browsers=plan.impact_browsers, upload_bytes=plan.impact_upload, objects=plan.impact_objects) if check else None)
    result = run_impact(scan, out_dir, options, execute=lambda experiment, out: story.execute(experiment, out,
                                                                                              summary=False))
    for line in result.summary_lines():
        print(line)
    capped = result.tables["upload_shares"].filter((pl.col("upload_binding") != LINK) & (pl.col("browser") == "chromium")
                                                   & (pl.col("rtt_ms") == 30.0))
    headline = (f"8 the lab's server sets against browsers (qreplay impact): chromium's upload capped below "
                f"{options.rate_mbps:g} Mbit/s at 30 ms on {capped['share_pct'].sum():.0f}% of endpoints"
                + (f" (most by {capped.sort('share_pct')['upload_binding'][-1]})" if capped.height else ""))
    if result.checks is not None:
        headline += f"; {result.measured()}, {result.bound_within()}"
    story.say(headline)
    story.warn()
    return [Entry(out_dir / "report.html", "What every server set of the scan does to a browser's upload and page "
                                           "load: predicted, spot-checked with real browsers through the set's own "
                                           "library where the project has its h3 server (self-contained page)."),
            Entry(out_dir / "impact.duckdb", "Its tables (DuckDB): predictions, endpoint shares, lifting values, "
                                             "spot checks measured beside predicted."),
            Entry(out_dir / "spot_checks.duckdb", "The spot checks' browser runs (a qreplay results file).")]


def _notebooks(story: Story, scan: Path, html_dir: Path, replay_db: Path | None) -> list[Entry]:
    from scanner.analysis import render_notebooks

    pages = render_notebooks(scan, html_dir, replay_db=replay_db)
    story.say(f"9 rendered {len(pages)} analysis notebooks over the results into {html_dir}")
    sentences = {"parameter_popularity": "The scan's parameter sets and values, counted as the thesis counts "
                                         "them (notebook).",
                 "scan_comparison": "Two scans side by side, what changed between them (here the scan with "
                                    "itself: nothing should).",
                 "replay_goodput": "The replay's results drawn from the stored runs: goodput by set and delay, the "
                                   "traces' flow-control credit and RTTs (notebook)."}
    return [Entry(page, sentences.get(page.stem, "An analysis notebook, rendered.")) for page in pages]


def write_index(path: Path, entries: list[Entry], plan: DemoPlan, started: datetime.datetime,
                said: list[str]) -> Path:
    """The page a person opens first: what the terminal said, then each file the demo wrote, linked relative
    to the page, with what it holds; pictures shown small beside their sentence."""
    rows = []
    for entry in entries:
        href = html.escape(os.path.relpath(entry.path, path.parent))
        if not entry.path.exists():
            # A step that failed or was left out: said, and not linked (every link on the page resolves),
            # so the page does not look whole when it is not.
            rows.append(f"<tr><td>{href} <b>(not made)</b></td><td>{html.escape(entry.sentence)}</td></tr>")
            continue
        shown = f"<br><a href='{href}'><img src='{href}' alt='{html.escape(entry.path.name)}' width=320></a>" \
            if entry.path.suffix == ".png" else ""
        rows.append(f"<tr><td><a href='{href}'>{html.escape(entry.path.name)}</a></td>"
                    f"<td>{html.escape(entry.sentence)}{shown}</td></tr>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
             "td{border:1px solid #bbb;padding:4px 8px;vertical-align:top}pre{white-space:pre-wrap}")
    path.write_text(
        f"<!doctype html><meta charset=utf-8><title>quictp demo</title><style>{style}</style>\n"
        f"<h1>The demo's results</h1>\n<p>The {plan.name} demo of {started:%Y-%m-%d %H:%M} UTC: a scan of the lab's "
        "servers, their parameter sets replayed through real QUIC stacks over an emulated link, the thesis's "
        "figures reproduced, every client against every server, the browsers against their own sets, "
        "QuicSand's workloads beside TCP, and what the scanned server sets do to browsers (predicted, spot-checked). "
        "What each step found:</p>\n"
        f"<pre>{html.escape(chr(10).join(said))}</pre>\n<p>Each file the demo wrote, and what it holds:</p>\n"
        f"<table>\n{chr(10).join(rows)}\n</table>\n")
    return path
