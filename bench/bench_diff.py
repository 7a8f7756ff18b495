"""`qscan diff` at census size: two campaigns of 1,000,000 handshake records each, a week apart.

Week 1 is written as a scan writes it (bench_parquet: ``--base`` distinct synthetic records through
ScanStore, copied with new addresses into shard files), with a library verdict per endpoint
(the library component's table, as `qscan targets --identify` fills it). Week 2 is a copy of
each shard file with known changes made in it: 1% of the endpoints gone, 1% new ones, and of the
rest 1% with another initial_max_data, 0.5% each with another ALPN, QUIC version, certificate and
library. Both weeks are exported as campaign directories (scanner.campaign_store.export_shard).

Timed, best of two each: the diff in this process (scanner.diff.diff, every change and the counts
written as Parquet, what `qscan diff --out` does), and ``qscan diff --out`` as the CLI runs it (a new
process, imports included); the baseline, in this process and the same run, is a plain DuckDB
anti-join of the two campaigns' handshakes over the same files (only the endpoints that appeared and
disappeared). The diff's counts are checked against the changes made.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_parquet import make_base, make_shard, size_arguments  # noqa: E402
from scanner.campaign_store import export_shard  # noqa: E402
from scanner.diff import diff  # noqa: E402
from scanner.identify import LIBRARY_SCHEMA  # noqa: E402
from scanner.store import ScanStore  # noqa: E402

QSCAN = str(Path(sys.executable).with_name("qscan"))
LIBRARIES = ("ngtcp2", "quic-go", "quiche", "quinn", "aioquic", "msquic", "lsquic")
# Week 2's changes: which endpoints (by the record's number in its shard, handshake_id) and how.
GONE, NEW = "handshake_id % 100 = 1", "handshake_id % 100 = 7"  # NEW: copied to new addresses
CHANGES = {  # kind: (which, SQL that makes the change)
    "parameters": ("handshake_id % 100 = 2", "initial_max_data = initial_max_data + 1"),
    "alpn": ("handshake_id % 200 = 3", "alpn = 'h3-29'"),
    "version": ("handshake_id % 200 = 4", "quic_version = 1798521807"),  # 0x6b3343cf, QUIC v2
    "certificate": ("handshake_id % 200 = 5", "certificates = [{'sha256': md5(ip) || md5(ip), 'subject': 'CN=new', "
                    "'issuer': 'CN=ca', 'sans': ['new.example'], 'not_before': now(), 'not_after': now()}]"),
}
LIBRARY_CHANGE = "hash(ip) % 200 = 6"


def add_verdicts(path: Path) -> None:
    """A library verdict for every endpoint, as identification stores them."""
    with ScanStore.open(path) as store:
        store.apply_schema(LIBRARY_SCHEMA[0], LIBRARY_SCHEMA[1], LIBRARY_SCHEMA[2].read_text())
        names = ", ".join(f"'{name}'" for name in LIBRARIES)
        store.con.execute(f"INSERT INTO server_library (ip, port, sni, identified_at, library, library_evidence) "
                          f"SELECT ip, port, sni, now(), [{names}][CAST(1 + hash(ip) % {len(LIBRARIES)} AS BIGINT)], 'bench' FROM handshakes")


def next_week(week_1: Path, week_2: Path, first_new: int) -> None:
    """Week 1's shard file with week 2's changes made in it."""
    shutil.copy(week_1, week_2)
    with duckdb.connect(str(week_2)) as con:
        count = con.execute("SELECT count(*) FROM handshakes").fetchone()[0]
        con.execute(f"DELETE FROM server_library WHERE ip IN (SELECT ip FROM handshakes WHERE {GONE})")
        con.execute(f"DELETE FROM handshakes WHERE {GONE}")
        # New endpoints: copies of the first records (ids past the file's last), at addresses of their own.
        g = f"(handshake_id - 1 + {first_new})"
        ip = f"concat_ws('.', 120 + ({g} >> 24), ({g} >> 16) & 255, ({g} >> 8) & 255, {g} & 255)"
        con.execute(f"INSERT INTO handshakes SELECT * REPLACE (handshake_id + {count} AS handshake_id, {ip} AS ip) "
                    f"FROM handshakes WHERE {NEW}")
        con.execute(f"INSERT INTO server_library SELECT l.* REPLACE (h.ip AS ip) FROM handshakes h "
                    f"JOIN handshakes o ON o.handshake_id = h.handshake_id - {count} JOIN server_library l ON l.ip = o.ip "
                    f"WHERE h.handshake_id > {count}")
        for which, change in CHANGES.values():
            con.execute(f"UPDATE handshakes SET {change} WHERE {which}")
        con.execute(f"UPDATE server_library SET library = library || '-next' WHERE {LIBRARY_CHANGE}")


def measure(records: int, shards: int, base: int, directory: Path) -> dict[str, float]:
    base = min(base, records)
    start = time.perf_counter()
    make_base(directory / "base.duckdb", base)
    per_shard = -(-records // shards)
    weeks: dict[str, list[Path]] = {"2026-w01": [], "2026-w02": []}
    for shard in range(shards):
        first, count = shard * per_shard, min(per_shard, records - shard * per_shard)
        old, new = directory / f"w01-shard{shard}.duckdb", directory / f"w02-shard{shard}.duckdb"
        make_shard(old, directory / "base.duckdb", base, first, count)
        add_verdicts(old)
        next_week(old, new, first)
        weeks["2026-w01"].append(old)
        weeks["2026-w02"].append(new)
    campaigns = {week: directory / week for week in weeks}
    for week, files in weeks.items():
        for shard, path in enumerate(files):
            export_shard(path, campaigns[week], campaign=week, vantage="bench", shard=str(shard))
    generate_s = time.perf_counter() - start
    diff_s = min(_timed(_diff, campaigns, directory / f"changes{attempt}") for attempt in range(2))
    cli_s = min(_timed(_diff_cli, campaigns, directory / f"cli{attempt}") for attempt in range(2))
    anti_join_s, anti_join = min(_anti_join(campaigns) for _ in range(2))
    counts = dict(pl.read_parquet(directory / "changes0" / "counts.parquet").rows())
    changes = pl.read_parquet(directory / "changes0" / "changes.parquet").height
    expected = _made(weeks)
    assert counts == expected, (counts, expected)
    assert (counts["appeared"], counts["disappeared"]) == anti_join, (counts, anti_join)
    return {"records": records, "shards": shards, "base": base, "generate_s": generate_s, "diff_s": diff_s,
            "cli_s": cli_s, "anti_join_s": anti_join_s, "changes": changes, **{f"count_{k}": v for k, v in counts.items()}}


def _timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def _diff(campaigns: dict[str, Path], out: Path) -> None:
    result = diff(*campaigns.values())
    try:
        result.write(out)
    finally:
        result.close()


def _diff_cli(campaigns: dict[str, Path], out: Path) -> None:
    subprocess.run([QSCAN, "diff", *map(str, campaigns.values()), "--out", str(out)], check=True, capture_output=True)


def _anti_join(campaigns: dict[str, Path]) -> tuple[float, tuple[int, int]]:
    """The baseline: endpoints only in one week, by a plain anti-join of the two campaigns' handshakes."""
    con = duckdb.connect()
    old, new = (f"read_parquet('{campaigns[week]}/handshakes/*/*/*/*.parquet')" for week in campaigns)
    start = time.perf_counter()
    key = "o.ip = n.ip AND o.port = n.port AND o.sni IS NOT DISTINCT FROM n.sni"  # no SNI in a scan of addresses
    appeared = con.execute(f"SELECT count(*) FROM {new} n ANTI JOIN {old} o ON {key}").fetchone()[0]
    gone = con.execute(f"SELECT count(*) FROM {old} o ANTI JOIN {new} n ON {key}").fetchone()[0]
    return time.perf_counter() - start, (appeared, gone)


