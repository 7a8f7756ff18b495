"""The demo: the whole pipeline on the built-in lab, start to finish.

Brings the lab up, scans every lab server from the client namespace, prints
the popularity report, tears the lab down whatever happens, replays the
browsers' client sets through a real QUIC stack over the emulated link
(short downloads, two repetitions), replays a small part of the thesis's
campaign on every stack usable here, LSQUIC too where a build is configured
(`qreplay reproduce --quick`, figures 5.3a, 5.4 and 5.6, with its report
beside the published numbers), traces one run per stack at the smallest
connection window, downloads across every pair of those stacks at 30 ms
(`qreplay pairs`, a heat map), holds both browsers against their own sets
replayed on two stacks (`qreplay fidelity --quick`, where the browsers are
installed), runs QuicSand's workloads (request-response, upload) on a Rust, a Go
and a Python stack beside TCP's reference, and renders the analysis notebooks
over both result files.
"""

from __future__ import annotations

import sys
from pathlib import Path


from tparams.errors import ToolError

from scanner.engine import ScanSettings
from lab import Lab
from scanner.report import build_report, render
from scanner.scan import scan_into
from scanner.targets import Target
from common.terminal import cli_console

_err = cli_console(stderr=True)


# A replay small enough for a demo: both browsers, no delay and the thesis's 30 ms.
REPLAY_SETS = ("firefox", "chrome")
REPLAY_DELAYS_MS = (0.0, 30.0)
REPLAY_SIZE = 20_000_000
REPLAY_REPS = 2
DEMO_DIR = Path("out/demo")
# The thesis's headline figures, small, on every stack usable here (LSQUIC where the user configured a build).
REPRODUCE_FIGURES = {"5.3a", "5.4", "5.6"}
REPRODUCE_SIZE = 5_000_000
REPRODUCE_REPS = 1
# Why figure 5.4's smallest window comes out as it does, per stack: one traced run each.
TRACE_WINDOW = 196_608
TRACE_SIZE = 2_000_000
# Every client against every server of one protocol, at the thesis's 30 ms.
PAIRS_DELAY_MS = 30.0
PAIRS_SIZE = 5_000_000
# QuicSand's request-response and upload, three languages' stacks beside TCP's reference, at 30 ms.
WORKLOAD_STACKS = ("quinn", "quic-go", "aioquic", "tcp-h2")
WORKLOAD_REQUESTS, WORKLOAD_CONCURRENCY, WORKLOAD_REQUEST_SIZE = 200, 16, 10_000
WORKLOAD_UPLOAD_SIZE = 5_000_000


def _replay_path(scan: Path) -> Path:
    return scan.with_name(f"{scan.stem}-replay.duckdb")


def run_demo(out: Path | None, fmt: str = "table", html_dir: Path | None = None, replay: bool = True) -> str:
    """Return the printed report; notebooks go to ``html_dir`` when given.

    The scan goes to ``out`` (refused if it exists) or else to
    DEMO_DIR/scan.duckdb, which each demo replaces; the replay beside it as
    ``<stem>-replay.duckdb``."""
    if out is None:
        out = DEMO_DIR / "scan.duckdb"
        for previous in (out, _replay_path(out)):
            previous.unlink(missing_ok=True)
    for kept in (out, _replay_path(out)):
        if kept.exists():
            raise ToolError(f"{kept} exists; the demo writes fresh results")
    out.parent.mkdir(parents=True, exist_ok=True)
    path, replay_path = out, _replay_path(out)
    _err.print("bringing up the lab ...")
    with Lab.up() as lab:
        targets = [Target(s.ip, s.port, s.sni) for s in lab.servers]
        _err.print(f"scanning {len(targets)} lab servers from namespace {lab.client_ns} ...")
        with lab.in_client():
            outcome = scan_into(path, targets, ScanSettings(timeout=3.0), kind="demo")
    _err.print(f"lab down; {outcome.ok} of {outcome.attempted} handshakes completed")
    text = render(build_report(path, top=10), fmt)
    sys.stdout.write(text.rstrip("\n") + "\n")
    if replay:
        _replay(replay_path)
        stacks = _usable_stacks()
        _reproduce(replay_path, stacks)
        _traces(replay_path, stacks)
        _pairs(replay_path.with_name(f"{replay_path.stem}-pairs"), stacks)
        _fidelity(replay_path)
        _workloads(replay_path)
    if html_dir is not None:
        from scanner.analysis import render_notebooks

        _err.print(f"rendering the analysis notebooks into {html_dir} ...")
        for page in render_notebooks(path, html_dir, replay_db=replay_path if replay else None):
            _err.print(f"  {page}")
    return text


