"""docs/scale.md's plan for the seeds' figures at the full grid: the campaign file datasets/campaign/full-grid.toml
(every figure `qreplay reproduce` runs, on every replay stack that can run it, at issue 36's full grid of
conditions), planned by `qreplay campaign plan`'s own planner (replay.campaign.load) and projected on 1, 8 and 64
hosts (replay.campaign.project) from the run times this machine measured, datasets/campaign/seeds-measured.json
(``bench/bench_campaign.py --replay``'s probe of datasets/campaign/seeds-probe.toml, saved with when and at what
load it ran). A stack with no measured run (LSQUIC, which needs its own build) is counted apart, its runs listed
as needing it. docs_build/committed.py writes the tables into the page between their markers, and a test fails
while they are stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "datasets" / "campaign" / "seeds-measured.json"
FULL_GRID = ROOT / "datasets" / "campaign" / "full-grid.toml"
PAGE = "scale.md"
SECTION = "the seeds' figures at the full grid"
HOSTS = (1, 8, 64)


def span(seconds: float) -> str:
    """A projected span to the precision it has: days and hours, hours and minutes, or minutes and seconds."""
    from scanner.discovery.plan import duration

    unit = 3600 if seconds >= 86400 else 60 if seconds >= 3600 else 1
    return duration(round(seconds / unit) * unit)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:g} MB" if size >= 1e6 else f"{size:,} B"


def own_grid(plan) -> str:
    """A figure's grid as `qreplay reproduce` runs it (its full campaign): series, links, size, repetitions."""
    delays = sorted({c.link.delay_down_ms for c in plan.conditions})
    losses = sorted({c.link.loss_pct for c in plan.conditions})
    series = len({(c.client.name, c.server and c.server.name, c.sweep_value, c.stack and c.stack.name)
                  for c in plan.conditions})
    link = (f"{delays[0]:g}-{delays[-1]:g} ms" if len(delays) > 1 else f"{delays[0]:g} ms") + (
        f", loss {losses[0]:g}-{losses[-1]:g}%" if len(losses) > 1 else f", loss {losses[0]:g}%" if losses[0] else "")
    moved = (f"{plan.requests:,} requests of {_megabytes(plan.size)}" if plan.requests > 1
             else f"{_megabytes(plan.size)} {plan.workload.name}")
    return f"{series} x {link}, {moved}, {plan.reps} reps"


def measured_stacks(runs: list[dict]) -> list[str]:
    """The replay stacks of the measured runs (a twin's server among them): the stacks that run here."""
    from replay.stacks import all_stacks

    return sorted({run[column] for run in runs for column in ("stack", "server_stack")} & set(all_stacks()))


def figure_of(plan, run) -> str:
    """A run's figure: its experiment's name in the campaign file."""
    return plan.experiments[run.experiment].tags["campaign_experiment"]


def stack_of(plan, run) -> str:
    """The stack whose row a run is in: its client's, or its server's where the client is a browser (a twin)."""
    client, server = plan.experiments[run.experiment].stacks(run.condition)
    return server.name if client.own_parameters else client.name


def grid_of(plan) -> str:
    """The campaign's grid in words, read from its plan: delays, loss rates, congestion controls, repetitions."""
    conditions = [c for e in plan.experiments for c in e.conditions]
    delays = sorted({c.link.delay_down_ms for c in conditions})
    losses = sorted({c.link.loss_pct for c in conditions})
    ccs = list(dict.fromkeys(c.knobs["cc"] for c in conditions if "cc" in c.knobs))
    reps = sorted({e.reps for e in plan.experiments})
    return (f"{len(delays)} delays ({', '.join(f'{d:g}' for d in delays)} ms) x {len(losses)} loss rates "
            f"({', '.join(f'{x:g}' for x in losses)}%) x {len(ccs)} congestion controls ({', '.join(ccs)}) x "
            f"{'-'.join(map(str, reps))} repetitions")


def table(measured: Path = MEASURED, file: Path = FULL_GRID) -> str:
    from replay import campaign
    from replay.reproduce import plan_campaign

    saved = json.loads(measured.read_text())
    runs, setups, fixed = saved["runs"], saved["setups"], saved["fixed"]
    stacks = measured_stacks(runs)
    whole = campaign.load(file)
    measured_part = whole.part(lambda run: stack_of(whole, run) in stacks)

    def projected(plan_: campaign.Plan) -> list[str]:
        return [span(campaign.project(plan_, hosts, runs, setups, fixed).wall_seconds) for hosts in HOSTS]

    hosts_header = [f"on {hosts} host{'s' if hosts > 1 else ''}" for hosts in HOSTS]
    figures = [plan.figure for plan in plan_campaign()]
    figure_rows = []
    for plan in plan_campaign():
        figure = measured_part.part(lambda run: figure_of(whole, run) == plan.figure)
        ran = sorted({stack_of(whole, run) for run in figure.runs})
        figure_rows.append([plan.figure, own_grid(plan), f"all {len(ran)}" if ran == stacks else ", ".join(ran),
                            f"{len(figure.runs):,}", *projected(figure)])
    total = campaign.project(measured_part, 1, runs, setups, fixed)
    everything = ["every figure", "", f"all {len(stacks)}", f"{len(measured_part.runs):,}", *projected(measured_part)]
    stack_rows, apart = [], []
    for name in sorted({stack_of(whole, run) for run in whole.runs}):
        mine = whole.part(lambda run: stack_of(whole, run) == name)
        its = ", ".join(sorted({figure_of(whole, run) for run in mine.runs}, key=figures.index))
        if name in stacks:
            stack_rows.append([name, its, f"{len(mine.runs):,}", *projected(mine)])
            continue
        needed = campaign.needs(whole, mine.runs).get(name)
        stack_rows.append([f"{name} (not measured here)", its, f"{len(mine.runs):,}", *["-"] * len(HOSTS)])
        apart.append(f"{name}'s {len(mine.runs):,} runs" + (f" (not usable here: {needed[0]})" if needed else ""))
    provenance = saved["provenance"]
    loads = total.measured_load
    return "\n\n".join([
        f"Each figure's series at the full grid: {grid_of(whole)}, at the figure's own size and workload "
        f"(`{file.relative_to(ROOT)}`, {len(whole.runs):,} runs, planned by `qreplay campaign plan`); its own grid "
        "in `qreplay reproduce` beside it.",
        markdown_table(["figure", "its own grid (series x links, size, reps)", "stacks that run it",
                        "runs at the full grid", *hosts_header], [*figure_rows, everything]),
        "By stack (a server-side twin counted with its server's stack):",
        markdown_table(["stack", "figures", "runs", *hosts_header], stack_rows),
        f"Estimated from {total.measured_runs:,} runs measured {provenance['date']} on {provenance['machine']} "
        f"(`{provenance['command']}`, {provenance['what']}; load "
        + (f"{loads[0]:.1f}-{loads[1]:.1f}" if loads else "not recorded") + "): "
        + ", ".join(f"{n:,} runs by {level}" for level, n in total.matched.items())
        + f"; {total.setup_seconds:.1f} s set-up and teardown an experiment a host, {total.fixed_seconds:.1f} s "
        "a host's own."
        + (f" Not in the figures' rows nor their times: {'; '.join(apart)}, whose stack has no run time measured "
           "here; `qreplay campaign plan` lists them as needing it." if apart else ""),
    ])


if __name__ == "__main__":
    print(table())
