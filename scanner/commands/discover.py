"""qscan ipv4 | ipv6 | domains | merge: find QUIC servers (ZMap, DNS, Alt-Svc), then handshake with them."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from common.cliapp import output_file
from tparams.errors import ToolError

from scanner.commands.options import HandshakeRate, JsonOutcome, Netns, Quiet, Strict, handshake_options
from common.terminal import cli_console

if TYPE_CHECKING:  # built by the shared options; --help needs no import of it
    from scanner.engine import ScanSettings

_err = cli_console(stderr=True)


def confirm_or_refuse(plan_lines: list[str], whole_space: bool, yes: bool,
                      what: str = "scan the whole IPv4 space") -> None:
    """Print the plan; a scan of the Internet (``whole_space``: the whole IPv4 space, or IPv6
    addresses outside the lab) starts only after an interactive yes or --yes, and never without
    a terminal to ask on."""
    for line in plan_lines:
        _err.print(line, highlight=False, markup=False, soft_wrap=True)
    if not whole_space or yes:
        return
    if not sys.stdin.isatty():
        raise ToolError(f"refusing to {what} without confirmation: pass --yes (no terminal to ask on)")
    answer = input("This scan sends to the Internet. Start it? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise ToolError("scan not started (answered no)")


def show_discovery(result, out: Path, discover_only: bool, json_output: bool, planned: dict | None = None,
                   planned_text: str = "") -> None:
    """The one summary line (or JSON object) of a discovery scan, ``planned`` its plan's own counts."""
    summary = {
        "scan_id": result.scan_id, "out": str(out), "probes_sent": result.discovery.probes_sent, **(planned or {}),
        "quic_servers": len(result.discovery.found), "answers": dict(sorted(result.discovery.answers.items())),
        "handshakes": result.handshakes_attempted, "handshakes_ok": result.handshakes_ok,
        "seconds_discovery": round(result.seconds_discovery, 3),
        "seconds_handshakes": round(result.seconds_handshakes, 3),
    }
    if json_output:
        typer.echo(json.dumps(summary))
        return
    answers = ", ".join(f"{k} {v}" for k, v in summary["answers"].items()) or "none"
    typer.echo(f"scan {result.scan_id} in {out}: {summary['probes_sent']} probes, "
               f"{summary['quic_servers']} QUIC servers (answers: {answers}){planned_text}"
               + ("" if discover_only else f"; {result.handshakes_ok}/{result.handshakes_attempted} handshakes ok"))


def show_dry_run(plan_lines: list[str], prepared) -> None:
    """What a --dry-run prints (on stdout): the plan, the probe, its payload hex and the exact command."""
    from scanner.discovery.response import format_version
    for line in plan_lines:
        typer.echo(line)
    typer.echo(f"probe:      version {format_version(prepared.probe.version)}, {len(prepared.probe.payload)} bytes")
    typer.echo(f"payload:    {prepared.probe.hex}")
    typer.echo(f"command:    {prepared.command}")