def _replay(results: Path) -> None:
    """qreplay's matrix, small: the browsers' newest captured client sets on ngtcp2."""
    from replay.commands.run import execute
    from replay.link import LinkConfig
    from replay.runner import Condition, Experiment
    from replay.sets import resolve_one
    from replay.stacks import get_stack
    from replay.stacks.base import RunOptions

    clients = [resolve_one(name) for name in REPLAY_SETS]
    conditions = [Condition(client, None, LinkConfig(delay_down_ms=delay)) for delay in REPLAY_DELAYS_MS for client in clients]
    _err.print(f"replaying {', '.join(c.name for c in clients)} on ngtcp2 over the emulated link, "
               f"{REPLAY_SIZE // 1_000_000} MB x {REPLAY_REPS} at {' and '.join(f'{d:g}' for d in REPLAY_DELAYS_MS)} ms ...")  # fmt: skip
    options = RunOptions(size=REPLAY_SIZE, timeout_s=60.0)
    execute(Experiment("matrix", get_stack("ngtcp2"), conditions, options, REPLAY_REPS, command_line="quictp-demo"), results, False)


def _usable_stacks() -> list:
    from replay.stacks import all_stacks

    usable = []
    for stack in all_stacks().values():
        reason = stack.unavailable_reason()
        if reason:
            _err.print(f"not replaying on {stack.name}: {reason}")
        else:
            usable.append(stack)
    return usable


def _reproduce(results: Path, stacks: list) -> None:
    """`qreplay reproduce --quick`, a part of it, on every usable stack into the replay file (the notebook
    shows it) and its report beside it: the stacks side by side, beside the thesis."""
    from replay.commands.run import execute
    from replay.reproduce import build_report, plan_campaign, run_campaign

    plans = plan_campaign(quick=True, figures=REPRODUCE_FIGURES, size=REPRODUCE_SIZE, reps=REPRODUCE_REPS)
    _err.print(f"reproducing the thesis's figures {', '.join(sorted(REPRODUCE_FIGURES))} on "
               f"{', '.join(s.name for s in stacks)}, {REPRODUCE_SIZE // 1_000_000} MB downloads ...")
    run_campaign(stacks, plans, results, mode="quick", command_line="quictp-demo",
                 execute=lambda experiment, out: execute(experiment, out, False))
    report = build_report(results, results.with_name(f"{results.stem}-reproduce"))
    _err.print(f"the stacks beside the thesis: {report.markdown} and {report.html}")


def _traces(results: Path, stacks: list) -> None:
    """One traced run per usable stack at the thesis's smallest connection window (initial_max_data 196,608,
    30 ms): the notebook draws why each stack's figure 5.4 point comes out as it does."""
    from replay.commands.run import execute
    from replay.link import LinkConfig
    from replay.runner import Condition, Experiment
    from replay.sets import resolve_one, with_overrides
    from replay.stacks.base import RunOptions

    client = with_overrides(resolve_one("lsquic-client-default"), [f"initial_max_data={TRACE_WINDOW}"])
    _err.print(f"one traced run each on {', '.join(s.name for s in stacks)} at initial_max_data {TRACE_WINDOW:,}, "
               f"30 ms ...")
    for stack in stacks:
        condition = Condition(client, None, LinkConfig(delay_down_ms=30.0), "initial_max_data", TRACE_WINDOW)
        execute(Experiment("sweep", stack, [condition], RunOptions(size=TRACE_SIZE, timeout_s=60.0, trace=True), 1,
                           command_line="quictp-demo"), results, False)


