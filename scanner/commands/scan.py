"""qscan targets | report | export: handshake scans into DuckDB and their popularity report."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import sys
from pathlib import Path

import typer

from common.cliapp import output_dir, output_file
from tparams.errors import ToolError

from scanner.commands.options import JsonOutcome, Netns, Strict
from scanner.formats import FORMATS

def register(app: typer.Typer) -> None:
    @app.command("targets", epilog="Example: qscan targets hosts.txt --identify --out scan.duckdb")
    def targets_command(
        file: str = typer.Argument(..., help="Targets, one `ip[,port[,sni]]` a line (port 443 if omitted); `#` comments; `-` reads stdin."),
        out: Path = typer.Option(..., "--out", "-o", callback=output_file,
                                 help="DuckDB file to write (created; one file per scan)."),
        rate: float = typer.Option(100.0, help="New handshakes per second over all workers (0 = unlimited)."),
        concurrency: int = typer.Option(1000, help="Handshakes in flight at once over all workers."),
        timeout: float = typer.Option(5.0, help="Seconds to wait for a handshake to complete."),
        alpn: str = typer.Option("h3", help="ALPN offered (any string, also an invalid one, e.g. `invalid`)."),
        sni: str = typer.Option(None, help="Server name for targets without one (default: none sent)."),
        workers: int = typer.Option(None, help="Worker processes, each with its own event loop on a share of the "
                                    "targets (default: one per core; small scans use one)."),
        resume: bool = typer.Option(False, "--resume", help="Continue the scan in --out, skipping targets already recorded."),
        strict: Strict = False,
        groups: str = typer.Option("x25519,secp256r1", help="Key shares sent in the ClientHello, comma-separated (supported_groups lists every other group the engine completes too)."),
        keylog: Path = typer.Option(None, callback=output_file,
                                    help="Append TLS secrets (SSLKEYLOGFILE format) here, e.g. for tshark."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
        json_output: JsonOutcome = False,
        netns: Netns = None,
        identify: bool = typer.Option(False, "--identify", help="Also name each server's QUIC library: one more "
                                      "handshake per target offering ALPN `invalid`; verdicts in table server_library."),
    ) -> None:
        """Complete a QUIC handshake with every target and record what each server sent."""
        from scanner.engine import ScanSettings
        from scanner.scan import refuse_held_scan, scan_into
        from scanner.targets import read_targets
        if netns is not None:  # pyroute2 where a namespace is named; identification's polars where it runs
            from common.netns import in_namespace
            from scanner.discovery.netinfo import require_namespace
            require_namespace(netns)
        if identify:
            from scanner import identify as identify_api
        refuse_held_scan(out, resume)  # before the targets' warnings
        targets, bad = read_targets(file, strict=strict)
        for line in bad:
            print(f"skipped {file} {line}", file=sys.stderr)  # one line each, never wrapped: greppable
        if sni:
            targets = list(dict.fromkeys(t if t.sni else dataclasses.replace(t, sni=sni) for t in targets))
        settings = ScanSettings(
            alpn=alpn, timeout=timeout, rate=rate, concurrency=concurrency,
            **({"workers": workers} if workers is not None else {}),
            groups=tuple(g.strip() for g in groups.split(",") if g.strip()),
            keylog_file=str(keylog) if keylog else None,
        )  # fmt: skip
        if identify:
            settings = identify_api.h3_settings(settings)  # the scan's handshakes are identification's h3 ones
        # --identify (scanner/identify.py, issue 7): signatures checked before any packet, the scan's own
        # handshakes kept for their order, then the invalid-ALPN pass.
        signatures = identify_api.load_signatures() if identify else None
        h3_records: list = []
        with in_namespace(netns) if netns else contextlib.nullcontext():  # sockets made inside stay inside
            outcome = scan_into(
                out, targets, settings, resume=resume, progress=not quiet and sys.stderr.isatty(),
                command_line=shlex.join(["qscan", *sys.argv[1:]]), on_batch=h3_records.extend if identify else None,
            )  # fmt: skip
            libraries = (identify_api.identify_into(out, targets, settings, signatures, h3_records)
                         if signatures is not None else None)
        summary = dataclasses.asdict(outcome) | {"bad_lines": len(bad), "out": str(out)}
        if libraries is not None:
            summary["libraries"] = libraries
            named = ", ".join(f"{name} {n}" for name, n in sorted(libraries.items(), key=lambda kv: (-kv[1], kv[0])))
            print(f"libraries: {named or 'none'} (targets each; verdicts in table server_library)", file=sys.stderr)
        if json_output:
            import json

            print(json.dumps(summary))
        else:
            print(
                f"{outcome.attempted} handshakes ({outcome.ok} ok, {outcome.attempted - outcome.ok} failed, "
                f"{outcome.unreachable} of them unreachable), "
                f"{outcome.skipped} already recorded, {len(bad)} bad lines, {outcome.seconds:.1f} s -> {out}"
            )

    @app.command("report", epilog="Example: qscan report scan.duckdb --top 5 --format markdown")
    def report_command(
        scan: Path = typer.Argument(..., help="A DuckDB scan file written by qscan, or a campaign directory (qscan export --campaign)."),
        fmt: str = typer.Option("table", "--format", "-f", help=f"Output format: {', '.join(FORMATS)}."),
        top: int = typer.Option(10, help="How many sets and values per parameter to list."),
        compare: Path = typer.Option(None, "--compare", help="A later scan of the same population: show the sets "
                                     "that appeared, vanished, grew, shrank and the value shifts from SCAN to it."),
    ) -> None:
        """Targets reached, distinct parameter sets, most common sets and values (thesis tables 5.1-5.7)."""
        from scanner.report import build_report, render
        # --compare (scanner/analysis.py, issue 7): the two-scan comparison instead of the popularity report.
        if compare is not None:
            from scanner.analysis import compare_scans, render_comparison

            sys.stdout.write(render_comparison(compare_scans(scan, compare), fmt, top).rstrip("\n") + "\n")
            return
        if fmt not in FORMATS:
            raise ToolError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        sys.stdout.write(render(build_report(scan, top), fmt).rstrip("\n") + "\n")

    @app.command("export", epilog="Example: qscan export shard0.duckdb --parquet census/ --campaign 2026-w48 "
                 "--vantage fra1 --shard 0")
    def export_command(
        scan: Path = typer.Argument(..., help="A DuckDB scan file written by qscan."),
        parquet: Path = typer.Option(..., "--parquet", callback=output_dir, help="Directory for one Parquet file per table and view; "
                                     "with --campaign, a campaign directory this scan becomes one shard of."),
        campaign: str = typer.Option(None, help="Campaign label: write Hive-partitioned tables "
                                     "<table>/campaign=/vantage=/campaign_shard= (docs/scale.md)."),
        vantage: str = typer.Option(None, help="Vantage point label (with --campaign)."),
        shard: str = typer.Option(None, help="Shard label, unique in campaign and vantage (with --campaign); "
                                  "exporting it again replaces it."),
    ) -> None:
        """Export every table and view of a scan as Parquet, for sharing and for DuckDB/polars elsewhere."""
        from scanner.campaign_store import export_shard
        from scanner.report import export_parquet
        labels = {"--campaign": campaign, "--vantage": vantage, "--shard": shard}
        if any(labels.values()):
            missing = [flag for flag, value in labels.items() if not value]
            if missing:
                raise ToolError(f"a campaign shard needs {', '.join(labels)} together; missing {', '.join(missing)}")
            rows = export_shard(scan, parquet, campaign=campaign, vantage=vantage, shard=shard)
            print(f"{rows.get('handshakes', 0)} handshakes, {len(rows)} tables -> {parquet} "
                  f"campaign={campaign} vantage={vantage} campaign_shard={shard}")
            return
        for path in export_parquet(scan, parquet):
            print(path)
