"""The emulated path between the client and server namespaces: its settings
(LinkConfig), the parsers for what users type ("30ms", "1gbit", "0.5%"), and
the link backends behind one small interface.

Semantics follow the thesis, which put netem on the client's ingress: delay
has a value per direction, while jitter, loss, reordering and the rate limit
with its queue act on the server-to-client ("down") direction, the one that
carries the download. An upload's direction has a rate of its own
(``rate_up_bps``, --rate-up; its queue sized as the down one's, by --queue or
one bandwidth-delay product of its own rate): without it an upload's link is
never its limit.

Adding a backend is one LinkBackend subclass registered in BACKENDS.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from common.process import STARTED_PIDS, ns_command, stop_process
from common.signals import signals_deferred
from common import netns
from tparams.errors import ToolError

REPO_ROOT = Path(__file__).resolve().parents[1]
LINKEM = REPO_ROOT / "build" / "bin" / "linkem"
MTU = 1500
PATH_DEVICE = "qrep0"  # the path's interface inside each namespace (namespaced, so never collides)
# netem's own default queue; the seeds' lesson is that it must also hold at
# least one bandwidth-delay product, hence the max() in queue_limit().
DEFAULT_QUEUE_PACKETS = 1000
TUN_QUEUE_PACKETS = 10_000


# --- parsing what users type ------------------------------------------------------------------------

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_DURATION_UNITS_MS = {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 0.001, "µs": 0.001}
_RATE_UNITS = {"": 1, "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_SIZE_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2}


def _number_and_unit(text: str | float | int, units: str, malformed: str) -> tuple[float, str]:
    """A number given as one, or as text followed by a unit (``units``: a regex with one group, matched
    case-insensitively); the unit is "" when none is written. A one-line ToolError ``malformed`` otherwise."""
    if isinstance(text, (int, float)):
        return float(text), ""
    m = re.fullmatch(_NUMBER + r"\s*" + units, str(text).strip().lower())
    if not m:
        raise ToolError(malformed)
    return float(m.group(1)), m.group(2) or ""


def parse_duration_ms(text: str | float | int, what: str = "delay") -> float:
    """"30ms", "0.5s", "250us" or a bare number of milliseconds -> milliseconds."""
    value, unit = _number_and_unit(text, r"(ms|s|us|µs)?", f"malformed {what} {text!r}: use e.g. 30ms, 0.5s, "
                                   "250us or a number of milliseconds")
    if not math.isfinite(value) or value < 0:
        raise ToolError(f"{what} must be a non-negative duration, got {text!r}")
    return value * _DURATION_UNITS_MS[unit]


def parse_rate_bps(text: str | int) -> int:
    """"1gbit", "50mbit", "800kbit" or a bare number of bits per second -> bits/s (tc's units)."""
    value, unit = _number_and_unit(text, r"([kmgt]?bit)?(?:/s)?", f"malformed rate {text!r}: use e.g. 1gbit, "
                                   "50mbit, 800kbit or bits per second")
    bps = int(value * _RATE_UNITS[unit])
    if bps <= 0:
        raise ToolError(f"rate must be positive, got {text!r}")
    return bps


def parse_percent(text: str | float | int, what: str = "loss") -> float:
    """"0.5%" or "0.5" -> 0.5 (percent, 0..100)."""
    value, _ = _number_and_unit(text, r"(%)?", f"malformed {what} {text!r}: use a percentage such as 1% or 0.5")
    if not 0 <= value <= 100:
        raise ToolError(f"{what} must be between 0 and 100 percent, got {text!r}")
    return value


def parse_queue(text: str) -> tuple[int | None, int | None]:
    """"1000" or "1000p" -> (1000 packets, None); "256kb", "2mb", "64000b" -> (None, bytes)."""
    m = re.fullmatch(r"(\d+)\s*(p|b|kb|mb)?", str(text).strip().lower())
    if not m or int(m.group(1)) == 0:
        raise ToolError(f"malformed queue {text!r}: use packets (1000 or 1000p) or bytes (256kb, 2mb, 64000b)")
    count, unit = int(m.group(1)), m.group(2) or "p"
    return (count, None) if unit == "p" else (None, count * _SIZE_UNITS[unit])


# Download and buffer sizes: decimal units as in the thesis's "500 MB file", KiB/MiB/GiB binary
# (queues above take tc's units, where kb is 1024 bytes).
_DATA_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_DATA_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
                    "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str, option: str = "--size") -> int:
    """'500MB' -> 500000000, '64MiB' -> 67108864, '1000000' -> 1000000."""
    match = _DATA_SIZE.match(text)
    unit = (match[2] or "").lower() if match else None
    if not match or unit not in _DATA_SIZE_UNITS or float(match[1]) * _DATA_SIZE_UNITS[unit] < 1:
        raise ToolError(f"{option}: {text!r} is not a size like 500MB, 64MiB or 1000000")
    return int(float(match[1]) * _DATA_SIZE_UNITS[unit])


@dataclass(frozen=True)
class GilbertElliott:
    """Burst loss with netem's gemodel parameters, all percents: ``p`` good->bad,
    ``r`` bad->good, ``loss_bad`` (netem's 1-h) and ``loss_good`` (1-k)."""

    p: float
    r: float
    loss_bad: float = 100.0
    loss_good: float = 0.0

    @classmethod
    def parse(cls, text: str) -> "GilbertElliott":
        """"P,R[,LOSS_BAD[,LOSS_GOOD]]" in percents, e.g. "1%,25%"."""
        parts = [p for p in str(text).split(",")]
        if not 2 <= len(parts) <= 4:
            raise ToolError(f"malformed Gilbert-Elliott loss {text!r}: use P,R[,LOSS_BAD[,LOSS_GOOD]] in percent")
        return cls(*(parse_percent(p, "Gilbert-Elliott parameter") for p in parts))

    @property
    def stationary_loss_pct(self) -> float:
        if self.p + self.r == 0:
            return self.loss_good
        return (self.r * self.loss_good + self.p * self.loss_bad) / (self.p + self.r)


@dataclass(frozen=True)
class LinkConfig:
    """One setting of the emulated path (see the module docstring for which direction each applies to)."""

    delay_down_ms: float = 0.0
    delay_up_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    gilbert: GilbertElliott | None = None
    rate_bps: int | None = None
    queue: str | None = None  # packets ("1000", "1000p") or bytes ("256kb"); default: queue_limit()
    reorder_pct: float = 0.0
    rate_up_bps: int | None = None  # the client-to-server ("up") direction's rate, with a queue as the down one's

    def __post_init__(self):
        for name in ("delay_down_ms", "delay_up_ms", "jitter_ms"):
            parse_duration_ms(getattr(self, name), name)
        parse_percent(self.loss_pct, "loss")
        parse_percent(self.reorder_pct, "reorder")
        if self.loss_pct and self.gilbert:
            raise ToolError("give either Bernoulli loss or Gilbert-Elliott loss, not both")
        for rate in (self.rate_bps, self.rate_up_bps):
            if rate is not None and rate <= 0:
                raise ToolError(f"rate must be positive, got {rate}")
        if self.queue is not None:
            parse_queue(self.queue)
        if self.reorder_pct and not self.delay_down_ms:
            raise ToolError("reordering sends some packets without the delay, so it needs a down delay")

    @property
    def rtt_ms(self) -> float:
        return self.delay_down_ms + self.delay_up_ms

    def queue_limit(self, up: bool = False) -> tuple[int | None, int | None]:
        """(packets, bytes) of the down queue (``up``: the up one's, behind rate_up_bps): as given, else the
        larger of netem's 1000 packets and one bandwidth-delay product of that direction's rate."""
        if self.queue is not None:
            return parse_queue(self.queue)
        packets = DEFAULT_QUEUE_PACKETS
        rate = self.rate_up_bps if up else self.rate_bps
        if rate:
            bdp_bytes = rate / 8 * max(self.rtt_ms, 1.0) / 1000
            packets = max(packets, math.ceil(bdp_bytes / MTU))
        return packets, None

    def describe(self) -> str:
        parts = [f"delay {self.delay_down_ms:g}ms down/{self.delay_up_ms:g}ms up"]
        if self.jitter_ms:
            parts.append(f"jitter {self.jitter_ms:g}ms")
        if self.loss_pct:
            parts.append(f"loss {self.loss_pct:g}%")
        if self.gilbert:
            g = self.gilbert
            parts.append(f"gilbert p={g.p:g}% r={g.r:g}% ({g.stationary_loss_pct:.2f}% mean)")
        if self.rate_bps:
            packets, size = self.queue_limit()
            parts.append(f"rate {self.rate_bps / 1e6:g}Mbit/s queue {packets}p" if packets
                         else f"rate {self.rate_bps / 1e6:g}Mbit/s queue {size}B")
        if self.rate_up_bps:
            packets, size = self.queue_limit(up=True)
            parts.append(f"rate up {self.rate_up_bps / 1e6:g}Mbit/s queue {packets}p" if packets
                         else f"rate up {self.rate_up_bps / 1e6:g}Mbit/s queue {size}B")
        if self.reorder_pct:
            parts.append(f"reorder {self.reorder_pct:g}%")
        return ", ".join(parts)


# --- backends ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str  # why not, or what it uses when it works


class LinkBackend(ABC):
    """Joins the client and server namespaces by a path of MTU 1500 and emulates LinkConfig on it."""

    name: str

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability: ...

    def __init__(self, client_ns: str, server_ns: str, client_ip: str, server_ip: str, workdir: Path):
        self.client_ns, self.server_ns = client_ns, server_ns
        self.client_ip, self.server_ip = client_ip, server_ip
        self.workdir = workdir

    @abstractmethod
    def attach(self, config: LinkConfig) -> None:
        """Build the path (interfaces, addresses) and apply ``config``."""

    @abstractmethod
    def apply(self, config: LinkConfig) -> None:
        """Change the emulation of an attached path."""

    def link_counters(self) -> dict:
        """The emulator's own cumulative counters (drops by cause), {} if it has none."""
        return {}

    @classmethod
    def queue_applied(cls, config: LinkConfig) -> str | None:
        """The down queue this backend holds under ``config`` ("1000p", "262144B"), None where it adds none."""
        return None

    def detach(self) -> None:
        """Stop whatever runs outside the namespaces; the interfaces go with the namespaces."""

    def _address(self, ifname: str) -> None:
        for ns, ip in ((self.client_ns, self.client_ip), (self.server_ns, self.server_ip)):
            with netns.iproute(ns) as ipr:
                index = ipr.link_lookup(ifname=ifname)[0]
                ipr.link("set", index=index, mtu=MTU)
            netns.add_address(ns, ifname, ip, 24)
            netns.link_up(ns, ifname)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise ToolError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")


class NetemBackend(LinkBackend):
    """Kernel tc netem, the seeds' method: a veth pair; netem on the client's
    egress (up) and, through an ifb, on its ingress (down); tbf for the rate
    on the server's egress."""

    name = "netem"
    IFB = "qrep-ifb"

    @classmethod
    @functools.cache
    def availability(cls) -> Availability:
        scratch = f"qrep-probe-{os.getpid()}"
        netns.create_namespace(scratch)
        try:
            netns.add_veth(scratch, "probe0", scratch, "probe1")
            for argv, what in (
                (["tc", "qdisc", "add", "dev", "probe0", "root", "netem", "delay", "1ms"], "sch_netem"),
                (["ip", "link", "add", "probe-ifb", "type", "ifb"], "ifb"),
                (["tc", "qdisc", "add", "dev", "probe1", "root", "tbf", "rate", "1gbit", "burst", "64k",
                  "latency", "10ms"], "sch_tbf"),
            ):
                done = subprocess.run(ns_command(scratch, argv), capture_output=True, text=True)
                if done.returncode:
                    return Availability(False, f"kernel has no {what} ({done.stderr.strip() or 'tc failed'})")
        finally:
            netns.delete_namespace(scratch)
        return Availability(True, "kernel sch_netem + ifb + tbf")

    def attach(self, config: LinkConfig) -> None:
        netns.add_veth(self.client_ns, PATH_DEVICE, self.server_ns, PATH_DEVICE)
        self._address(PATH_DEVICE)
        self._tc(self.client_ns, ["ip", "link", "add", self.IFB, "type", "ifb"])
        self._tc(self.client_ns, ["ip", "link", "set", self.IFB, "up"])
        self._tc(self.client_ns, ["tc", "qdisc", "add", "dev", PATH_DEVICE, "handle", "ffff:", "ingress"])
        self._tc(self.client_ns, ["tc", "filter", "add", "dev", PATH_DEVICE, "parent", "ffff:", "matchall",
                                  "action", "mirred", "egress", "redirect", "dev", self.IFB])
        self.apply(config)

    @classmethod
    def queue_applied(cls, config: LinkConfig) -> str | None:
        packets, size = config.queue_limit()
        return f"{packets or max(1, size // MTU)}p"  # netem's limit is in packets, with or without a rate

    def apply(self, config: LinkConfig) -> None:
        packets, size = config.queue_limit()
        limit = packets or max(1, size // MTU)
        down = ["delay", f"{config.delay_down_ms}ms"]
        if config.jitter_ms:
            down.append(f"{config.jitter_ms}ms")
        if config.loss_pct:
            down += ["loss", "random", f"{config.loss_pct}%"]
        if config.gilbert:
            g = config.gilbert
            down += ["loss", "gemodel", f"{g.p}%", f"{g.r}%", f"{g.loss_bad}%", f"{g.loss_good}%"]
        if config.reorder_pct:
            down += ["reorder", f"{config.reorder_pct}%"]
        self._tc(self.client_ns, ["tc", "qdisc", "replace", "dev", self.IFB, "root", "netem", *down,
                                  "limit", str(limit)])
        # the up direction's rate is netem's own (the client's egress holds only this netem), its queue netem's
        up_packets, up_size = config.queue_limit(up=True)
        up = ["rate", str(config.rate_up_bps) + "bit"] if config.rate_up_bps else []
        self._tc(self.client_ns, ["tc", "qdisc", "replace", "dev", PATH_DEVICE, "root", "netem", "delay",
                                  f"{config.delay_up_ms}ms", *up,
                                  "limit", str(up_packets or max(1, up_size // MTU)) if up else str(limit)])
        if config.rate_bps:
            self._tc(self.server_ns, ["tc", "qdisc", "replace", "dev", PATH_DEVICE, "root", "tbf", "rate",
                                      str(config.rate_bps), "burst", "64k", "limit", str(size or packets * MTU)])
        else:
            subprocess.run(ns_command(self.server_ns, ["tc", "qdisc", "del", "dev", PATH_DEVICE, "root"]),
                           capture_output=True)

    def _tc(self, ns: str, argv: list[str]) -> None:
        _run(ns_command(ns, argv))


class RelayBackend(LinkBackend):
    """linkem, our userspace emulator: a tun device in each namespace, both
    held by one linkem process that relays between them."""

    name = "relay"

    @classmethod
    def queue_applied(cls, config: LinkConfig) -> str | None:
        if not config.rate_bps:
            return None  # linkem queues only behind its rate limit
        packets, size = config.queue_limit()
        return f"{packets}p" if packets else f"{size}B"

    @classmethod
    def availability(cls) -> Availability:
        if not LINKEM.exists():
            return Availability(False, f"{LINKEM.relative_to(REPO_ROOT)} is missing: run scripts/setup.sh (needs Go)")
        if not Path("/dev/net/tun").exists():
            return Availability(False, "/dev/net/tun is missing (no tun driver)")
        return Availability(True, f"linkem userspace relay over tun ({LINKEM.relative_to(REPO_ROOT)})")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.process: subprocess.Popen | None = None
        self.stats_file = self.workdir / "linkem-stats.json"
        self.final_counters: dict = {}

    def attach(self, config: LinkConfig) -> None:
        for ns in (self.client_ns, self.server_ns):
            _run(["ip", "-n", ns, "tuntap", "add", "mode", "tun", "dev", PATH_DEVICE])
            # tun's default queue (500) holds 5 ms at 100,000 packets/s: a
            # reader waiting that long for a core would drop what a wire keeps.
            _run(["ip", "-n", ns, "link", "set", "dev", PATH_DEVICE, "txqueuelen", str(TUN_QUEUE_PACKETS)])
        self._address(PATH_DEVICE)
        self.apply(config)

    def apply(self, config: LinkConfig) -> None:
        # Restarting costs a few milliseconds and the packets in flight,
        # which is cheap between runs and keeps linkem free of a control channel.
        self.detach()
        self.stats_file.unlink(missing_ok=True)
        log = self.workdir / "linkem.log"
        with open(log, "ab") as err, open(self.workdir / "linkem.out", "wb") as out, signals_deferred():
            self.process = subprocess.Popen(
                [str(LINKEM), "relay", *self.flags(config), "--stats-file", str(self.stats_file)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
            STARTED_PIDS.add(self.process.pid)
        deadline = time.monotonic() + 5
        while not self.stats_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.detach()
                tail = log.read_text(errors="replace").strip().splitlines()[-1:]
                raise ToolError(f"linkem did not start: {tail[0] if tail else 'no output'}")
            time.sleep(0.005)

    def flags(self, config: LinkConfig) -> list[str]:
        flags = ["--client-netns", self.client_ns, "--client-dev", PATH_DEVICE,
                 "--server-netns", self.server_ns, "--server-dev", PATH_DEVICE, "--mtu", str(MTU),
                 "--down-delay", f"{config.delay_down_ms}ms", "--up-delay", f"{config.delay_up_ms}ms"]
        if config.jitter_ms:
            flags += ["--down-jitter", f"{config.jitter_ms}ms"]
        if config.loss_pct:
            flags += ["--down-loss", str(config.loss_pct)]
        if config.gilbert:
            g = config.gilbert
            flags += ["--down-gilbert", f"{g.p},{g.r},{g.loss_bad},{g.loss_good}"]
        if config.reorder_pct:
            flags += ["--down-reorder", str(config.reorder_pct)]
        if config.rate_bps:
            packets, size = config.queue_limit()
            flags += ["--down-rate", str(config.rate_bps)]
            flags += ["--down-queue-packets", str(packets)] if packets else ["--down-queue-bytes", str(size)]
        if config.rate_up_bps:
            packets, size = config.queue_limit(up=True)
            flags += ["--up-rate", str(config.rate_up_bps)]
            flags += ["--up-queue-packets", str(packets)] if packets else ["--up-queue-bytes", str(size)]
        return flags

    def link_counters(self) -> dict:
        if self.process is None or self.process.poll() is not None:
            return self.final_counters
        before = self.stats_file.stat().st_mtime_ns
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 1
        while self.stats_file.stat().st_mtime_ns == before and time.monotonic() < deadline:
            time.sleep(0.002)
        return json.loads(self.stats_file.read_text())

    def detach(self) -> None:
        if self.process is None:
            return
        stop_process(self.process.pid)
        self.process.wait()
        out = (self.workdir / "linkem.out").read_text().strip().splitlines()
        if out:
            self.final_counters = json.loads(out[-1])
        self.process = None


class VethBackend(LinkBackend):
    """A plain veth pair, no emulation: the baseline the emulators are measured against."""

    name = "veth"

    @classmethod
    def availability(cls) -> Availability:
        return Availability(True, "plain veth pair, no emulation (baseline only)")

    def attach(self, config: LinkConfig) -> None:
        netns.add_veth(self.client_ns, PATH_DEVICE, self.server_ns, PATH_DEVICE)
        self._address(PATH_DEVICE)
        self.apply(config)

    def apply(self, config: LinkConfig) -> None:
        if config != LinkConfig():
            raise ToolError("the veth backend cannot emulate delay, loss or rate; use auto, netem or relay")


BACKENDS: dict[str, type[LinkBackend]] = {b.name: b for b in (NetemBackend, RelayBackend, VethBackend)}
# auto: the kernel's emulator where it exists (what the thesis used), else ours.
AUTO_ORDER = ("netem", "relay")


def select_backend(choice: str, link: LinkConfig | None = None) -> type[LinkBackend]:
    """The backend class for ``choice``; ``auto`` with nothing to emulate on ``link`` is the plain veth
    pair, so an emulator never takes CPU from the stacks where it would only copy packets."""
    if choice == "auto" and link == LinkConfig():
        return VethBackend
    if choice == "auto":
        reasons = []
        for name in AUTO_ORDER:
            available = BACKENDS[name].availability()
            if available.ok:
                return BACKENDS[name]
            reasons.append(f"{name}: {available.reason}")
        raise ToolError("no link backend works here (" + "; ".join(reasons) + ")")
    if choice not in BACKENDS:
        raise ToolError(f"unknown link backend {choice!r}: choose auto, {', '.join(BACKENDS)}")
    available = BACKENDS[choice].availability()
    if not available.ok:
        raise ToolError(f"link backend {choice} is not usable here: {available.reason}")
    return BACKENDS[choice]
