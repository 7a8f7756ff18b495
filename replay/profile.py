"""`qreplay --profile`: where each endpoint's cycles go during the transfer (the Kempf thesis's method).

Each endpoint is sampled with call stacks from the moment it takes part in the download until the
client has finished: the server from when it listens, the client from its start (a native client waits
at a gate until perf samples). Native programs are sampled by perf (cpu-clock, the software event: a VM
offers no hardware counters) on every CPU, their samples picked out by pid, unwinding with DWARF (Rust
and C are built without frame pointers) except Go's binaries, which keep frame pointers and whose
compressed DWARF perf cannot unwind; a Python interpreter (aioquic) is sampled by py-spy, which names
the Python functions. Either way the samples are folded into one line per distinct stack (root first,
frames joined by ``;``), the form of Brendan Gregg's FlameGraph that inferno draws.

Every sample is then sorted into the thesis's components by the mapping kept as data in
datasets/profile/components.csv: walking its stack from the innermost frame outwards, the first frame
that a row of the endpoint's library (or of every library, ``*``) matches decides. A stack no row
matches is UNMAPPED: counted, never guessed.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
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
#: samples a second of CPU, perf's cpu-clock (off the kernel's tick rate) and py-spy's (its default): a
#: rate that costs the stacks nothing measurable here (bench/bench_profile.py); enough samples come from
#: repetitions, as the thesis summed 20.
PERF_HZ = 99
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
        shentsize, shstrndx = (int.from_bytes(head[o:o + 2], "little") for o in (0x3A, 0x3E))
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


def perf_unwinding(executable: str) -> str:
    """How perf unwinds ``executable``'s user stacks: Go keeps frame pointers (and its compressed DWARF
    defeats perf); Rust and C are built without them, so their stacks are copied and unwound by DWARF."""
    return "fp" if is_go(executable) else "dwarf"


def unavailable_reason() -> str | None:
    """Why runs cannot be profiled here (None: they can)."""
    if not shutil.which("perf"):
        return "perf is not installed: run scripts/setup.sh (Debian's linux-perf)"
    return None


def executable_of(argv: list[str]) -> str:
    """The program ``argv`` runs, through env(1)'s assignments: a command line with an environment is started so
    (stacks.base.Applied.command), and env execs the program in the same process, the one that is sampled."""
    if Path(argv[0]).name == "env":
        argv = list(itertools.dropwhile(lambda word: "=" in word, argv[1:])) or argv
    return shutil.which(argv[0]) or argv[0]


def gated(argv: list[str]) -> bool:
    """Whether a client of ``argv`` waits at a gate until it is sampled: perf must sample before the
    stack starts (its own start-up takes 0.1-0.4 s here, longer than a short transfer). py-spy attaches
    to a running interpreter, which imports for longer than py-spy takes to attach."""
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


def _stop(popen: subprocess.Popen) -> None:
    """SIGINT (perf and py-spy write what they have on it), then wait; SIGKILL if one hangs."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGINT)
    try:
        popen.wait(30)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


