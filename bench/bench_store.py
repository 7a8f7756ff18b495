"""Store speed: 1,000,000 synthetic handshake records written in batches, then the report.

Goal (issue 3): write < 20 s, report < 2 s; (issue 12) the write at most 1.2x
DuckDB's own ingest of the same rows as ready Arrow tables, measured in the
same run on all the records.

The write is measured as a scan makes it: two worker processes (as many as
the engine starts on this machine) turn their records into columns
(scanner.columns.handshake_columns, in the engine's batches of
scanner.engine.BATCH_RECORDS) and send them over a multiprocessing queue;
the parent appends them to the store, one transaction every 20,000 records.
Timed from the moment the workers, their records made, are told to start,
to the store's close. Printed beside it, the older path: the same records
converted in the writing process itself (ScanStore.append_records).

Times are wall and CPU seconds (all threads, and the workers' CPU for the
scan path): on a machine shared with other work the wall ratio moves with
the load, the CPU ratio much less. Baseline printed in the same run: the
same records inserted with executemany of plain rows (row-by-row, what the
store avoids), on a 20,000-record sample, extrapolated.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scanner.columns import HandshakeColumns, handshake_columns  # noqa: E402
from scanner.engine import BATCH_RECORDS, OK, HandshakeRecord  # noqa: E402
from scanner.report import build_report  # noqa: E402
from scanner.store import ScanStore  # noqa: E402
from tparams.codec import DecodedParameters, decode_transport_parameters, encode_transport_parameters  # noqa: E402
from tparams.varint import encode_varint  # noqa: E402
from tparams.paramset import ParamSet  # noqa: E402

BATCH = 20_000
WORKERS = 2
NOW = dt.datetime.now(dt.timezone.utc)


def synthetic_records(count: int, seed: int = 1, first: int = 0) -> list[HandshakeRecord]:
    """Records shaped like a real scan: a few dozen distinct sets (popularity skewed), ~14 parameters each."""
    rng = random.Random(seed)
    sets = []
    for _ in range(40):
        params = ParamSet(
            max_idle_timeout=rng.choice([30000, 60000, 120000, 180000]),
            max_udp_payload_size=rng.choice([1472, 1500, 65527, None]),
            initial_max_data=rng.choice([196608, 1048576, 16777216]),
            initial_max_stream_data_bidi_local=rng.choice([131072, 1048576]),
            initial_max_stream_data_bidi_remote=rng.choice([131072, 32768]),
            initial_max_stream_data_uni=131072,
            initial_max_streams_bidi=100,
            initial_max_streams_uni=rng.choice([3, 100, 103]),
            active_connection_id_limit=rng.choice([2, 4, 8, None]),
        )
        raw = encode_transport_parameters(
            [(0x00, rng.randbytes(8)), (0x02, rng.randbytes(16)), (0x0F, rng.randbytes(8)), (27 + 31 * rng.randrange(100), b"")]
            + params.transport_parameters()
        )
        sets.append((raw, decode_transport_parameters(raw, "server")))
    weights = [1 / (rank + 1) for rank in range(len(sets))]
    chosen = [_fresh_connection(raw, decoded, rng) for raw, decoded in rng.choices(sets, weights, k=count)]
    return [
        HandshakeRecord(
            ip=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", port=443, sni=None, started_at=NOW, finished_at=NOW,
            handshake_ms=12.5, status=OK, quic_version=1, alpn="h3", tls_version="TLS 1.3",
            cipher_suite="AES_128_GCM_SHA256", key_exchange_group="x25519",
            transport_parameters_raw=raw, decoded=decoded,
        )  # fmt: skip
        for i, (raw, decoded) in enumerate(chosen, first)
    ]


def _fresh_connection(raw: bytes, decoded: DecodedParameters, rng: random.Random) -> tuple[bytes, DecodedParameters]:
    """As a real scan sees it: connection IDs, reset token and GREASE id differ in every handshake,
    so no record shares its raw bytes or parameter objects with another."""
    original_dcid, reset_token, source_cid, grease = decoded.parameters[:4]
    fresh = rng.randbytes(32)
    head = [
        original_dcid._replace(raw=fresh[:8], value=fresh[:8]),
        reset_token._replace(raw=fresh[8:24], value=fresh[8:24]),
        source_cid._replace(raw=fresh[24:], value=fresh[24:]),
        grease._replace(id=27 + 31 * rng.randrange(1 << 20)),
    ]
    prefix = b"".join(encode_varint(p.id) + encode_varint(len(p.raw)) + p.raw for p in head)
    rest = raw[len(b"".join(encode_varint(p.id) + encode_varint(len(p.raw)) + p.raw for p in decoded.parameters[:4])) :]
    return prefix + rest, DecodedParameters(prefix + rest, (*head, *decoded.parameters[4:]), decoded.findings)


def _worker_share(total: int, worker: int) -> list[HandshakeRecord]:
    share = total // WORKERS
    return synthetic_records(share, seed=worker + 1, first=worker * share)


def _scan_worker(total: int, worker: int, ready, go, results) -> None:
    """What a scan worker does with its finished records, on synthetic ones."""
    records = _worker_share(total, worker)
    ready.put(worker)
    go.wait()
    start_cpu = time.process_time()
    for offset in range(0, len(records), BATCH_RECORDS):
        results.put(handshake_columns(records[offset : offset + BATCH_RECORDS]))
    results.put(time.process_time() - start_cpu)


def write_as_a_scan(path: Path, total: int) -> tuple[float, float, list[HandshakeColumns]]:
    """Wall and CPU seconds (parent and workers) of the scan path; the batches the store received."""
    context = multiprocessing.get_context("spawn")  # as the engine starts its workers
    ready, go, results = context.Queue(), context.Event(), context.Queue()
    workers = [context.Process(target=_scan_worker, args=(total, w, ready, go, results), daemon=True) for w in range(WORKERS)]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get()
    received: list[HandshakeColumns] = []
    worker_cpu, running = 0.0, WORKERS
    start, start_cpu = time.perf_counter(), time.process_time()
    go.set()
    with ScanStore.open(path) as store:
        scan_id = store.begin_scan("bench", {})
        pending: list[HandshakeColumns] = []
        while running:
            item = results.get()
            if isinstance(item, float):
                worker_cpu, running = worker_cpu + item, running - 1
                continue
            pending.append(item)
            received.append(item)
            if sum(map(len, pending)) >= BATCH:
                store.append_columns(scan_id, pending)
                pending = []
        store.append_columns(scan_id, pending)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu + worker_cpu
    for worker in workers:
        worker.join()
    return wall, cpu, received


def write_in_process(path: Path, records: list[HandshakeRecord]) -> tuple[float, float]:
    """Wall and CPU seconds of converting and appending in the writing process."""
    start, start_cpu = time.perf_counter(), time.process_time()
    with ScanStore.open(path) as store:
        scan_id = store.begin_scan("bench", {})
        for offset in range(0, len(records), BATCH):
            store.append_records(scan_id, records[offset : offset + BATCH])
    return time.perf_counter() - start, time.process_time() - start_cpu


def _transactions(received: list[HandshakeColumns]) -> list[list[HandshakeColumns]]:
    """The batches grouped as the scan path committed them: a transaction once BATCH records wait."""
    transactions: list[list[HandshakeColumns]] = [[]]
    for batch in received:
        if sum(map(len, transactions[-1])) >= BATCH:
            transactions.append([])
        transactions[-1].append(batch)
    return transactions


def store_columns(path: Path, received: list[HandshakeColumns]) -> tuple[float, float]:
    """Wall and CPU seconds of the store's part alone: the workers' batches, already in this
    process, appended in the scan path's transactions."""
    start, start_cpu = time.perf_counter(), time.process_time()
    with ScanStore.open(path) as store:
        scan_id = store.begin_scan("bench", {})
        for transaction in _transactions(received):
            store.append_columns(scan_id, transaction)
    return time.perf_counter() - start, time.process_time() - start_cpu


