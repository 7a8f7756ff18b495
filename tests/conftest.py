"""Shared fixtures. `lab`: the lab, brought up once per session.
The session fails loudly if a lab namespace or a process it started outlives it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from common.process import STARTED_PIDS, pid_alive, stop_process
from common import netns
from lab import Lab, default_topology
from lab.kinds import kind_for, runnable

# LSQUIC runs only where the user names a build of their own (QREPLAY_LSQUIC_CLIENT/_SERVER); the
# project holds none, and its tests skip, saying why, without them.

# Several pytest sessions may run on one machine at once (and a lab started by
# hand with `qscan lab up` may be running): every lab instance a session makes
# is named qlab<role><pid>, and the leak check looks only at those.
SESSION_TAG = str(os.getpid())
# The JVM options of the tests' Spark drivers: seconds of queries, where the JIT's first tier and one GC thread give
# the same answers with 10 s less CPU (the campaign store's Spark test: 22.7 -> 12.5 s user, 2026-11-28 13:30, load 2)
SPARK_TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_SESSION_NAMESPACE = re.compile(rf"qlab[a-z]*{SESSION_TAG}-")


# `make test` runs the suite on four workers (pytest-xdist, --dist loadgroup; on two cores, since a third of the
# time the tests wait on links, timeouts and daemons rather than compute): a module's tests stay on one worker
# in their order, so its module-scoped lab, scan or server starts once; a test that needs no such sharing may
# name a group of its own (the manual's pages, each on a private /run). The groups start longest first, so the
# workers end together: these took 35-213 s each of a 658-s run (2026-11-29 10:31, a clone of main, nothing else
# running), the rest under 35 s. Ranked as they were before, test_replay_twohost and test_replay_limits (60 and 85
# s, unranked) started at 556 and 521 s and were the last groups to end, beside the `alone` tests.
LONGEST_GROUPS = ("test_replay_browsers", "manual-qscan.md", "test_replay_campaign", "test_demo", "manual-qreplay.md",
                  "test_replay_limits", "test_notebooks", "test_library", "test_campaign_store", "test_codec",
                  "manual-identification.md", "test_capture_suite", "test_replay_twohost", "manual-scale.md",
                  "test_replay_cli", "manual-reproduce.md", "manual-README.md", "test_capture", "test_diff",
                  "test_discovery", "test_engine", "manual-store.md", "test_docs")
# The `timing` tests, one group run first, at the normal scheduling policy while every other test runs at SCHED_IDLE
# (below): the kernel gives an idle-policy task a CPU only when no normal one wants it, so the tests that measure
# have the machine as if alone, and the others use what they leave. Taking the workers' lock alone instead, each
# waited for every other worker's test in flight to end, and run last as one group, they were a tail of 107 s with
# one core of two idle (2026-11-28 13:15, 73 CPU-s of tests in it).
TIMING_GROUP = "timing"
# The `alone` tests check state the kernel keeps for the whole machine (the socket-buffer sysctls every testbed
# raises, the CPU-latency request), or are timing tests that the others at SCHED_IDLE still disturbed (each says
# how): they hold the workers' lock alone, one short group run last.
ALONE_GROUP = "alone"


# Each worker its own temporary directory (runs' work directories, browser profiles), so that a test checking what
# its runs left behind sees its own; inherited by every program a test starts.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["TMPDIR"] = tempfile.mkdtemp(prefix=f"quictp-{os.environ['PYTEST_XDIST_WORKER']}-")
    tempfile.tempdir = None


def pytest_unconfigure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(tempfile.gettempdir(), ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A `timing` test runs at the normal policy and every other one at SCHED_IDLE, inherited by the programs it
    starts (with the others at the normal policy beside it, two workers at a load of 8-10 gave a 2 ms relay's RTT
    of 27-72 ms, a profile's CPU above GNU time's, no socket drops from a sender slowed down). An `alone` test holds
    the workers' lock exclusively, from its fixtures' set-up to their tear-down; every other test holds it shared."""
    workers = os.environ.get("PYTEST_XDIST_WORKER")
    if not workers:
        yield
        return
    timing = item.get_closest_marker("timing") is not None
    os.sched_setscheduler(0, os.SCHED_OTHER if timing else os.SCHED_IDLE, os.sched_param(0))
    locks = item.config._tmp_path_factory.getbasetemp().parent
    exclusive = item.get_closest_marker("alone") is not None
    with open(locks / "alone.turnstile", "a") as turnstile, open(locks / "alone.lock", "a") as lock:
        # The turnstile keeps a waiting `alone` test from being starved by the other workers' streams of tests.
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        with contextlib.ExitStack() as held:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            held.callback(fcntl.flock, lock, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            yield


# First, before xdist's own hook turns each item's xdist_group into the `@group` suffix of its node id, which is
# what --dist loadgroup groups by: run after it, the module groups were never seen and a module's tests (and its
# module-scoped lab or scan) were spread over all three workers.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    def group(item) -> str:
        marker = item.get_closest_marker("xdist_group")
        if marker and marker.args:
            return marker.args[0]
        if item.get_closest_marker("alone"):
            return ALONE_GROUP
        return TIMING_GROUP if item.get_closest_marker("timing") else item.module.__name__

    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group(item)))
    rank = {name: index for index, name in enumerate(LONGEST_GROUPS)}
    items.sort(key=lambda item: (group(item) == ALONE_GROUP, group(item) != TIMING_GROUP,
                                 rank.get(group(item), len(rank))))