class _Recorder:
    """One `perf record` of every CPU, for the endpoints of one way of unwinding; their samples are told
    apart by pid afterwards. Per-CPU, not attached to the stacks' tasks: attached, the sampling cost
    ngtcp2 and quic-go a quarter of their goodput here (0.75-0.77x, 2026-11-25; its timer is re-armed at
    every context switch of theirs, dear in a VM), per-CPU nothing measurable."""

    def __init__(self, unwind: str, workdir: Path):
        self.unwind = unwind
        self.out = workdir / f"perf-{unwind}.data"
        self.log = open(workdir / f"perf-{unwind}.log", "w+b")
        control = [workdir / f"perf-{unwind}.{name}" for name in ("ctl", "ack")]
        for fifo in control:
            os.mkfifo(fifo)
        call_graph = "fp" if unwind == "fp" else f"dwarf,{DWARF_STACK_BYTES}"
        # events off (-D -1) until enabled through the control FIFO, whose acknowledgement says perf samples
        argv = ["perf", "record", "-q", "-a", "-e", "cpu-clock", "-F", str(PERF_HZ), "--call-graph", call_graph,
                "-D", "-1", "--control", f"fifo:{control[0]},{control[1]}", "-o", str(self.out)]
        # its own session: a Ctrl-C to qreplay's group must not end it before it has written its file
        self.popen = subprocess.Popen(argv, stdout=self.log, stderr=self.log, start_new_session=True)
        # (read-write opens never block, whenever perf opens its ends; both stay open until perf ends,
        # as it takes a closed control FIFO for the end of its commands)
        self.fifos = [os.open(fifo, os.O_RDWR | os.O_NONBLOCK) for fifo in control]
        os.write(self.fifos[0], b"enable\n")
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while time.monotonic() < deadline and self.popen.poll() is None:
            if select.select([self.fifos[1]], [], [], 0.05)[0] and b"ack" in os.read(self.fifos[1], 64):
                return
        self.stop()
        raise RuntimeError(f"perf did not start sampling within {ATTACH_TIMEOUT_S:.0f} s: "
                           + Path(self.log.name).read_text(errors="replace").strip()[-300:])

    def stop(self) -> None:
        _stop(self.popen)
        self.log.close()
        for fd in self.fifos:
            os.close(fd)
        self.fifos = []

    def samples(self, pids: set[int]) -> dict[int, tuple[Counter, float]]:
        """{pid: (folded stacks, CPU seconds)} of the processes ``pids``."""
        script = subprocess.run(["perf", "script", "--no-inline", "-i", str(self.out),
                                 "--pid", ",".join(map(str, sorted(pids))), "-F", "pid,period,ip,sym,dso"],
                                capture_output=True, text=True, errors="replace")
        if script.returncode != 0:
            raise ToolError(f"perf script failed: {script.stderr.strip()[-300:]}")
        return {pid: fold_perf_script(script.stdout, pid) for pid in pids}


class _PySpy:
    """py-spy attached to one Python endpoint, without pausing it to sample (--nonblocking: paused 100
    times a second, aioquic kept 0.78x of its goodput, unpaused 1.00x; a stack read while it changes is
    dropped). It samples the wall-clock time of threads it judges busy (it misjudges some waits), so their
    CPU comes from the kernel's accounting of the process."""

    def __init__(self, pid: int, workdir: Path, endpoint: str):
        self.pid, self.out = pid, workdir / f"{endpoint}.py-spy"
        self.log = open(workdir / f"{endpoint}.py-spy.log", "w+b")
        py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
        if not py_spy:
            raise ToolError("py-spy is not installed: run scripts/setup.sh (it is pinned in requirements.lock)")
        self.popen = subprocess.Popen([py_spy, "record", "--pid", str(pid), "--format", "raw", "--nolineno",
                                       "--rate", str(PY_SPY_HZ), "--nonblocking", "--output", str(self.out)],
                                      stdout=self.log, stderr=self.log, start_new_session=True)
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while b"Sampling process" not in Path(self.log.name).read_bytes():
            if time.monotonic() > deadline or self.popen.poll() is not None:
                self.stop()
                raise RuntimeError("py-spy did not start sampling: "
                                   + Path(self.log.name).read_text(errors="replace").strip()[-300:])
            time.sleep(0.01)
        self.cpu_start, self.cpu_end = process_cpu_s(pid), None

    def stop(self) -> None:
        if self.cpu_end is None:
            self.cpu_end = process_cpu_s(self.pid)
        if self.popen.poll() is None and process_cpu_s(self.pid) is None:
            # its process is gone: py-spy ends by itself once it has written everything
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(ATTACH_TIMEOUT_S)
        _stop(self.popen)
        self.log.close()

    def samples(self, total_cpu_s: float | None) -> tuple[Counter, float]:
        """(folded stacks, CPU seconds); ``total_cpu_s``: the process's CPU over its life, for one that had
        exited by the time sampling stopped."""
        if not self.out.exists():
            raise ToolError("py-spy wrote nothing: " + Path(self.log.name).read_text(errors="replace").strip()[-300:])
        end = self.cpu_end if self.cpu_end is not None else total_cpu_s
        cpu_s = max(0.0, end - (self.cpu_start or 0.0)) if end is not None else 0.0
        return fold_py_spy(self.out.read_text(errors="replace")), cpu_s


