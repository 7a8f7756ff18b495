"""Running Debian's ZMap 2.1.1 with the VN probe, and reading what it found.

ZMap's ``udp`` module sends the payload file to every target and records
every UDP answer and ICMP error (``--output-filter`` lets failures through, so
closed ports are counted too). Its working files (payload, blocklist,
allowlist, CSV, metadata, log) are kept in a directory next to the scan file:
the raw evidence of a scan survives it, and a dry run's command is runnable.
"""

from __future__ import annotations

import collections
import csv
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common.process import ns_command
from tparams.errors import ToolError

from scanner.discovery.netinfo import Route
from scanner.discovery.plan import Plan
from tparams.probe import Probe
from scanner.discovery.response import judge_response


OUTPUT_FIELDS = ("saddr", "sport", "data", "classification", "success", "repeat", "timestamp-str")
# Every response, not only ZMap's "successes", so ICMP port-unreachable is counted too.
OUTPUT_FILTER = "success = 1 || success = 0"
VERSION_NEGOTIATION = "version-negotiation"
_PROGRESS = re.compile(r"^\s*\d+:\d+(?::\d+)? (\d+)%")


@dataclass(frozen=True)
class ZMapFiles:
    directory: Path

    @property
    def payload(self) -> Path:
        return self.directory / "probe.bin"

    @property
    def blocklist(self) -> Path:
        return self.directory / "blocklist.conf"

    @property
    def allowlist(self) -> Path:
        return self.directory / "allowlist.conf"

    @property
    def results(self) -> Path:
        return self.directory / "results.csv"

    @property
    def metadata(self) -> Path:
        return self.directory / "metadata.json"

    @property
    def log(self) -> Path:
        return self.directory / "zmap.log"


@dataclass(frozen=True)
class Discovered:
    ip: str
    port: int
    versions: tuple[int, ...]
    time: dt.datetime


@dataclass
class Outcome:
    found: list[Discovered] = field(default_factory=list)
    answers: collections.Counter = field(default_factory=collections.Counter)
    probes_sent: int | None = None


def write_inputs(plan: Plan, probe: Probe, files: ZMapFiles) -> None:
    files.directory.mkdir(parents=True, exist_ok=True)
    files.payload.write_bytes(probe.payload)
    files.blocklist.write_text("".join(f"{net}\n" for net in plan.blocklist) or "# nothing blocked\n")
    if plan.targets:
        files.allowlist.write_text("".join(f"{net}\n" for net in plan.targets))


# ZMap 2.1.1 hands captured answers to its output in batches up to about 1 s late (measured in the lab: a
# median of 0.5 s after they arrived, at most 1.03 s), so its --cooldown-time N listens N-1 to N seconds: with
# N = 1, answers 0.88-1.53 s after the last probe were lost while pcap_drop stayed 0. It is given the cooldown
# asked plus this lag (the stored zmap_command shows what ran; the settings keep what was asked).
ZMAP_OUTPUT_LAG_S = 1


def zmap_command(plan: Plan, route: Route, files: ZMapFiles, seed: int) -> list[str]:
    argv = [
        "zmap",
        "--probe-module=udp", f"--probe-args=file:{files.payload}",
        f"--target-port={plan.port}",
        f"--interface={route.interface}", f"--source-ip={route.source_ip}", f"--gateway-mac={route.gateway_mac}",
        f"--blacklist-file={files.blocklist}",
        f"--rate={plan.rate}", f"--cooldown-time={plan.cooldown + ZMAP_OUTPUT_LAG_S}",
        f"--seed={seed}", f"--shards={plan.shards}", f"--shard={plan.shard}",
        "--output-module=csv", f"--output-fields={','.join(OUTPUT_FIELDS)}", f"--output-filter={OUTPUT_FILTER}",
        f"--output-file={files.results}", f"--metadata-file={files.metadata}",
        "--disable-syslog",
    ]
    if plan.targets:
        argv.append(f"--whitelist-file={files.allowlist}")
    return argv


def command_text(argv: Sequence[str]) -> str:
    return shlex.join(argv)


# ZMap 2.1.1 aborts in its address permutation for some seeds (zmap/zmap#310; measured here: seed 251 of 1-300
# for a /24, every time), at the start of its sending, before any probe leaves.
PERMUTATION_ABORT = "constraint_lookup_index"
RESEEDS = 3


