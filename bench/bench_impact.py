"""`qreplay impact` at campaign size: seconds per 1,000 distinct server sets (issue 34: an Internet campaign's
hundreds of thousands of sets in minutes, not hours).

The scan is a real DuckDB scan file written as a scan writes it: ``--sets`` distinct sets (each its own
max_idle_timeout, the three parameters the prediction reads drawn from the values servers send), on
``--endpoints`` endpoints (every set once, the rest by a skewed popularity), through ScanStore; and a
library verdict per endpoint through scanner.identify.store_identifications, over libraries with a measured
rule, a written one, none (an assumed rule) and unknown.

Timed, best of two each: the prediction alone (replay.impact.predict over the sets read), `run_impact` in
this process (read, predict, every table and the report written), and `qreplay impact` as the CLI runs it
(a new process, imports included); the baseline, in the same run over the same file, is `qscan report` as
the CLI runs it (also a new process reading every endpoint's set).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from replay import impact  # noqa: E402
from replay.impact_report import ImpactOptions, browser_clients, h3_servers, read_sets, rule_keys, run_impact  # noqa: E402
from replay.measured_rules import load_update_rules  # noqa: E402
from scanner.engine import OK, HandshakeRecord  # noqa: E402
from scanner.identify import store_identifications  # noqa: E402
from scanner.store import ScanStore  # noqa: E402
from tparams.codec import decode_transport_parameters, encode_transport_parameters  # noqa: E402
from tparams.paramset import ParamSet  # noqa: E402

BIN = Path(sys.executable).parent
NOW = dt.datetime.now(dt.timezone.utc)
BATCH = 20_000
LIBRARIES = ("ngtcp2", "quic-go", "quiche", "lsquic", "kwik", "aioquic|kwik", "unknown")
WINDOWS = (0, 16_384, 65_536, 131_072, 262_144, 1_048_576, 6_291_456, 16_777_216)
STREAMS = (0, 1, 16, 100, 128, 256, 100_000)


def _address(i: int) -> str:
    return f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


def make_scan(path: Path, sets: int, endpoints: int, seed: int = 1) -> None:
    """The scan file: every set on one endpoint, the other endpoints' sets by a skewed popularity."""
    rng = random.Random(seed)
    chosen = list(range(sets)) + [min(int(rng.paretovariate(1.0)) - 1, sets - 1) for _ in range(endpoints - sets)]
    with ScanStore.open(path) as store:
        scan_id = store.begin_scan("bench", {})
        for first in range(0, endpoints, BATCH):
            records = []
            for i in range(first, min(first + BATCH, endpoints)):
                n = chosen[i]
                pick = random.Random(n)  # a set's values follow from its number: its endpoints agree
                params = ParamSet(max_idle_timeout=1000 + n, initial_max_data=pick.choice(WINDOWS[1:]),
                                  initial_max_stream_data_bidi_remote=pick.choice(WINDOWS),
                                  initial_max_streams_bidi=pick.choice(STREAMS))
                raw = encode_transport_parameters(params.transport_parameters())
                records.append(HandshakeRecord(ip=_address(i), port=443, sni=None, started_at=NOW, finished_at=NOW,
                                               handshake_ms=10.0, status=OK, quic_version=1, alpn="h3",
                                               transport_parameters_raw=raw,
                                               decoded=decode_transport_parameters(raw, "server")))
            store.append_records(scan_id, records)
    store_identifications(path, pl.DataFrame({
        "ip": [_address(i) for i in range(endpoints)], "port": [443] * endpoints,
        "identified_at": [NOW] * endpoints, "library": [LIBRARIES[chosen[i] % len(LIBRARIES)] for i in range(endpoints)],
        "library_evidence": ["bench"] * endpoints}, schema_overrides={"port": pl.Int32}))


def _timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def _predict(sets: pl.DataFrame) -> float:
    """Seconds of the prediction alone over the sets read."""
    browsers, rules, keys, servers = browser_clients(), load_update_rules(), rule_keys(), h3_servers()
    start = time.perf_counter()
    impact.predict(sets, browsers, rules, keys, servers)
    return time.perf_counter() - start


def _cli(*argv: str) -> None:
    subprocess.run([str(BIN / argv[0]), *argv[1:]], check=True, capture_output=True)


def measure(sets: int, endpoints: int, directory: Path) -> dict[str, float]:
    scan = directory / "scan.duckdb"
    start = time.perf_counter()
    make_scan(scan, sets, endpoints)
    generate_s = time.perf_counter() - start
    read, _ = read_sets(scan)
    predict_s = min(_predict(read) for _ in range(2))
    in_process_s = min(_timed(run_impact, scan, directory / f"out{n}", ImpactOptions()) for n in range(2))
    cli_s = min(_timed(_cli, "qreplay", "impact", str(scan), "--out-dir", str(directory / f"cli{n}")) for n in range(2))
    report_s = min(_timed(_cli, "qscan", "report", str(scan), "--format", "csv") for _ in range(2))
    rows = pl.read_parquet(directory / "cli0" / "predictions.parquet").height
    thousands = read.height / 1000
    return {"sets": read.height, "endpoints": endpoints, "rows": rows, "generate_s": generate_s,
            "predict_s": predict_s, "in_process_s": in_process_s, "cli_s": cli_s, "report_s": report_s,
            "predict_per_1000": predict_s / thousands, "in_process_per_1000": in_process_s / thousands,
            "cli_per_1000": cli_s / thousands, "report_per_1000": report_s / thousands}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=100_000, help="distinct server sets in the scan")
    parser.add_argument("--endpoints", type=int, default=200_000, help="endpoints (at least --sets)")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one, removed)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        m = measure(args.sets, max(args.endpoints, args.sets), Path(directory))
    print(f"{m['sets']:,} distinct sets x library on {m['endpoints']:,} endpoints (written in {m['generate_s']:.0f} s); "
          f"{m['rows']:,} prediction rows; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load {load:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after")
    print(f"prediction alone:          {m['predict_s']:.2f} s   {m['predict_per_1000'] * 1000:.1f} ms per 1,000 sets")
    print(f"run_impact (tables, report): {m['in_process_s']:.2f} s   {m['in_process_per_1000'] * 1000:.1f} ms per 1,000 sets")
    print(f"qreplay impact (new process): {m['cli_s']:.2f} s   {m['cli_per_1000'] * 1000:.1f} ms per 1,000 sets   "
          f"qscan report on the same file {m['report_s']:.2f} s   ratio {m['cli_s'] / m['report_s']:.2f}")


if __name__ == "__main__":
    main()
