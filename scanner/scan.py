"""Scan targets into a DuckDB file: the library call behind `qscan targets`, discovery and domains.

Kept out of the CLI module so that notebooks, discovery and the demo call the
same function the command line does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tparams.errors import ToolError

from scanner.columns import HandshakeColumns, handshake_columns
from scanner.discovery.netinfo import refuse_unreachable_lab
from scanner.engine import OK, UNREACHABLE, HandshakeRecord, ScanSettings, scan_targets
from scanner.store import ScanStore
from scanner.targets import Target
from common.terminal import cli_console

_err = cli_console(stderr=True)

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
    unreachable: int = 0  # of the failed: an ICMP error answered (a UDP-closed port, an unreachable host)


def refuse_held_scan(out: str | Path, resume: bool = False) -> None:
    """What scan_into refuses about ``out``, said alone: a command checks its output before it reads
    (and warns about) its input. Nothing is created."""
    if not resume and Path(out).exists():
        with ScanStore.open(out) as store:
            _refuse_held(store, out)


def _refuse_held(store: ScanStore, out: str | Path) -> None:
    if store.handshake_count():
        raise ToolError(f"{out} already holds handshakes; pass --resume to continue that scan, or use a new --out")


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
    continues and targets already recorded are skipped. Lab addresses this
    network namespace would reach only out of the lab are refused first.
    """
    refuse_unreachable_lab(t.ip for t in targets)
    with ScanStore.open(out) as store:
        if not resume:
            _refuse_held(store, out)
        scan_id = store.begin_scan(kind, dataclasses.asdict(settings), command_line, resume=resume)
        done = store.recorded_targets(scan_id) if resume else set()
        todo = [t for t in targets if t not in done]
        # The workers send columns (scanner/columns.py), so this process only inserts;
        # on_batch wants the records themselves, which are then converted here.
        pending: list[HandshakeColumns] = []
        counts = {"done": 0, "ok": 0, "unreachable": 0, "pending": 0}
        last_flush = time.monotonic()
        started = time.monotonic()

        def flush() -> None:
            nonlocal last_flush
            store.append_columns(scan_id, pending)
            pending.clear()
            counts["pending"] = 0
            last_flush = time.monotonic()

        with _progress_bar(progress, len(todo)) as (bar, task):

            def on_columns(batch: HandshakeColumns) -> None:
                pending.append(batch)
                counts["done"] += len(batch)
                counts["pending"] += len(batch)
                counts["ok"] += batch.count_status(OK)
                counts["unreachable"] += batch.count_status(UNREACHABLE)
                if counts["pending"] >= BATCH_RECORDS or time.monotonic() - last_flush >= BATCH_SECONDS:
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

            try:
                if todo and on_batch is None:
                    scan_targets(todo, settings, on_columns, prepare=handshake_columns)
                elif todo:
                    wants_records = on_batch

                    def on_records(records: list[HandshakeRecord]) -> None:
                        wants_records(records)
                        on_columns(handshake_columns(records))

                    scan_targets(todo, settings, on_records)
            except KeyboardInterrupt:
                flush()  # everything the workers finished before Ctrl-C
                raise ToolError(
                    f"interrupted: {counts['done']} handshakes of this run stored in {out}; --resume continues the scan",
                    exit_code=130,
                ) from None
            flush()
        store.finish_scan(scan_id)
        return ScanOutcome(scan_id, counts["done"], counts["ok"], len(targets) - len(todo), time.monotonic() - started,
                           counts["unreachable"])


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
