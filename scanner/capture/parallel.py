"""qscan pcap on several cores: each worker process reads the whole capture and follows the connections
``shard_of`` gives it, turning its ClientHellos into the store's Arrow rows; this process stores them in
frame order, numbered as one process would number them, and writes nothing else.

Reading the file twice costs a few microseconds a packet; opening an Initial and its ClientHello costs a
hundred, so the work splits nearly evenly, and each worker's share of CPU is half of one process's plus the
reading and a second interpreter's start. That pays only with a core free for each worker: on the busy 2-core
machine of bench_pcap's runs two workers were no faster than one, or faster only by taking a larger share of
the machine from other work, with more CPU (qscan pcap --workers, default 1). The rows of one worker are stored once every worker has read
past them (each reports how far it read with every batch), so the file's numbering does not depend on
which worker is faster, and what is held back stays within a batch or two.
"""

from __future__ import annotations

import gc
import multiprocessing
import queue
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from common.pcap import Damage
from scanner.capture.extract import CaptureScan, CaptureSummary, collecting_for_capture, nothing_found
from scanner.capture.frontend import CaptureDatagrams
from scanner.capture.results import CaptureWriter, HelloTally, hellos_to_arrow
from tparams.errors import ToolError

def _worker(path: str, client: str | None, shard: tuple[int, int], keep: int, results: multiprocessing.Queue) -> None:
    index = shard[0]
    try:
        with collecting_for_capture():
            scan = CaptureScan(path, None, client, (), shard)
            tally = HelloTally(keep=keep)
            for hellos in scan.batches():
                gc.freeze()  # collecting_for_capture says why
                tally.add(hellos)
                tables = hellos_to_arrow(path, hellos) if hellos else None
                results.put(("batch", index, scan.datagrams.packets, scan.datagrams.offset, tables))
        results.put(("done", index, scan.summary, scan.datagrams.damage, tally))
    except ToolError as exc:
        results.put(("error", index, str(exc)))
    except BaseException as exc:  # noqa: BLE001 - said in one line by the parent, never lost
        results.put(("error", index, f"worker {index} failed: {type(exc).__name__}: {exc}"))


class ShardedScan:
    """``CaptureScan`` over ``workers`` processes, for ``run``; ``offset`` says how far the slowest has read."""

    def __init__(self, path: Path | str, client: str | None, workers: int) -> None:
        self.path = Path(path)
        self.size = CaptureDatagrams(path).size  # the file's errors (missing, no capture) are said here, once
        self._client = client
        self._workers = workers
        self._offsets = [0] * workers
        self.summary = CaptureSummary()
        self.damage: Damage | None = None

    @property
    def offset(self) -> int:
        return min(self._offsets)

    def nothing_found(self) -> ToolError:
        return nothing_found(self.path, self.summary, self.damage)

    def run(self, writer: CaptureWriter | None, tally: HelloTally) -> None:
        """Read the capture, storing its ClientHellos through ``writer`` and counting them into ``tally``."""
        context = multiprocessing.get_context("spawn")  # no fork of this process's DuckDB and threads
        results = context.Queue(maxsize=4 * self._workers)  # workers wait while this process stores
        processes = [
            context.Process(target=_worker, args=(str(self.path), self._client, (i, self._workers), tally.keep, results), daemon=True)
            for i in range(self._workers)
        ]
        for process in processes:
            process.start()
        read_to = [0] * self._workers  # packets each worker has read
        pending: list[tuple[pa.Table, pa.Table]] = []
        finished = 0
        try:
            while finished < self._workers:
                try:
                    message = results.get(timeout=1.0)
                except queue.Empty:
                    if any(p.exitcode not in (None, 0) for p in processes):
                        raise ToolError("a worker reading the capture ended without a word (out of memory?)") from None
                    continue
                kind, index = message[:2]
                if kind == "error":
                    raise ToolError(message[2])
                if kind == "batch":
                    read_to[index], self._offsets[index], tables = message[2:]
                    if tables is not None:
                        pending.append(tables)
                        tally.count += tables[0].num_rows  # for the progress line; the tallies merge at the end
                else:
                    _, _, summary, damage, shard_tally = message
                    self.summary.add(summary)
                    self.damage = damage  # every worker reads the same file to the same damage
                    tally.count -= shard_tally.count
                    tally.merge(shard_tally)
                    read_to[index], self._offsets[index] = 1 << 62, self.size
                    finished += 1
                pending = self._store_up_to(min(read_to), pending, writer)
        finally:
            for process in processes:
                if process.is_alive():
                    process.terminate()
                process.join()

    @staticmethod
    def _store_up_to(frame: int, pending: list[tuple[pa.Table, pa.Table]], writer: CaptureWriter | None) -> list[tuple[pa.Table, pa.Table]]:
        """Store the rows of frames up to ``frame`` (no worker will send an earlier one); the rest wait."""
        if not pending or writer is None:
            return []
        hellos = pa.concat_tables([h for h, _ in pending])
        parameters = pa.concat_tables([p for _, p in pending])
        ready, ready_parameters = pc.less_equal(hellos.column("frame"), frame), pc.less_equal(parameters.column("hello_id"), frame)
        writer.add_tables(hellos.filter(ready), parameters.filter(ready_parameters))
        rest = hellos.filter(pc.invert(ready))
        return [(rest, parameters.filter(pc.invert(ready_parameters)))] if rest.num_rows else []
