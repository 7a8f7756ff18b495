"""Fidelity: does a replayed browser set behave like the browser?

qreplay's method, the thesis's, stands a browser's transport-parameter set in for the browser: the set goes
into another QUIC stack. A fidelity campaign holds that against the browser itself. Each installed browser
(Chromium, Firefox ESR over HTTP/3) first loads a page once so that its ClientHello gives the set it sends
today; then the browser downloads beside that set replayed on every replay stack, windows pinned and with
--autotune (where the stack can grow its windows), over the same links, in one experiment whose repetitions
interleave. The report gives, per browser, stack, mode and link, the ratio of the replayed goodput to the
browser's, with its spread (the ratio of the means, its standard error propagated from both means by the
delta method: replay.statistics.ratio_of_means), which stack and mode comes closest, and what the campaign
stored about why the others differ (the window each side keeps, the client's CPU, its ACKs).

The server stays the same where the application protocol allows: the browsers and ngtcp2's client download
from ngtcp2's server (gtlsserver, HTTP/3); the other replay stacks speak hq-interop, which gtlsserver does
not, so each one's own server stands in (LSQUIC speaks HTTP/3 and would download from gtlsserver too).

    plan = plan_fidelity(quick=True)
    campaign = run_fidelity(plan, "fidelity.duckdb")
    written = write_fidelity_report("fidelity.duckdb", "out/fidelity")
"""

from __future__ import annotations

import datetime
import json
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common.markdown import markdown_table
from replay import statistics, store
from replay.figures import markdown_page, pyplot, save_png
from replay.flowcontrol import client_window_bound
from replay.link import LinkConfig
from replay.measured_rules import RULES_CSV, load_update_rules
from replay.grids.reproduce import LOSS_DELAY_MS
from replay.reproduce import HEADLINES_CSV, read_headlines
from replay.runner import Condition, Experiment, run_experiment
from replay.sets import NamedSet, own_set
from replay.stacks import all_stacks, get_stack
from replay.stacks.base import RunOptions, Stack, default_timeout_s
from tparams.errors import ToolError
from tparams.paramset import ParamSet

from replay.grids.fidelity import (
    BROWSERS, DELAYS_MS, LOSS_PCT, SIZE, LOSS_SIZE, REPS, QUICK_STACKS, QUICK_DELAYS_MS, QUICK_SIZE, QUICK_REPS,
    CAPTURE_SIZE, THESIS_FROM_MS
)


def modes(stack: Stack) -> tuple[bool, ...]:
    """The --autotune values a replay stack runs: pinned, and growing windows where the stack can."""
    return (False, True) if stack.autotunes(True) else (False,)


def mode_name(autotune: bool) -> str:
    return "autotune" if autotune else "pinned"


@dataclass(frozen=True)
class FidelityPlan:
    browsers: tuple[Stack, ...]
    stacks: tuple[Stack, ...]
    links: tuple[LinkConfig, ...]  # without loss, each downloading ``size``
    size: int
    reps: int
    mode: str  # quick | full | custom: what the report says the campaign was
    loss_link: LinkConfig | None = None  # downloading ``loss_size``
    loss_size: int = LOSS_SIZE

    def parts(self) -> list[tuple[tuple[LinkConfig, ...], int]]:
        """(links, download size) of each comparison experiment."""
        return [(self.links, self.size)] + ([((self.loss_link,), self.loss_size)] if self.loss_link else [])


def _usable(names: list[str] | None, default: tuple[str, ...] | None, what: str) -> tuple[Stack, ...]:
    """The stacks named (each must run here), or the default ones that run here (None: every replay stack)."""
    if names:
        chosen = [get_stack(name) for name in names]
        unusable = [f"{s.name}: {s.unavailable_reason()}" for s in chosen if s.unavailable_reason()]
        if unusable:
            raise ToolError(f"{what} not usable here: " + "; ".join(unusable))
        return tuple(chosen)
    candidates = [get_stack(name) for name in default] if default else list(all_stacks().values())
    return tuple(s for s in candidates if s.unavailable_reason() is None)


