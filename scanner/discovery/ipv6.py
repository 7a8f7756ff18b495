"""`qscan ipv6` as a library call: a hitlist, our prober (scanner/discovery/prober6.py),
then handshakes with what answered; one file, one scan_id, the tables of `qscan ipv4`.

``netns`` runs the whole scan inside a named network namespace (the prober's and the
handshakes' sockets are created inside it).
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from tparams.errors import ToolError
from tparams.probe import Probe, make_probe

from common.netns import in_namespace
from scanner.discovery import prober6
from scanner.discovery.hitlist import LAB_RANGE6, HitlistPlan
from scanner.discovery.ipv4 import DiscoveryResult, DiscoveryStep, run_discovery_scan
from scanner.discovery.netinfo import refuse_unreachable_lab, require_namespace
from scanner.discovery.zmap import ZMapFiles
from scanner.engine import ScanSettings
from scanner.store import SCHEMA_DIR

HITLIST_SCHEMA = ("hitlist", 1, SCHEMA_DIR / "hitlist_v1.sql")


@dataclass(frozen=True)
class Prepared6:
    plan: HitlistPlan
    aliased_source: str | None
    probe: Probe
    seed: int
    files: ZMapFiles

    @property
    def command(self) -> str:
        plan = self.plan
        return prober6.command_text(plan.rate, plan.cooldown, self.seed, plan.shard, plan.shards, plan.port,
                                    self.files)


def prober_dir(out: str | Path) -> Path:
    return Path(f"{out}.prober6")


def prepare_ipv6(plan: HitlistPlan, out: str | Path, netns: str | None = None, seed: int | None = None,
                 aliased: Path | None = None, yes: bool = False, dry_run: bool = False) -> Prepared6:
    """Check where the probes would go: an address outside the lab (2001:2::/48) only with ``yes``,
    a lab address only from where the lab is reached (its client namespace). A dry run, which
    sends and writes nothing, is not refused for where its probes would go."""
    if plan.shards > 1 and seed is None:
        raise ToolError("--shard needs --seed: every shard must walk the same address permutation")
    require_namespace(netns)
    outside = plan.outside_lab
    if not dry_run:
        if outside and not yes:
            raise ToolError(f"{len(outside):,} hitlist addresses lie outside the lab ({LAB_RANGE6}), first "
                            f"{outside[0]}: probing them sends to the Internet; refusing without --yes")
        refuse_unreachable_lab([t.ip for t in plan.targets], netns)
    seed = secrets.randbits(31) if seed is None else seed
    return Prepared6(plan, None if aliased is None else str(aliased), make_probe(), seed, ZMapFiles(prober_dir(out)))


def scan_ipv6(prepared: Prepared6, out: str | Path, settings: ScanSettings, netns: str | None = None,
              discover_only: bool = False, command_line: str | None = None, progress: bool = False,
              resume: bool = False) -> DiscoveryResult:
    """Probe this shard of the hitlist, store the valid answers in ``discovery`` (and the hitlist's
    accounting in ``hitlist_runs``/``hitlist_aliased``), then handshake with each responsive address
    under the same scan_id.

    With ``resume`` the scan already in ``out`` (the same hitlist, aliased prefixes, port and shard)
    continues: a finished probing run is not repeated (its stored answers are the targets), and
    handshakes already recorded are skipped."""
    plan = prepared.plan
    order = prober6.shard_order([t.ip for t in plan.targets], prepared.seed, plan.shard, plan.shards)

    def send() -> dict:
        with in_namespace(netns) if netns else contextlib.nullcontext():
            return prober6.probe(order, prepared.probe.payload, plan.port, plan.rate, plan.cooldown, prepared.files)

    def hitlist_tables(scan_id: int) -> dict[str, pa.Table]:
        mine = set(order)  # each shard records the aliased prefixes it probed: merged shards hold each once
        aliased = [t for t in plan.targets if t.aliased_prefix is not None and t.ip in mine]
        return {
            "hitlist_runs": pa.Table.from_pylist([{
                "scan_id": scan_id, "shard": plan.shard, "hitlist": plan.hitlist, "aliased": prepared.aliased_source,
                "targets": len(plan.targets), "bad_lines": len(plan.bad_lines), "blocked": plan.blocked,
                "folded": plan.folded}]),
            "hitlist_aliased": pa.Table.from_pydict({
                "scan_id": [scan_id] * len(aliased), "prefix": [t.aliased_prefix for t in aliased],
                "ip": [t.ip for t in aliased]}, schema=pa.schema([
                    ("scan_id", pa.int32()), ("prefix", pa.string()), ("ip", pa.string())])),
        }

    discovery_settings = {"hitlist": plan.hitlist, "aliased": prepared.aliased_source, "port": plan.port,
                          "rate": plan.rate, "cooldown": plan.cooldown, "shard": plan.shard, "shards": plan.shards,
                          "seed": prepared.seed, "blocklist": plan.blocklist_source,
                          "probe_version": f"0x{prepared.probe.version:08x}", "family": 6}
    step = DiscoveryStep("ipv6", "the prober", discovery_settings, [plan.hitlist], send, hitlist_tables,
                         (HITLIST_SCHEMA,))
    return run_discovery_scan(step, prepared, out, settings, netns, discover_only, command_line, progress, resume)
