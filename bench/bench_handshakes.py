"""Handshake speed: completed QUIC handshakes per second against ngtcp2's gtlsserver, in one run:

  (a) naive aioquic: a few concurrent ``aioquic.asyncio.connect()`` calls in a loop (the baseline);
  (b) quic-go: bench/qscanner_loop (QScanner's stack), one socket per dial as QScanner does, and
      all dials over one shared socket; the faster of the two is the anchor;
  (c) our engine: scanner.engine.scan_targets, rate unlimited, high concurrency, building the
      full HandshakeRecord of every handshake and turning it into the store's Arrow columns
      where qscan does (in the worker; not stored: bench_store covers that), in one process
      and with one worker process per core; the faster of the two is compared, as quic-go's
      faster mode is.

Goal (issue 12): engine >= 1.0x quic-go's rate in the same run, and client CPU per completed
handshake at or below quic-go's. Each contender prints its CPU per completed handshake, client
and servers apart, which shows whether a gap is the client's own work or the servers' share of
the two cores; the engine's client CPU includes starting its worker processes.
Then memory: 10,000 handshakes in flight in one engine process towards a silent UDP socket
(it never reads, so no ICMP answers either), peak RSS < 512 MiB.

Everything runs on loopback: the servers bind 127.0.0.1, the silent target too. Several
gtlsserver processes (``--servers``) serve round-robin because one is single-threaded;
they are killed on exit, Ctrl-C and failure. Each contender runs ``--repeats`` times,
interleaved, so a change in machine load hits all of them; the spread is printed.

    .venv/bin/python bench/bench_handshakes.py [--count 3000] [--servers 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from procfs import process_cpu_seconds  # noqa: E402  (bench/, the script's own directory)
from scanner.engine import OK, HandshakeLoop, ScanSettings, scan_targets  # noqa: E402
from common.certs import write_certificate  # noqa: E402
from scanner.columns import HandshakeColumns, handshake_columns  # noqa: E402
from scanner.targets import Target  # noqa: E402

LOOPBACK = "127.0.0.1"
QUICGO = ROOT / "build" / "bin" / "qscanner_loop"
GOAL_RATE = 1000.0
GOAL_RATIO = 1.0
MEMORY_GOAL = 512 << 20


def client_cpu_seconds() -> float:
    """This process plus its reaped children: the naive loop, the engine's workers, the quic-go loop."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def add_server_arguments(parser: argparse.ArgumentParser, count: int, count_help: str, port: int) -> None:
    """--count handshakes against --servers gtlsserver processes from --port on: every gtlsservers bench's options."""
    parser.add_argument("--count", type=int, default=count, help=count_help)
    parser.add_argument("--servers", type=int, default=2, help="gtlsserver processes (each is single-threaded)")
    parser.add_argument("--port", type=int, default=port, help="first server port on 127.0.0.1")


@contextlib.contextmanager
def gtlsservers(count: int, first_port: int) -> Iterator[list[tuple[str, int]]]:
    """``count`` gtlsserver processes on loopback; always killed, also on Ctrl-C."""
    with tempfile.TemporaryDirectory(prefix="qbench-") as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        write_certificate(cert, key, ["bench.test"], [LOOPBACK])
        (Path(tmp) / "index.html").write_text("bench\n")
        servers: list[subprocess.Popen] = []
        previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        try:
            addresses = [(LOOPBACK, first_port + i) for i in range(count)]
            for ip, port in addresses:
                servers.append(
                    subprocess.Popen(
                        ["gtlsserver", "--quiet", f"--htdocs={tmp}", ip, str(port), str(key), str(cert)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    )  # fmt: skip
                )
            time.sleep(0.5)
            dead = [s.args for s in servers if s.poll() is not None]
            if dead:
                raise SystemExit(f"gtlsserver did not start (port busy?): {dead[0]}")
            gtlsservers.pids = [server.pid for server in servers]  # type: ignore[attr-defined]
            yield addresses
        finally:
            for server in servers:
                server.kill()
            for server in servers:
                server.wait()
            signal.signal(signal.SIGTERM, previous)


def naive_aioquic(addresses: list[tuple[str, int]], count: int, concurrency: int) -> dict:
    """The baseline: what a straightforward asyncio client does, one connect() after another."""
    from aioquic.asyncio import connect
    from aioquic.quic.configuration import QuicConfiguration

    async def run() -> dict:
        remaining = iter(range(count))
        done = failed = 0

        async def worker() -> None:
            nonlocal done, failed
            for n in remaining:
                host, port = addresses[n % len(addresses)]
                configuration = QuicConfiguration(is_client=True, alpn_protocols=["h3"], verify_mode=ssl.CERT_NONE)
                try:
                    async with connect(host, port, configuration=configuration, wait_connected=True):
                        done += 1
                except (ConnectionError, OSError, asyncio.TimeoutError):
                    failed += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - start
        return {"completed": done, "failed": failed, "seconds": seconds}

    return asyncio.run(run())


def quic_go(addresses: list[tuple[str, int]], count: int, concurrency: int, shared: bool) -> dict:
    argv = [str(QUICGO), "-target", ",".join(f"{ip}:{port}" for ip, port in addresses),
            "-count", str(count), "-concurrency", str(concurrency)]  # fmt: skip
    if shared:
        argv.append("-shared")
    result = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600).stdout)
    return {"completed": result["completed"], "failed": result["failed"], "seconds": result["seconds"]}