def run_zmap(
    argv: Sequence[str],
    files: ZMapFiles,
    netns: str | None = None,
    on_progress: Callable[[float], None] | None = None,
    reseed: Callable[[], Sequence[str]] | None = None,
) -> dict:
    """Run ZMap to the end (killing it on Ctrl-C or error); returns its metadata (its ``seed`` the one that
    ran). A failure becomes a ToolError with ZMap's own FATAL line. ``reseed``, where the seed is qscan's own
    choice, gives the command with another seed when ZMap cannot walk the targets with this one."""
    if shutil.which("zmap") is None:
        raise ToolError("zmap is not installed (Debian package zmap; scripts/setup.sh installs it)")
    status = _run_once(ns_command(netns, argv), files, on_progress)
    for _ in range(RESEEDS if reseed else 0):
        if status == 0 or not _aborted_in_permutation(files.log):
            break
        files.log.replace(files.log.with_suffix(".aborted.log"))
        argv = reseed()
        print(f"warning: zmap aborted in its address permutation before sending (a ZMap 2.1.1 bug with some seeds, "
              f"zmap/zmap#310): ran it with another seed (the aborted run's log: "
              f"{files.log.with_suffix('.aborted.log')})", file=sys.stderr, flush=True)
        status = _run_once(ns_command(netns, argv), files, on_progress)
    if status != 0 and _aborted_in_permutation(files.log):
        raise ToolError("zmap aborted in its address permutation before sending: ZMap 2.1.1 cannot walk these "
                        "targets with this seed (zmap/zmap#310); give another --seed (the same on every shard) "
                        f"(full log: {files.log})")
    if status != 0:
        raise ToolError(f"zmap failed: {_fatal_line(files.log)} (full log: {files.log})")
    try:
        metadata = json.loads(files.metadata.read_text())
    except (OSError, ValueError):
        return {}
    dropped = sum(metadata.get(key) or 0 for key in ("pcap_drop", "pcap_ifdrop"))
    if dropped:
        print(f"warning: ZMap's capture dropped {dropped:,} packets (pcap_drop + pcap_ifdrop in {files.metadata}): "
              "answers may be missing; a lower --rate loses fewer", file=sys.stderr, flush=True)
    return metadata


def _run_once(full: list[str], files: ZMapFiles, on_progress: Callable[[float], None] | None) -> int:
    with open(files.log, "w") as log:
        process = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            for line in process.stderr:
                log.write(line)
                match = _PROGRESS.match(line)
                if match and on_progress:
                    on_progress(int(match.group(1)) / 100)
            return process.wait()
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def read_results(files: ZMapFiles, probe: Probe, port: int) -> Outcome:
    """Judge every row of ZMap's CSV: valid VN answers become Discovered, the
    rest are counted by reason (never trusted)."""
    outcome = Outcome()
    seen: set[str] = set()
    with open(files.results, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["repeat"] == "1" or row["saddr"] in seen:
                outcome.answers["repeat"] += 1
                continue
            if row["classification"] != "udp":
                # ICMP errors: ZMap leaves sport and data empty (not QUIC).
                outcome.answers[row["classification"] or "unclassified"] += 1
                continue
            if row["sport"] != str(port):
                outcome.answers["invalid:wrong-source-port"] += 1
                continue
            judgement = judge_response(bytes.fromhex(row["data"]), probe)
            if not judgement.valid:
                outcome.answers[f"invalid:{judgement.invalid_reason}"] += 1
                continue
            seen.add(row["saddr"])
            outcome.answers[VERSION_NEGOTIATION] += 1
            outcome.found.append(Discovered(row["saddr"], port, judgement.versions, _timestamp(row["timestamp-str"])))
    return outcome


def _timestamp(text: str) -> dt.datetime:
    # ZMap writes e.g. 2026-11-21T23:37:42.709+0000
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z")


def _fatal_line(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    for line in reversed(lines):
        if "[FATAL]" in line:
            return line.split("[FATAL]", 1)[1].strip()
        if "Assertion" in line:  # an abort: its status thread may still print a line after it
            return line.strip()
    return lines[-1].strip() if lines else "no output"


def _aborted_in_permutation(log: Path) -> bool:
    """Whether ZMap aborted in its address permutation: its assertion anywhere in the log, as the status thread
    may print one more progress line after it (the line is not always the last)."""
    return PERMUTATION_ABORT in log.read_text(errors="replace")
