"""Campaign benchmark: what one shard (host) costs, how two shards scale, and a Slurm array job run for real.

In a population lab (lab/population.py: 16,384 addresses, 4,096 of them QUIC on
two gtlsservers) with two shard namespaces, each figure against a baseline
from the same run:

- ZMap probes/s of one shard over 198.19.0.0/16 (unrouted: the core answers
  ICMP), and of two shards at once (ratio against 2x one shard);
- handshakes/s of one shard's worker over the population (a 1-shard campaign),
  and of two shards at once (ratio against 2x), with the machine's CPU busy
  share and the servers' CPU, which say what bounds it on this machine;
- Parquet bytes a record, merge and report seconds a million records
  (bench/bench_parquet.py's ``measure``, on generated records of the real schema);
- the plan's projection for the 2-shard lab campaign beside its measured time;
- a Slurm array job written by ``qscan campaign plan --slurm`` submitted to a
  one-node slurmctld+slurmd (config in a temporary directory, stopped after),
  its two tasks running the two shards; the campaign's union checked.

Writes datasets/campaign/measured.json (what `qscan campaign plan` reads).

``--replay`` measures qreplay campaigns instead (replay/campaign.py; nothing of the above):

- the merge's time for 100,000 runs (two shards of copies of real runs, exported as the campaign layout);
- the planner's projection against a small campaign's measured time: a first campaign of one repetition
  each gives the run times, the plan projects the same campaign at three repetitions, which then runs; each
  campaign is a `qreplay campaign run` process timed from outside, as a host runs it; three rounds (the
  figure varies with the machine's load);
- run times of every replay stack that runs here, one run of each condition of datasets/campaign/seeds-probe.toml
  (downloads at every link of the full grid, the stream-count figure's requests, the server-side twins' browser
  uploads and page loads), kept as the campaign directory ``--replay-probe`` (default
  datasets/campaign/replay-probe, not committed) and saved, with when and at what load they ran, as
  datasets/campaign/seeds-measured.json (committed), from which docs/scale.md projects datasets/campaign/seeds.toml
  and every seed figure at the full grid (datasets/campaign/full-grid.toml, by docs_build/scale.py) on 1, 8 and 64
  hosts.

    .venv/bin/python bench/bench_campaign.py [--parquet-records 200000] [--no-slurm]
    .venv/bin/python bench/bench_campaign.py --replay [--no-probe] [--no-merge] [--projection-rounds 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_parquet import measure as parquet_measure  # noqa: E402
from procfs import process_cpu_seconds  # noqa: E402
from lab.population import Population, population_lab, shard_namespace  # noqa: E402
from common.slurm import single_node_cluster, unavailable_reason as slurm_unavailable  # noqa: E402
from scanner import campaign_plan  # noqa: E402
from scanner.campaign import QSCAN, CampaignSpec, run_local, union_check  # noqa: E402
from scanner.campaign_store import open_campaign  # noqa: E402
from scanner.engine import ScanSettings  # noqa: E402

INSTANCE = "qcbench"  # not "qlab*": a concurrent test session's leak sweep must not take it
THROUGHPUT_RANGE = "198.19.0.0/16"
#: the replay probe's run times, committed: docs/scale.md's projections read them (docs_build/scale.py)
SEEDS_MEASURED = campaign_plan.MEASURED.parent / "seeds-measured.json"
SETTINGS = ScanSettings(timeout=3, rate=0, concurrency=200, workers=1)


def busy_share(before: list[int], after: list[int]) -> float:
    """Share of all cores busy between two /proc/stat samples."""
    delta = [b - a for a, b in zip(before, after)]
    idle = delta[3] + delta[4]
    return 1 - idle / max(sum(delta), 1)


def cpu_sample() -> list[int]:
    return [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]


def zmap_run(namespaces: list[str], work: Path, rate: int) -> list[float]:
    """probes/s of each shard, all shards at once (discovery only)."""
    shards = len(namespaces)
    processes = []
    for index, ns in enumerate(namespaces):
        out = work / f"zmap{shards}-{index}.duckdb"
        argv = [QSCAN, "ipv4", THROUGHPUT_RANGE, "--out", str(out), "--discover-only", "--rate", str(rate),
                "--cooldown", "1", "--shard", f"{index}/{shards}", "--seed", "3", "--quiet", "--json"]
        processes.append(subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True))
    rates = []
    for process in processes:
        summary = json.loads(process.communicate(timeout=600)[0])
        rates.append(summary["probes_sent"] / (summary["seconds_discovery"] - 1.0))
    return rates


def handshake_run(population: Population, namespaces: list[str], directory: Path, server_pids: list[int]) -> dict:
    spec = CampaignSpec(f"bench{len(namespaces)}", (population.block,), 5, len(namespaces))
    cpu, servers = cpu_sample(), process_cpu_seconds(server_pids)
    results = run_local(spec, directory, namespaces, vantage="main", rate=5000, cooldown=1, settings=SETTINGS)
    busy, server_cpu = busy_share(cpu, cpu_sample()), process_cpu_seconds(server_pids) - servers
    con = open_campaign(directory)
    try:
        check = union_check(con, population.responsive())
    finally:
        con.close()
    ok = sum(r.handshakes_ok for r in results.values())
    return {"per_shard": [r.handshakes_ok / r.seconds_handshakes for r in results.values()],
            "seconds": max(r.seconds_handshakes + r.seconds_discovery for r in results.values()),
            "ok": ok, "busy": busy, "server_cpu_per_handshake_ms": 1000 * server_cpu / max(ok, 1), "union": check}


def slurm_proof(population: Population, lab_instance: str, work: Path, measured: dict) -> str:
    """Submit the plan's job file as a 2-task array to a one-node Slurm; the shards' union checked."""
    if reason := slurm_unavailable():
        return f"not run: {reason}"
    directory = work / "slurm-campaign"
    spec = CampaignSpec("slurm", (population.block,), 9, 2)
    projection = campaign_plan.project(population.network.num_addresses, 2, 5000, SETTINGS.concurrency, measured)
    job = work / "campaign.sbatch"
    script = campaign_plan.slurm_script(projection, spec, str(directory), netns_prefix=f"{lab_instance}-shard")
    job.write_text(script.replace("--cooldown 8", "--cooldown 1"))  # the lab answers at once
    try:
        with single_node_cluster(work / "slurm", "qscanbench") as env:
            started = time.monotonic()
            done = subprocess.run(["sbatch", "--wait", f"--chdir={work}", str(job)], env=env | {"QSCAN": QSCAN},
                                  capture_output=True, text=True, timeout=600)
            seconds = time.monotonic() - started
    except RuntimeError as exc:
        return f"not run: {exc}"
    if done.returncode != 0:
        logs = " | ".join(p.read_text()[-300:] for p in work.glob("qscan-slurm-*.log"))
        return f"FAILED: sbatch exit {done.returncode}: {done.stderr.strip()} {logs}"
    con = open_campaign(directory)
    try:
        check = union_check(con, population.responsive())
    finally:
        con.close()
    return (f"2-task array job ran in {seconds:.1f} s; union {check['discovered']} discovered, "
            f"{check['missing']} missing, {check['duplicates']} twice")


SMALL_CAMPAIGN = """campaign = "{name}"
[[experiment]]
name = "small"
stacks = ["ngtcp2", "quic-go"]
sets = ["firefox", "chrome"]
size = ["1MB", "5MB"]
delays = ["30ms"]
reps = {reps}
"""


def replay_merge(runs: int, work: Path) -> float:
    """Seconds `campaign.merge` takes for ``runs`` runs in two shards (copies of one small campaign's runs)."""
    from replay import campaign as replay_campaign, store
    from scanner.campaign_store import export_shard

    seed = work / "seed.toml"
    seed.write_text(SMALL_CAMPAIGN.format(name="mergebench", reps=1).replace('size = ["1MB", "5MB"]', 'size = "100KB"'))
    plan = replay_campaign.load(seed)
    replay_campaign.run_shard(plan, 0, 1, work / "seed")
    for shard in range(2):
        path = work / f"copies-{shard}.duckdb"
        con = store.connect(path)
        con.execute(f"ATTACH '{work / 'seed' / '_work' / 'main' / 'shard-0.duckdb'}' AS seed (READ_ONLY)")
        con.execute("INSERT INTO experiments SELECT * FROM seed.experiments")
        copies = runs // 2 // len(plan.runs) + 1
        con.execute(f"INSERT INTO runs BY NAME SELECT r.* REPLACE (run_id || '-{shard}-' || i AS run_id) FROM seed.runs r, "
                    f"range({copies}) t(i) LIMIT {runs // 2}")
        con.close()
        export_shard(path, work / "copies", campaign="mergebench", vantage="main", shard=str(shard),
                     open_file=replay_campaign.read_only_results)
    started = time.monotonic()
    result = replay_campaign.merge(work / "copies", work / "copies.duckdb", partial=True)
    seconds = time.monotonic() - started
    assert result.runs == runs // 2 * 2, result
    return seconds


def replay_projection(work: Path) -> list[tuple[str, float, float, str]]:
    """(what it was projected from, projected, measured seconds, loads) of a small campaign on one host, each
    campaign run as a host runs it (`qreplay campaign run`, its own process, timed from outside): projected from
    its first runs (one repetition of each condition), and from an earlier run of the whole campaign."""
    from replay import campaign as replay_campaign

    first, full = work / "first.toml", work / "full.toml"
    first.write_text(SMALL_CAMPAIGN.format(name="first", reps=1))
    full.write_text(SMALL_CAMPAIGN.format(name="full", reps=3))
    host_run(first, work / "first")
    plan = replay_campaign.load(full)
    comparisons = []
    for name, source in (("its first runs", work / "first"), ("an earlier run of it", work / "earlier")):
        projection = replay_campaign.project(plan, 1, *replay_campaign.measured_durations([source]))
        before = os.getloadavg()[0]
        seconds = host_run(full, work / name.replace(" ", "-"))
        if name == "its first runs":  # this run is the next comparison's earlier run
            (work / name.replace(" ", "-")).rename(work / "earlier")
        comparisons.append((name, projection.wall_seconds, seconds, f"load {before:.1f}-{os.getloadavg()[0]:.1f}"))
    return comparisons


def host_run(file: Path, directory: Path, timeout: float = 600) -> float:
    """Wall seconds of one host's `qreplay campaign run` of ``file`` (one shard), start-up included."""
    started = time.monotonic()
    subprocess.run([str(Path(sys.executable).with_name("qreplay")), "campaign", "run", str(file), "--shard", "0/1",
                    "--out", str(directory), "--quiet"], check=True, capture_output=True, timeout=timeout)
    return time.monotonic() - started


def replay_probe(directory: Path) -> str:
    """Run datasets/campaign/seeds-probe.toml into ``directory`` (a host's `qreplay campaign run`, its own process)
    and save its run times as datasets/campaign/seeds-measured.json."""
    from replay import campaign as replay_campaign

    probe = campaign_plan.MEASURED.parent / "seeds-probe.toml"
    started, load = dt.datetime.now(dt.timezone.utc), os.getloadavg()[0]
    seconds = host_run(probe, directory, timeout=4 * 3600)
    shard = json.loads((directory / "_work" / replay_campaign.VANTAGE / "shard-0.json").read_text())
    what = f"{probe.name}, {shard['ran']} runs in {seconds:.0f} s, {shard['failed'] or 'none'} failed"
    replay_campaign.save_measured([directory], SEEDS_MEASURED, {
        "command": "bench/bench_campaign.py --replay", "what": what, "date": f"{started:%Y-%m-%d %H:%M} UTC",
        "machine": f"{platform.node()}, {os.cpu_count()} cores, {platform.machine()}, load {load:.1f} at the start"})
    return f"{what} into {directory}, run times in {SEEDS_MEASURED}"


def replay_main(args) -> None:
    load = os.getloadavg()[0]
    print(f"qreplay campaigns, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, load {load:.1f}, "
          f"{os.cpu_count()} cores")
    if not args.no_merge:
        with tempfile.TemporaryDirectory() as tmp:
            seconds = replay_merge(args.merge_runs, Path(tmp))
            print(f"merge of {args.merge_runs:,} runs (2 shards): {seconds:.1f} s")
    for _ in range(args.projection_rounds):
        with tempfile.TemporaryDirectory() as tmp:
            for source, projected, measured, loads in replay_projection(Path(tmp)):
                print(f"small campaign (2 stacks x 2 sets x 2 sizes at 30 ms x 3 reps, one host): projected {projected:.1f} s "
                      f"from {source}, measured {measured:.1f} s ({loads}); ratio {measured / projected:.2f} (goal "
                      f"within 20%: {'met' if abs(measured / projected - 1) <= 0.2 else 'not met'})", flush=True)
    if not args.no_probe:
        print(f"probe: {replay_probe(args.replay_probe)}")
    print(f"load after: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zmap-rate", type=int, default=1_000_000, help="ZMap rate asked for (probes/s)")
    parser.add_argument("--parquet-records", type=int, default=200_000, help="records for the Parquet figures")
    parser.add_argument("--no-slurm", action="store_true", help="skip the Slurm array job")
    parser.add_argument("--out", type=Path, default=campaign_plan.MEASURED, help="where to write the figures")
    parser.add_argument("--replay", action="store_true", help="measure qreplay campaigns instead (see above)")
    parser.add_argument("--merge-runs", type=int, default=100_000, help="runs for the replay merge figure")
    parser.add_argument("--no-probe", action="store_true", help="skip the replay stacks' run times")
    parser.add_argument("--no-merge", action="store_true", help="skip the replay merge figure")
    parser.add_argument("--projection-rounds", type=int, default=3,
                        help="times to compare the replay projection with a measured campaign (it varies with load)")
    parser.add_argument("--replay-probe", type=Path,
                        default=campaign_plan.MEASURED.parent / "replay-probe", help="where the probe runs go")
    args = parser.parse_args()
    if args.replay:
        replay_main(args)
        return
    population = Population()
    with tempfile.TemporaryDirectory() as tmp, population_lab(population, clients=2, instance=INSTANCE) as lab:
        work = Path(tmp)
        one, two = [shard_namespace(INSTANCE, 0)], [shard_namespace(INSTANCE, i) for i in range(2)]
        zmap1 = zmap_run(one, work, args.zmap_rate)
        zmap2 = zmap_run(two, work, args.zmap_rate)
        print(f"ZMap, {THROUGHPUT_RANGE} asked at {args.zmap_rate:,}/s: one shard {zmap1[0]:,.0f} probes/s; two at once "
              f"{' + '.join(f'{r:,.0f}' for r in zmap2)} = {sum(zmap2):,.0f}; ratio to one shard {sum(zmap2) / zmap1[0]:.2f} "
              "(2.00 = linear)")
        servers = [s.pid for s in lab.servers if s.kind == "ngtcp2-range"]
        hs1 = handshake_run(population, one, work / "one", servers)
        hs2 = handshake_run(population, two, work / "two", servers)
        print(f"handshakes, 4,096 QUIC addresses, {SETTINGS.concurrency} in flight a shard: one shard "
              f"{hs1['per_shard'][0]:,.0f}/s (CPU {hs1['busy']:.0%} of {os.cpu_count()} cores busy); two at once "
              f"{' + '.join(f'{r:,.0f}' for r in hs2['per_shard'])} = {sum(hs2['per_shard']):,.0f}/s (CPU "
              f"{hs2['busy']:.0%} busy); ratio to one shard {sum(hs2['per_shard']) / hs1['per_shard'][0]:.2f}; "
              f"servers {hs1['server_cpu_per_handshake_ms']:.2f} ms CPU a handshake")
        for name, run in (("one shard", hs1), ("two shards", hs2)):
            u = run["union"]
            print(f"  union of {name}: {u['discovered']} discovered of {u['expected']}, {u['missing']} missing, "
                  f"{u['duplicates']} twice; {run['ok']} handshakes ok")
        with tempfile.TemporaryDirectory() as parquet_dir:
            pq = parquet_measure(args.parquet_records, 2, min(args.parquet_records, 100_000), Path(parquet_dir))
        print(f"Parquet ({pq['records']:,} generated records): {pq['parquet_bytes_per_record']:.0f} B a record "
              f"(DuckDB file {pq['duckdb_bytes_per_record']:.0f} B); merge {pq['merge_campaign_s_per_million']:.1f} s a "
              f"million (DuckDB shard files {pq['merge_files_s_per_million']:.1f} s); report {pq['report_campaign_s']:.1f} s")
        million = pq["records"] / 1e6
        measured = {
            "per_shard": {"probes_per_second": round(zmap1[0]), "handshakes_per_second": round(hs1["per_shard"][0])},
            "two_shards": {"probes_ratio": round(sum(zmap2) / zmap1[0], 3),
                           "handshakes_ratio": round(sum(hs2["per_shard"]) / hs1["per_shard"][0], 3),
                           "cpu_busy_one": round(hs1["busy"], 3), "cpu_busy_two": round(hs2["busy"], 3),
                           "server_cpu_ms_per_handshake": round(hs1["server_cpu_per_handshake_ms"], 3)},
            "parquet": {"records": pq["records"], "bytes_per_record": round(pq["parquet_bytes_per_record"], 1),
                        "merge_seconds_per_million": round(pq["merge_campaign_s_per_million"], 2),
                        "report_seconds_per_million": round(pq["report_campaign_s"] / million, 2)},
            "provenance": {"command": "bench/bench_campaign.py " + " ".join(sys.argv[1:]),
                           "date": dt.date.today().isoformat(),
                           "machine": f"{platform.node()}, {os.cpu_count()} cores, {platform.machine()}, "
                                      f"load {os.getloadavg()[0]:.1f}"},
        }
        projection = campaign_plan.project(population.network.num_addresses, 2, 5000, SETTINGS.concurrency, measured,
                                           responsive=len(population.responsive()) / population.network.num_addresses,
                                           cooldown=1)
        print(f"plan for this 2-shard lab campaign (16,384 targets, 5,000 probes/s): {projection.total_hours * 3600:.1f} s a "
              f"host; measured {hs2['seconds']:.1f} s; ratio {hs2['seconds'] / (projection.total_hours * 3600):.2f}")
        if not args.no_slurm:
            print(f"Slurm: {slurm_proof(population, INSTANCE, work, measured)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(measured, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
