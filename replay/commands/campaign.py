"""`qreplay campaign`: experiments written down in one file, planned into runs, run shard by shard on many hosts."""

from __future__ import annotations

import json
import math
from collections import Counter
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from common.cliapp import add_group, output_dir, output_file
from common.terminal import cli_console
if TYPE_CHECKING:  # an annotation only: the campaign module imports DuckDB and the runner, --help needs neither
    from replay import campaign

FileArg = Annotated[Path, typer.Argument(help="The campaign file (TOML: `campaign = NAME` and [[experiment]] "
                                              "tables of the replay options, docs/scale.md).")]


def slurm_script(plan: campaign.Plan, file: str, directory: str, hosts: int, projected_s: float | None) -> str:
    """The array job: task I runs shard I of ``hosts`` (a requeued task resumes its shard)."""
    from replay import campaign
    from common.slurm import array_job
    command = shlex.join(campaign.host_argv(file, "SHARD", hosts, directory, qreplay="QREPLAY"))
    command = command.replace("SHARD/", '"${SLURM_ARRAY_TASK_ID}"/').replace("QREPLAY", '"${QREPLAY:-qreplay}"', 1)
    minutes = math.ceil(projected_s * 2 / 60) if projected_s else 24 * 60  # twice the projection
    return array_job(f"qreplay-{plan.name}", hosts, minutes, command,
                     f"qreplay campaign {plan.name} ({plan.digest}): {len(plan.runs)} runs on {hosts} hosts, one "
                     "shard a node, one run at a time (qreplay campaign plan)", exclusive=True)