def arrow_floor(path: Path, received: list[HandshakeColumns]) -> tuple[float, float]:
    """DuckDB's own ingest of the same rows as ready Arrow tables (numbered and made one
    chunk a table beforehand, untimed: DuckDB's fastest input), in the same transactions."""
    tables, first_id = [], 1
    for transaction in _transactions(received):
        numbered = []
        for batch in transaction:
            numbered.append(batch.numbered(1, first_id))
            first_id += len(batch)
        tables.append({
            "handshakes": pa.concat_tables([h for h, _ in numbered]).combine_chunks(),
            "handshake_parameters": pa.concat_tables([p for _, p in numbered]).combine_chunks(),
        })  # fmt: skip
    start, start_cpu = time.perf_counter(), time.process_time()
    with ScanStore.open(path) as store:
        for batch_tables in tables:
            store.append(batch_tables)
    return time.perf_counter() - start, time.process_time() - start_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="?", type=int, default=1_000_000, help="synthetic handshake records to write")
    total = parser.parse_args().records // WORKERS * WORKERS
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        scan_path = Path(tmp) / "scan.duckdb"
        scan_s, scan_cpu, received = write_as_a_scan(scan_path, total)
        start = time.perf_counter()
        report = build_report(scan_path, top=10)
        report_s = time.perf_counter() - start
        assert report.summary["reached"][0] == total
        # The store's part and the floor alternate, twice each: load that comes and goes
        # then weighs on both.
        store_runs, floor_runs = [], []
        for run in range(2):
            floor_runs.append(arrow_floor(Path(tmp) / f"arrow{run}.duckdb", received))
            store_runs.append(store_columns(Path(tmp) / f"store{run}.duckdb", received))
        del received
        records = [record for worker in range(WORKERS) for record in _worker_share(total, worker)]
        inline_s, inline_cpu = write_in_process(Path(tmp) / "inline.duckdb", records)
        load_end = os.getloadavg()[0]

        # Baseline: row-by-row inserts of only the handshakes' scalar columns.
        sample = records[:20_000]
        con = duckdb.connect(str(Path(tmp) / "rows.duckdb"))
        con.execute("CREATE TABLE h (ip VARCHAR, port INTEGER, status VARCHAR, handshake_ms DOUBLE, raw BLOB)")
        start = time.perf_counter()
        con.executemany("INSERT INTO h VALUES (?, ?, ?, ?, ?)", [(r.ip, r.port, r.status, r.handshake_ms, r.transport_parameters_raw) for r in sample])
        row_s = (time.perf_counter() - start) * total / len(sample)
        con.close()
    print(f"records: {total:,} ({total * len(records[0].decoded.parameters):,} parameter rows), transactions of {BATCH:,}; "
          f"load average {load:.1f} at start, {load_end:.1f} at the end, on {os.cpu_count()} cores")  # fmt: skip
    write_s, write_cpu = (sum(run[i] for run in store_runs) for i in (0, 1))
    arrow_s, arrow_cpu = (sum(run[i] for run in floor_runs) for i in (0, 1))
    ratio = write_s / arrow_s
    print(f"store write (workers' columns appended, 2 runs): {write_s / 2:6.2f} s a run ({2 * total / write_s:,.0f} records/s), "
          f"CPU {write_cpu / 2:.1f} s   goal < 20 s: {'PASS' if write_s / 2 < 20 else 'FAIL'}")  # fmt: skip
    print(f"floor: DuckDB ingest of the same rows as ready Arrow (2 runs): {arrow_s / 2:6.2f} s a run, CPU {arrow_cpu / 2:.1f} s "
          f"-> the store takes {ratio:.2f}x DuckDB's own ingest time ({write_cpu / arrow_cpu:.2f}x its CPU; runs "
          f"{', '.join(f'{s[0]:.2f}/{f[0]:.2f}' for s, f in zip(store_runs, floor_runs))})   "
          f"goal <= 1.2x: {'PASS' if ratio <= 1.2 else 'FAIL'}")  # fmt: skip
    print(f"report:       {report_s:6.2f} s   goal < 2 s: {'PASS' if report_s < 2 else 'FAIL'}")
    print(f"whole scan path ({WORKERS} workers converting flat out while the parent inserts, on {os.cpu_count()} cores): "
          f"{scan_s:6.2f} s, CPU {scan_cpu:.1f} s (workers included) -> {2 * scan_s / arrow_s:.2f}x the floor's time, "
          f"{2 * scan_cpu / arrow_cpu:.2f}x its CPU")  # fmt: skip
    print(f"converted in the writing process (append_records): {inline_s:6.2f} s, CPU {inline_cpu:.1f} s -> "
          f"{2 * inline_s / arrow_s:.2f}x the floor's time ({2 * inline_cpu / arrow_cpu:.2f}x its CPU)")  # fmt: skip
    print(f"baseline row-by-row executemany (5 columns only, extrapolated): {row_s:6.1f} s -> batch store is {row_s / write_s:.1f}x faster")


if __name__ == "__main__":
    main()