def plan_fidelity(quick: bool = False, browsers: list[str] | None = None, stacks: list[str] | None = None,
                  delays_ms: list[float] | None = None, loss_pct: float | None = None, size: int | None = None,
                  reps: int | None = None, loss_size: int | None = None) -> FidelityPlan:
    """The campaign: by default both browsers beside every replay stack usable here at DELAYS_MS (SIZE bytes)
    and at LOSS_PCT loss at LOSS_DELAY_MS (LOSS_SIZE bytes), REPS times; ``quick`` a small one; any argument
    narrows it."""
    chosen = _usable(browsers, BROWSERS, "browser")
    wrong = [s.name for s in chosen if not s.own_parameters or s.protocol != "h3"]
    if wrong:
        raise ToolError(f"--browsers: {', '.join(wrong)} is not a browser over HTTP/3 (chromium, firefox)")
    replays = _usable(stacks, QUICK_STACKS if quick else None, "stack")
    wrong = [s.name for s in replays if s.own_parameters or "client" not in s.roles or "server" not in s.roles]
    if wrong:
        raise ToolError(f"--stacks: {', '.join(wrong)} is no replay stack (a client and a server taking a set)")
    if not chosen or not replays:
        raise ToolError(f"no {'browser' if not chosen else 'replay stack'} is usable here (`qreplay doctor`)")
    loss = (0.0 if quick else LOSS_PCT) if loss_pct is None else loss_pct
    links = tuple(LinkConfig(delay_down_ms=d) for d in (delays_ms or (QUICK_DELAYS_MS if quick else DELAYS_MS)))
    custom = any(v is not None for v in (browsers, stacks, delays_ms, loss_pct, size, reps, loss_size))
    return FidelityPlan(chosen, replays, links, size or (QUICK_SIZE if quick else SIZE),
                        reps or (QUICK_REPS if quick else REPS), "custom" if custom else "quick" if quick else "full",
                        LinkConfig(delay_down_ms=LOSS_DELAY_MS, loss_pct=loss) if loss else None,
                        loss_size or LOSS_SIZE)


# --- running -------------------------------------------------------------------------------------------

Execute = Callable[[Experiment, Path], list[dict]]


def captured_set(browser: Stack, results: Path, tags: dict, execute: Execute, **experiment) -> NamedSet:
    """The set ``browser`` sends today: one page load (stored as a run of the campaign), its ClientHello's
    parameters as a named client set."""
    condition = Condition(own_set(browser), None, LinkConfig())
    row = execute(Experiment("fidelity", browser, [condition], RunOptions(size=CAPTURE_SIZE, timeout_s=60.0), 1,
                             tags={**tags, "purpose": "set capture"}, **experiment), results)[0]
    if row["status"] != "ok" or not row.get("client_sent"):
        raise ToolError(f"{browser.name}'s run that records its set failed: {row.get('error') or 'no ClientHello'}")
    version = row.get("browser_version") or browser.version()
    return NamedSet(f"{browser.name}-{version}-sent", ParamSet.from_mapping(json.loads(row["client_sent"])),
                    f"{browser.name} {version}'s ClientHello (run {row['run_id'][:12]})", "client")


def fidelity_conditions(plan: FidelityPlan, links: tuple[LinkConfig, ...], sets: dict[str, NamedSet]) \
        -> list[Condition]:
    """Per link, each browser and its set on every replay stack in every mode."""
    return [condition for link in links for browser in plan.browsers
            for condition in [Condition(own_set(browser), None, link, stack=browser),
                              *(Condition(sets[browser.name], None, link, stack=stack, knobs={"autotune": autotune})
                                for stack in plan.stacks for autotune in modes(stack))]]


def run_fidelity(plan: FidelityPlan, results: str | Path, *, link_backend: str = "auto",
                 udp_buffer_bytes: int | None = None, command_line: str | None = None,
                 execute: Execute | None = None) -> str:
    """Record each browser's set, then run the comparison, one experiment per download size, into ``results``;
    returns the campaign id its experiments are tagged with (each with the machine's 1-minute load at its
    start and end)."""
    results, execute = Path(results), execute or run_experiment
    campaign = uuid.uuid4().hex[:12]
    common = {"link_backend": link_backend, "command_line": command_line, "udp_buffer_bytes": udp_buffer_bytes}
    sets = {b.name: captured_set(b, results, campaign_tags(plan, campaign), execute, **common) for b in plan.browsers}
    for experiment in comparison_experiments(plan, campaign, sets, **common):
        execute(experiment, results)  # its load at the start and end in its config (runner.run_experiment)
    return campaign


def campaign_tags(plan: FidelityPlan, campaign: str) -> dict:
    """What every experiment of the fidelity campaign ``campaign`` carries in its config (load_fidelity finds it
    by them)."""
    return {"fidelity": campaign, "mode": plan.mode}


