"""`qreplay --profile`: where each endpoint's cycles go during the transfer (the Kempf thesis's method).

Each endpoint is sampled with call stacks from the moment it takes part in the download until the
client has finished: the server once it listens (before the client starts, so nothing of the transfer
is missed), the client as soon as it exists. A native program is sampled by perf (cpu-clock, the
software event: a VM offers no hardware counters) attached to its pid, unwinding with DWARF (Rust and C
are built without frame pointers) except Go's binaries, which keep frame pointers and whose compressed
DWARF perf cannot unwind; a Python interpreter (aioquic) is sampled by py-spy, which names the Python
functions. Either way the samples are folded into one line per distinct stack (root first, frames
joined by ``;``), the form of Brendan Gregg's FlameGraph that inferno draws.

Every sample is then sorted into the thesis's components by the mapping kept as data in
datasets/profile/components.csv: walking its stack from the innermost frame outwards, the first frame
that a row of the endpoint's library (or of every library, ``*``) matches decides. A stack no row
matches is UNMAPPED: counted, never guessed.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from replay.stacks.base import GO_BIN_DIR, REPO_ROOT
from tparams.errors import ToolError

#: the thesis's components (chapter 5.1), in its order; samples no row maps are UNMAPPED
COMPONENTS = ("PACKET_IO", "IO", "CRYPTO", "CONN_MGMT", "MARSHALLING", "GENERAL")
UNMAPPED = "UNMAPPED"
MAPPING_FILE = REPO_ROOT / "datasets" / "profile" / "components.csv"
#: samples a second of CPU: perf's cpu-clock at 999 Hz (off the kernel's 1000 Hz tick); py-spy's default 100
PERF_HZ = 999
PY_SPY_HZ = 100
#: bytes of user stack perf copies with each sample for DWARF unwinding (perf's default)
DWARF_STACK_BYTES = 8192
INFERNO = GO_BIN_DIR / "inferno-flamegraph"  # scripts/setup.sh: cargo install --locked inferno@0.12.8
ATTACH_TIMEOUT_S = 5.0


# --- the mapping -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    library: str  # a stack's name, or * for every stack
    pattern: re.Pattern
    component: str


@cache
def load_mapping(path: Path = MAPPING_FILE) -> tuple[Rule, ...]:
    """The rows of the component mapping; a bad component or regex is a one-line error naming its row."""
    rules = []
    with open(path, newline="") as rows:
        for line, row in enumerate(csv.DictReader(row for row in rows if not row.startswith("#")), start=2):
            if row["component"] not in COMPONENTS:
                raise ToolError(f"{path.name}: {row['component']!r} is not one of {', '.join(COMPONENTS)} "
                                f"(row {row})")
            try:
                rules.append(Rule(row["stack"], re.compile(row["pattern"]), row["component"]))
            except re.error as exc:
                raise ToolError(f"{path.name}: bad pattern {row['pattern']!r}: {exc}") from None
    return tuple(rules)


class Sorter:
    """Sorts folded stacks of one library into components (each distinct frame matched once)."""

    def __init__(self, library: str, rules: tuple[Rule, ...] | None = None):
        rules = load_mapping() if rules is None else rules
        # the library's own rows first: they may claim a frame the common rows would place otherwise
        self.rules = [r for r in rules if r.library == library] + [r for r in rules if r.library == "*"]
        self._frames: dict[str, str | None] = {}

    def frame(self, frame: str) -> str | None:
        if frame not in self._frames:
            self._frames[frame] = next((r.component for r in self.rules if r.pattern.search(frame)), None)
        return self._frames[frame]

    def component(self, folded: str) -> str:
        for frame in reversed(folded.split(";")):
            found = self.frame(frame)
            if found:
                return found
        return UNMAPPED


# --- sampling --------------------------------------------------------------------------------------

def is_python(executable: str) -> bool:
    return Path(executable).name.startswith("python")


def is_go(executable: str) -> bool:
    """Whether the program is a Go binary (its ELF has a .go.buildinfo section)."""
    with open(executable, "rb") as elf:
        head = elf.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
            return False
        shoff = int.from_bytes(head[0x28:0x30], "little")
        shentsize, shnum, shstrndx = (int.from_bytes(head[o:o + 2], "little") for o in (0x3A, 0x3C, 0x3E))
        elf.seek(shoff + shstrndx * shentsize)
        names_header = elf.read(shentsize)
        elf.seek(int.from_bytes(names_header[0x18:0x20], "little"))
        names = elf.read(int.from_bytes(names_header[0x20:0x28], "little"))
    return b"\0.go.buildinfo\0" in names


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, every thread) ``pid`` has used so far; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sampler_argv(pid: int, executable: str, out: Path, control: tuple[Path, Path]) -> tuple[list[str], str]:
    """(the sampler's command line for ``pid``, running ``executable``, a description of it for the
    results). perf starts with its events off, until told through the ``control`` FIFOs."""
    if is_python(executable):
        py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
        if not py_spy:
            raise ToolError("py-spy is not installed: run scripts/setup.sh (it is pinned in requirements.lock)")
        return ([py_spy, "record", "--pid", str(pid), "--format", "raw", "--nolineno", "--rate", str(PY_SPY_HZ),
                 "--output", str(out)], f"py-spy {PY_SPY_HZ} Hz")
    unwind = "fp" if is_go(executable) else f"dwarf,{DWARF_STACK_BYTES}"
    return (["perf", "record", "-q", "-e", "cpu-clock", "-F", str(PERF_HZ), "--call-graph", unwind,
             "-D", "-1", "--control", f"fifo:{control[0]},{control[1]}", "-p", str(pid), "-o", str(out)],
            f"perf cpu-clock {PERF_HZ} Hz, {unwind.split(',')[0]} unwinding")


def executable_of(argv: list[str]) -> str:
    return shutil.which(argv[0]) or argv[0]


def gated(argv: list[str]) -> bool:
    """Whether a client of ``argv`` waits at a gate for its sampler: perf follows a process's children,
    so it attaches to the gate (which then execs GNU time, which starts the stack) and loses nothing of
    a short transfer to its own start-up (0.1-0.4 s here). py-spy follows no children: it attaches to
    the interpreter, which imports for longer than py-spy takes to attach."""
    return not is_python(executable_of(argv))


@dataclass
class EndpointProfile:
    """One endpoint's samples, folded: {stack: samples}, with the CPU seconds they stand for."""

    endpoint: str  # client | server
    library: str  # the stack whose mapping sorts it
    profiler: str
    stacks: Counter = field(default_factory=Counter)
    cpu_s: float = 0.0
    window_s: float = 0.0

    def rows(self, run_id: str, sorter: Sorter, payload_bytes: int) -> tuple[list[dict], list[dict]]:
        """(profiles rows: one per component, UNMAPPED included, its share of the endpoint's samples and
        its CPU seconds per GB of the download's payload; profile_stacks rows)."""
        samples, stacks = Counter(), []
        for folded, count in self.stacks.items():
            component = sorter.component(folded)
            samples[component] += count
            stacks.append({"run_id": run_id, "endpoint": self.endpoint, "folded": folded, "samples": count,
                           "component": component})
        total = sum(samples.values())
        profiles = []
        for component in (*COMPONENTS, UNMAPPED):
            share = samples[component] / total if total else None
            cpu_s = self.cpu_s * share if total else None
            profiles.append({"run_id": run_id, "endpoint": self.endpoint, "library": self.library,
                             "profiler": self.profiler, "window_s": self.window_s, "component": component,
                             "samples": samples[component], "share": share, "cpu_s": cpu_s,
                             "cpu_s_per_gb": cpu_s / (payload_bytes / 1e9) if cpu_s is not None and payload_bytes
                             else None})
        return profiles, stacks


