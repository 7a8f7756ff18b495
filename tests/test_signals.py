"""common/signals.py: a Ctrl-C or SIGTERM held back until the step it landed in is over, in real processes."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from common.process import STARVED_S, pid_alive
from interrupting import interruptible


# Starts a program and hands it to its owner (``held``, which the finally stops) with a SIGTERM or Ctrl-C landing
# between the two, as a two-host run's server did when CI's SIGTERM came in the middle of its start (2026-11-28).
HANDED_OVER = """
import os, signal, sys
from pathlib import Path
from common import netns
from common.process import Process
from common.signals import signals_deferred
held = []
with netns.teardown_on_signals():
    try:
        with signals_deferred():
            os.kill(os.getpid(), getattr(signal, sys.argv[2]))
            held.append(Process(None, ["sleep", "60"], Path(sys.argv[1])))
            print(held[0].program_pid(), flush=True)
        print("went on past the signal", flush=True)
    finally:
        for process in held:
            process.stop()
"""


# SystemExit(143) from teardown_on_signals; an uncaught KeyboardInterrupt ends Python by SIGINT itself
@pytest.mark.parametrize(("sent", "exit_code"), [("SIGTERM", 143), ("SIGINT", -signal.SIGINT)])
def test_a_signal_between_a_start_and_its_owner_waits_until_the_owner_holds_it(tmp_path, sent, exit_code):
    done = subprocess.run(interruptible([sys.executable, "-c", HANDED_OVER, str(tmp_path / "p.usage"), sent]),
                          capture_output=True, text=True, timeout=STARVED_S)
    lines = done.stdout.split()
    assert done.returncode == exit_code and lines and "went on" not in done.stdout, (done.stdout, done.stderr)
    assert not pid_alive(int(lines[0]))


# A Ctrl-C while DuckDB runs a statement (about 1 s of work here: time for the watching thread to see it running,
# on a loaded machine too), sent once its progress shows it running:
# without the deferral DuckDB abandons it, keeping no row, and raises RuntimeError, not KeyboardInterrupt
INTERRUPTED_STATEMENT = """
import os, signal, threading, time, duckdb
from common.signals import signals_deferred
con = duckdb.connect()
con.execute("SET enable_progress_bar = true; SET enable_progress_bar_print = false; CREATE TABLE t (x BIGINT)")
def interrupt_once_running():
    while con.query_progress() <= 0:
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupt_once_running, daemon=True).start()
try:
    with signals_deferred():
        con.execute("INSERT INTO t SELECT count(*) FROM range(30000) a, range(30000) b WHERE a.range + b.range > 0")
except BaseException as exc:
    print(type(exc).__name__, con.execute("SELECT * FROM t").fetchall())
"""


def test_a_ctrl_c_mid_statement_lets_duckdb_finish_it_then_interrupts():
    done = subprocess.run(interruptible([sys.executable, "-c", INTERRUPTED_STATEMENT]), capture_output=True, text=True,
                          timeout=STARVED_S)
    assert done.stdout.split() == ["KeyboardInterrupt", "[(899999999,)]"], (done.stdout, done.stderr)