def comparison_experiments(plan: FidelityPlan, campaign: str, sets: dict[str, NamedSet], **experiment) \
        -> list[Experiment]:
    """The comparison, one experiment per download size, each browser's replays with ``sets[browser]``
    (``experiment``: further Experiment fields). run_fidelity runs them after capturing the sets; a replay
    campaign file's ``fidelity = true`` experiment plans them with the sets it names (replay/campaign.py)."""
    return [Experiment("fidelity", plan.browsers[0], fidelity_conditions(plan, links, sets),
                       RunOptions(size=size, timeout_s=default_timeout_s(size)), plan.reps,
                       tags={**campaign_tags(plan, campaign), "purpose": "comparison",
                             "sets": {b: s.name for b, s in sets.items()}}, **experiment)
            for links, size in plan.parts()]


# --- reading a campaign back ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """One replayed condition against its browser under one link."""

    browser: str
    real: dict  # the browser's summary row (replay.statistics.summary)
    replayed: dict  # the replay stack's
    ratio: dict  # replay.statistics.ratio_of_means(replayed, real)

    @property
    def key(self) -> tuple[str, str]:
        return self.replayed["stack"], mode_name(self.replayed["autotune"])

    @property
    def link(self) -> tuple[float, float]:
        return self.real["delay_ms"], self.real["loss_pct"]


@dataclass
class FidelityCampaign:
    campaign: str
    mode: str
    results: Path
    started_at: datetime.datetime
    finished_at: datetime.datetime | None
    loads: tuple[float, ...]  # the machine's 1-minute load when each comparison experiment started and ended
    versions: dict[str, str]  # every client and server stack's version
    sets: dict[str, dict]  # browser -> {"name", "source", "parameters"}
    summary: list[dict]  # the comparison's summary rows, with "client_cpu_s" and "not_applied_client" added
    set_fingerprints: dict[str, list[str]]  # browser -> the set fingerprints its runs sent
    comparisons: list[Comparison] = field(default_factory=list)
    #: whether each browser's set was captured from its ClientHello before the comparison (run_fidelity), not
    #: named in a replay campaign file (its `fidelity = true` experiment, replay/campaign.py)
    captured: bool = True

    def real(self, browser: str) -> list[dict]:
        return [row for row in self.summary if row["stack"] == browser]

    def replays(self, browser: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.browser == browser]

    @property
    def browsers(self) -> list[str]:
        return list(self.sets)

    @property
    def links(self) -> list[tuple[float, float]]:
        return sorted({(row["delay_ms"], row["loss_pct"]) for row in self.summary}, key=lambda x: (x[1], x[0]))