@dataclass
class _Endpoint:
    library: str
    executable: str
    pid: int | None = None
    sampler: _Recorder | _PySpy | None = None


class Profiling:
    """The sampling of one run. ``attach`` each endpoint once it may be sampled (returning once it is):
    a native one is sampled by a perf recorder of its way of unwinding, started for the first such
    endpoint; a client waiting at its gate is named by ``identify`` once it runs. ``stop`` when the
    client has finished, then ``results``. Stopping twice is harmless."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.endpoints: dict[str, _Endpoint] = {}
        self.recorders: dict[str, _Recorder] = {}
        self.started = time.monotonic()
        self.stopped: float | None = None

    def attach(self, endpoint: str, library: str, executable: str, pid: int | None = None) -> None:
        entry = self.endpoints[endpoint] = _Endpoint(library, executable, pid)
        if is_python(executable):
            entry.sampler = _PySpy(pid, self.workdir, endpoint)
            return
        unwind = perf_unwinding(executable)
        if unwind not in self.recorders:
            self.recorders[unwind] = _Recorder(unwind, self.workdir)
        entry.sampler = self.recorders[unwind]

    def identify(self, endpoint: str, pid: int) -> None:
        self.endpoints[endpoint].pid = pid

    def stop(self) -> None:
        if self.stopped is None:
            self.stopped = time.monotonic()
        for sampler in {id(e.sampler): e.sampler for e in self.endpoints.values() if e.sampler}.values():
            sampler.stop()

    def results(self, total_cpu_s: dict[str, float | None]) -> list[EndpointProfile]:
        """Each endpoint's samples; ``total_cpu_s``: each endpoint's CPU seconds over its life (GNU time's)."""
        self.stop()
        found = []
        for recorder in self.recorders.values():
            mine = {name: e for name, e in self.endpoints.items() if e.sampler is recorder and e.pid}
            per_pid = recorder.samples({e.pid for e in mine.values()}) if mine else {}
            for name, e in mine.items():
                profiler = f"perf cpu-clock {PERF_HZ} Hz, {recorder.unwind} unwinding"
                found.append(EndpointProfile(name, e.library, profiler, *per_pid[e.pid], self._window()))
        for name, e in self.endpoints.items():
            if isinstance(e.sampler, _PySpy):
                found.append(EndpointProfile(name, e.library, f"py-spy {PY_SPY_HZ} Hz",
                                             *e.sampler.samples(total_cpu_s.get(name)), self._window()))
        return sorted(found, key=lambda p: p.endpoint != "server")

    def _window(self) -> float:
        return (self.stopped or time.monotonic()) - self.started


# --- folding ---------------------------------------------------------------------------------------

_FRAME = re.compile(r"^\s*[0-9a-f]+ (.*) \((.*)\)$")


def frame_name(symbol: str, dso: str) -> str:
    """A frame as the flame graph shows it: the function (kernel ones marked ``_[k]``, as inferno's
    collapse-perf --all does), or ``[library]`` where the symbol is unknown."""
    if symbol == "[unknown]" or not symbol:
        return f"[{Path(dso).name}]" if dso and dso != "[unknown]" else "[unknown]"
    return f"{symbol}_[k]" if dso.startswith("[kernel") else symbol


def fold_perf_script(text: str, pid: int) -> tuple[Counter, float]:
    """({folded stack: samples}, CPU seconds) of process ``pid`` from `perf script -F pid,period,ip,sym,dso`
    of cpu-clock samples (each sample's period is the CPU nanoseconds it stands for)."""
    stacks: Counter = Counter()
    total_ns = 0
    for block in text.split("\n\n"):
        lines = block.strip("\n").splitlines()
        if not lines:
            continue
        try:
            sample_pid, period = (int(word) for word in lines[0].split()[:2])
        except ValueError:
            continue
        if sample_pid != pid:
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
