"""Shared fixtures. `lab`: the lab, brought up once per session.
The session fails loudly if a lab namespace or a process it started outlives it."""

from __future__ import annotations

import os
import re
import shutil
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
_SESSION_NAMESPACE = re.compile(rf"qlab[a-z]*{SESSION_TAG}-")


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