def load_fidelity(results: str | Path, campaign: str | None = None) -> FidelityCampaign:
    """A fidelity campaign's comparison, summarised per condition (the newest in the file by default)."""
    import duckdb
    import polars as pl

    results = Path(results)
    con = store.open_read_only(results)
    try:
        campaign, chosen = store.campaign_experiments(con, results, "fidelity", "qreplay fidelity", campaign,
                                                      "json_extract_string(config, '$.purpose') = 'comparison'")
        ids = [e[0] for e in chosen]
        frame = statistics.summary(con).filter(pl.col("experiment_id").is_in(ids))
        extra = con.sql(f"""
            SELECT experiment_id, {', '.join(statistics.present_conditions(con))},
                   avg(client_cpu_s) FILTER (WHERE status = 'ok') AS client_cpu_s,
                   any_value(not_applied_client) AS not_applied_client,
                   list(DISTINCT set_fingerprint) AS fingerprints, any_value(browser_version) AS browser_version
            FROM runs WHERE list_contains({ids!r}, experiment_id) GROUP BY ALL""").pl()
        captured = con.execute("SELECT count(*) FROM experiments WHERE json_extract_string(config, '$.fidelity') = ? "
                               "AND json_extract_string(config, '$.purpose') = 'set capture'", [campaign]).fetchone()[0]
    except duckdb.Error as exc:
        raise ToolError(f"{results} is not a qreplay results file: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    keys = ["experiment_id", *(c for c in statistics.conditions() if c in frame.columns)]
    summary = frame.join(extra, on=keys, how="left", nulls_equal=True).to_dicts()
    configs = {e[0]: e[4] for e in chosen}
    config = configs[ids[0]]
    versions = {**config.get("stack_versions", {}), **{r["stack"]: r["browser_version"] for r in summary
                                                        if r["browser_version"]}}
    sets = {browser: {"name": name, "parameters": ParamSet.from_mapping(
                json.loads(next((r["requested_client"] for r in summary if r["set_name"] == name), "{}") or "{}"))}
            for browser, name in config["sets"].items()}
    loads = [configs[i].get(key) for i in ids for key in ("load_1min", "load_1min_end")]
    out = FidelityCampaign(campaign, config.get("mode", "full"), results, chosen[0][2],
                           chosen[-1][3] if all(e[3] for e in chosen) else None,
                           tuple(v for v in loads if v is not None), versions, sets, summary,
                           {b: sorted({f for r in summary if r["stack"] == b for f in r["fingerprints"] or []})
                            for b in sets}, captured=bool(captured))
    for browser, info in sets.items():
        real = {(r["experiment_id"], r["delay_ms"], r["loss_pct"]): r for r in out.real(browser)}
        for row in summary:
            base = real.get((row["experiment_id"], row["delay_ms"], row["loss_pct"]))
            if row["set_name"] == info["name"] and base:
                out.comparisons.append(Comparison(browser, base, row, statistics.ratio_of_means(row, base)))
    return out


# --- what the campaign says -------------------------------------------------------------------------------

def link_text(link: tuple[float, float]) -> str:
    delay, loss = link
    return f"{delay:g} ms" + (f", {loss:g}% loss" if loss else "")


def ratio_text(ratio: dict) -> str:
    """``0.84 (0.71-0.97)``: the ratio and its 95% interval, where there is one."""
    if ratio["ratio"] is None:
        return "-"
    interval = "" if ratio["ratio_ci95_low"] is None else \
        f" ({ratio['ratio_ci95_low']:.2f}-{ratio['ratio_ci95_high']:.2f})"
    return f"{ratio['ratio']:.2f}{interval}"


def goodput_text(row: dict) -> str:
    if not row["n"]:
        return f"failed ({row['runs']})"
    sd = f" ({row['stddev_mbps']:.0f})" if row["stddev_mbps"] is not None else ""
    return f"{row['mean_mbps']:.0f}{sd}" + (f", {row['failed']} failed" if row["failed"] else "")


def closest(campaign: FidelityCampaign, browser: str) -> list[tuple[tuple[str, str], float]]:
    """(stack, mode) and the geometric mean of how far its ratios lie from 1 (exp of the mean |ln ratio|,
    1.0 = the browser's goodput everywhere), nearest first; only those with a ratio at every link."""
    links = {link for link in campaign.links if any(r["n"] and (r["delay_ms"], r["loss_pct"]) == link
                                                    for r in campaign.real(browser))}
    distances: dict[tuple[str, str], list[float]] = {}
    for c in campaign.replays(browser):
        if c.ratio["ratio"]:
            distances.setdefault(c.key, []).append(abs(math.log(c.ratio["ratio"])))
    ranked = [(key, math.exp(sum(d) / len(d))) for key, d in distances.items() if len(d) == len(links)]
    return sorted(ranked, key=lambda item: item[1])


def _by_key(campaign: FidelityCampaign, browser: str) -> dict[tuple[str, str], dict[tuple[float, float], Comparison]]:
    table: dict[tuple[str, str], dict] = {}
    for c in campaign.replays(browser):
        table.setdefault(c.key, {})[c.link] = c
    order = [key for key, _ in closest(campaign, browser)]
    return dict(sorted(table.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])))


def ratio_rows(campaign: FidelityCampaign, browser: str) -> list[list[str]]:
    """Per replay stack and mode (nearest first): the ratio at each link."""
    return [[stack, mode, *(ratio_text(cells[link].ratio) if link in cells else "-" for link in campaign.links)]
            for (stack, mode), cells in _by_key(campaign, browser).items()]


def goodput_rows(campaign: FidelityCampaign, browser: str) -> list[list[str]]:
    real = {(r["delay_ms"], r["loss_pct"]): r for r in campaign.real(browser)}
    rows = [[f"{browser} (the browser)", "as built", *(goodput_text(real[link]) if link in real else "-"
                                                       for link in campaign.links)]]
    return rows + [[stack, mode, *(goodput_text(cells[link].replayed) if link in cells else "-"
                                   for link in campaign.links)]
                   for (stack, mode), cells in _by_key(campaign, browser).items()]


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _acks(rows: list[dict]) -> float | None:
    """Packets the client sent per 100 the server sent (its ACKs, updates and requests), over the links."""
    return _mean([100 * r["mean_client_tx_packets"] / r["mean_server_tx_packets"] for r in rows
                  if r["mean_client_tx_packets"] and r["mean_server_tx_packets"]])


