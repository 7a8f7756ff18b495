"""docs/scale.md's plan for the seeds' figures at the full grid: every figure `qreplay reproduce` runs, on every
replay stack measured here, at issue 36's full grid of conditions (replay.reproduce.full_grid_plan), projected on
1, 8 and 64 hosts by the replay campaign planner (replay.campaign.project) from the run times this machine
measured, datasets/campaign/seeds-measured.json (``bench/bench_campaign.py --replay``'s probe of
datasets/campaign/seeds-probe.toml, saved with when and at what load it ran). docs_build/committed.py writes the
tables into the page between their markers, and a test fails while they are stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "datasets" / "campaign" / "seeds-measured.json"
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


def table(measured: Path = MEASURED) -> str:
    from replay import campaign
    from replay.reproduce import (
        FULL_GRID_CCS, FULL_GRID_DELAYS_MS, FULL_GRID_LOSSES_PCT, FULL_GRID_REPS, full_grid_plan, plan_campaign,
    )
    from replay.stacks import get_stack

    saved = json.loads(measured.read_text())
    runs, setups, fixed = saved["runs"], saved["setups"], saved["fixed"]
    stacks = measured_stacks(runs)
    whole = full_grid_plan([get_stack(name) for name in stacks])

    def part(name: str, keep) -> campaign.Plan:
        experiments = [e for e in whole.experiments if keep(e)]
        return campaign.plan_of(name, experiments)

    def projected(plan_: campaign.Plan) -> list[str]:
        return [span(campaign.project(plan_, hosts, runs, setups, fixed).wall_seconds) for hosts in HOSTS]

    hosts_header = [f"on {hosts} host{'s' if hosts > 1 else ''}" for hosts in HOSTS]
    figure_rows = []
    for plan in plan_campaign():
        figure = part(plan.figure, lambda e: e.tags["figure"] == plan.figure)
        ran = sorted({e.tags["stack"] for e in figure.experiments})
        figure_rows.append([plan.figure, own_grid(plan), f"all {len(ran)}" if ran == stacks else ", ".join(ran),
                            f"{len(figure.runs):,}",
                            *projected(figure)])
    total = campaign.project(whole, 1, runs, setups, fixed)
    everything = ["every figure", "", f"all {len(stacks)}", f"{len(whole.runs):,}", *projected(whole)]
    stack_rows = []
    for name in stacks:
        mine = part(name, lambda e: e.tags["stack"] == name)
        figures = sorted({e.tags["figure"] for e in mine.experiments}, key=[p.figure for p in plan_campaign()].index)
        stack_rows.append([name, ", ".join(figures), f"{len(mine.runs):,}", *projected(mine)])
    provenance = saved["provenance"]
    grid = (f"{len(FULL_GRID_DELAYS_MS)} delays ({', '.join(f'{d:g}' for d in FULL_GRID_DELAYS_MS)} ms) x "
            f"{len(FULL_GRID_LOSSES_PCT)} loss rates ({', '.join(f'{x:g}' for x in FULL_GRID_LOSSES_PCT)}%) x "
            f"{len(FULL_GRID_CCS)} congestion controls ({', '.join(FULL_GRID_CCS)}) x {FULL_GRID_REPS} repetitions")
    loads = total.measured_load
    return "\n\n".join([
        f"Each figure's series at the full grid: {grid}, at the figure's own size and workload "
        "(`replay.reproduce.full_grid_plan`); its own grid in `qreplay reproduce` beside it.",
        markdown_table(["figure", "its own grid (series x links, size, reps)", "stacks that run it",
                        "runs at the full grid", *hosts_header], [*figure_rows, everything]),
        "By stack (a server-side twin counted with its server's stack):",
        markdown_table(["stack", "figures", "runs", *hosts_header], stack_rows),
        f"Estimated from {total.measured_runs:,} runs measured {provenance['date']} on {provenance['machine']} "
        f"(`{provenance['command']}`, {provenance['what']}; load "
        + (f"{loads[0]:.1f}-{loads[1]:.1f}" if loads else "not recorded") + "): "
        + ", ".join(f"{n:,} runs by {level}" for level, n in total.matched.items())
        + f"; {total.setup_seconds:.1f} s set-up and teardown an experiment a host, {total.fixed_seconds:.1f} s "
        "a host's own.",
    ])


if __name__ == "__main__":
    print(table())
