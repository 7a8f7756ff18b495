"""qscan targets | report | export | demo: handshake scans into DuckDB and their popularity report."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tparams.errors import ToolError

from scanner.engine import OK, HandshakeRecord, ScanSettings, scan_targets
from scanner import identify as identify_api
from scanner.report import FORMATS, build_report, export_parquet, render
from scanner.store import ScanStore
from scanner.targets import Target, read_targets

_err = Console(stderr=True)

# Batches commit at this size or age: bounded loss on kill -9, few transactions at speed.
BATCH_RECORDS = 2000
BATCH_SECONDS = 1.0


@dataclasses.dataclass
class ScanOutcome:
    scan_id: int
    attempted: int
    ok: int
    skipped: int
    seconds: float


def scan_into(
    out: str | Path,
    targets: Sequence[Target],
    settings: ScanSettings,
    kind: str = "targets",
    resume: bool = False,
    command_line: str | None = None,
    progress: bool = False,
    on_batch: Callable[[list[HandshakeRecord]], None] | None = None,
) -> ScanOutcome:
    """Handshake with ``targets`` and store every attempt in ``out`` (a library call; the CLI wraps it).

    The store is opened (and its schema checked) before the first packet, so a
    bad ``out`` costs no traffic. With ``resume`` the latest scan of ``kind``
    continues and targets already recorded are skipped.
    """
    with ScanStore.open(out) as store:
        if store.handshake_count() and not resume:
            raise ToolError(f"{out} already holds handshakes; pass --resume to continue that scan, or use a new --out")
        scan_id = store.begin_scan(kind, dataclasses.asdict(settings), command_line, resume=resume)
        done = store.recorded_targets(scan_id) if resume else set()
        todo = [t for t in targets if t not in done]
        pending: list[HandshakeRecord] = []
        counts = {"done": 0, "ok": 0}
        last_flush = time.monotonic()
        started = time.monotonic()

        def flush() -> None:
            nonlocal last_flush
            store.append_records(scan_id, pending)
            pending.clear()
            last_flush = time.monotonic()

        with _progress_bar(progress, len(todo)) as (bar, task):

            def on_records(records: list[HandshakeRecord]) -> None:
                pending.extend(records)
                counts["done"] += len(records)
                counts["ok"] += sum(r.status == OK for r in records)
                if on_batch:
                    on_batch(records)
                if len(pending) >= BATCH_RECORDS or time.monotonic() - last_flush >= BATCH_SECONDS:
                    flush()
                if bar is not None:
                    elapsed = max(time.monotonic() - started, 1e-9)
                    bar.update(
                        task,
                        completed=counts["done"],
                        ok=counts["ok"],
                        failed=counts["done"] - counts["ok"],
                        rate=counts["done"] / elapsed,
                    )

            if todo:
                scan_targets(todo, settings, on_records)
            flush()
        store.finish_scan(scan_id)
        return ScanOutcome(scan_id, counts["done"], counts["ok"], len(targets) - len(todo), time.monotonic() - started)


@contextlib.contextmanager
def _progress_bar(enabled: bool, total: int) -> Iterator[tuple[Progress | None, Any]]:
    if not enabled:
        yield None, None
        return
    progress = Progress(
        TextColumn("handshakes"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("ok {task.fields[ok]}  failed {task.fields[failed]}  {task.fields[rate]:.0f}/s"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=_err,
    )
    with progress:
        yield progress, progress.add_task("scan", total=total, ok=0, failed=0, rate=0.0)


def register(app: typer.Typer) -> None:
    @app.command("targets")
    def targets_command(
        file: str = typer.Argument(..., help="Targets, one `ip[,port[,sni]]` a line (port 443 if omitted); `#` comments; `-` reads stdin."),
        out: Path = typer.Option(..., "--out", "-o", help="DuckDB file to write (created; one file per scan)."),
        rate: float = typer.Option(100.0, help="New handshakes per second over all workers (0 = unlimited)."),
        concurrency: int = typer.Option(1000, help="Handshakes in flight at once over all workers."),
        timeout: float = typer.Option(5.0, help="Seconds to wait for a handshake to complete."),
        alpn: str = typer.Option("h3", help="ALPN offered (any string, also an invalid one, e.g. `invalid`)."),
        sni: str = typer.Option(None, help="Server name for targets without one (default: none sent)."),
        workers: int = typer.Option(1, help="Worker processes; each runs its own event loop on a share of the targets."),
        resume: bool = typer.Option(False, "--resume", help="Continue the scan in --out, skipping targets already recorded."),
        strict: bool = typer.Option(False, "--strict", help="Reject the whole file if any line is malformed."),
        groups: str = typer.Option("x25519,secp256r1", help="Key shares offered in the ClientHello, comma-separated."),
        keylog: Path = typer.Option(None, help="Append TLS secrets (SSLKEYLOGFILE format) here, e.g. for tshark."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
        json_output: bool = typer.Option(False, "--json", help="Print the outcome as one JSON object."),
        identify: bool = typer.Option(False, "--identify", help="Also name each server's QUIC library: one more "
                                      "handshake per target offering ALPN `invalid`; verdicts in table server_library."),
    ) -> None:
        """Complete a QUIC handshake with every target and record what each server sent."""
        targets, bad = read_targets(file, strict=strict)
        for line in bad:
            print(f"skipped {file} {line}", file=sys.stderr)  # one line each, never wrapped: greppable
        if sni:
            targets = list(dict.fromkeys(t if t.sni else dataclasses.replace(t, sni=sni) for t in targets))
        settings = ScanSettings(
            alpn=alpn, timeout=timeout, rate=rate, concurrency=concurrency, workers=workers,
            groups=tuple(g.strip() for g in groups.split(",") if g.strip()),
            keylog_file=str(keylog) if keylog else None,
        )  # fmt: skip
        # --identify (scanner/identify.py, issue 7): signatures checked before any packet, the scan's own
        # handshakes kept for their order, then the invalid-ALPN pass.
        signatures = identify_api.load_signatures() if identify else None
        h3_records: list = []
        outcome = scan_into(
            out, targets, settings, resume=resume, progress=not quiet and sys.stderr.isatty(),
            command_line=shlex.join(["qscan", *sys.argv[1:]]), on_batch=h3_records.extend if identify else None,
        )  # fmt: skip
        summary = dataclasses.asdict(outcome) | {"bad_lines": len(bad), "out": str(out)}
        if signatures is not None:
            summary["libraries"] = identify_api.identify_into(out, targets, settings, signatures, h3_records)
            print(f"libraries: {summary['libraries']}", file=sys.stderr)
        if json_output:
            import json

            print(json.dumps(summary))
        else:
            print(
                f"{outcome.attempted} handshakes ({outcome.ok} ok, {outcome.attempted - outcome.ok} failed), "
                f"{outcome.skipped} already recorded, {len(bad)} bad lines, {outcome.seconds:.1f} s -> {out}"
            )

    @app.command("report")
    def report_command(
        scan: Path = typer.Argument(..., help="A DuckDB scan file written by qscan."),
        fmt: str = typer.Option("table", "--format", "-f", help=f"Output format: {', '.join(FORMATS)}."),
        top: int = typer.Option(10, help="How many sets and values per parameter to list."),
        compare: Path = typer.Option(None, "--compare", help="A later scan of the same population: show the sets "
                                     "that appeared, vanished, grew, shrank and the value shifts from SCAN to it."),
    ) -> None:
        """Targets reached, distinct parameter sets, most common sets and values (thesis tables 5.1-5.7)."""
        # --compare (scanner/analysis.py, issue 7): the two-scan comparison instead of the popularity report.
        if compare is not None:
            from scanner.analysis import compare_scans, render_comparison

            sys.stdout.write(render_comparison(compare_scans(scan, compare), fmt, top).rstrip("\n") + "\n")
            return
        if fmt not in FORMATS:
            raise ToolError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        sys.stdout.write(render(build_report(scan, top), fmt).rstrip("\n") + "\n")

    @app.command("export")
    def export_command(
        scan: Path = typer.Argument(..., help="A DuckDB scan file written by qscan."),
        parquet: Path = typer.Option(..., "--parquet", help="Directory for one Parquet file per table and view."),
    ) -> None:
        """Export every table and view of a scan as Parquet, for sharing and for DuckDB/polars elsewhere."""
        for path in export_parquet(scan, parquet):
            print(path)

    @app.command("demo")
    def demo_command(
        out: Path = typer.Option(None, help="Keep the scan in this DuckDB file (default: a temporary file)."),
        fmt: str = typer.Option("table", "--format", "-f", help=f"Report format: {', '.join(FORMATS)}."),
    ) -> None:
        """Bring up the lab, scan every lab server from the client namespace, print the parameter sets, tear down."""
        run_demo(out, fmt)


def run_demo(out: Path | None, fmt: str = "table") -> str:
    import tempfile

    from scanner.lab import Lab

    with tempfile.TemporaryDirectory(prefix="qscan-demo-") as tmp:
        path = out or Path(tmp) / "demo.duckdb"
        if out is not None and out.exists():
            raise ToolError(f"{out} exists; the demo writes a fresh scan")
        _err.print("bringing up the lab ...")
        with Lab.up() as lab:
            targets = [Target(s.ip, s.port, s.sni) for s in lab.servers]
            _err.print(f"scanning {len(targets)} lab servers from namespace {lab.client_ns} ...")
            with lab.in_client():
                outcome = scan_into(path, targets, ScanSettings(timeout=3.0), kind="demo")
        _err.print(f"lab down; {outcome.ok} of {outcome.attempted} handshakes completed")
        text = render(build_report(path, top=10), fmt)
        sys.stdout.write(text.rstrip("\n") + "\n")
        return text
