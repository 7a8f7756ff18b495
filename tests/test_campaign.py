"""Campaigns: a 4-shard census of a 16,384-address lab population, each shard a host (its own
namespace, ZMap shard, handshakes), merged exactly, a killed shard resumed, overlaps refused."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from conftest import lab_instance, lab_unavailable
from common.netns import namespace_pids
from lab.population import Part, Population, population_lab, shard_namespace
from scanner.campaign import CampaignSpec, start_local, union_check, wait_local
from scanner.campaign_store import work_file
from scanner.campaign_store import open_campaign
from scanner.engine import ScanSettings
from scanner.merge import merge_scans
from tparams.errors import ToolError

QSCAN = str(Path(sys.executable).parent / "qscan")
SHARDS, SEED, KILLED = 4, 7, 2
# Small rates: the four shards and both QUIC servers share this machine's two cores.
OPTIONS = {"vantage": "main", "rate": 1000, "cooldown": 1,
           "settings": ScanSettings(timeout=3, rate=150, concurrency=200, workers=1)}


def test_population_layout_is_aligned_and_its_responsive_set_computed():
    population = Population()
    layout = {part.name: str(net) for part, net in population.layout()}
    assert layout == {"silent": "198.18.64.0/19", "alpha": "198.18.96.0/21", "beta": "198.18.104.0/21",
                      "garbage": "198.18.112.0/21", "closed": "198.18.120.0/21"}
    responsive = population.responsive()
    assert len(responsive) == 4096 and "198.18.96.0" in responsive and "198.18.112.0" not in responsive
    assert population.addresses("closed") == population.addresses("garbage") == 2048
    with pytest.raises(ToolError, match="power of two"):
        Population(parts=(Part("a", "quic", 3), Part("b", "silent", 1)))
    with pytest.raises(ToolError, match="overlaps the lab's own addresses"):
        Population("198.18.0.0/18")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """The campaign, with shard 2's host killed (SIGKILL to everything in its namespace) while it
    handshakes, then its same command run again."""
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    population = Population()
    directory = tmp_path_factory.mktemp("campaign") / "census"
    spec = CampaignSpec("lab", (population.block,), SEED, SHARDS)
    with population_lab(population, clients=SHARDS, instance=lab_instance("camp")) as lab:
        namespaces = [shard_namespace(lab.instance, i) for i in range(SHARDS)]
        started = start_local(spec, directory, namespaces, **OPTIONS)
        metadata = Path(f"{work_file(directory, 'main', KILLED)}.zmap") / "metadata.json"
        deadline = time.monotonic() + 60
        while not (metadata.exists() and metadata.stat().st_size) and time.monotonic() < deadline:  # written at ZMap's end
            time.sleep(0.1)
        # ZMap done; 2.5 s on, about 375 of the shard's ~1,000 handshakes are started, and the WAL has grown past the
        # discovery's rows by at least one batch of them: waited for as well, since a loaded machine once had none
        # stored 2.5 s after ZMap (2026-11-28 12:20, load 11; here the WAL took 241 kB, then 527 kB, 1.4 and 2.6 s on)
        wal, discovered = Path(f"{work_file(directory, 'main', KILLED)}.wal"), 0
        handshaking = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            size = wal.stat().st_size if wal.exists() else 0
            discovered = discovered or size
            if time.monotonic() >= handshaking and size > discovered > 0:
                break
            time.sleep(0.05)
        # Stopped first, so that it stores nothing more while its namespace's processes are listed (a listing at
        # SCHED_IDLE on a loaded machine can outlast the shard's remaining handshakes)
        killed = started.pop(KILLED)
        os.killpg(killed.pid, signal.SIGSTOP)
        for pid in namespace_pids(namespaces[KILLED]):
            os.kill(pid, signal.SIGKILL)
        killed.wait(timeout=10)
        results = wait_local(started, timeout=120)
        with duckdb.connect(str(work_file(directory, "main", KILLED)), read_only=True) as con:
            before = con.execute("SELECT count(*) FROM handshakes").fetchone()[0]
        results |= wait_local(start_local(spec, directory, namespaces, shards=[KILLED], **OPTIONS), timeout=120)
    return directory, population, results, before, killed.returncode


@pytest.mark.lab
def test_four_shards_merge_exactly_into_the_population(campaign):
    directory, population, results, _, _ = campaign
    con = open_campaign(directory)
    try:
        check = union_check(con, population.responsive())
        statuses = dict(con.execute("SELECT status, count(*) FROM handshakes GROUP BY ALL").fetchall())
        sets = con.execute("SELECT count(DISTINCT set_fingerprint) FROM handshakes WHERE status = 'ok'").fetchone()[0]
        answers = dict(con.execute("SELECT key, sum(value) FROM (SELECT unnest(map_keys(answers)) AS key, "
                                   "unnest(map_values(answers)) AS value FROM discovery_runs) GROUP BY key").fetchall())
    finally:
        con.close()
    # Where an answer was lost, if ZMap saw it go: each shard's send failures and capture drops.
    zmap = [json.loads((Path(f"{work_file(directory, 'main', i)}.zmap") / "metadata.json").read_text())
            for i in range(SHARDS)]
    losses = [{k: m.get(k) for k in ("send_to_failures", "pcap_drop", "pcap_ifdrop", "success_unique")} for m in zmap]
    assert check == {"discovered": 4096, "duplicates": 0, "handshakes": 4096, "handshake_duplicates": 0,
                     "expected": 4096, "missing": 0, "unexpected": 0}, losses
    assert all(r.quic_servers > 0 for r in results.values())  # every shard found a part of the population
    assert sum(r.probes_sent for r in results.values()) == 16384  # ZMap's shards partition the block
    # Every closed address answered ICMP port unreachable, every garbage one with bytes that are not QUIC.
    assert answers["icmp-unreach"] == population.addresses("closed")
    assert sum(n for reason, n in answers.items() if reason.startswith("invalid:")) == population.addresses("garbage")
    assert statuses.get("ok", 0) >= 0.95 * 4096 and sets == 2  # alpha and beta
    # The shards' scan files merged the old way agree: one scan, the same addresses.
    merged = directory.parent / "merged.duckdb"
    merge_scans([work_file(directory, "main", i) for i in range(SHARDS)], merged)
    with duckdb.connect(str(merged), read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT scan_id), count(DISTINCT ip), count(*) FROM discovery").fetchone() \
            == (1, 4096, 4096)


@pytest.mark.lab
def test_a_killed_shard_resumes_where_it_stopped(campaign):
    directory, _, results, before, returncode = campaign
    assert returncode == -signal.SIGKILL
    resumed = results[KILLED]
    assert resumed.resumed and 0 < before < resumed.quic_servers  # killed half way through its handshakes
    assert resumed.handshakes == resumed.quic_servers - before  # only the rest was handshaked again
    assert all(not r.resumed for i, r in results.items() if i != KILLED)
    # ZMap's files beside the resumed scan still hold the probe its stored answers answered (resuming once
    # wrote a new random probe over it)
    with duckdb.connect(str(work_file(directory, "main", KILLED)), read_only=True) as con:
        sent = con.execute("SELECT probe_hex FROM discovery_runs").fetchall()
    assert sent == [((Path(f"{work_file(directory, 'main', KILLED)}.zmap") / "probe.bin").read_bytes().hex(),)]


def _shard(directory, *args):
    return subprocess.run([QSCAN, "campaign", "shard", "198.18.64.0/18", "--campaign", "lab", "--out",
                           str(directory), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.lab
@pytest.mark.parametrize("args, message", [
    (["--shard", "0/4", "--seed", "7"], "shard 0/4 of campaign lab (vantage main) is already complete in"),
    (["--shard", "0/4", "--seed", "8"], "holds campaign lab with seed 7 (this shard: 8)"),
    (["--shard", "1/2", "--seed", "7"], "holds campaign lab with shards 4 (this shard: 2)"),
])
def test_overlapping_shards_are_refused_in_one_line(campaign, args, message):
    directory = campaign[0]
    done = _shard(directory, *args)
    assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1], done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_shard_running_elsewhere_is_refused(tmp_path):
    spec_args = ["--shard", "3/4", "--seed", "7"]
    lock = work_file(tmp_path, "main", 3).with_suffix(".lock")
    lock.parent.mkdir(parents=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = _shard(tmp_path, *spec_args)
    assert done.returncode == 2
    assert done.stderr.strip() == ("qscan: error: shard 3/4 of campaign lab (vantage main) is being run by "
                                   "another process; refusing to run it twice")
