"""The measurements behind the LSQUIC causes in docs/reproduce.md: why client initial_max_data 196,608 lands where it
does at 30 ms, and under which conditions Firefox 109's client set beats Chrome 109's.

    QREPLAY_LSQUIC_CLIENT=... QREPLAY_LSQUIC_SERVER=... .venv/bin/python scripts/lsquic_causes.py OUT_DIR [part ...]

Parts: ``updates`` (the credit each window update of the client granted, from its own flow-control
log), ``sinks`` (196,608 with the body into the runner's FIFO, a tmpfs file, or discarded), ``backlog`` (Firefox vs Chrome, the bytes waiting in the client's socket during each run), ``size``
(196,608 at 5/20/100 MB, paced and unpaced server), ``delay`` (Firefox vs Chrome at 30 and 50 ms, socket
buffers of 1664 KiB and 32 MiB), ``long`` (the same at 500 MB, 1664 KiB / 8 MiB / 32 MiB), ``browsers``
(Firefox vs Chrome under socket buffers, a rate limit with a shallow and a deep queue, an unpaced server,
500 MB). Every part is
ordinary qreplay experiments (one results file per variant in OUT_DIR); the repetitions of variants that
differ in something an experiment fixes (size, buffer) alternate experiment by experiment, so drift on a
shared machine spreads over all of them. Prints one JSON line per condition.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import sys
from pathlib import Path

from common.process import ns_command
from common import netns
from replay.link import LinkConfig, parse_size
from replay import statistics, store
from replay.runner import Condition, Experiment, run_experiment
from replay.sets import resolve_one, with_overrides
from replay.stacks.base import RunOptions, default_timeout_s
from replay.stacks.lsquic import Lsquic
from replay.testbed import PREFIX


class LsquicWith(Lsquic):
    """LSQUIC with extra engine settings on the server (e.g. its pacing off), and optionally the client's
    flow-control log (cfcw, sfcw at debug) kept in a file, for these measurements."""

    def __init__(self, server_settings: list[str], client_log: Path | None = None):
        self.server_settings, self.client_log = server_settings, client_log

    def server_command(self, params, opts, ip, port, workdir):
        argv, applied = super().server_command(params, opts, ip, port, workdir)
        for setting in self.server_settings:
            argv += ["-o", setting]
            applied.notes.append(f"server -o {setting}")
        return argv, applied

    def client_command(self, params, opts, server_ip, port, workdir):
        plan, applied = super().client_command(params, opts, server_ip, port, workdir)
        if self.client_log:
            # LSQUIC logs to stderr only, which the runner keeps in the run's scratch directory.
            plan.argv = ["sh", "-c", 'exec "$@" 2>"$0"', str(self.client_log), *plan.argv,
                         "-l", "cfcw=debug,sfcw=debug"]
        return plan, applied


class LsquicSink(Lsquic):
    """LSQUIC whose client writes the body to a tmpfs file or discards it (-K) instead of the runner's FIFO:
    does the FIFO's reader slow the client's reads? Goodput from the client's lifetime (wall_s), the same
    for every sink; the runner then finds no body and marks the run failed, which is expected here."""

    def __init__(self, sink: str):
        self.sink = sink

    def client_command(self, params, opts, server_ip, port, workdir):
        plan, applied = super().client_command(params, opts, server_ip, port, workdir)
        if self.sink == "fifo":
            return plan, applied
        at = plan.argv.index("-7")
        plan.argv[at:at + 2] = ["-K"] if self.sink == "discard" else ["-7", str(workdir)]
        return type(plan)(plan.argv), applied


def sinks(out: Path) -> None:
    """initial_max_data 196,608 at 30 ms, 20 MB, with the body into the runner's FIFO, a tmpfs file, nowhere."""
    client = with_overrides(resolve_one("lsquic-client-default"), ["initial_max_data=196608"])
    condition = Condition(client, resolve_one("lsquic-server-default"), LinkConfig(delay_down_ms=30),
                          "initial_max_data", 196608)
    walls: dict[str, list[float]] = {}
    for rep in range(3):
        for sink in ("fifo", "tmpfs", "discard"):
            experiment = Experiment("single", LsquicSink(sink), [condition], RunOptions(size=20_000_000, timeout_s=120),
                                    1, "relay", f"scripts/lsquic_causes.py sinks {sink}", tags={"variant": sink})
            (row,) = run_experiment(experiment, out / "sinks.duckdb")
            walls.setdefault(sink, []).append(20_000_000 * 8 / row["wall_s"] / 1e6)
    for sink, rates in walls.items():
        print(json.dumps({"variant": f"sink-{sink}", "goodput_by_client_lifetime_mbps": rates,
                          "mean": sum(rates) / len(rates)}), flush=True)