def register(app: typer.Typer) -> None:
    group = add_group(app, "campaign", "Campaigns: experiments in one file, their runs shared out over many hosts "
                      "(one shard each), merged into one results file.", "qreplay campaign plan seeds.toml --hosts 8")

    @group.command("plan", epilog="Example: qreplay campaign plan seeds.toml --hosts 8 --measured earlier.duckdb "
                                  "--slurm seeds.sbatch")
    def plan_command(
        file: FileArg,
        hosts: Annotated[int, typer.Option("--hosts", min=1, help="Hosts (shards) to share the runs out to.")] = 1,
        measured: Annotated[Optional[list[Path]], typer.Option(
            "--measured", help="Results files or campaign directories whose stored run times the projection uses, "
            "or those times saved as JSON (datasets/campaign/seeds-measured.json) (repeatable). Default: the "
            "campaign file's `measured`, the run times its runs are dealt to hosts by.")] = None,
        out: Annotated[str, typer.Option("--out", help="The campaign directory the hosts write into.")] = "campaign",
        slurm: Annotated[Optional[Path], typer.Option("--slurm", callback=output_file,
                                                      help="Write a Slurm array job here: one task a host.")] = None,
        runs: Annotated[bool, typer.Option("--runs", help="List every run: plan index, run id, shard, "
                                                          "condition (JSON lines).")] = False,
        json_output: Annotated[bool, typer.Option("--json", help="Print the projection as JSON.")] = False,
    ) -> None:
        """Expand a campaign file into its runs (every stack, set and knob checked first), in the order each host
        runs its share, and project the wall time on --hosts from measured run times."""
        from replay import campaign
        plan = campaign.load(file)
        needed = campaign.needs(plan)
        projection = None
        measured = measured or ([plan.measured] if plan.measured else None)  # by default what the file deals by
        if measured:
            projection = campaign.project(plan, hosts, *campaign.measured_durations(measured))
        if runs:
            dealt = plan.deal(hosts)
            for run in plan.runs:
                experiment = plan.experiments[run.experiment]
                typer.echo(json.dumps({"index": run.index, "run_id": run.run_id, "shard": dealt[run.index],
                                       "rep": run.rep, **campaign.planned_values(plan, run),
                                       "set": run.condition.client.name,
                                       "server_set": run.condition.server and run.condition.server.name,
                                       **({"sweep_param": run.condition.sweep_param,
                                           "sweep_value": run.condition.sweep_value}
                                          if run.condition.sweep_param else {}),
                                       "knobs": dict(run.condition.knobs),
                                       **({"server_host": experiment.server_host,
                                           "launcher": experiment.launcher.describe()}
                                          if experiment.server_host else {})},
                                      default=str))
        elif json_output:
            typer.echo(json.dumps({"campaign": plan.name, "plan": plan.digest, "runs": len(plan.runs),
                                   "needs": {name: {"why": why, "runs": n} for name, (why, n) in needed.items()},
                                   **({"projection": asdict(projection) | {"wall_seconds": projection.wall_seconds}}
                                      if projection else {})}))
        elif projection:
            for line in [*campaign.projection_lines(plan, projection, str(file), out), *campaign.needs_lines(needed)]:
                typer.echo(line)
        else:
            typer.echo(f"campaign {plan.name} ({plan.digest}): {len(plan.experiments)} experiments, "
                       f"{len(plan.runs):,} runs, at most {max(Counter(plan.deal(hosts)).values()):,} a host on "
                       f"{hosts}; "
                       "give --measured for the time it takes")
            for line in campaign.needs_lines(needed):
                typer.echo(line)
        if slurm is not None:
            slurm.write_text(slurm_script(plan, str(file), out, hosts, projection and projection.wall_seconds))
            cli_console(stderr=True).print(f"wrote {slurm}: sbatch {slurm}")

    @group.command("run", epilog="Example: qreplay campaign run seeds.toml --shard 3/8 --out seeds/")
    def run_command(
        file: FileArg,
        shard: Annotated[str, typer.Option("--shard", help="I/N: run the I-th of N hosts' shares (0-based).")],
        out: Annotated[Path, typer.Option("--out", callback=output_dir,
                                          help="The campaign directory (Parquet partitions, one a shard).")],
        quiet: Annotated[bool, typer.Option("--quiet", help="No line a run.")] = False,
    ) -> None:
        """Run (or resume: stored runs are skipped by their plan id) one host's share of a campaign, then export
        it as its partition of the campaign directory. Prints the shard's summary as JSON."""
        from replay import campaign
        from scanner.discovery.plan import parse_shard  # qscan's: one spelling of I/N for both campaigns
        index, shards = parse_shard(shard)
        plan = campaign.load(file)
        console = cli_console(stderr=True)

        def said(row: dict) -> None:
            if not quiet:
                goodput = f"{row['goodput_mbps']:.1f} Mbit/s" if row.get("goodput_mbps") else row.get("error") or ""
                console.print(f"{row['run_id']} {row['stack']} {row['set_name']} delay {row['delay_ms']:g} ms rep "
                              f"{row['rep']}: {row['status']} {goodput}"[:160], soft_wrap=True)

        typer.echo(json.dumps(asdict(campaign.run_shard(plan, index, shards, out, said,
                                                        startup_seconds=campaign.process_age()))))

    @group.command("merge", epilog="Example: qreplay campaign merge seeds/ --out seeds.duckdb")
    def merge_command(
        directory: Annotated[Path, typer.Argument(help="The campaign directory.")],
        out: Annotated[Path, typer.Option("--out", callback=output_file, help="The results file to write (new).")],
        partial: Annotated[bool, typer.Option("--partial", help="Merge even if runs the plan lists are missing.")]
        = False,
    ) -> None:
        """Every shard's runs as one results file, which plot and the replay notebook read as if one host had run
        the campaign, and `qreplay fidelity --report-only --out FILE` where an experiment was `fidelity = true`."""
        from replay import campaign
        result = campaign.merge(directory, out, partial)
        typer.echo(f"merged {result.runs:,} runs of {result.shards} shards into {out} in {result.seconds:.1f} s"
                   + (f" ({result.missing:,} planned runs missing)" if result.missing else ""))