def _made(weeks: dict[str, list[Path]]) -> dict[str, int]:
    """What next_week changed, counted in the week-1 shard files by the same rules."""
    con = duckdb.connect()
    made = dict.fromkeys(("appeared", "disappeared", "parameters", "library", "version", "alpn", "certificate"), 0)
    for path in weeks["2026-w01"]:
        con.execute(f"ATTACH '{path}' AS w (READ_ONLY)")
        made["appeared"] += con.execute(f"SELECT count(*) FROM w.handshakes WHERE {NEW} AND NOT ({GONE})").fetchone()[0]
        made["disappeared"] += con.execute(f"SELECT count(*) FROM w.handshakes WHERE {GONE}").fetchone()[0]
        for kind, (which, _) in CHANGES.items():
            made[kind] += con.execute(f"SELECT count(*) FROM w.handshakes WHERE ({which}) AND NOT ({GONE})").fetchone()[0]
        made["library"] += con.execute(f"SELECT count(*) FROM w.handshakes WHERE {LIBRARY_CHANGE} AND NOT ({GONE})"
                                       ).fetchone()[0]
        con.execute("DETACH w")
    return made


def main() -> None:
    args = size_arguments(__doc__.splitlines()[0], "handshake records in each week's campaign")
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        m = measure(args.records, args.shards, args.base, Path(directory))
    print(f"2 campaigns of {m['records']:,} records in {m['shards']} shards ({m['base']:,} distinct; "
          f"generated in {m['generate_s']:.0f} s)")
    print("changes found:      " + ", ".join(f"{k.removeprefix('count_')} {v:,}" for k, v in m.items() if k.startswith("count_"))
          + f"  ({m['changes']:,} rows)")
    print(f"diff, changes written: {m['diff_s']:.2f} s   plain DuckDB anti-join (appeared, disappeared only) "
          f"{m['anti_join_s']:.2f} s   ratio {m['diff_s'] / m['anti_join_s']:.1f}")
    print(f"qscan diff --out (a new process): {m['cli_s']:.2f} s")


if __name__ == "__main__":
    main()