def why_rows(campaign: FidelityCampaign, browser: str) -> list[list[str]]:
    """What the campaign stored about each side: its server, what of the set it applied, its client's CPU at the
    smallest delay, its ACKs, and the window model's reach at the largest delay with its update rule."""
    rules = load_update_rules()
    sent = campaign.sets[browser]["parameters"].as_sent()
    fastest = min(delay for delay, loss in campaign.links if not loss) if campaign.links else 0.0
    slowest = max(delay for delay, loss in campaign.links if not loss) if campaign.links else 0.0

    def row(name: str, mode: str, rows: list[dict], applied: str, rule_stack: str) -> list[str]:
        at = {(r["delay_ms"], r["loss_pct"]): r for r in rows}
        cpu = (at.get((fastest, 0.0)) or {}).get("client_cpu_s")
        bound = client_window_bound(sent, slowest, rule_stack, rows[0]["size_bytes"], rules) if slowest else None
        measured = (at.get((slowest, 0.0)) or {}).get("mean_mbps")
        rule = rules.get(rule_stack)
        drops = _mean([r["client_socket_drop_pct"] for r in rows if not r["loss_pct"]])
        return [name, mode, rows[0]["server_stack"], applied, "-" if cpu is None else f"{cpu:.2f}",
                "-" if drops is None else f"{drops:.2f}%", "-" if _acks(rows) is None else f"{_acks(rows):.1f}",
                "-" if rule is None else f"{rule.consumed_fraction:.2f}",
                "-" if bound is None else f"{bound.text()} (measured {measured:.0f})" if measured else bound.text()]

    out = [row(browser, "as built", campaign.real(browser), "its own", browser)]
    for (stack, mode), cells in _by_key(campaign, browser).items():
        rows = [c.replayed for c in cells.values()]
        missing = json.loads(rows[0]["not_applied_client"] or "{}")
        applied = "all" if not missing else "not " + ", ".join(sorted(missing))
        out.append(row(stack, mode, rows, applied, stack))
    return out


WHY_HEADER = ["client", "mode", "server", "set applied", "client CPU s a run (smallest delay)",
              "client socket drops (mean over the delays)", "client packets per 100 server packets", "stream-window update share f (rules.csv, 30 ms)",
              "window model at the largest delay, Mbit/s"]


def browser_rules(path: Path = RULES_CSV, browsers: tuple[str, ...] = BROWSERS) -> list[dict]:
    """The browsers' measured window rules (datasets/flowcontrol/rules.csv), each delay a row."""
    import csv

    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f) if row["stack"] in browsers]


def thesis_rows(campaign: FidelityCampaign) -> list[list[str]]:
    """The thesis's finding (Firefox's set ahead of Chrome's by ~170 Mbit/s at >= 20 ms) on the real browsers,
    one row per link: the difference of their means with its interval, and the verdict."""
    if not {"chromium", "firefox"} <= set(campaign.sets):
        return []
    published = next((r["goodput_mbit_s"] for r in read_headlines(HEADLINES_CSV) if r["experiment"] == "client_sets"),
                     "+170")
    real = {b: {(r["delay_ms"], r["loss_pct"]): r for r in campaign.real(b)} for b in ("chromium", "firefox")}
    rows = []
    for link in campaign.links:
        if link[1] or link[0] < THESIS_FROM_MS or link not in real["chromium"] or link not in real["firefox"]:
            continue
        firefox, chromium = real["firefox"][link], real["chromium"][link]
        diff = statistics.difference_of_means(firefox, chromium)
        if diff["difference"] is None:
            continue
        low, high = diff["difference_ci95_low"], diff["difference_ci95_high"]
        thesis = float(published)
        if low is None:
            verdict = "not resolved (fewer than two runs a side)"
        elif low > thesis:
            verdict = "holds: Firefox ahead, by more than the thesis's"
        elif low > 0:
            verdict = "holds: Firefox ahead" + (f", by less than the thesis's {thesis:+g}" if high < thesis else
                                                ", as far as in the thesis")
        else:
            verdict = "does not hold: Chromium ahead" if high < 0 else "does not hold: no difference beyond the noise"
        interval = "" if low is None else f" ({low:+.0f} to {high:+.0f})"
        rows.append([link_text(link), goodput_text(firefox), goodput_text(chromium),
                     f"{diff['difference']:+.0f}{interval}", ratio_text(statistics.ratio_of_means(firefox, chromium)),
                     published, verdict])
    return rows


