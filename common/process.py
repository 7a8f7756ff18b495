"""Starting and ending the programs both pipelines run: a command in a network namespace, in a session of
its own (Ctrl-C in the caller's terminal does not reach it, and its whole group can be signalled), optionally
measured by GNU time; a wait until it listens on a UDP or TCP port; and the end of its whole process group.

Every process started here is in STARTED_PIDS until it is reaped, so that a test session can check that
nothing outlived it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from common.signals import signals_deferred

if TYPE_CHECKING:
    from common.launchers.base import Launcher

# Processes this Python process started and has not yet reaped; the test suite
# checks it is empty at the end of a session.
STARTED_PIDS: set[int] = set()


def ns_command(ns: str | Launcher | None, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside the named namespace ``ns``, on another host through a launcher
    (common/launchers), or as it is without either. ``ip netns exec`` execs argv in place (the pid stays the
    program's) and gives it the namespace's own /sys and /etc/netns view."""
    if ns is None or isinstance(ns, str):
        return ["ip", "netns", "exec", ns, *argv] if ns else list(argv)
    return ns.command(argv)


def start_process(
    ns: str,
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen:
    """Start ``argv`` inside ``ns`` in its own session, stdout and stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            ns_command(ns, argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env},
            cwd=cwd,
            start_new_session=True,
        )
    STARTED_PIDS.add(process.pid)
    return process


# How long a step a starved process takes at once (exiting when killed, GNU time forking its program) may last before
# something is wrong: the tests run at SCHED_IDLE, which a loaded machine gives no CPU for seconds at a time
STARVED_S = 30.0


def pid_alive(pid: int) -> bool:
    try:
        # A zombie still "exists" to kill(0); it is not alive for us.
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def stop_process(pid: int, grace: float = 2.0) -> None:
    """SIGTERM to the process group (or the process), SIGKILL after ``grace`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal(pid, sig)
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else STARVED_S)
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_alive(pid):
                STARTED_PIDS.discard(pid)
                return
            time.sleep(0.02)
    _reap(pid)
    STARTED_PIDS.discard(pid)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


Starter = Callable[..., subprocess.Popen]


@contextlib.contextmanager
def process_groups() -> Iterator[Starter]:
    """``start(command, log, env=None, first_signal=SIGTERM)`` runs a command in its own group, output to the
    file ``log``; on the way out, whatever happens, every group is ended, newest first."""
    processes: list[tuple[subprocess.Popen, int]] = []
    with contextlib.ExitStack() as logs:
        def start(command: list[str], log: Path, env: dict[str, str] | None = None,
                  first_signal: int = signal.SIGTERM) -> subprocess.Popen:
            handle = logs.enter_context(open(log, "wb"))
            with signals_deferred():
                process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=env, start_new_session=True)
                STARTED_PIDS.add(process.pid)
                processes.append((process, first_signal))
            return process

        try:
            yield start
        finally:
            for process, first_signal in reversed(processes):
                end_group(process, first_signal)


def end_group(process: subprocess.Popen, first_signal: int = signal.SIGTERM, grace: float = 5.0) -> None:
    """``first_signal`` to the process's group, SIGKILL after ``grace`` s; then SIGKILL to what is left of the
    group (children that outlived their leader, such as a browser's helpers)."""
    for sig in (first_signal, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(grace if sig == first_signal else STARVED_S)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    STARTED_PIDS.discard(process.pid)


def run_to_end(ns: str | None, argv: Sequence[str], out, timeout: float) -> tuple[int | None, object]:
    """Run ``argv`` in ``ns`` (stdout and stderr to the file ``out``) to its end; its group is killed at
    ``timeout`` s. (exit code, None when killed; its rusage from wait4)."""
    process = subprocess.Popen(ns_command(ns, argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    STARTED_PIDS.add(process.pid)
    deadline = time.monotonic() + timeout
    while True:
        pid, status, rusage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            returncode = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            _, _, rusage = os.wait4(process.pid, 0)
            returncode = None
            break
        time.sleep(0.005)
    process.returncode = returncode if returncode is not None else -9  # keep Popen from waiting on a reaped pid
    STARTED_PIDS.discard(process.pid)
    return returncode, rusage


def _measured(argv: list[str], usage_file: Path) -> list[str]:
    # GNU time forks the program from its own small image: a child exec'd straight from this Python
    # process would inherit its peak RSS (Linux keeps the pre-exec high-water mark), so wait4's
    # ru_maxrss here would report Python's memory, not the program's.
    return ["/usr/bin/time", "-f", "%U %S %M", "-o", str(usage_file), *argv]


class Process:
    """A program in a namespace, measured by GNU time (CPU and peak RSS in ``usage_file``); its exit is
    collected by a thread. End it with ``stop`` on every way out."""

    def __init__(self, ns: str | Launcher | None, argv: list[str], usage_file: Path, stdout=subprocess.DEVNULL,
                 gated: bool = False):
        self.usage_file = usage_file
        # stderr to a file, not a pipe: a chatty program must never block on a full pipe mid-run.
        self.stderr_file = usage_file.with_suffix(".stderr")
        # GNU time writes its usage file where the program runs: on a host that does not see ours, unread.
        self.measured = isinstance(ns, (str, type(None))) or ns.shares_files
        measured = _measured(argv, usage_file) if self.measured else list(argv)
        if gated:  # waits for a line on stdin (release) before it becomes GNU time and the program
            measured = ["sh", "-c", 'read -r _; exec "$@" </dev/null', "sh", *measured]
        with open(self.stderr_file, "wb") as stderr:
            self.popen = subprocess.Popen(ns_command(ns, measured), stdout=stdout, stderr=stderr,
                                          stdin=subprocess.PIPE if gated else None, start_new_session=True)
        STARTED_PIDS.add(self.popen.pid)
        self.started = time.monotonic()
        self.ended: float | None = None
        self.status: int | None = None
        # An event, not Thread.join: a KeyboardInterrupt that lands inside join() leaves the thread marked as
        # ended while it still waits (Python 3.11), and Ctrl-C would then skip the stop and remove a run
        # directory a browser still writes into.
        self._exited = threading.Event()
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        _, status = os.waitpid(self.popen.pid, 0)
        self.ended = time.monotonic()
        self.status = os.waitstatus_to_exitcode(status)
        self.popen.returncode = self.status  # keep Popen from waiting on a reaped pid
        STARTED_PIDS.discard(self.popen.pid)
        self._exited.set()

    def wait(self, timeout: float | None) -> bool:
        return self._exited.wait(timeout)

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM to the program alone (GNU time must survive to write the usage), then SIGKILL to all."""
        if self.wait(0):
            return
        # Unmeasured (a launcher's ssh or srun): the process itself passes the signal on to the far program.
        for child in self._children() if self.measured else [self.popen.pid]:
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if self.wait(grace_s):
            return
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # Not the grace again: a killed group surely ends, but at SCHED_IDLE on a loaded machine it may take seconds
        # to be scheduled to, and a caller must not see it still running after stop
        self.wait(STARVED_S)

    def release(self) -> None:
        """Let a gated process go on (the program starts now)."""
        self.popen.stdin.write(b"go\n")
        self.popen.stdin.close()
        self.started = time.monotonic()

    def program_pid(self, timeout_s: float = STARVED_S) -> int:
        """The program's own pid: GNU time's child (``ip netns exec`` execs into GNU time)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.wait(0):
            if children := self._children():
                return children[0]
            time.sleep(0.002)
        raise RuntimeError("the program's process was gone before its profiler could attach")

    def _children(self) -> list[int]:
        try:
            return [int(pid) for pid in
                    Path(f"/proc/{self.popen.pid}/task/{self.popen.pid}/children").read_text().split()]
        except OSError:
            return []

    def usage(self) -> tuple[float | None, int | None]:
        """(CPU seconds, peak RSS in KiB) of the program; None when it was killed before GNU time wrote them."""
        try:
            fields = self.usage_file.read_text().split("\n")[-2].split()
            return float(fields[0]) + float(fields[1]), int(fields[2])
        except (OSError, IndexError, ValueError):
            return None, None

    def killed_by(self) -> str | None:
        """The signal that ended the program (GNU time notes it in the usage file), e.g. 'SIGSEGV'."""
        try:
            found = re.search(r"Command terminated by signal (\d+)", self.usage_file.read_text())
        except OSError:
            return None
        if not found:
            return None
        try:
            return signal.Signals(int(found.group(1))).name
        except ValueError:
            return f"signal {found.group(1)}"

    def stderr_tail(self) -> str:
        try:
            with open(self.stderr_file, "rb") as stderr:
                stderr.seek(max(0, self.stderr_file.stat().st_size - 4096))
                text = stderr.read().decode(errors="replace").strip()
        except OSError:
            return ""
        return " | ".join(text.splitlines()[-3:])[-400:]


class ExitedEarly(RuntimeError):
    """The process ended before it listened."""


class NotListening(RuntimeError):
    """Nothing listened on the port within the time given."""


def wait_listening(ns: str | None, port: int, transport: str, timeout_s: float,
                   process: Process | None = None, interval_s: float = 0.05) -> None:
    """Until a ``transport`` ("udp" or "tcp") socket listens on ``port`` in ``ns``; ExitedEarly as soon as
    ``process`` has ended, NotListening after ``timeout_s``."""
    flags = {"udp": "-Hnlu", "tcp": "-Hnlt"}[transport]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.wait(0):
            raise ExitedEarly(f"the process ended before it listened on {transport.upper()} port {port}")
        out = subprocess.run(ns_command(ns, ["ss", flags, f"sport = :{port}"]), capture_output=True, text=True).stdout
        if out.strip():
            return
        time.sleep(interval_s)
    raise NotListening(f"nothing listened on {transport.upper()} port {port} within {timeout_s:g} s")