def _pairs(out_dir: Path, stacks: list) -> None:
    """`qreplay pairs` at 30 ms over every usable stack: the heat map of client x server goodput."""
    from replay.commands.run import execute
    from replay.link import LinkConfig
    from replay.pairs import run_pairs, write_pairs_report
    from replay.sets import resolve_one
    from replay.stacks.base import RunOptions

    _err.print(f"every client x server of {', '.join(s.name for s in stacks)} at {PAIRS_DELAY_MS:g} ms, "
               f"{PAIRS_SIZE // 1_000_000} MB ...")
    out_dir.mkdir(parents=True, exist_ok=True)
    run_pairs(stacks, resolve_one("firefox"), [LinkConfig(delay_down_ms=PAIRS_DELAY_MS)],
              RunOptions(size=PAIRS_SIZE, timeout_s=60.0), 1, out_dir / "pairs.duckdb", command_line="quictp-demo",
              execute=lambda experiment, out: execute(experiment, out, False))
    written = write_pairs_report(out_dir / "pairs.duckdb", out_dir)
    _err.print(f"implementation pairs: {written.html} ({', '.join(str(p) for p in written.heatmaps)})")


def _fidelity(results: Path) -> None:
    """`qreplay fidelity --quick` into the replay file (the notebook shows it) and its report beside it: each
    browser beside the set its own ClientHello sent, replayed on ngtcp2 and quic-go, at 10 and 50 ms."""
    from replay.commands.run import execute
    from replay.fidelity import closest, load_fidelity, plan_fidelity, run_fidelity, write_fidelity_report

    try:
        plan = plan_fidelity(quick=True)
    except ToolError as exc:
        _err.print(f"not holding the browsers against their replayed sets: {exc}")
        return
    _err.print(f"{', '.join(b.name for b in plan.browsers)} beside their own sets replayed on "
               f"{', '.join(s.name for s in plan.stacks)} at {' and '.join(f'{l.delay_down_ms:g}' for l in plan.links)} "
               f"ms, {plan.size // 1_000_000} MB x {plan.reps} ...")
    run_fidelity(plan, results, command_line="quictp-demo",
                 execute=lambda experiment, out: execute(experiment, out, False, summary=False))
    written = write_fidelity_report(results, results.with_name(f"{results.stem}-fidelity"))
    campaign = load_fidelity(results)
    for browser in campaign.browsers:
        ranked = closest(campaign, browser)
        if ranked:
            (stack, mode), distance = ranked[0]
            _err.print(f"closest to {browser}: its set on {stack}, {mode} (ratios {distance:.2f}x from 1 on average)")
    _err.print(f"browsers against their replayed sets: {written.markdown} and {written.html}")


def _workloads(results: Path) -> None:
    """Requests per second, time to first byte and latency of many small requests on one connection, and an
    upload, on quinn (Rust), quic-go (Go) and aioquic (Python) beside tcp-h2 (TCP), at 30 ms."""
    from replay.commands.run import execute
    from replay.link import LinkConfig
    from replay.runner import Condition, Experiment
    from replay.sets import own_set, resolve_one
    from replay.stacks import get_stack
    from replay.stacks.base import RunOptions
    from tparams.workloads import REQUESTS, UPLOAD

    stacks = [get_stack(name) for name in WORKLOAD_STACKS if not get_stack(name).unavailable_reason()]
    link = LinkConfig(delay_down_ms=30.0)
    conditions = [Condition(own_set(s) if s.own_parameters else resolve_one("firefox"), None, link, stack=s)
                  for s in stacks]
    _err.print(f"{WORKLOAD_REQUESTS} requests of {WORKLOAD_REQUEST_SIZE // 1000} kB, {WORKLOAD_CONCURRENCY} at once, "
               f"and a {WORKLOAD_UPLOAD_SIZE // 1_000_000} MB upload on {', '.join(s.name for s in stacks)} "
               "at 30 ms ...")
    for options in (RunOptions(size=WORKLOAD_REQUEST_SIZE, timeout_s=60.0, workload=REQUESTS,
                               requests=WORKLOAD_REQUESTS, concurrency=WORKLOAD_CONCURRENCY),
                    RunOptions(size=WORKLOAD_UPLOAD_SIZE, timeout_s=60.0, workload=UPLOAD)):
        execute(Experiment("matrix", stacks[0], conditions, options, 1, command_line="quictp-demo"), results, False,
                title=options.workload.name)
