"""The qlog cross-check under CPU starvation (tests/test_replay_limits.py's window-share test; replay/limits.py
rule 4): traced 2 MB downloads at 30 ms with the server's qlog, beside busy loops this script starts pinned to
each core with taskset and stops when it ends; per run the capture's share of the transfer at the window, the
share charged to the sender's CPU for ACKs it had not read yet, and for the request before it read it, the stack's
own qlog's share at its window (over its own span, from its read of the request, and over the breakdown's), and
how late the server read its ACKs.

usage: .venv/bin/python scripts/qlog_unread_acks.py STACK [RUNS] [BUSY_LOOPS] [OUT_DIR]"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

from replay import limits, sets, statistics, trace
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, run_experiment
from replay.stacks import get_stack
from replay.stacks.base import RunOptions


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    if not 2 <= len(sys.argv) <= 5:
        sys.exit(__doc__.splitlines()[-1])
    stack = get_stack(sys.argv[1])
    runs, loops = (int(sys.argv[i]) if len(sys.argv) > i else default for i, default in ((2, 3), (3, 6)))
    out = Path(sys.argv[4]) if len(sys.argv) > 4 else Path(tempfile.mkdtemp(prefix="qlog-unread-"))
    if stack.unavailable_reason():
        sys.exit(f"{stack.name}: {stack.unavailable_reason()}")
    busy = []
    try:
        for i in range(loops):  # pinned: each core gets its share of them, whatever the scheduler prefers
            busy.append(subprocess.Popen(["taskset", "-c", str(i % (os.cpu_count() or 1)), "sh", "-c",
                                          "while :; do :; done"]))
        out.mkdir(parents=True, exist_ok=True)
        print(f"{loops} busy loops; load {load()}; runs in {out}", file=sys.stderr)
        for n in range(runs):
            qlog = out / f"qlog{n}"
            run, = run_experiment(Experiment("single", stack, [Condition(sets.resolve_one("firefox"), None,
                                                                         LinkConfig(delay_down_ms=30))],
                                             RunOptions(size=2_000_000, timeout_s=30, trace=True, qlog_dir=qlog),
                                             reps=1), out / f"run{n}.duckdb")
            if run["status"] != "ok":
                print(f"run {n}: {run['status']}: {run.get('error')}")
                continue
            basis = json.loads(run["limits"])["basis"]
            with duckdb.connect(str(out / f"run{n}.duckdb"), read_only=True) as con:
                own = trace.own_qlog_share(qlog, statistics.trace_points(con, run["run_id"]), basis["mss"],
                                           stack.qlog_in_flight_omits)
                late = con.execute("SELECT max(read_s - t_s) * 1000 FROM trace_points WHERE run_id = ?",
                                   [run["run_id"]]).fetchone()[0]
            at, unread, request = basis["at_window_share"], basis["ack_unread_share"], basis["request_unread_share"]
            if own is None or at is None:
                print(f"run {n}: no congestion window in {stack.name}'s qlog")
                continue
            spanned = limits.against_own_qlog(basis, own)[1]
            print(f"run {n} (load {load()}): capture at the window {at:.1%}, ACKs unread {unread:.1%}, request "
                  f"unread {request:.1%}, qlog {own:.1%} ({spanned:.1%} over the breakdown's span): capture "
                  f"{100 * (at - spanned):+.1f} points, with the unread {100 * (at + unread - spanned):+.1f}; ACKs "
                  f"read up to {late or 0:.1f} ms late")
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()


if __name__ == "__main__":
    main()
