"""Campaigns over time: `qscan diff` and `scanner.trends` on two real lab campaigns between which the
lab changed as deployments do, and on corrupt campaign directories.

The lab of week 1 runs four sites; by week 2 site a has changed its windows (ngtcp2, the thesis's
set alpha to its set beta), site d has moved from aioquic to qh3, site c is gone and site e
(quinn) is new. Both weeks scan the same five targets with `qscan targets --identify` and export
the scan as a campaign directory. A lab restarted reissues its certificate, so every site that
answered both weeks shows a new one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from common.setfiles import builtin_set
from conftest import lab_instance, lab_unavailable
from lab import Lab
from lab.topology import ServerSpec, Topology
from scanner import trends
from scanner.analysis import execute_notebook
from scanner.campaign_store import export_shard
from scanner.diff import KINDS, diff
from scanner.engine import TIMEOUT
from scanner.store import ScanStore
from test_store import ALPHA, record
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet

QSCAN = str(Path(sys.executable).with_name("qscan"))


def ngtcp2(name: str, ip: str, parameter_set: str) -> ServerSpec:
    return ServerSpec(name, "ngtcp2", ip, options={"parameter_set": parameter_set,
                                                   "parameters": builtin_set(parameter_set).as_sent()})


WEEK_1 = (ngtcp2("site-a", "198.18.1.10", "alpha"), ngtcp2("site-b", "198.18.1.11", "beta"),
          ServerSpec("site-c", "caddy", "198.18.1.20"), ServerSpec("site-d", "aioquic", "198.18.1.30"))
WEEK_2 = (ngtcp2("site-a", "198.18.1.10", "beta"), ngtcp2("site-b", "198.18.1.11", "beta"),
          ServerSpec("site-d", "qh3", "198.18.1.30"), ServerSpec("site-e", "quinn", "198.18.1.60"))
TARGETS = {spec.name: (spec.ip, 443, spec.server_name) for spec in (*WEEK_1, WEEK_2[-1])}


@pytest.fixture(scope="module")
def weeks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    """campaigns/2026-w01 and 2026-w02 (campaign directories), and what each week's lab says each
    site sends (its kind's transport parameters) and runs (its library)."""
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("weeks")
    hosts = root / "hosts.txt"
    hosts.write_text("".join(f"{ip},{port},{sni}\n" for ip, port, sni in TARGETS.values()))
    labs = {}
    for week, servers in (("2026-w01", WEEK_1), ("2026-w02", WEEK_2)):
        scan = root / f"{week}.duckdb"
        with Lab.up(Topology(servers=servers), instance=lab_instance(f"d{week[-1]}")) as lab:
            done = lab.run_in_client([QSCAN, "targets", str(hosts), "--identify", "--timeout", "5", "--out", str(scan)],
                                     timeout=180)
            assert done.returncode == 0, done.stderr
            labs[week] = {s.name: {"library": s.library, "parameters": s.transport_parameters} for s in lab.servers}
        export_shard(scan, root / "campaigns" / week, campaign=week, vantage="lab", shard="0")
    return root / "campaigns", labs


def expected_parameter_changes(labs: dict[str, dict]) -> set[tuple]:
    before, after = labs["2026-w01"], labs["2026-w02"]
    rows = set()
    for site in before.keys() & after.keys():
        old, new = before[site]["parameters"], after[site]["parameters"]
        for name in PERFORMANCE_PARAMETERS:
            texts = [str(p[name]).lower() if name in p else "not sent" for p in (old, new)]
            if texts[0] != texts[1]:
                rows.add((TARGETS[site], name, *texts))
    return rows


@pytest.mark.lab
def test_diff_finds_exactly_the_changes_the_lab_made(weeks, tmp_path: Path):
    campaigns, labs = weeks
    out = tmp_path / "changes"
    done = subprocess.run([QSCAN, "diff", str(campaigns / "2026-w01"), str(campaigns / "2026-w02"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "endpoints per kind of change" in done.stdout and "initial_max_data" in done.stdout
    changes = pl.read_parquet(out / "changes.parquet")
    by_kind = {kind: {(r["ip"], r["port"], r["sni"]) for r in changes.filter(pl.col("kind") == kind).to_dicts()}
               for kind in KINDS}
    both = {TARGETS[site] for site in ("site-a", "site-b", "site-d")}
    assert by_kind["appeared"] == {TARGETS["site-e"]}
    assert by_kind["disappeared"] == {TARGETS["site-c"]}
    assert by_kind["certificate"] == both  # the restarted lab's new certificate, on every site it kept
    assert by_kind["version"] == by_kind["alpn"] == set()
    libraries = changes.filter(pl.col("kind") == "library").select("ip", "old_value", "new_value").rows()
    assert libraries == [("198.18.1.30", "aioquic", "qh3")]
    assert {labs[w]["site-d"]["library"] for w in labs} == {"aioquic", "qh3"}
    parameters = {((r["ip"], r["port"], r["sni"]), r["field"], r["old_value"], r["new_value"])
                  for r in changes.filter(pl.col("kind") == "parameters").to_dicts()}
    assert parameters == expected_parameter_changes(labs)
    assert {row[0] for row in parameters} == {TARGETS["site-a"], TARGETS["site-d"]}  # windows changed, library changed
    counts = dict(pl.read_parquet(out / "counts.parquet").rows())
    assert counts == {kind: len(endpoints) for kind, endpoints in by_kind.items()}
    # The scan files give the same rows as the campaign directories, and --json the same as Parquet.
    scans = diff(campaigns.parent / "2026-w01.duckdb", campaigns.parent / "2026-w02.duckdb")
    try:
        assert scans.con.sql("SELECT * FROM changes ORDER BY ALL").pl().equals(
            changes.sort(*changes.columns, nulls_last=True).select(scans.changes.columns))
    finally:
        scans.close()
    printed = json.loads(subprocess.run([QSCAN, "diff", str(campaigns / "2026-w01"), str(campaigns / "2026-w02"), "--json"],
                                        capture_output=True, text=True, timeout=120).stdout)
    assert len(printed["changes"]) == changes.height and printed["endpoints"] == {"old": 4, "new": 4, "both": 3}


@pytest.mark.lab
def test_trends_follow_the_lab_population(weeks):
    campaigns, _ = weeks
    opened = trends.open_trends(campaigns)
    try:
        assert opened.campaigns == ["2026-w01", "2026-w02"] and opened.skipped == []
        (churn,) = trends.set_churn(opened).to_dicts()
        assert (churn["in_both"], churn["kept_set"], churn["changed_set"], churn["appeared"], churn["disappeared"]) \
            == (3, 1, 2, 1, 1)
        libraries = {(r["campaign"], r["library"]): r["endpoints"] for r in trends.library_shares(opened).to_dicts()}
        assert libraries[("2026-w01", "aioquic")] == libraries[("2026-w02", "qh3")] == 1
        assert libraries[("2026-w01", "quic-go")] == 1 and libraries[("2026-w02", "quic-go")] == 0
        assert libraries[("2026-w01", "ngtcp2")] == libraries[("2026-w02", "ngtcp2")] == 2
        sets = dict(opened.con.execute("SELECT ip, set_fingerprint FROM trend_endpoints WHERE campaign = '2026-w01' "
                                       "AND ip IN ('198.18.1.10', '198.18.1.11')").fetchall())
        shares = {(r["campaign"], r["set_fingerprint"]): r["share_pct"] for r in trends.set_shares(opened, 10).to_dicts()}
        alpha, beta = sets["198.18.1.10"], sets["198.18.1.11"]  # site a's first set, and the one it moved to
        assert (shares[("2026-w01", alpha)], shares[("2026-w02", alpha)]) == (25.0, 0.0)
        assert (shares[("2026-w01", beta)], shares[("2026-w02", beta)]) == (25.0, 50.0)
    finally:
        opened.close()


@pytest.mark.lab
def test_trend_notebook_draws_the_lab_weeks_and_the_thesis_two_point_case(weeks):
    campaigns, _ = weeks
    notebook = execute_notebook("scan_trends", {"QTP_CAMPAIGNS_DIR": str(campaigns)})  # raises on a failing cell
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    texts = " ".join(output.get("data", {}).get("text/plain", output.get("text", "")) for output in outputs)
    assert sum("image/png" in output.get("data", {}) for output in outputs) >= 6
    assert "2026-w02" in texts and "qh3" in texts
    assert "180489" in texts and "71829" in texts  # max_idle_timeout 120000 (2022-10-13) and 30000 (2022-01-27)


def _scan(path: Path, records) -> Path:
    with ScanStore.open(path) as store:
        store.append_records(store.begin_scan("targets", {}), records)
    return path


def _digest(path: Path) -> str:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()


def test_diff_rows_of_scan_files_and_campaigns(tmp_path: Path):
    """Without the lab: a changed window, a dropped parameter, another ALPN, an endpoint that
    answered only the second time; the same rows from scan files and from campaign directories."""
    changed = ParamSet(initial_max_data=1048576, disable_active_migration=True)
    # An endpoint handshaked twice counts by its latest completed handshake: 192.0.2.2 as ALPHA in
    # the old scan, 192.0.2.1 as ALPHA in the new one although its last attempt timed out.
    old = _scan(tmp_path / "old.duckdb", [record("192.0.2.1", ALPHA), record("192.0.2.2", changed),
                                          record("192.0.2.2", ALPHA), record("192.0.2.3", ALPHA),
                                          record("192.0.2.4", None, status=TIMEOUT)])
    other_alpn = dataclasses.replace(record("192.0.2.3", ALPHA), alpn="h3-29")
    new = _scan(tmp_path / "new.duckdb", [record("192.0.2.1", ALPHA), record("192.0.2.2", changed), other_alpn,
                                          record("192.0.2.4", ALPHA), record("192.0.2.1", None, status=TIMEOUT)])
    expected = [
        ("alpn", "192.0.2.3", "alpn", "h3", "h3-29"),
        ("appeared", "192.0.2.4", "status", "timeout", "ok"),
        ("parameters", "192.0.2.2", "initial_max_data", "16777216", "1048576"),
        ("parameters", "192.0.2.2", "max_idle_timeout", "30000", "not sent"),
    ]
    for number, path in enumerate((old, new)):
        export_shard(path, tmp_path / f"c{number}", campaign=f"w{number}", vantage="v", shard="0")
    for pair in ((old, new), (tmp_path / "c0", tmp_path / "c1"), (old, tmp_path / "c1")):
        result = diff(*pair)
        try:
            rows = result.con.execute("SELECT kind, ip, field, old_value, new_value FROM changes ORDER BY ALL").fetchall()
            assert rows == expected, pair
            assert dict(result.counts().rows()) == {**dict.fromkeys(KINDS, 0), "alpn": 1, "appeared": 1, "parameters": 1}
        finally:
            result.close()


def test_corrupt_campaign_directories_end_in_one_line_each_nothing_lost(tmp_path: Path):
    intact = tmp_path / "campaigns"
    for week in ("2026-w01", "2026-w02"):
        scan = _scan(tmp_path / f"{week}.duckdb", [record("192.0.2.1", ALPHA), record(f"192.0.2.{week[-1]}0", ALPHA)])
        export_shard(scan, intact / week, campaign=week, vantage="v", shard="0")
    damaged = {
        "bad-schema": lambda d: (d / "_schema.json").write_text("{"),
        "no-schema": lambda d: (d / "_schema.json").unlink(),
        "cut-parquet": lambda d: (lambda f: f.write_bytes(f.read_bytes()[:200]))(next((d / "handshakes").rglob("*.parquet"))),
        "foreign-schema": lambda d: (d / "_schema.json").write_text(json.dumps({"format": "other/1"})),
        # one table of another export (week 1's), as an export killed between its renames leaves it
        "half-export": lambda d: shutil.copy(next((intact / "2026-w01" / "scans").rglob("*.parquet")),
                                             next((d / "scans").rglob("*.parquet"))),
    }
    for name, damage in damaged.items():
        shutil.copytree(intact / "2026-w02", intact / name)
        damage(intact / name)
    before = {entry.name: _digest(entry) for entry in intact.iterdir()}
    messages = {}
    for name in damaged:
        done = subprocess.run([QSCAN, "diff", str(intact / "2026-w01"), str(intact / name), "--out", str(tmp_path / name)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.startswith("qscan: error:") and done.stderr.count("\n") == 1, done.stderr
        assert not (tmp_path / name).exists()  # no half-written output either
        messages[name] = done.stderr
    assert "damaged" in messages["bad-schema"] and "not a campaign directory" in messages["no-schema"]
    done = subprocess.run([QSCAN, "trends", str(intact), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    skipped = done.stderr.splitlines()
    assert sorted(line.split(":")[1].strip().split()[-1] for line in skipped) == sorted(damaged)  # "qscan: skipped NAME: why"
    assert [row["campaign"] for row in json.loads(done.stdout)["campaigns"]] == ["2026-w01", "2026-w02"]
    assert {entry.name: _digest(entry) for entry in intact.iterdir()} == before  # read, never changed
    with duckdb.connect() as con:  # the intact campaigns still read as they were written
        assert con.execute(f"SELECT count(*) FROM read_parquet('{intact}/2026-w0*/handshakes/**/*.parquet')").fetchone()[0] == 4
