"""Campaign directories at census size: bytes a record in Parquet, merge seconds per million
records, and `qscan report` over the campaign (issue 18 goal: 10M records in under 10 s).

Records are of the real schema: ``--base`` distinct synthetic handshakes made as a scan makes
them (bench_store.synthetic_records through ScanStore, ~14 parameters each, fresh connection
ids and GREASE per handshake), then copied with new addresses and ids until the shards hold
``--records`` (a copy of a row lies ``--base`` rows away, beyond a Parquet row group, so
compression sees no repeats). Each shard is a scan file exported as one campaign shard.

Printed beside each figure, its baseline measured in the same run: the Parquet size beside
the merged DuckDB file's, the campaign's merge (`qscan merge CAMPAIGN`) beside the merge of
the shards' DuckDB files, the report over the campaign beside the report over the merged
file (both as the CLI runs them: a new process, imports included).

``measure(records, shards, base, directory)`` returns the figures for bench_campaign.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_store import synthetic_records  # noqa: E402
from scanner.campaign_store import export_shard  # noqa: E402
from scanner.merge import merge_scans  # noqa: E402
from scanner.store import ScanStore  # noqa: E402

QSCAN = str(Path(sys.executable).with_name("qscan"))
BATCH = 20_000


def make_base(path: Path, count: int) -> None:
    """``count`` distinct records written as a scan writes them."""
    with ScanStore.open(path) as store:
        scan_id = store.begin_scan("bench", {})
        for first in range(0, count, BATCH):
            store.append_records(scan_id, synthetic_records(min(BATCH, count - first), seed=first + 1, first=first))


def make_shard(path: Path, base: Path, base_count: int, first: int, count: int) -> None:
    """A scan file of ``count`` records: the base's, copied with addresses first.. and ids 1..count."""
    with ScanStore.open(path) as store:
        con = store.con
        con.execute(f"ATTACH '{base}' AS base (READ_ONLY)")
        con.execute("INSERT INTO scans SELECT * FROM base.scans")
        con.execute("INSERT OR IGNORE INTO parameter_names SELECT * FROM base.parameter_names")
        for offset in range(0, count, base_count):
            take = min(base_count, count - offset)
            g = f"(handshake_id - 1 + {first + offset})"  # the record's number in the campaign: its address
            ip = f"concat_ws('.', 10 + ({g} >> 24), ({g} >> 16) & 255, ({g} >> 8) & 255, {g} & 255)"
            con.execute(f"INSERT INTO handshakes SELECT * REPLACE (handshake_id + {offset} AS handshake_id, {ip} AS ip) "
                        f"FROM base.handshakes WHERE handshake_id <= {take}")
            con.execute(f"INSERT INTO handshake_parameters SELECT * REPLACE (handshake_id + {offset} AS handshake_id) "
                        f"FROM base.handshake_parameters WHERE handshake_id <= {take}")
        con.execute("DETACH base")


def _timed(function, *args, **kwargs) -> float:
    start = time.perf_counter()
    function(*args, **kwargs)
    return time.perf_counter() - start


def _report_cli(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run([QSCAN, "report", str(path), "--format", "csv"], check=True, capture_output=True)
    return time.perf_counter() - start


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(records: int, shards: int, base: int, directory: Path) -> dict[str, float]:
    base = min(base, records)
    start = time.perf_counter()
    make_base(directory / "base.duckdb", base)
    files, per_shard = [], -(-records // shards)
    for shard in range(shards):
        first, count = shard * per_shard, min(per_shard, records - shard * per_shard)
        files.append(directory / f"shard{shard}.duckdb")
        make_shard(files[-1], directory / "base.duckdb", base, first, count)
    generate_s = time.perf_counter() - start
    campaign = directory / "campaign"
    export_s = sum(_timed(export_shard, f, campaign, campaign="bench", vantage="v", shard=str(n)) for n, f in enumerate(files))
    merged, from_campaign = directory / "merged.duckdb", directory / "from_campaign.duckdb"
    merge_files_s = _timed(merge_scans, files, merged)
    merge_campaign_s = _timed(merge_scans, [campaign], from_campaign)
    # Best of two, each a fresh process: the first run of a file also pays for the page cache.
    report_campaign_s = min(_report_cli(campaign) for _ in range(2))
    report_file_s = min(_report_cli(merged) for _ in range(2))
    count = duckdb.connect(str(merged), read_only=True).execute("SELECT count(*) FROM handshakes").fetchone()[0]
    assert count == records, (count, records)
    million = records / 1e6
    return {
        "records": records, "shards": shards, "base": base, "generate_s": generate_s,
        "export_s_per_million": export_s / million,
        "parquet_bytes_per_record": _size(campaign) / records, "duckdb_bytes_per_record": _size(merged) / records,
        "merge_campaign_s_per_million": merge_campaign_s / million, "merge_files_s_per_million": merge_files_s / million,
        "report_campaign_s": report_campaign_s, "report_file_s": report_file_s,
    }  # fmt: skip


def size_arguments(description: str, records_help: str) -> argparse.Namespace:
    """The options of a benchmark over campaigns made by ``make_base`` and ``make_shard``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--records", type=int, default=1_000_000, help=records_help)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--base", type=int, default=200_000, help="distinct records generated; the rest are copies")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one, removed)")
    return parser.parse_args()


def main() -> None:
    args = size_arguments(__doc__.splitlines()[0], "handshake records in the campaign (issue: 10M)")
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        m = measure(args.records, args.shards, args.base, Path(directory))
    print(f"{m['records']:,} records in {m['shards']} shards ({m['base']:,} distinct; generated in {m['generate_s']:.0f} s)")
    print(f"size a record:      Parquet {m['parquet_bytes_per_record']:.0f} B   DuckDB file {m['duckdb_bytes_per_record']:.0f} B"
          f"   ratio {m['parquet_bytes_per_record'] / m['duckdb_bytes_per_record']:.2f}")
    print(f"export a million:   {m['export_s_per_million']:.1f} s (scan file -> campaign shard)")
    print(f"merge a million:    campaign {m['merge_campaign_s_per_million']:.1f} s   DuckDB shard files "
          f"{m['merge_files_s_per_million']:.1f} s   ratio {m['merge_campaign_s_per_million'] / m['merge_files_s_per_million']:.2f}")
    goal = ("met" if m["report_campaign_s"] < 10 else "NOT met") if m["records"] >= 10_000_000 else "judged at 10M"
    print(f"qscan report:       campaign {m['report_campaign_s']:.1f} s   merged DuckDB file {m['report_file_s']:.1f} s"
          f"   ratio {m['report_campaign_s'] / m['report_file_s']:.2f}   (goal < 10 s at 10M: {goal})")


if __name__ == "__main__":
    main()
