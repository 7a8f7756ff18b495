"""A census campaign: the shards of one ZMap scan, each run by its own host into one campaign directory.

Every host runs the same command but for its shard (``shard_argv``): ZMap's
shard I of N with the campaign's seed, then handshakes with what it found,
into a scan file of its own (``_work/<vantage>/shard-<i>.duckdb``), which is
then exported as that shard's Parquet partition (scanner.campaign_store).
The directory's ``_campaign.json`` fixes what every shard must agree on
(targets, port, seed, shard count); a shard that disagrees, or that is
already complete, or that another process is running, is refused in one
line. A shard killed half way resumes when its command runs again: a
finished ZMap run is kept and recorded handshakes are skipped.

``run_local`` is the one-machine simulation: each shard's command started
inside its own network namespace of a population lab (lab/population.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from common.process import STARTED_PIDS, ns_command
from tparams.errors import ToolError


from scanner.campaign_store import agree, export_shard, only_runner, work_file
from scanner.discovery.ipv4 import prepare, scan_ipv4
from scanner.discovery.plan import LAB_RANGE, make_plan, parse_cidr
from scanner.engine import ScanSettings

QSCAN = str(Path(sys.executable).parent / "qscan")


@dataclass(frozen=True)
class CampaignSpec:
    """What every shard of a campaign must agree on."""

    name: str
    targets: tuple[str, ...]
    seed: int
    shards: int
    port: int = 443

    allowlist: str | None = None  # a file of addresses/CIDRs (a hitlist), ZMap's allowlist

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ToolError(f"a campaign needs at least one shard, not {self.shards}")

    @property
    def in_lab(self) -> bool:
        """Every target inside the lab's range: nothing is sent to the Internet."""
        return self.allowlist is None and bool(self.targets) and all(
            parse_cidr(t).subnet_of(LAB_RANGE) for t in self.targets)


@dataclass
class ShardResult:
    shard: int
    resumed: bool
    probes_sent: int | None
    quic_servers: int
    handshakes: int
    handshakes_ok: int
    seconds_discovery: float
    seconds_handshakes: float
    rows: dict[str, int]


def shard_argv(spec: CampaignSpec, shard: int | str, directory: str | Path, *, vantage: str, rate: int,
               cooldown: int, settings: ScanSettings, qscan: str = "qscan") -> list[str]:
    """The command the host of ``shard`` runs (``shard`` may be a shell expression, e.g. for Slurm)."""
    return [qscan, "campaign", "shard", *spec.targets, "--campaign", spec.name, "--out", str(directory),
            "--shard", f"{shard}/{spec.shards}", "--seed", str(spec.seed), "--port", str(spec.port),
            "--vantage", vantage, "--rate", str(rate), "--cooldown", str(cooldown),
            "--handshake-rate", f"{settings.rate:g}", "--concurrency", str(settings.concurrency),
            "--workers", str(settings.workers), "--timeout", f"{settings.timeout:g}", "--quiet", "--json",
            *(["--allowlist", spec.allowlist] if spec.allowlist else [])]


def run_shard(directory: str | Path, spec: CampaignSpec, shard: int, *, vantage: str, rate: int, cooldown: int,
              settings: ScanSettings, netns: str | None = None, command_line: str | None = None) -> ShardResult:
    """Run (or resume) shard ``shard`` of ``spec`` and export it into ``directory``."""
    if not 0 <= shard < spec.shards:
        raise ToolError(f"shard must be I/N with 0 <= I < N, not {shard}/{spec.shards}")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    agree(root, _manifest(spec))
    work = work_file(root, vantage, shard)
    work.parent.mkdir(parents=True, exist_ok=True)
    done = work.with_suffix(".done")
    label = f"shard {shard}/{spec.shards} of campaign {spec.name} (vantage {vantage})"
    with only_runner(work.with_suffix(".lock"), label):
        if done.exists():
            raise ToolError(f"{label} is already complete in {root}; refusing to run it twice")
        resumed = work.exists()
        plan = make_plan(list(spec.targets), spec.port, rate, cooldown, shard=shard, shards=spec.shards,
                         allowlist=Path(spec.allowlist) if spec.allowlist else None)
        prepared = prepare(plan, work, netns, seed=spec.seed)
        result = scan_ipv4(prepared, work, settings, netns, command_line=command_line, resume=resumed)
        rows = export_shard(work, root, campaign=spec.name, vantage=vantage, shard=str(shard))
        outcome = ShardResult(shard, resumed, result.discovery.probes_sent, len(result.discovery.found),
                              result.handshakes_attempted, result.handshakes_ok, result.seconds_discovery,
                              result.seconds_handshakes, rows)
        done.write_text(json.dumps(asdict(outcome), indent=1) + "\n")
    return outcome


def _manifest(spec: CampaignSpec) -> dict:
    return asdict(spec) | {"targets": list(spec.targets)}


def start_local(spec: CampaignSpec, directory: str | Path, namespaces: Sequence[str], *, vantage: str, rate: int,
                cooldown: int, settings: ScanSettings, shards: Sequence[int] | None = None) -> dict[int, subprocess.Popen]:
    """Start each shard's command in its own namespace (namespaces[i] for shard i); JSON on stdout."""
    if len(namespaces) < spec.shards:
        raise ToolError(f"{spec.shards} shards need as many client namespaces; the lab has {len(namespaces)}")
    Path(directory).mkdir(parents=True, exist_ok=True)
    agree(Path(directory), _manifest(spec))  # before any shard starts: a mismatch is one line, not N
    started = {}
    for shard in range(spec.shards) if shards is None else shards:
        argv = shard_argv(spec, shard, directory, vantage=vantage, rate=rate, cooldown=cooldown, settings=settings,
                          qscan=QSCAN)
        process = subprocess.Popen(ns_command(namespaces[shard], argv), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        STARTED_PIDS.add(process.pid)
        started[shard] = process
    return started


def wait_local(started: dict[int, subprocess.Popen], timeout: float | None = None) -> dict[int, ShardResult]:
    """Wait for every shard; a failed one raises with its own last line."""
    results, failures = {}, []
    for shard, process in started.items():
        out, err = process.communicate(timeout=timeout)
        STARTED_PIDS.discard(process.pid)
        if process.returncode != 0:
            last = (err.strip().splitlines() or [f"exit status {process.returncode}"])[-1]
            failures.append(f"shard {shard}: {last}")
        else:
            results[shard] = ShardResult(**json.loads(out))
    if failures:
        raise ToolError("; ".join(failures))
    return results


def run_local(spec: CampaignSpec, directory: str | Path, namespaces: Sequence[str], **options) -> dict[int, ShardResult]:
    return wait_local(start_local(spec, directory, namespaces, **options))


def union_check(con, expected: set[str] | None = None) -> dict[str, int]:
    """How the shards' discovered addresses add up: total rows, distinct, and against ``expected``."""
    rows, distinct = con.execute("SELECT count(*), count(DISTINCT ip) FROM discovery").fetchone()
    check = {"discovered": rows, "duplicates": rows - distinct}
    handshakes, targets = con.execute("SELECT count(*), count(DISTINCT (ip, port, sni)) FROM handshakes").fetchone()
    check |= {"handshakes": handshakes, "handshake_duplicates": handshakes - targets}
    if expected is not None:
        found = {ip for (ip,) in con.execute("SELECT DISTINCT ip FROM discovery").fetchall()}
        check |= {"expected": len(expected), "missing": len(expected - found), "unexpected": len(found - expected)}
    return check

