"""qscan campaign shard | run | plan: a census split across hosts, simulated on one machine, planned from measurement."""

from __future__ import annotations

import json
import secrets
import shlex
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from common.cliapp import add_group, output_dir, output_file
from tparams.errors import ToolError

from scanner.commands.options import HandshakeTimeout, JsonOutcome, Quiet, handshake_options

if TYPE_CHECKING:  # built by the shared options; --help needs no import of it
    from scanner.engine import ScanSettings

VANTAGE_HELP = "Where the campaign measures from (a plain name); shards of one vantage must not overlap."


def register(app: typer.Typer) -> None:
    group = add_group(app, "campaign", "Campaigns: the shards of one census on many hosts, into one Parquet "
                      "directory.", "qscan campaign plan --preset hitlist --hosts 4")

    @group.command("shard", epilog="Example: qscan campaign shard 198.18.64.0/18 --campaign lab --out camp "
                   "--shard 0/4 --seed 7")
    @handshake_options(rate=0.0)
    def shard_command(
        cidrs: list[str] = typer.Argument(None, help="IPv4 ranges of the whole campaign (the same on every host)."),
        allowlist: Path = typer.Option(None, help="Addresses or CIDRs to probe, one a line (a hitlist), added to the ranges."),
        yes: bool = typer.Option(False, "--yes", help="Targets outside the lab (the Internet): start without asking."),
        campaign: str = typer.Option(..., help="Campaign name (a plain name)."),
        out: Path = typer.Option(..., "--out", "-o", callback=output_dir,
                                 help="Campaign directory (local, or a shared mount)."),
        shard: str = typer.Option(..., help="This host's shard I/N."),
        seed: int = typer.Option(..., help="ZMap permutation seed, the same on every host."),
        port: int = typer.Option(443, help="UDP port to probe."),
        vantage: str = typer.Option("main", help=VANTAGE_HELP),
        rate: int = typer.Option(10000, help="ZMap send rate of this host, probes per second."),
        cooldown: int = typer.Option(8, help="Seconds ZMap keeps listening after the last probe."),
        settings: ScanSettings = None,
        quiet: Quiet = False,
        json_output: JsonOutcome = False,
    ) -> None:
        """Run (or resume, after a crash) one shard of a campaign: ZMap shard, handshakes, Parquet export."""
        from scanner.campaign import CampaignSpec, run_shard
        from scanner.discovery.plan import parse_shard
        index, total = parse_shard(shard)
        spec = CampaignSpec(campaign, tuple(cidrs or ()), seed, total, port, str(allowlist) if allowlist else None)
        if not spec.targets and spec.allowlist is None:
            raise ToolError("give the campaign's ranges or --allowlist (the same on every host)")
        if not spec.in_lab and not yes:
            raise ToolError("this campaign sends to the Internet (targets outside 198.18.0.0/15): pass --yes")
        result = run_shard(out, spec, index, vantage=vantage, rate=rate, cooldown=cooldown, settings=settings,
                           command_line=shlex.join(["qscan", *sys.argv[1:]]))
        if json_output:
            typer.echo(json.dumps(asdict(result)))
        elif not quiet:
            typer.echo(f"shard {index}/{total} of {campaign}{' (resumed)' if result.resumed else ''}: "
                       f"{result.probes_sent} probes, {result.quic_servers} QUIC servers, "
                       f"{result.handshakes_ok}/{result.handshakes} handshakes ok -> {out}")

    @group.command("run", epilog="Example: qscan campaign run --shards 4 --out camp --rate 2000")
    def run_command(
        out: Path = typer.Option(..., "--out", "-o", callback=output_dir, help="Campaign directory to write."),
        shards: int = typer.Option(4, help="Shards, each a host: a client namespace of the population lab."),
        seed: int = typer.Option(None, help="ZMap permutation seed (default: random)."),
        campaign: str = typer.Option("lab", help="Campaign name (a plain name)."),
        vantage: str = typer.Option("main", help=VANTAGE_HELP),
        lab: str = typer.Option("qpop", help="Population lab instance; brought up (and down after) if not up."),
        rate: int = typer.Option(2000, help="ZMap send rate of each shard, probes per second."),
        cooldown: int = typer.Option(2, help="Seconds ZMap keeps listening after the last probe."),
        handshake_rate: float = typer.Option(0.0, help="New handshakes per second of each shard (0 = unlimited)."),
        concurrency: int = typer.Option(500, help="Handshakes in flight at once in each shard."),
        timeout: HandshakeTimeout = 3.0,
        json_output: JsonOutcome = False,
    ) -> None:
        """Simulate a campaign on one machine: each shard's command at once in its own lab namespace; then check the union."""
        from scanner.engine import ScanSettings
        from scanner.campaign import CampaignSpec, run_local, union_check
        import contextlib

        from lab.population import Population, described, population_lab
        from scanner.campaign_store import open_campaign

        try:
            population, namespaces = described(lab)
            running = contextlib.nullcontext()
        except ToolError:
            population, namespaces = Population(), []
            running = population_lab(population, clients=shards, instance=lab)
        with running as started:
            if started is not None:
                namespaces = [f"{lab}-shard{i}" for i in range(shards)]
            spec = CampaignSpec(campaign, (population.block,), secrets.randbits(31) if seed is None else seed, shards)
            settings = ScanSettings(timeout=timeout, rate=handshake_rate, concurrency=concurrency, workers=1)
            results = run_local(spec, out, namespaces, vantage=vantage, rate=rate, cooldown=cooldown,
                                settings=settings)
        con = open_campaign(out)
        try:
            check = union_check(con, population.responsive())
        finally:
            con.close()
        if json_output:
            typer.echo(json.dumps({"shards": {i: asdict(r) for i, r in results.items()}, "union": check}))
            return
        for index, result in sorted(results.items()):
            typer.echo(f"shard {index}/{shards}: {result.probes_sent} probes in {result.seconds_discovery:.1f} s, "
                       f"{result.quic_servers} QUIC servers, {result.handshakes_ok}/{result.handshakes} handshakes ok "
                       f"in {result.seconds_handshakes:.1f} s")
        typer.echo(f"union: {check['discovered']} discovered ({check['duplicates']} twice), {check['expected']} "
                   f"expected, {check['missing']} missing, {check['unexpected']} unexpected -> {out}")
        if check["duplicates"] or check["missing"] or check["unexpected"]:
            raise ToolError("the shards' union differs from the population's QUIC addresses")

    @group.command("plan", epilog="Example: qscan campaign plan --preset ipv4 --hosts 8 --rate 100000 "
                   "--concurrency 5000 --slurm census.sbatch")
    def plan_command(
        targets: int = typer.Option(None, help="Targets (addresses or domains); default: the three census presets."),
        preset: str = typer.Option(None, help="ipv4 (3.7e9 addresses), hitlist (10M) or tranco (1M domains)."),
        cidrs: list[str] = typer.Option(None, "--range", help="The campaign's ranges, for the host command "
                                        "(default 0.0.0.0/0; a hitlist preset uses --allowlist hitlist.txt)."),
        hosts: int = typer.Option(8, help="Hosts, one shard each."),
        rate: int = typer.Option(100000, help="ZMap probes per second a host asks for."),
        concurrency: int = typer.Option(5000, help="Handshakes in flight a host."),
        responsive: float = typer.Option(None, help="Share of targets that answer (default: the preset's assumption; 1)."),
        handshake_seconds: float = typer.Option(0.25, help="Seconds a handshake holds a slot on the Internet (assumed)."),
        out: str = typer.Option("census", "--out", help="Campaign directory the hosts write (shown in their command)."),
        campaign: str = typer.Option("census", help="Campaign name."),
        seed: int = typer.Option(1, help="ZMap seed, the same on every host."),
        measured: Path = typer.Option(None, help="Measurements to plan from (default datasets/campaign/measured.json)."),
        slurm: Path = typer.Option(None, callback=output_file,
                                   help="Write a Slurm array job file (one task a shard) here."),
        netns_prefix: str = typer.Option(None, help="In the job file, run task I inside namespace PREFIX<I> (the lab)."),
        json_output: bool = typer.Option(False, "--json", help="Print the projection(s) as JSON."),
    ) -> None:
        """Project discovery and handshake time, Parquet size, merge and report time, from measured per-shard costs."""
        from scanner.campaign import CampaignSpec
        from scanner import campaign_plan as cp

        figures = cp.load_measured(measured) if measured else cp.load_measured()
        if preset is not None and preset not in cp.PRESETS:
            raise ToolError(f"--preset must be one of {', '.join(cp.PRESETS)}, not {preset!r}")
        if targets is not None:
            cases = {"custom": cp.Preset(targets, responsive or 1.0, "zmap", "given with --targets")}
        elif preset is not None:
            cases = {preset: cp.PRESETS[preset]}
        else:
            cases = dict(cp.PRESETS)
        if slurm is not None and len(cases) != 1:
            raise ToolError("--slurm writes one job: choose --preset or --targets")
        report = {}
        for name, case in cases.items():
            share = responsive if responsive is not None else case.responsive
            allowlist = "hitlist.txt" if case.discovery == "allowlist" else None
            ranges = tuple(cidrs or (() if allowlist else ("0.0.0.0/0",)))
            spec = CampaignSpec(campaign, ranges, seed, hosts, allowlist=allowlist)
            projection = cp.project(case.targets, hosts, rate, concurrency, figures, share, handshake_seconds,
                                    discovery=case.discovery)
            report[name] = cp.as_json(projection, spec, out, case.discovery) | {"note": case.note}
            if not json_output:
                typer.echo(f"== {name}: {case.note}")
                for line in cp.lines(projection, spec, out, case.discovery):
                    typer.echo(line)
            if slurm is not None:
                if case.discovery == "domains":
                    raise ToolError("--slurm writes ZMap campaigns; a domain list is split by line instead")
                slurm.write_text(cp.slurm_script(projection, spec, out, netns_prefix))
                if not json_output:
                    typer.echo(f"slurm:       {slurm} (sbatch {slurm})")
        if json_output:
            typer.echo(json.dumps(report, indent=2))