THESIS_HEADER = ["link", "Firefox (Mbit/s, sd)", "Chromium", "Firefox - Chromium (95% CI)", "Firefox / Chromium",
                 "thesis (figure 5.3a)", "verdict"]


# --- the figure and the report ------------------------------------------------------------------------------

@dataclass(frozen=True)
class FidelityReport:
    markdown: Path
    html: Path
    figure: Path


def draw_fidelity(campaign: FidelityCampaign, path: Path) -> Path:
    """Per browser, three panels: goodput against delay of the browser and of its set on each replay stack and
    mode (a band of one standard deviation; log scale), the ratios replayed / real against delay with their 95%
    intervals, and the ratios at the lossy link. Every combination of conditions that differs is a series of
    its own (replay.statistics.series); a series' colour is its client and mode, its marker the link (hollow
    squares: 0 ms over a plain veth pair, where auto has nothing to emulate)."""
    import polars as pl
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    plt = pyplot()
    browsers = campaign.browsers
    fig, axes = plt.subplots(len(browsers), 3, figsize=(19, 6 * len(browsers)), squeeze=False,
                             gridspec_kw={"width_ratios": [5, 5, 3]})
    palette = plt.get_cmap("tab20").colors
    colours: dict[tuple[str, str], tuple] = {}

    def look(row: dict, browser: str) -> dict:
        if row["stack"] == browser:
            return {"color": "black", "linewidth": 3}
        colour = colours.setdefault((row["stack"], mode_name(row["autotune"])), palette[len(colours) % len(palette)])
        return {"color": colour, "linewidth": 1.2}

    def label(row: dict, browser: str) -> str:
        who = f"{browser} itself" if row["stack"] == browser else f"{row['stack']}, {mode_name(row['autotune'])}"
        return who if row["link_backend"] == "relay" else "_nolegend_"

    def marker(row: dict) -> dict:
        return {"marker": "o"} if row["link_backend"] == "relay" else {"marker": "s", "fillstyle": "none",
                                                                           "markersize": 8}

    for (left, middle, right), browser in zip(axes, browsers):
        rows = [r for r in campaign.summary if r["n"] and (r["stack"] == browser
                                                           or r["set_name"] == campaign.sets[browser]["name"])]
        plain = pl.DataFrame([r for r in rows if not r["loss_pct"]], infer_schema_length=None)
        for _, part in statistics.series(plain, "delay_ms") if plain.height else []:
            first = part.row(0, named=True)
            x, mean = part["delay_ms"].to_list(), part["mean_mbps"].to_list()
            sd = [v or 0.0 for v in part["stddev_mbps"].to_list()]
            left.plot(x, mean, label=label(first, browser), **look(first, browser), **marker(first))
            left.fill_between(x, [max(m - d, 1.0) for m, d in zip(mean, sd)], [m + d for m, d in zip(mean, sd)],
                              alpha=0.15, color=look(first, browser)["color"])
        left.set_yscale("log")
        left.set(xlabel="added one-way delay, server to client (ms)", ylabel="goodput (Mbit/s, log)",
                 title=f"{browser} {campaign.versions.get(browser, '')} and its set replayed")
        left.legend(fontsize=7, ncol=2, loc="lower left")
        ratios = [{**{k: c.replayed[k] for k in (*statistics.conditions(), "experiment_id") if k in c.replayed},
                   **c.ratio} for c in campaign.replays(browser) if c.ratio["ratio"] is not None]
        frame = pl.DataFrame([r for r in ratios if not r["loss_pct"]], infer_schema_length=None) if ratios else None
        for _, part in statistics.series(frame, "delay_ms") if frame is not None and frame.height else []:
            first = part.row(0, named=True)
            y = part["ratio"].to_list()
            low = [r - (lo if lo is not None else r) for r, lo in zip(y, part["ratio_ci95_low"].to_list())]
            high = [(hi if hi is not None else r) - r for r, hi in zip(y, part["ratio_ci95_high"].to_list())]
            middle.errorbar(part["delay_ms"].to_list(), y, yerr=[low, high], capsize=3,
                            **look(first, browser), **marker(first))
        lossy = sorted((r for r in ratios if r["loss_pct"]), key=lambda r: r["ratio"])
        for i, r in enumerate(lossy):
            err = [[r["ratio"] - (r["ratio_ci95_low"] or r["ratio"])],
                   [(r["ratio_ci95_high"] or r["ratio"]) - r["ratio"]]]
            right.errorbar([r["ratio"]], [i], xerr=err, capsize=3, marker="o", color=look(r, browser)["color"])
        right.set_yticks(range(len(lossy)), [f"{r['stack']}, {mode_name(r['autotune'])}" for r in lossy], fontsize=7)
        if lossy:
            right.set_title(f"ratio at {link_text((lossy[0]['delay_ms'], lossy[0]['loss_pct']))}")
            right.set_xscale("log")
        else:  # said, so that an empty panel does not read as runs that failed
            right.text(0.5, 0.5, f"no run with loss in this campaign\n(the full one adds {LOSS_PCT:g}% loss at "
                       f"{LOSS_DELAY_MS:g} ms)", ha="center", va="center", fontsize=9, transform=right.transAxes)
        middle.axhline(1.0, color="black", linewidth=1)
        right.axvline(1.0, color="black", linewidth=1)
        middle.set_yscale("log")
        for axis in (middle.yaxis, right.xaxis):
            axis.set_major_locator(FixedLocator([0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20]))
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_locator(NullLocator())
        middle.set(xlabel="added one-way delay, server to client (ms)", ylabel=f"replayed / {browser} (ratio of means)",
                   title="ratio with its 95% interval (delta method)")
        for ax in (left, middle, right):
            ax.grid(alpha=0.3)
    fig.text(0.01, 0.005, "hollow squares: 0 ms over a plain veth pair; dots: through linkem. Servers: ngtcp2's for "
             "the browser and ngtcp2's client, each stack's own otherwise.", fontsize=8)
    return save_png(fig, path)