def pytest_xdist_node_collection_finished(node, ids):
    """Every worker's node ids must end in their group, or --dist loadgroup silently spreads a module over the workers
    (pytest 9.2 made xdist 3.8's suffix a no-op, pytest-xdist#1386: each module-scoped lab and scan was then set up on
    up to three workers, 13 min 48 s for the suite)."""
    if node.config.getvalue("dist") == "loadgroup" and ids and "@" not in ids[0]:
        pytest.exit(f"pytest {pytest.__version__} drops pytest-xdist's group from the node ids (pytest-xdist#1386), "
                    "so --dist loadgroup would not group the tests: install the pytest of requirements.lock", 4)


def lab_instance(role: str) -> str:
    """A lab instance name private to this test session, e.g. qlabcli4711."""
    return f"qlab{role}{SESSION_TAG}"


def lab_unavailable() -> str | None:
    """Why the lab cannot run here, or None."""
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces)"
    if not Path("/proc/self/ns/net").exists() or shutil.which("ip") is None:
        return "no network-namespace support or no `ip` command"
    missing = [tool for tool in ("gtlsserver", "gtlsclient", "caddy") if shutil.which(tool) is None]
    if missing:
        return f"lab servers not installed: {', '.join(missing)} (scripts/setup.sh installs them)"
    for spec in runnable(default_topology()).servers:
        reason = kind_for(spec.kind).unavailable_reason()
        if reason:
            return f"lab server {spec.name}: {reason}"
    return None


@pytest.fixture(scope="session", autouse=True)
def _no_lab_leftovers():
    yield
    if str(os.getpid()) != SESSION_TAG:
        return  # a forked helper unwinding through pytest: the session is not its to judge
    leaked = [name for name in netns.list_namespaces("qlab") if _SESSION_NAMESPACE.match(name)]
    alive = sorted(pid for pid in STARTED_PIDS if pid_alive(pid))
    for name in leaked:  # clean up first, so one leak does not poison the next run
        netns.delete_namespace(name)
    for pid in alive:
        stop_process(pid)
    if leaked or alive:
        pytest.fail(f"the tests leaked lab namespaces {leaked} and/or processes {alive}", pytrace=False)


@pytest.fixture(scope="session")
def lab():
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    with Lab.up(instance=lab_instance("t")) as running:
        yield running