def register(app: typer.Typer) -> None:
    @app.command("ipv4", epilog="Example: qscan ipv4 198.18.1.0/24 --out scan.duckdb")
    @handshake_options()
    def ipv4_command(
        cidrs: list[str] = typer.Argument(None, help="IPv4 ranges (CIDR) or addresses; none = the whole IPv4 "
                                          "space minus the blocklist (asks first, see --yes)."),
        out: Path = typer.Option(..., "--out", "-o", callback=output_file,
                                 help="DuckDB file to write (new; ZMap's files go to OUT.zmap/)."),
        port: int = typer.Option(443, help="UDP port to probe."),
        rate: int = typer.Option(10000, help="ZMap send rate, probes per second."),
        cooldown: int = typer.Option(8, help="Seconds ZMap keeps listening after the last probe."),
        interface: str = typer.Option(None, help="Interface to send on (default: the one routing to the targets)."),
        source_ip: str = typer.Option(None, help="Source address (default: the route's preferred source)."),
        gateway_mac: str = typer.Option(None, help="Gateway MAC (default: the route's gateway, from the neighbour table)."),
        blocklist: Path = typer.Option(None, help="CIDRs never probed, ZMap format (default: datasets/blocklist/"
                                       "default.conf, reserved and special-purpose ranges)."),
        allowlist: Path = typer.Option(None, help="CIDRs to probe, ZMap format (added to the ranges given)."),
        shard: str = typer.Option("0/1", help="This host's shard I/N of the scan (ZMap sharding; needs --seed)."),
        seed: int = typer.Option(None, help="ZMap permutation seed; the same on every shard of a scan."),
        netns: Netns = None,
        discover_only: bool = typer.Option(False, "--discover-only", help="Stop after ZMap; no handshakes."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, the exact ZMap command and the "
                                     "payload hex; send and write nothing."),
        yes: bool = typer.Option(False, "--yes", help="Start a whole-space scan without asking."),
        resume: bool = typer.Option(False, "--resume", help="Continue the scan in --out (same ranges and shard): "
                                    "a finished ZMap run is kept, recorded handshakes are skipped."),
        settings: ScanSettings = None,
        quiet: Quiet = False,
        json_output: JsonOutcome = False,
    ) -> None:
        """Find QUIC servers with ZMap (a Version Negotiation probe), then handshake with each one found."""
        from scanner.discovery.ipv4 import prepare, scan_ipv4
        from scanner.discovery.plan import make_plan, parse_shard
        index, total = parse_shard(shard)
        plan = make_plan(cidrs or [], port, rate, cooldown, blocklist, allowlist, index, total)
        if dry_run:
            show_dry_run(plan.lines(), prepare(plan, out, netns, interface, source_ip, gateway_mac, seed,
                                               dry_run=True))
            return
        # Before anything is resolved or sent: only the plan has been computed so far.
        confirm_or_refuse(plan.lines(), plan.whole_space, yes)
        prepared = prepare(plan, out, netns, interface, source_ip, gateway_mac, seed)
        show = not quiet and sys.stderr.isatty()
        with Progress(TextColumn("zmap"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                      TimeElapsedColumn(), console=_err, disable=not show) as bar:
            task = bar.add_task("zmap", total=1.0)
            result = scan_ipv4(prepared, out, settings, netns, discover_only, shlex.join(sys.argv),
                               on_zmap_progress=lambda done: bar.update(task, completed=done), progress=show,
                               resume=resume)
        show_discovery(result, out, discover_only, json_output)

    @app.command("ipv6", epilog="Example: qscan ipv6 --hitlist hitlist.txt --aliased aliased.txt "
                 "--netns qlab-client --out scan.duckdb")
    @handshake_options()
    def ipv6_command(
        hitlist: str = typer.Option(..., "--hitlist", help="IPv6 Hitlist service addresses, one a line (compressed "
                                    "or full form), `#` comments; `-` reads stdin. Other lines: one warning each."),
        out: Path = typer.Option(..., "--out", "-o", callback=output_file,
                                 help="DuckDB file to write (new; the prober's files go to OUT.prober6/)."),
        aliased: Path = typer.Option(None, help="The service's aliased prefixes, one a line: each is probed once, "
                                     "through its first hitlist address, and recorded as aliased."),
        port: int = typer.Option(443, help="UDP port to probe."),
        rate: int = typer.Option(10000, help="Probes per second (paced)."),
        cooldown: int = typer.Option(8, help="Seconds of listening after the last probe."),
        blocklist: Path = typer.Option(None, help="IPv6 prefixes never probed, one a line (default: datasets/"
                                       "blocklist/ipv6-default.conf, IANA's special-purpose ranges)."),
        shard: str = typer.Option("0/1", help="This host's shard I/N of the scan (as ZMap's; needs --seed)."),
        seed: int = typer.Option(None, help="Permutation seed; the same on every shard of a scan."),
        netns: Netns = None,
        discover_only: bool = typer.Option(False, "--discover-only", help="Stop after probing; no handshakes."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan, the exact prober command and the "
                                     "payload hex; send and write nothing."),
        yes: bool = typer.Option(False, "--yes", help="Probe addresses outside the lab (2001:2::/48) without asking."),
        resume: bool = typer.Option(False, "--resume", help="Continue the scan in --out (same hitlist, aliased "
                                    "prefixes and shard): a finished probing run is kept, recorded handshakes "
                                    "are skipped."),
        strict: Strict = False,
        settings: ScanSettings = None,
        quiet: Quiet = False,
        json_output: JsonOutcome = False,
    ) -> None:
        """Probe an IPv6 hitlist with the Version Negotiation probe (our own prober: ZMap 2.1.1 has no IPv6),
        then handshake with each address that answered."""
        from scanner.discovery.hitlist import make_hitlist_plan
        from scanner.discovery.ipv6 import prepare_ipv6, scan_ipv6
        from scanner.discovery.plan import parse_shard
        index, total = parse_shard(shard)
        plan = make_hitlist_plan(hitlist, port, rate, cooldown, aliased, blocklist, index, total, strict)
        for bad in plan.bad_lines:
            _err.print(f"warning: {hitlist}: {bad}", highlight=False, markup=False, soft_wrap=True)
        if dry_run:
            show_dry_run(plan.lines(), prepare_ipv6(plan, out, netns, seed, aliased, dry_run=True))
            return
        outside = bool(plan.outside_lab)
        confirm_or_refuse(plan.lines(), outside, yes, "probe IPv6 addresses outside the lab (2001:2::/48)")
        prepared = prepare_ipv6(plan, out, netns, seed, aliased, yes=yes or outside)
        show = not quiet and sys.stderr.isatty()
        result = scan_ipv6(prepared, out, settings, netns, discover_only, shlex.join(sys.argv), progress=show,
                           resume=resume)
        show_discovery(result, out, discover_only, json_output, {
            "bad_lines": len(plan.bad_lines), "blocked": plan.blocked, "folded": plan.folded,
            "aliased_prefixes": sum(t.aliased_prefix is not None for t in plan.targets)},
            f", {len(plan.bad_lines)} bad lines, {plan.blocked} blocklisted, {plan.folded} folded into aliased "
            "prefixes")

    @app.command("merge", epilog="Example: qscan merge census/ --out census.duckdb")
    def merge_command(
        inputs: list[Path] = typer.Argument(..., help="Scan files to merge (e.g. the shards of one scan), or "
                                            "campaign directories (qscan export --campaign), each shard as its file."),
        out: Path = typer.Option(..., "--out", "-o", callback=output_file, help="New DuckDB file to write."),
        json_output: JsonOutcome = False,
    ) -> None:
        """Merge scan files into one; the shards of one ZMap scan become one scan; overlapping shards are refused."""
        from scanner.merge import merge_scans
        result = merge_scans(inputs, out)
        if json_output:
            typer.echo(json.dumps({"out": str(out), "inputs": result.inputs, "scans": result.scans, "rows": result.rows}))
        else:
            rows = ", ".join(f"{t} {n}" for t, n in result.rows.items() if t != "schema_version")
            typer.echo(f"{out}: {result.inputs} inputs, {result.scans} scans ({rows})")

    @app.command("domains", epilog="Example: qscan domains domains.txt --netns qlab-client --resolver 198.18.1.53 "
                 "--out domains.duckdb")
    def domains_command(
        file: Path = typer.Argument(..., help="Domains, one a line; `#` comments."),
        out: Path = typer.Option(..., "--out", "-o", callback=output_file, help="DuckDB file to write (new)."),
        resolver: str = typer.Option(None, help="DNS server address to ask (default: the system's resolver)."),
        alt_svc: bool = typer.Option(True, "--alt-svc/--no-alt-svc", help="Also fetch Alt-Svc over HTTPS/TCP."),
        netns: Netns = None,
        discover_only: bool = typer.Option(False, "--discover-only", help="Gather evidence only; no handshakes."),
        timeout: float = typer.Option(5.0, help="Seconds for each DNS query, HTTPS fetch and handshake."),
        handshake_rate: HandshakeRate = 100.0,
        strict: Strict = False,
        quiet: Quiet = False,
        json_output: JsonOutcome = False,
    ) -> None:
        """Find QUIC servers behind domains (HTTPS records with h3, Alt-Svc), then handshake with SNI = domain."""
        from scanner.engine import ScanSettings
        from scanner.domains import read_domains, refuse_held_scan, scan_domains
        refuse_held_scan(out)  # before the domains' warnings
        domains, bad = read_domains(file, strict)
        for line in bad:
            print(f"skipped {file} {line}", file=sys.stderr)  # as qscan targets: one line each, greppable
        settings = ScanSettings(timeout=timeout, rate=handshake_rate)
        show = not quiet and sys.stderr.isatty()
        with Progress(TextColumn("domains"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=_err, disable=not show) as bar:
            task = bar.add_task("domains", total=len(domains))
            result = scan_domains(domains, out, settings, resolver, netns, alt_svc, discover_only,
                                  shlex.join(sys.argv), progress=show, on_domain=lambda: bar.advance(task))
        by_kind: dict[str, int] = {}
        for item in result.evidence:
            by_kind[item.evidence] = by_kind.get(item.evidence, 0) + 1
        summary = {"scan_id": result.scan_id, "out": str(out), "domains": result.domains, "bad_lines": len(bad),
                   "evidence": dict(sorted(by_kind.items())), "targets": len(result.targets),
                   "handshakes": result.handshakes_attempted, "handshakes_ok": result.handshakes_ok}
        if json_output:
            typer.echo(json.dumps(summary))
        else:
            evidence = ", ".join(f"{k} {v}" for k, v in summary["evidence"].items()) or "none"
            typer.echo(f"scan {result.scan_id} in {out}: {result.domains} domains, {len(bad)} bad lines "
                       f"(evidence: {evidence}), "
                       f"{len(result.targets)} QUIC targets"
                       + ("" if discover_only else f"; {result.handshakes_ok}/{result.handshakes_attempted} handshakes ok"))