def report_markdown(campaign: FidelityCampaign, figure: Path) -> str:
    loads = f"{min(campaign.loads):g} to {max(campaign.loads):g}" if campaign.loads else "not recorded"
    sample = campaign.summary[0] if campaign.summary else {}
    stacks = sorted({r["stack"] for r in campaign.summary if r["stack"] not in campaign.sets})
    when = f"{campaign.started_at:%Y-%m-%d %H:%M}" + (f" to {campaign.finished_at:%H:%M}" if campaign.finished_at else
                                                      " (not finished)")
    parts = [
        "# Do replayed browser sets behave like the browsers?", "",
        f"Campaign `{campaign.campaign}` ({campaign.mode}), `{campaign.results}`, {when}; the machine's 1-minute load "
        f"{loads} (at the start and end of each part). Downloads of "
        + " and ".join(sorted({f"{r['size_bytes'] / 1e6:g} MB" for r in campaign.summary})) + ", "
        f"{max((r['runs'] for r in campaign.summary), default=0)} runs a condition, interleaved; link "
        + ", ".join(f"{backend} at {', '.join(link_text(link) for link in links)}"
                    for backend, links in _backends(campaign).items())
        + f" (delay on the server-to-client direction); UDP buffers "
        f"{(sample.get('udp_buffer_bytes') or 0) // 1024} KiB.", "",
        "Clients: " + ", ".join(f"{name} {campaign.versions.get(name, '')}".strip()
                                for name in [*campaign.browsers, *stacks]) + ". "
        "Servers: the browsers and ngtcp2's client download from ngtcp2's server (gtlsserver, HTTP/3); every other "
        "replay stack speaks hq-interop, which gtlsserver does not, so its own server stands in.", "",
        "## The sets the browsers sent", "",
        "Each browser loaded the page once before the comparison; its ClientHello's parameters are the set its "
        "replays ran." if campaign.captured else
        "The replays ran the set the replay campaign file named for each browser (a `fidelity = true` experiment: "
        "every host plans the same runs before any runs, so no browser gave its set first); below, whether the "
        "browser's own runs sent it.", "",
        markdown_table(["parameter", *campaign.browsers],
                       [[name, *(_sent(campaign.sets[b]["parameters"].as_sent()[name]) for b in campaign.browsers)]
                        for name in campaign.sets[campaign.browsers[0]]["parameters"].as_sent()]), "",
    ]
    for browser in campaign.browsers:
        sent = campaign.sets[browser]["parameters"].fingerprint()
        others = [f for f in campaign.set_fingerprints[browser] if f != sent]
        parts.append(f"- {browser}: " + ("every run of the comparison sent this set." if not others else
                                         f"runs sent {len(others)} other set(s) too ({', '.join(others)})."))
    parts += ["", "## Ratio replayed / real", "",
              "Mean goodput of the set replayed over the browser's mean under the same link; in brackets the 95% "
              "interval of the ratio of means, its standard error propagated from both means' by the delta "
              "method (Student's t of the smaller sample). Stacks nearest the browser first.", ""]
    header = ["stack", "mode", *(link_text(link) for link in campaign.links)]
    for browser in campaign.browsers:
        ranked = closest(campaign, browser)
        parts += [f"### {browser}", "", markdown_table(header, ratio_rows(campaign, browser)), ""]
        if ranked:
            (stack, mode), distance = ranked[0]
            parts.append(f"Closest: **{stack}, {mode}**, its ratios {distance:.2f}x from 1 on geometric average "
                         f"over the links" + (f"; next {ranked[1][0][0]}, {ranked[1][0][1]} ({ranked[1][1]:.2f}x)."
                                              if len(ranked) > 1 else "."))
            parts.append("")
    parts += ["## Goodput", "", "Mean Mbit/s (sd) of the successful runs.", ""]
    for browser in campaign.browsers:
        parts += [f"### {browser}", "", markdown_table(["client", "mode", *header[2:]],
                                                       goodput_rows(campaign, browser)), ""]
    parts += ["## Why they differ", "",
              "What this campaign stored about each client: its server; which of the browser's parameters its "
              "command line could not set; its CPU seconds a run at the smallest delay (a browser's whole "
              "process tree, its start and the page load included); the datagrams its full socket buffer "
              "dropped (the sender takes them for congestion); packets it sent per 100 the server sent "
              "(ACKs mostly: ACK frequency); its receiver's measured update share f and the window model's "
              "goodput at the largest delay for the browser's windows with that f (replay/flowcontrol.py; "
              "burst bound to a whole window a round trip).", ""]
    for browser in campaign.browsers:
        parts += [f"### {browser}", "", markdown_table(WHY_HEADER, why_rows(campaign, browser)), ""]
    measured = browser_rules(browsers=tuple(campaign.browsers))
    if measured:
        parts += ["The browsers' own windows, traced (`datasets/flowcontrol/rules.csv`, "
                  "`scripts/flowcontrol_rules.py`): the credit each update granted as a share of the window, "
                  "updates per round trip, and whether the window grew.", "",
                  markdown_table(["browser", "version", "window", "delay ms", "initial", "updates", "share f",
                                  "updates per RTT", "ceiling", "growth", "date"],
                                 [[r["stack"], r["stack_version"], r["which"], f"{float(r['delay_ms']):g}",
                                   f"{int(r['window']):,}", r["n_updates"], _num(r["fraction_median"]),
                                   _num(r["updates_per_rtt"]), f"{int(float(r['window_ceiling'] or 0)):,}",
                                   _num(r["growth_factor"]), r["date"]] for r in measured]), ""]
    thesis = thesis_rows(campaign)
    parts += ["## The thesis's browser finding on the real browsers", "",
              "The thesis: Firefox's set ~170 Mbit/s ahead of Chrome's at 20 ms and more (figure 5.3a: Firefox and "
              "Chrome 109's sets on LSQUIC). Here the browsers themselves, each its own set and stack, against the "
              "same server:", "",
              markdown_table(THESIS_HEADER, thesis) if thesis else
              "Not tested: the campaign needs both browsers at 20 ms or more.", "",
              "## Figure", "", f"![fidelity]({figure.name})", ""]
    return "\n".join(parts)


def _backends(campaign: FidelityCampaign) -> dict[str, list[tuple[float, float]]]:
    """The link backend of each link (auto takes a plain veth pair where nothing is emulated)."""
    found: dict[str, list[tuple[float, float]]] = {}
    for link in campaign.links:
        backend = next(r["link_backend"] for r in campaign.summary if (r["delay_ms"], r["loss_pct"]) == link)
        found.setdefault(backend, []).append(link)
    return found


def _sent(value) -> str:
    return "not sent" if value is None else f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) \
        else str(value)


def _num(text: str) -> str:
    return f"{float(text):.2f}" if text else "-"


def write_fidelity_report(results: str | Path, out_dir: str | Path, campaign: str | None = None) -> FidelityReport:
    """fidelity.md, fidelity.html (self-contained) and fidelity.png of a campaign."""
    data = load_fidelity(results, campaign)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figure = draw_fidelity(data, out / "fidelity.png")
    markdown = report_markdown(data, figure)
    md_path, html_path = out / "fidelity.md", out / "fidelity.html"
    md_path.write_text(markdown)
    html_path.write_text(markdown_page("qreplay fidelity", markdown, [("fidelity", figure)]))
    return FidelityReport(md_path, html_path, figure)
