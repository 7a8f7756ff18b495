"""How long, how big, how many hosts: a campaign's projection from figures measured on this machine kind.

Pure apart from reading the measurements (datasets/campaign/measured.json,
written by bench/bench_campaign.py). Measured per shard (one host, one
handshake worker): ZMap probes/s, handshakes/s (CPU-bound: the lab's RTT is
~0), Parquet bytes a handshake record, merge and report seconds a million
records. Assumed, and printed as such: the share of targets that answer
(``responsive``) and how long a handshake holds a slot on the Internet
(``handshake_seconds``, a few RTTs), which with ``concurrency`` bounds
handshakes/s as much as CPU does.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

from common.slurm import array_job
from tparams.errors import ToolError

from scanner.campaign import CampaignSpec, shard_argv
from scanner.discovery.plan import duration
from scanner.engine import ScanSettings

MEASURED = Path(__file__).resolve().parents[1] / "datasets" / "campaign" / "measured.json"


@dataclass(frozen=True)
class Preset:
    targets: int
    responsive: float  # assumed share of targets that complete a handshake
    discovery: str
    note: str


# The three census sizes of issue 18. Responsive shares are assumptions (change them with --responsive).
PRESETS = {
    "ipv4": Preset(3_700_000_000, 0.0006, "zmap",
                   "routable IPv4 space; ~2M QUIC addresses assumed (early ZMap QUIC scans found a few million)"),
    "hitlist": Preset(10_000_000, 1.0, "allowlist", "a 10M address hitlist of known QUIC servers, every one handshaked"),
    "tranco": Preset(1_000_000, 0.3, "domains", "a Tranco-style 1M domain list; ~30% with HTTP/3 evidence assumed"),
}


@dataclass(frozen=True)
class Projection:
    targets: int
    hosts: int
    rate: int
    concurrency: int
    responsive: float
    handshake_seconds: float
    probes_per_host_second: float  # min(rate asked, measured)
    handshakes_per_host_second: float
    discovery_hours: float
    handshake_hours: float
    handshakes: int
    parquet_gib: float
    merge_minutes: float
    report_minutes: float
    bound: str  # what limits the handshakes: cpu or concurrency
    measured: dict

    @property
    def total_hours(self) -> float:
        return self.discovery_hours + self.handshake_hours


def load_measured(path: Path = MEASURED) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ToolError(f"no measurements at {path}: run bench/bench_campaign.py first") from None


def project(targets: int, hosts: int, rate: int, concurrency: int, measured: dict, responsive: float = 1.0,
            handshake_seconds: float = 0.25, cooldown: int = 8, discovery: str = "zmap") -> Projection:
    """``discovery`` "domains": no ZMap run, its DNS/Alt-Svc time is not projected (not measured)."""
    if targets < 1 or hosts < 1 or rate < 1 or concurrency < 1:
        raise ToolError("targets, hosts, rate and concurrency must be positive")
    if not 0 < responsive <= 1:
        raise ToolError(f"responsive must be a share in (0, 1], not {responsive}")
    figures = measured["per_shard"]
    probes = min(rate, figures["probes_per_second"])
    cpu = figures["handshakes_per_second"]
    slots = concurrency / handshake_seconds
    handshakes = round(targets * responsive)
    per_host = math.ceil(targets / hosts)
    parquet = measured["parquet"]
    return Projection(
        targets, hosts, rate, concurrency, responsive, handshake_seconds, probes, min(cpu, slots),
        discovery_hours=0.0 if discovery == "domains" else (per_host / probes + cooldown) / 3600,
        handshake_hours=math.ceil(handshakes / hosts) / min(cpu, slots) / 3600,
        handshakes=handshakes,
        parquet_gib=handshakes * parquet["bytes_per_record"] / 2**30,
        merge_minutes=handshakes / 1e6 * parquet["merge_seconds_per_million"] / 60,
        report_minutes=handshakes / 1e6 * parquet["report_seconds_per_million"] / 60,
        bound="cpu" if cpu <= slots else "concurrency", measured=measured,
    )


def host_command(preset_discovery: str, spec: CampaignSpec, shard: int | str, directory: str, rate: int,
                 concurrency: int, qscan: str = "qscan") -> list[str]:
    """What host ``shard`` runs: a ZMap shard of the ranges (or of the hitlist, ZMap's allowlist), or its
    line-split part of a domain list (``split -n l/N``), which no ZMap shard can split."""
    if preset_discovery == "domains":
        return [qscan, "domains", f"domains.txt.{shard}", "--out", f"{directory}/shard-{shard}.duckdb",
                "--handshake-rate", "0", "--quiet", "--json"]
    argv = shard_argv(spec, shard, directory, vantage="main", rate=rate, cooldown=8,
                      settings=ScanSettings(rate=0, concurrency=concurrency, workers=1), qscan=qscan)
    return argv + (["--yes"] if not spec.in_lab else [])


def lines(p: Projection, spec: CampaignSpec, directory: str, discovery: str = "zmap") -> list[str]:
    m = p.measured
    shard = m["per_shard"]
    out = [
        f"targets:     {p.targets:,} on {p.hosts} hosts ({math.ceil(p.targets / p.hosts):,} each), "
        f"{p.responsive:.4%} responsive (assumed) = {p.handshakes:,} handshakes",
        (f"discovery:   {_hours(p.discovery_hours)} at {p.probes_per_host_second:,.0f} probes/s a host "
         f"(asked {p.rate:,}; measured {shard['probes_per_second']:,.0f} a shard)") if discovery != "domains" else
        "discovery:   DNS (HTTPS records) and Alt-Svc per domain: not measured by bench_campaign",
        f"handshakes:  {_hours(p.handshake_hours)} at {p.handshakes_per_host_second:,.0f}/s a host, bound by "
        f"{p.bound} (measured {shard['handshakes_per_second']:,.0f}/s a shard's worker; {p.concurrency:,} in flight "
        f"x {p.handshake_seconds} s each assumed)",
        f"total:       {_hours(p.total_hours)} a host" + (" + the domains' discovery" if discovery == "domains" else ""),
        f"parquet:     {p.parquet_gib:,.2f} GiB ({m['parquet']['bytes_per_record']:,.0f} B a handshake record, measured)",
        f"merge:       {p.merge_minutes:,.1f} min; report {p.report_minutes:,.1f} min "
        f"({m['parquet']['merge_seconds_per_million']:.1f} and {m['parquet']['report_seconds_per_million']:.1f} s "
        "a million records, measured)",
        f"each host:   {shlex.join(host_command(discovery, spec, '<I>', directory, p.rate, p.concurrency))}",
        f"measured:    {m['provenance']['date']} on {m['provenance']['machine']} by `{m['provenance']['command']}`",
    ]
    return out


def as_json(p: Projection, spec: CampaignSpec, directory: str, discovery: str = "zmap") -> dict:
    data = asdict(p)
    data.pop("measured")
    return data | {"total_hours": p.total_hours, "measured_from": p.measured["provenance"],
                   "host_command": host_command(discovery, spec, "<I>", directory, p.rate, p.concurrency)}


def slurm_script(p: Projection, spec: CampaignSpec, directory: str, netns_prefix: str | None = None) -> str:
    """A Slurm array job: task I runs shard I (a requeued task resumes its shard)."""
    limit = math.ceil(p.total_hours * 60 * 2)  # twice the projection, at least 10 minutes (array_job)
    command = shlex.join(host_command("zmap", spec, "SHARD", directory, p.rate, p.concurrency, qscan="QSCAN"))
    command = command.replace("SHARD/", '"${SLURM_ARRAY_TASK_ID}"/').replace("QSCAN", '"${QSCAN:-qscan}"', 1)
    if netns_prefix:
        command = f'ip netns exec {shlex.quote(netns_prefix)}"${{SLURM_ARRAY_TASK_ID}}" {command}'
    return array_job(f"qscan-{spec.name}", p.hosts, limit, command,
                     f"qscan campaign {spec.name}: {p.hosts} shards of {', '.join(spec.targets) or 'the IPv4 space'}, "
                     f"projected {_hours(p.total_hours)} a shard (qscan campaign plan)")


def _hours(hours: float) -> str:
    return duration(hours * 3600)
