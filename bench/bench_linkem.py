"""linkem speed, each figure against a plain veth pair measured in the same run.

1. 30 ms delay, --pps (100,000) datagrams of 64 B a second from `linkem blast`
   (server namespace, sendmmsg, send time stamped in the payload) to `linkem
   sink` (client namespace, the kernel's receive time stamp), once with
   linkem's threads pinned to one core and the load generator on the
   other(s), once unpinned as qreplay runs it.
   Reports packets/s relayed, linkem's own added-delay error (read to write,
   p50/p99; goal p99 < 0.2 ms) and the end-to-end error (payload stamp to
   receive stamp, minus 30 ms), beside the same generator's one-way latency
   over a plain veth: what the sender, the stacks and the machine add anyway.
   During the veth run `linkem timer` meets one deadline per packet with a
   writer's priority and waiting policy on linkem's core(s): the error the
   machine itself leaves (scheduler, timers, a VM's host), the floor for
   linkem's.
2. 0 ms configured: goodput through linkem versus a plain veth (goal >= 0.8x)
   for iperf3 UDP (1400 B datagrams, unlimited sender, no GSO) and iperf3 TCP;
   then every QUIC stack usable here through `qreplay` at 0 ms: the veth
   baseline, `--link auto` as qreplay runs such a condition (goal >= 0.9x:
   with nothing to emulate it takes the veth, so linkem costs nothing), and
   linkem forced, with each stack's client and server CPU a gigabyte.

Each figure is measured --repeats times, veth and linkem alternating, and
printed as the median with the range. The machine is shared: note `uptime`.

    .venv/bin/python bench/bench_linkem.py [--pps 100000] [--repeats 3] [--quic-size 200MB] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from procfs import process_cpu_seconds  # bench/, the script's own directory
from common.process import STARTED_PIDS, ns_command
from replay.link import LINKEM, LinkConfig
from replay.stacks import all_stacks
from replay.testbed import IPERF_PORT, Testbed

SINK_PORT = 9000
REPO = Path(__file__).resolve().parents[1]


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` onto ``cpus`` (a thread started later inherits its creator's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def _udp_counter(tb: Testbed, name: str) -> int:
    out = subprocess.run(ns_command(tb.client_ns, ["nstat", "-az", name]), capture_output=True, text=True)
    return int(out.stdout.split()[-2]) if name in out.stdout else 0


def blast(tb: Testbed, pps: int, seconds: float, delay_ms: float, load_cpus: set[int]) -> dict:
    """One blast/sink run server -> client; the sink's summary plus what the generator offered."""
    taskset = ["taskset", "-c", ",".join(map(str, sorted(load_cpus)))]
    overflow_before = _udp_counter(tb, "UdpRcvbufErrors")
    sink = subprocess.Popen(ns_command(tb.client_ns, [*taskset, str(LINKEM), "sink", "--listen",
                                                            f"{tb.client_ip}:{SINK_PORT}", "--delay", f"{delay_ms}ms"]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    STARTED_PIDS.add(sink.pid)
    try:
        sink.stderr.readline()  # "listening"
        sent = tb.run_in(tb.server_ns, [*taskset, str(LINKEM), "blast", "--target", f"{tb.client_ip}:{SINK_PORT}",
                                        "--pps", str(pps), "--size", "64", "--duration", f"{seconds}s"],
                         timeout=seconds + 30)
        out, _ = sink.communicate(timeout=30)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
        STARTED_PIDS.discard(sink.pid)
    result = json.loads(out)
    result["offered_pps"] = json.loads(sent.stdout)["offered_pps"]
    result["sink_overflow"] = _udp_counter(tb, "UdpRcvbufErrors") - overflow_before
    return result


def iperf(tb: Testbed, udp: bool, seconds: float) -> float:
    """iperf3 server -> client, the receiver's mean goodput in bits/s without the first second."""
    server = tb.start_server(["iperf3", "-s", "-1", "-B", tb.server_ip, "-p", str(IPERF_PORT)], "iperf3.log")
    tb.wait_listening(IPERF_PORT, "tcp")
    mode = ["-u", "-l", "1400", "-b", "0"] if udp else []
    done = tb.run_client(["iperf3", "-c", tb.server_ip, "-p", str(IPERF_PORT), "-R", "-J", "-t", str(seconds), *mode],
                         timeout=seconds + 30)
    tb.stop(server)
    intervals = json.loads(done.stdout)["intervals"][1:]
    return statistics.mean(i["sum"]["bits_per_second"] for i in intervals)


def quic(stack: str, link: str, size: str, reps: int) -> dict | None:
    """`qreplay --stack STACK --delay 0ms --link LINK`: mean goodput (Mbit/s), the path taken, and the client's
    and the server's CPU seconds a gigabyte; None if the stack is unusable or a run failed."""
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "bench.duckdb"
        done = subprocess.run([str(REPO / ".venv" / "bin" / "qreplay"), "--stack", stack, "--delay", "0ms",
                               "--size", size, "--reps", str(reps), "--link", link, "--json",
                               "--out", str(results)], capture_output=True, text=True)
        if done.returncode or not results.exists():
            return None
        row = duckdb.connect(str(results), read_only=True).execute(
            "SELECT count(*) FILTER (WHERE status != 'ok'), avg(goodput_mbps), any_value(link_backend), "
            "sum(client_cpu_s) / sum(bytes) * 1e9, sum(server_cpu_s) / sum(bytes) * 1e9 FROM runs").fetchone()
    failed, mbps, path, client_cpu, server_cpu = row
    if failed or mbps is None:
        return None
    return {"mbps": mbps, "path": path, "client_cpu_s_per_gb": client_cpu, "server_cpu_s_per_gb": server_cpu}


def spread(values: list[float], scale: float = 1.0, fmt: str = ",.0f") -> str:
    values = sorted(v * scale for v in values)
    return f"{statistics.median(values):{fmt}} ({values[0]:{fmt}}-{values[-1]:{fmt}})"


def timer_floor(args, cpus: set[int]) -> subprocess.Popen:
    """`linkem timer` on ``cpus``: a writer's wake-ups alone, one deadline per packet of --pps."""
    return subprocess.Popen(["taskset", "-c", ",".join(map(str, sorted(cpus))), str(LINKEM), "timer",
                             "--interval", f"{1e9 / args.pps:.0f}ns", "--duration", f"{args.seconds}s"],
                            stdout=subprocess.PIPE, text=True)


def delay_part(args, pinned: bool) -> None:
    cores = sorted(os.sched_getaffinity(0))
    linkem_cpus = {cores[-1]} if pinned else set(cores)
    load_cpus = (set(cores[:-1]) or {cores[-1]}) if pinned else set(cores)
    relayed, veth, floor = [], [], []
    for _ in range(args.repeats):
        with Testbed(backend="veth") as tb:
            # The same load over a plain veth, with linkem's waiting policy alone where linkem would run:
            # the part of the delay error this machine leaves to any emulator.
            timer = timer_floor(args, linkem_cpus)
            veth.append(blast(tb, args.pps, args.seconds, 0, load_cpus))
            floor.append(json.loads(timer.communicate(timeout=args.seconds + 30)[0]))
        with Testbed(link=LinkConfig(delay_down_ms=30), backend="relay") as tb:
            _pin(tb._path.process.pid, linkem_cpus)
            cpu_before, started = process_cpu_seconds([tb._path.process.pid]), time.monotonic()
            run = blast(tb, args.pps, args.seconds, 30, load_cpus)
            run["linkem_cores"] = (process_cpu_seconds([tb._path.process.pid]) - cpu_before) / (time.monotonic() - started)
            run["linkem"] = tb.link_counters()["down"]
            relayed.append(run)
    where = f"linkem alone on core {cores[-1]}, the load on the rest" if pinned else "no pinning (as qreplay runs)"
    print(f"30 ms delay, 64 B datagrams offered at {args.pps:,}/s, {where}; median (range) of {args.repeats}:")
    print(f"  offered {spread([r['offered_pps'] for r in relayed])}/s, relayed "
          f"{spread([r['received_pps'] for r in relayed])}/s = "
          f"{spread([r['received_pps'] / r['offered_pps'] for r in relayed], fmt='.3f')} x offered; "
          f"lost in linkem {[r['linkem']['dropped_overflow'] for r in relayed]}, "
          f"at the sink's socket {[r['sink_overflow'] for r in relayed]}; linkem used "
          f"{spread([r['linkem_cores'] for r in relayed], fmt='.2f')} cores")
    p50 = [r["linkem"]["delay_error_p50_us"] / 1000 for r in relayed]
    p99 = [r["linkem"]["delay_error_p99_us"] / 1000 for r in relayed]
    floor99 = [f["error_p99_us"] / 1000 for f in floor]
    print(f"  linkem added-delay error p50 {spread(p50, fmt='.3f')} ms, p99 {spread(p99, fmt='.3f')} ms = "
          f"{spread([v / 0.2 for v in p99], fmt='.2f')} x the 0.2 ms goal")
    print(f"  the machine's floor (linkem timer: a writer's wake-ups alone, same load over a veth): p50 "
          f"{spread([f['error_p50_us'] / 1000 for f in floor], fmt='.3f')} ms, p99 {spread(floor99, fmt='.3f')} ms; "
          f"linkem p99 / floor p99 = {statistics.median(p99) / max(statistics.median(floor99), 1e-3):.2f}")
    print(f"  end to end: error p50 {spread([r['error_p50_ms'] for r in relayed], fmt='.3f')} ms, "
          f"p99 {spread([r['error_p99_ms'] for r in relayed], fmt='.3f')} ms; the same generator over a plain veth: "
          f"one-way latency p50 {spread([r['latency_p50_ms'] for r in veth], fmt='.3f')} ms, "
          f"p99 {spread([r['latency_p99_ms'] for r in veth], fmt='.3f')} ms (sink lost "
          f"{[r['sink_overflow'] for r in veth]})")


def goodput_part(args) -> None:
    rows = [("iperf3 UDP 1400 B", lambda tb: iperf(tb, True, args.seconds)),
            ("iperf3 TCP", lambda tb: iperf(tb, False, args.seconds))]
    print("0 ms configured, goodput through linkem vs plain veth, median (range) "
          f"of {args.repeats} alternating runs (goal >= 0.80 x):")
    for name, measure in rows:
        veth, relay = [], []
        for _ in range(args.repeats):
            with Testbed(backend="veth") as tb:
                veth.append(measure(tb))
            with Testbed(link=LinkConfig(), backend="relay") as tb:
                relay.append(measure(tb))
        print(f"  {name:<22} veth {spread(veth, 1e-6)} Mbit/s, linkem {spread(relay, 1e-6)} Mbit/s = "
              f"{statistics.median(relay) / statistics.median(veth):.2f} x")
    if args.quick:
        return
    print(f"0 ms, every stack through qreplay ({args.quic_size} downloads, {args.quic_reps} per figure): the "
          "plain veth baseline; `auto`, as qreplay runs a 0 ms condition (goal >= 0.90 x of the veth; it takes "
          "the veth itself when nothing is to be emulated); linkem forced (--link relay), for reference; and "
          "the CPU seconds a gigabyte of the client and the server, over the veth:")
    for stack, usable in all_stacks().items():
        if args.stacks and stack not in args.stacks.split(","):
            continue
        if usable.unavailable_reason():
            print(f"  {stack:<10} not usable here: {usable.unavailable_reason()}")
            continue
        runs: dict[str, list[dict]] = {"veth": [], "auto": [], "relay": []}
        for _ in range(args.repeats):
            for link in runs:
                runs[link].append(quic(stack, link, args.quic_size, args.quic_reps))
        if any(None in measured for measured in runs.values()):
            print(f"  {stack:<10} a run failed (qreplay {stack} --delay 0ms --size {args.quic_size} says why)")
            continue
        mbps = {link: [r["mbps"] for r in measured] for link, measured in runs.items()}
        veth = statistics.median(mbps["veth"])
        print(f"  {stack:<10} veth {spread(mbps['veth'])}, auto ({runs['auto'][0]['path']}) {spread(mbps['auto'])} = "
              f"{statistics.median(mbps['auto']) / veth:.2f} x, linkem {spread(mbps['relay'])} = "
              f"{statistics.median(mbps['relay']) / veth:.2f} x Mbit/s; CPU a GB: client "
              f"{statistics.median(r['client_cpu_s_per_gb'] for r in runs['veth']):.2f} s, server "
              f"{statistics.median(r['server_cpu_s_per_gb'] for r in runs['veth']):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pps", type=int, default=100_000, help="offered datagrams per second (30 ms part)")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each transfer")
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each figure")
    parser.add_argument("--quic-size", default="200MB", help="qreplay download size")
    parser.add_argument("--quic-reps", type=int, default=3, help="qreplay --reps per figure")
    parser.add_argument("--quick", action="store_true", help="skip the QUIC stacks")
    parser.add_argument("--stacks", help="comma-separated QUIC stacks (default: every one usable here)")
    parser.add_argument("--skip-delay", action="store_true", help="only the 0 ms goodput part")
    args = parser.parse_args()
    if args.seconds < 2:  # iperf3's first one-second interval is start-up, left out of every figure
        parser.error("--seconds must be at least 2: the first second of each transfer is left out as start-up")
    if not LINKEM.exists():
        sys.exit(f"{LINKEM} is missing: run scripts/setup.sh")
    print(f"load: {open('/proc/loadavg').read().split()[:3]} at {time.strftime('%H:%M:%S')}")
    if not args.skip_delay:
        delay_part(args, pinned=True)
        delay_part(args, pinned=False)
    goodput_part(args)
    print(f"load: {open('/proc/loadavg').read().split()[:3]} at {time.strftime('%H:%M:%S')}")


if __name__ == "__main__":
    main()