def engine(addresses: list[tuple[str, int]], count: int, concurrency: int, workers: int) -> dict:
    """Our engine through its library API, every record built, and turned into the store's
    columns where qscan does it (in each worker), as in a scan."""
    targets = [Target(*addresses[n % len(addresses)]) for n in range(count)]
    batches: list[HandshakeColumns] = []
    start = time.perf_counter()
    settings = ScanSettings(rate=0, concurrency=concurrency, timeout=10, workers=workers)
    scan_targets(targets, settings, batches.append, prepare=handshake_columns)
    total = time.perf_counter() - start
    handshakes = pa.concat_tables(batch.handshakes for batch in batches)
    ok = sum(batch.count_status(OK) for batch in batches)
    # Handshaking time, first Initial to last completion: what the quic-go loop times too.
    # The workers' interpreter start is reported separately.
    first = pc.min(handshakes.column("started_at")).as_py()
    last = pc.max(handshakes.column("finished_at")).as_py()
    seconds = (last - first).total_seconds()
    return {"completed": ok, "failed": handshakes.num_rows - ok, "seconds": seconds, "end_to_end_seconds": total}


def memory_child(in_flight: int, timeout: float) -> None:
    """One engine process holding ``in_flight`` handshakes towards a silent socket; prints JSON."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind((LOOPBACK, 0))  # bound and never read: datagrams are dropped, nothing answers
    target = Target(LOOPBACK, silent.getsockname()[1])
    peak = {"in_flight": 0, "rss": 0}
    loop: HandshakeLoop

    def sample() -> bool:
        inflight = len(loop.inflight)
        if inflight > peak["in_flight"]:
            peak["in_flight"] = inflight
        return inflight >= in_flight  # all started and none finished: the peak is reached

    settings = ScanSettings(rate=0, concurrency=in_flight, timeout=timeout, workers=1)
    loop = HandshakeLoop(settings, lambda record: None)
    start = time.perf_counter()
    try:
        loop.run([target] * in_flight, should_stop=sample)
    finally:
        loop.close()
        silent.close()
    # VmHWM: this process's peak resident set, the interpreter included.
    status = Path("/proc/self/status").read_text()
    hwm_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    print(json.dumps({"in_flight": peak["in_flight"], "peak_rss": hwm_kib * 1024, "seconds": time.perf_counter() - start}))


def memory(in_flight: int, timeout: float) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", str(in_flight), "--timeout", str(timeout)],
        capture_output=True, text=True, check=True, timeout=timeout + 600,
    )  # fmt: skip
    return json.loads(out.stdout)


def summarise(name: str, runs: list[dict]) -> float:
    rates = [r["completed"] / r["seconds"] for r in runs]
    median = statistics.median(rates)
    failed = sum(r["failed"] for r in runs)
    extra = ""
    if "end_to_end_seconds" in runs[0]:
        e2e = [r["completed"] / r["end_to_end_seconds"] for r in runs]
        extra = f"  (incl. worker start: {statistics.median(e2e):,.0f}/s)"
    # CPU per completed handshake says where the cores went: the client's own work, or the servers'.
    client_ms = statistics.median(r["client_cpu"] / max(1, r["completed"]) * 1000 for r in runs)
    server_ms = statistics.median(r["server_cpu"] / max(1, r["completed"]) * 1000 for r in runs)
    print(f"  {name:<34} {median:8,.0f}/s  spread {min(rates):,.0f}-{max(rates):,.0f}  failed {failed}  "
          f"CPU/handshake: client {client_ms:.2f} ms, servers {server_ms:.2f} ms{extra}")  # fmt: skip
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_arguments(parser, 3000, "handshakes per run (naive aioquic: a third)", 24433)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each contender, interleaved")
    parser.add_argument("--concurrency", type=int, default=256, help="engine handshakes in flight")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="engine worker processes")
    parser.add_argument("--memory", type=int, default=10_000, help="handshakes in flight for the memory test (0: skip)")
    parser.add_argument("--timeout", type=float, default=120.0, help="memory test: handshake timeout, seconds")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.timeout)
        return
    if not QUICGO.exists():
        subprocess.run(["go", "build", "-o", str(QUICGO), "./bench/qscanner_loop"], cwd=ROOT, check=True)

    load = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"naive": [], "quicgo": [], "quicgo_shared": [], "engine": [], "engine_workers": []}
    with gtlsservers(args.servers, args.port) as addresses:
        for repeat in range(args.repeats):
            # Rotate the order so a load change mid-run does not always hit the same contender.
            order = list(runs)[repeat % len(runs) :] + list(runs)[: repeat % len(runs)]
            for name in order:
                client_before, server_before = client_cpu_seconds(), process_cpu_seconds(gtlsservers.pids)  # type: ignore[attr-defined]
                if name == "naive":
                    runs[name].append(naive_aioquic(addresses, max(200, args.count // 3), 8))
                elif name == "quicgo":
                    runs[name].append(quic_go(addresses, args.count, 32, shared=False))
                elif name == "quicgo_shared":
                    runs[name].append(quic_go(addresses, args.count, 32, shared=True))
                elif name == "engine":
                    runs[name].append(engine(addresses, args.count, args.concurrency, 1))
                else:
                    runs[name].append(engine(addresses, args.count, args.concurrency, args.workers))
                runs[name][-1]["client_cpu"] = client_cpu_seconds() - client_before
                runs[name][-1]["server_cpu"] = process_cpu_seconds(gtlsservers.pids) - server_before  # type: ignore[attr-defined]
                print(f"  run {repeat + 1} {name}: {runs[name][-1]['completed'] / runs[name][-1]['seconds']:,.0f}/s", file=sys.stderr)
    print(f"completed handshakes/s against {args.servers} gtlsserver(s) on loopback, median of {args.repeats} "
          f"(load average at start {load:.1f} on {os.cpu_count()} cores; every process shares them)")  # fmt: skip
    naive = summarise("(a) naive aioquic connect() x8", runs["naive"])
    go_dial = summarise("(b) quic-go, socket per dial x32", runs["quicgo"])
    go_shared = summarise("(b) quic-go, shared socket x32", runs["quicgo_shared"])
    one = summarise(f"(c) engine, in-process x{args.concurrency}", runs["engine"])
    workers = summarise(f"(c) engine, {args.workers} worker(s) x{args.concurrency}", runs["engine_workers"])
    ours = max(one, workers)
    anchor = max(go_dial, go_shared)
    print(f"engine (faster mode) / quic-go (faster mode): {ours / anchor:.2f}   goal >= {GOAL_RATIO}: {'PASS' if ours / anchor >= GOAL_RATIO else 'FAIL'}")
    print(f"engine / naive aioquic:         {ours / naive:.1f}x")
    print(f"quic-go / naive aioquic:        {anchor / naive:.1f}x")
    print(f"engine >= {GOAL_RATE:,.0f}/s: {'PASS' if ours >= GOAL_RATE else 'FAIL'}")
    if args.memory:
        result = memory(args.memory, args.timeout)
        rss = result["peak_rss"]
        print(f"memory: {result['in_flight']:,} handshakes in flight in one process, peak RSS {rss / 2**20:,.0f} MiB "
              f"({rss / max(1, result['in_flight']) / 1024:.1f} KiB each incl. interpreter)   goal < 512 MiB: "
              f"{'PASS' if rss < MEMORY_GOAL and result['in_flight'] >= args.memory else 'FAIL'}")  # fmt: skip


if __name__ == "__main__":
    main()