class _Sampler:
    def __init__(self, endpoint: str, library: str, pid: int, executable: str, workdir: Path, gate: bool):
        self.endpoint, self.library, self.gate = endpoint, library, gate
        self.out = workdir / f"{endpoint}.profile"
        self.control = (workdir / f"{endpoint}.profile.ctl", workdir / f"{endpoint}.profile.ack")
        argv, self.profiler = sampler_argv(pid, executable, self.out, self.control)
        self.pid, self.cpu_start, self.cpu_end = pid, None, None
        self.fifos: list[int] = []
        if self.profiler.startswith("perf"):
            for fifo in self.control:
                os.mkfifo(fifo)
        self.log = open(workdir / f"{endpoint}.profile.log", "w+b")
        # its own session: a Ctrl-C to qreplay's group must not end it before it has written its file
        self.popen = subprocess.Popen(argv, stdout=self.log, stderr=self.log, start_new_session=True)
        self.started = time.monotonic()
        self.stopped: float | None = None

    def ready(self, timeout_s: float = ATTACH_TIMEOUT_S) -> None:
        """Wait until the sampler samples: perf acknowledges the ``enable`` it is sent, py-spy says so."""
        self._await_sampling(timeout_s)
        self.cpu_start = process_cpu_s(self.pid)

    def _await_sampling(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        if self.profiler.startswith("perf"):
            # (read-write opens: a FIFO opened so never blocks, whenever perf opens its end; both stay
            # open until perf ends, as it takes a closed control FIFO for an end of its commands)
            self.fifos = [os.open(fifo, os.O_RDWR | os.O_NONBLOCK) for fifo in self.control]
            ctl, ack = self.fifos
            os.write(ctl, b"enable\n")
            while time.monotonic() < deadline and self.popen.poll() is None:
                if select.select([ack], [], [], 0.05)[0] and b"ack" in os.read(ack, 64):
                    return
        else:
            while time.monotonic() < deadline and self.popen.poll() is None:
                if b"Sampling process" in Path(self.log.name).read_bytes():
                    return
                time.sleep(0.01)
        raise RuntimeError(f"the {self.endpoint}'s profiler did not start sampling within {timeout_s:.0f} s: "
                           + Path(self.log.name).read_text(errors="replace").strip()[-300:])

    def stop(self) -> None:
        """SIGINT (both write what they have on it), then wait; SIGKILL if either hangs."""
        if self.stopped is None:
            self.stopped = time.monotonic()
            self.cpu_end = process_cpu_s(self.pid)
        if self.popen.poll() is None and process_cpu_s(self.pid) is None:
            # its process is gone: the sampler ends by itself once it has written everything (a SIGINT
            # while it is still setting up would leave its file unfinished)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(ATTACH_TIMEOUT_S)
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.log.close()
        for fd in self.fifos:
            os.close(fd)
        self.fifos = []

    def result(self, total_cpu_s: float | None) -> EndpointProfile:
        """The folded samples. ``total_cpu_s``: the endpoint's CPU over its whole life, for a py-spy
        endpoint that had exited by the time sampling stopped."""
        profile = EndpointProfile(self.endpoint, self.library, self.profiler,
                                  window_s=(self.stopped or time.monotonic()) - self.started)
        if not self.out.exists():
            raise ToolError(f"the {self.endpoint}'s profiler wrote nothing: "
                            + Path(self.log.name).read_text(errors="replace").strip()[-300:])
        if self.profiler.startswith("py-spy"):
            # py-spy samples wall-clock time of threads it judges busy (it misjudges some waits), so the
            # CPU comes from the kernel's accounting of the process over the same window
            profile.stacks = fold_py_spy(self.out.read_text(errors="replace"))
            end = self.cpu_end if self.cpu_end is not None else total_cpu_s
            profile.cpu_s = max(0.0, end - (self.cpu_start or 0.0)) if end is not None else 0.0
        else:
            script = subprocess.run(["perf", "script", "--no-inline", "-i", str(self.out), "-F",
                                     "pid,period,ip,sym,dso"], capture_output=True, text=True, errors="replace")
            if script.returncode != 0:
                raise ToolError(f"perf script failed on the {self.endpoint}'s samples: {script.stderr.strip()[-300:]}")
            # a gate's own samples (the shell, then GNU time, waiting for the stack) are not the stack's
            profile.stacks, profile.cpu_s = fold_perf_script(script.stdout, exclude_pid=self.pid if self.gate
                                                             else None)
        return profile


class Profiling:
    """The samplers of one run: ``attach`` each endpoint, ``stop`` when the client has finished, then
    ``results``. Stopping twice is harmless (the run's clean-up stops whatever is left)."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.samplers: list[_Sampler] = []

    def attach(self, endpoint: str, library: str, pid: int, executable: str, gate: bool = False) -> None:
        """Sample ``pid`` (running ``executable``; with ``gate``, a gate that will exec into it) from now on,
        returning once the sampler samples."""
        sampler = _Sampler(endpoint, library, pid, executable, self.workdir, gate)
        self.samplers.append(sampler)
        sampler.ready()

    def stop(self) -> None:
        for sampler in self.samplers:
            sampler.stop()

    def results(self, total_cpu_s: dict[str, float | None]) -> list[EndpointProfile]:
        """Each endpoint's samples; ``total_cpu_s``: each endpoint's CPU seconds over its life (GNU time's)."""
        self.stop()
        return [sampler.result(total_cpu_s.get(sampler.endpoint)) for sampler in self.samplers]


# --- folding ---------------------------------------------------------------------------------------

_FRAME = re.compile(r"^\s*[0-9a-f]+ (.*) \((.*)\)$")


def frame_name(symbol: str, dso: str) -> str:
    """A frame as the flame graph shows it: the function (kernel ones marked ``_[k]``, as inferno's
    collapse-perf --all does), or ``[library]`` where the symbol is unknown."""
    if symbol == "[unknown]" or not symbol:
        return f"[{Path(dso).name}]" if dso and dso != "[unknown]" else "[unknown]"
    return f"{symbol}_[k]" if dso.startswith("[kernel") else symbol


def fold_perf_script(text: str, exclude_pid: int | None = None) -> tuple[Counter, float]:
    """({folded stack: samples}, CPU seconds) from `perf script -F pid,period,ip,sym,dso` of cpu-clock
    samples (each sample's period is the CPU nanoseconds it stands for), without ``exclude_pid``'s."""
    stacks: Counter = Counter()
    total_ns = 0
    for block in text.split("\n\n"):
        lines = block.strip("\n").splitlines()
        if not lines:
            continue
        try:
            pid, period = (int(word) for word in lines[0].split()[:2])
        except ValueError:
            continue
        if pid == exclude_pid:
            continue
        frames = [frame_name(*m.groups()) for m in map(_FRAME.match, lines[1:]) if m]
        if frames:
            stacks[";".join(reversed(frames))] += 1
            total_ns += period
    return stacks, total_ns / 1e9


#: a thread of asyncio's executor waiting for work: py-spy counts the wait (in C, GIL released) as busy
_IDLE_WORKER = "_worker (concurrent/futures/thread.py)"


def fold_py_spy(text: str) -> Counter:
    """{folded stack: samples} from py-spy's raw output (already folded, the count last on each line),
    without the samples of idle executor threads (no CPU: their thread was blocked on its work queue)."""
    stacks: Counter = Counter()
    for line in text.splitlines():
        folded, _, count = line.rpartition(" ")
        if folded and count.isdigit() and not folded.endswith(_IDLE_WORKER):
            stacks[folded] += int(count)
    return stacks


# --- flame graphs ----------------------------------------------------------------------------------

def flame_graph(stacks: dict[str, int], svg: Path, title: str) -> Path:
    """An SVG flame graph drawn by inferno (the Rust port of FlameGraph)."""
    if not INFERNO.exists():
        raise ToolError(f"{INFERNO} is missing: run scripts/setup.sh (it installs inferno)")
    folded = "".join(f"{stack} {count}\n" for stack, count in stacks.items())
    done = subprocess.run([str(INFERNO), "--title", title, "--colors", "java", "--hash"], input=folded,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ToolError(f"inferno-flamegraph failed: {done.stderr.strip()[-300:]}")
    svg.write_text(done.stdout)
    return svg