UPDATE = re.compile(r"\b(cfcw|sfcw):.*recv_off changed: read_off: (\d+); recv_off: (\d+)")


def window_updates(log: Path, module: str, window: int) -> dict:
    """The credit each of the receiver's window updates granted (new limit - previous limit), as a share
    of the window: 0.5 when every update is decided the moment half the window has been read."""
    limits = [int(m[3]) for m in map(UPDATE.search, log.read_text(errors="replace").splitlines())
              if m and m[1] == module and int(m[3]) >= window]
    steps = sorted(b - a for a, b in zip(limits, limits[1:]) if b > a)
    if not steps:
        return {"updates": 0}
    return {"updates": len(steps), "credit_per_update_mean": sum(steps) / len(steps) / window,
            "credit_per_update_median": steps[len(steps) // 2] / window,
            "credit_per_update_p90": steps[int(len(steps) * 0.9)] / window}


def updates(out: Path) -> None:
    """One download per window with the client's flow-control log: which credit each update granted."""
    server = resolve_one("lsquic-server-default")
    for param, window, module in (("initial_max_data", 196608, "cfcw"),
                                  ("initial_max_stream_data_bidi_local", 131072, "sfcw")):
        client = with_overrides(resolve_one("lsquic-client-default"), [f"{param}={window}"])
        log = out / f"updates-{param}.log"
        experiment = Experiment("single", LsquicWith([], log), [Condition(client, server, LinkConfig(delay_down_ms=30),
                                                                          param, window)],
                                RunOptions(size=20_000_000, timeout_s=120), 1, "relay",
                                f"scripts/lsquic_causes.py updates {param}", tags={"variant": f"updates-{param}"})
        (row,) = run_experiment(experiment, out / "updates.duckdb")
        print(json.dumps({"variant": f"updates-{param}", "window": window, "goodput_mbps": row.get("goodput_mbps"),
                          "status": row["status"], **window_updates(log, module, window)}), flush=True)


def _variants_size() -> list[dict]:
    client = with_overrides(resolve_one("lsquic-client-default"), ["initial_max_data=196608"])
    server = resolve_one("lsquic-server-default")
    condition = Condition(client, server, LinkConfig(delay_down_ms=30), "initial_max_data", 196608)
    return [{"name": f"imd196608-{size}-{pacing}", "conditions": [condition], "size": size,
             "server_settings": [] if pacing == "paced" else ["pace_packets=0"], "buffer": "1664KiB"}
            for size in ("5MB", "20MB", "100MB") for pacing in ("paced", "unpaced")]


def _variants_browsers() -> list[dict]:
    server = resolve_one("lsquic-server-default")

    def pair(link: LinkConfig) -> list[Condition]:
        return [Condition(resolve_one(name), server, link) for name in ("firefox-109", "chrome-109")]

    plain = LinkConfig(delay_down_ms=30)
    # 400 Mbit/s: below what the client drains here; queue of one BDP (the testbed's default) or 100 ms.
    shallow = LinkConfig(delay_down_ms=30, rate_bps=400_000_000)
    deep = LinkConfig(delay_down_ms=30, rate_bps=400_000_000, queue=f"{400_000_000 // 8 // 10 // 1024}kb")
    return [
        {"name": "browsers-1664KiB", "conditions": pair(plain), "size": "100MB", "buffer": "1664KiB"},
        {"name": "browsers-8MiB", "conditions": pair(plain), "size": "100MB", "buffer": "8MiB"},
        {"name": "browsers-8MiB-unpaced", "conditions": pair(plain), "size": "100MB", "buffer": "8MiB",
         "server_settings": ["pace_packets=0"]},
        {"name": "browsers-400mbit-bdp-queue", "conditions": pair(shallow), "size": "100MB", "buffer": "8MiB"},
        {"name": "browsers-400mbit-100ms-queue", "conditions": pair(deep), "size": "100MB", "buffer": "8MiB"},
        {"name": "browsers-8MiB-500MB", "conditions": pair(plain), "size": "500MB", "buffer": "8MiB", "reps": 2},
    ]


def _variants_delay() -> list[dict]:
    """Where Chrome's stream window binds below what this machine's client drains: at 50 ms its burst
    bound is 503 Mbit/s (3,145,728 B a round trip), at 30 ms 839."""
    server = resolve_one("lsquic-server-default")
    return [{"name": f"browsers-{delay}ms-{buffer}", "size": "100MB", "buffer": buffer,
             "conditions": [Condition(resolve_one(name), server, LinkConfig(delay_down_ms=delay))
                            for name in ("firefox-109", "chrome-109")]}
            for delay in (30, 50) for buffer in ("1664KiB", "32MiB")]


def _variants_long() -> list[dict]:
    """500 MB, as the thesis downloaded, under three socket buffer sizes."""
    server = resolve_one("lsquic-server-default")
    return [{"name": f"browsers-500MB-{buffer}", "size": "500MB", "buffer": buffer, "reps": 2,
             "conditions": [Condition(resolve_one(name), server, LinkConfig(delay_down_ms=30))
                            for name in ("firefox-109", "chrome-109")]}
            for buffer in ("1664KiB", "8MiB", "32MiB")]


PARTS = {"size": _variants_size, "browsers": _variants_browsers, "delay": _variants_delay, "long": _variants_long}


class BacklogSampler:
    """Samples the bytes waiting in the client's UDP socket (ss Recv-Q, kernel accounting) every 50 ms, in
    this process's testbed client namespaces: the queue a receiver that lags behind keeps in front of it."""

    def __init__(self):
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        mine = f"{PREFIX}{os.getpid()}-"
        while not self._stop.wait(0.05):
            for ns in (n for n in netns.list_namespaces(mine) if n.endswith("-c")):
                out = subprocess.run(ns_command(ns, ["ss", "-Hnua"]), capture_output=True, text=True).stdout
                queued = [int(line.split()[1]) for line in out.splitlines() if len(line.split()) > 2]
                if queued:
                    self.samples.append((time.time(), max(queued)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def during(self, row: dict) -> dict:
        start = row["started_at"].timestamp()
        values = sorted(q for t, q in self.samples if start <= t <= start + (row.get("wall_s") or 0))
        if not values:
            return {}
        return {"recv_q_samples": len(values), "recv_q_mean_bytes": sum(values) / len(values),
                "recv_q_p90_bytes": values[int(len(values) * 0.9)]}


def backlog(out: Path) -> None:
    """Firefox vs Chrome at 30 ms with 32 MiB buffers, 200 MB: the client socket's backlog per run."""
    server = resolve_one("lsquic-server-default")
    conditions = [Condition(resolve_one(name), server, LinkConfig(delay_down_ms=30))
                  for name in ("firefox-109", "chrome-109")]
    sampler = BacklogSampler()
    try:
        for buffer in ("32MiB", "1664KiB"):
            experiment = Experiment("matrix", Lsquic(), conditions, RunOptions(size=200_000_000, timeout_s=360), 3,
                                    "relay", f"scripts/lsquic_causes.py backlog {buffer}",
                                    udp_buffer_bytes=parse_size(buffer, "buffer"),
                                    tags={"variant": f"backlog-{buffer}"})
            for row in run_experiment(experiment, out / "backlog.duckdb"):
                counters = json.loads(row.get("counters") or "{}")
                print(json.dumps({"variant": f"backlog-{buffer}", "set_name": row["set_name"], "rep": row["rep"],
                                  "goodput_mbps": row.get("goodput_mbps"),
                                  "client_udp_rcvbuf_errors": counters.get("client_udp_rcvbuf_errors"),
                                  **sampler.during(row)}), flush=True)
    finally:
        sampler.stop()


def main(out_dir: str, *parts: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, part in (("updates", updates), ("backlog", backlog), ("sinks", sinks)):
        if name in parts:
            part(out)
            parts = tuple(p for p in parts if p != name)
    if not parts:
        return
    variants = [v for part in parts for v in PARTS[part]()]
    rows: dict[str, list[dict]] = {v["name"]: [] for v in variants}
    for rep in range(1, max(v.get("reps", 3) for v in variants) + 1):
        for variant in variants:
            if rep > variant.get("reps", 3):
                continue
            size = parse_size(variant["size"])
            experiment = Experiment("matrix", LsquicWith(variant.get("server_settings", [])), variant["conditions"],
                                    RunOptions(size=size, timeout_s=default_timeout_s(size)), 1, "relay",
                                    f"scripts/lsquic_causes.py {variant['name']} rep {rep}",
                                    udp_buffer_bytes=parse_size(variant["buffer"], "buffer"),
                                    tags={"variant": variant["name"], "load_1min": os.getloadavg()[0]})
            done = run_experiment(experiment, out / f"{variant['name']}.duckdb")
            rows[variant["name"]] += done
            for row in done:
                print(f"# {variant['name']} rep {rep} {row['set_name']}: {row['status']} "
                      f"{row.get('goodput_mbps') or row.get('error')}", file=sys.stderr, flush=True)
    for name in rows:
        con = store.open_read_only(out / f"{name}.duckdb")
        for summary in statistics.summary(con).iter_rows(named=True):
            print(json.dumps({"variant": name, **summary}, default=str), flush=True)
        con.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
