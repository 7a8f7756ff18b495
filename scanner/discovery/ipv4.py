"""`qscan ipv4` as a library call: ZMap discovery, then handshakes, one file, one scan_id.

``netns`` runs the whole scan inside a named network namespace (ZMap through
``ip netns exec``, the handshake sockets created inside it); without it the
scan runs wherever the process already is (e.g. under ``ip netns exec``).
``run_discovery_scan`` is the scan both families share (`qscan ipv6` sends with its own prober).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as dt
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from tparams.errors import ToolError

from scanner.scan import scan_into
from scanner.discovery.netinfo import (
    Route, check_raw_socket_permission, detect_route, refuse_unreachable_lab, require_namespace,
)
from scanner.discovery.plan import WHOLE_SPACE, Pacing, Plan, subtract
from tparams.probe import Probe, make_probe
from scanner.discovery.zmap import Discovered, Outcome, ZMapFiles, command_text, read_results, run_zmap, write_inputs, zmap_command
from scanner.engine import ScanSettings
from common.netns import in_namespace
from scanner.columns import TIMESTAMP
from scanner.store import SCHEMA_DIR, ScanStore
from scanner.targets import Target

DISCOVERY_SCHEMA = ("discovery", 1, SCHEMA_DIR / "discovery_v1.sql")

DISCOVERY_ARROW = pa.schema([
    ("scan_id", pa.int32()), ("shard", pa.int32()), ("ip", pa.string()), ("port", pa.int32()),
    ("versions", pa.list_(pa.int64())), ("time", TIMESTAMP),
])


@dataclass(frozen=True)
class Prepared:
    """Everything decided before the first packet: what a dry run prints."""

    plan: Plan
    route: Route
    probe: Probe
    seed: int
    files: ZMapFiles
    seed_chosen: bool = False  # qscan's own choice, not --seed's: ZMap may run with another (see run_zmap)

    @property
    def argv(self) -> list[str]:
        return zmap_command(self.plan, self.route, self.files, self.seed)

    @property
    def command(self) -> str:
        return command_text(self.argv)


@dataclass
class DiscoveryResult:
    scan_id: int
    discovery: Outcome
    handshakes_attempted: int = 0
    handshakes_ok: int = 0
    seconds_discovery: float = 0.0
    seconds_handshakes: float = 0.0


def zmap_dir(out: str | Path) -> Path:
    return Path(f"{out}.zmap")


def open_discovery_store(out: str | Path) -> ScanStore:
    store = ScanStore.open(out)
    try:
        store.apply_schema(DISCOVERY_SCHEMA[0], DISCOVERY_SCHEMA[1], DISCOVERY_SCHEMA[2].read_text())
    except BaseException:
        store.close()
        raise
    return store


def prepare(
    plan: Plan,
    out: str | Path,
    netns: str | None = None,
    interface: str | None = None,
    source_ip: str | None = None,
    gateway_mac: str | None = None,
    seed: int | None = None,
    dry_run: bool = False,
) -> Prepared:
    """Resolve the route and write ZMap's input files; sends and writes nothing when ``dry_run``."""
    if plan.shards > 1 and seed is None:
        raise ToolError("--shard needs --seed: every shard must walk the same address permutation")
    require_namespace(netns)
    first = subtract(plan.targets or [WHOLE_SPACE], plan.blocklist)[0].network_address
    if not dry_run:
        check_raw_socket_permission(netns)
        refuse_unreachable_lab([str(first)], netns)  # ZMap would send by the default route
    route = detect_route(str(first), netns, interface, source_ip, gateway_mac, resolve=not dry_run)
    probe = make_probe()
    chosen = seed is None
    seed = secrets.randbits(31) if chosen else seed
    files = ZMapFiles(zmap_dir(out))
    if not dry_run:  # a dry run writes nothing either
        write_inputs(plan, probe, files)
    return Prepared(plan, route, probe, seed, files, chosen)


def scan_ipv4(
    prepared: Prepared,
    out: str | Path,
    settings: ScanSettings,
    netns: str | None = None,
    discover_only: bool = False,
    command_line: str | None = None,
    on_zmap_progress: Callable[[float], None] | None = None,
    progress: bool = False,
    resume: bool = False,
) -> DiscoveryResult:
    """Run ZMap, store valid answers in ``discovery``, then handshake with each
    responsive address under the same scan_id.

    With ``resume`` the scan already in ``out`` (the same targets, port and
    shard) continues: a finished ZMap run is not repeated (its stored answers
    are the targets), and handshakes already recorded are skipped."""
    def another_seed() -> list[str]:
        return dataclasses.replace(prepared, seed=secrets.randbits(31)).argv

    step = DiscoveryStep("ipv4", "ZMap", _discovery_settings(prepared), [str(t) for t in prepared.plan.targets],
                         lambda: run_zmap(prepared.argv, prepared.files, netns, on_zmap_progress,
                                          reseed=another_seed if prepared.seed_chosen else None))
    return run_discovery_scan(step, prepared, out, settings, netns, discover_only, command_line, progress, resume)


class Preparation(Protocol):
    """What ``run_discovery_scan`` reads of a prepared scan (ipv4's Prepared, ipv6's Prepared6)."""

    @property
    def plan(self) -> Pacing: ...
    @property
    def probe(self) -> Probe: ...
    @property
    def seed(self) -> int: ...
    @property
    def files(self) -> ZMapFiles: ...
    @property
    def command(self) -> str: ...


@dataclass(frozen=True)
class DiscoveryStep:
    """How one family finds its targets, the rest of a discovery scan being the same for both."""

    kind: str  # scans.kind
    sender: str  # what sends the probes, as messages name it: "ZMap", "the prober"
    settings: dict  # scans.settings' "discovery"; the keys of _SCAN_IDENTITY decide what --resume may continue
    targets: list[str]  # discovery_runs.targets
    send: Callable[[], dict]  # sends every probe into the files, returns the sender's metadata (total_sent)
    extra_tables: Callable[[int], dict[str, pa.Table]] = lambda scan_id: {}  # appended with discovery's
    schemas: tuple[tuple[str, int, Path], ...] = ()  # components beside discovery's


def run_discovery_scan(step: DiscoveryStep, prepared: Preparation, out: str | Path, settings: ScanSettings,
                       netns: str | None, discover_only: bool, command_line: str | None, progress: bool,
                       resume: bool) -> DiscoveryResult:
    """Begin (or with ``resume`` continue) the scan in ``out``, send the probes unless a finished run is
    stored, store the valid answers, then handshake with them (ipv4's and ipv6's scan)."""
    plan = prepared.plan
    scan_settings = {"discovery": step.settings, "handshake": dataclasses.asdict(settings)}
    outcome = None
    with open_discovery_store(out) as store:
        for name, version, path in step.schemas:
            store.apply_schema(name, version, path.read_text())
        scan_id = _resumable_scan(store, out, step.kind, step.settings) if resume else None
        if scan_id is not None:
            store.begin_scan(step.kind, scan_settings, command_line, resume=True)
            outcome = _stored_outcome(store, scan_id)
            if outcome is not None:  # the sender's files stay the evidence of the run that found the answers
                prepared.files.payload.write_bytes(bytes.fromhex(store.con.execute(
                    "SELECT probe_hex FROM discovery_runs WHERE scan_id = ?", [scan_id]).fetchone()[0]))
        elif store.handshake_count() or store.con.execute("SELECT count(*) FROM discovery").fetchone()[0]:
            raise ToolError(f"{out} already holds a scan; use a new --out (shards go to separate files, "
                            "then `qscan merge`) or --resume")
        else:
            scan_id = store.begin_scan(step.kind, scan_settings, command_line)
    started = finished = dt.datetime.now(dt.timezone.utc)
    if outcome is None:
        try:
            metadata = step.send()
            outcome = read_results(prepared.files, prepared.probe, plan.port)
        except KeyboardInterrupt:
            raise ToolError(f"interrupted during {step.sender}: scan {scan_id} is begun in {out} but holds no "
                            f"answers ({step.sender}'s partial output: {prepared.files.directory}); the same "
                            f"command with --resume runs {step.sender} again, then the handshakes",
                            exit_code=130) from None
        outcome.probes_sent = metadata.get("total_sent")
        finished = dt.datetime.now(dt.timezone.utc)
        if metadata.get("seed") not in (None, prepared.seed):  # ZMap ran with another seed of qscan's choice
            prepared = dataclasses.replace(prepared, seed=metadata["seed"])
            step.settings["seed"] = prepared.seed
            with open_discovery_store(out) as store:
                store.con.execute("UPDATE scans SET settings = ? WHERE scan_id = ?",
                                  [json.dumps({**scan_settings, "discovery": step.settings}, default=str), scan_id])
        with open_discovery_store(out) as store:
            store.append({"discovery": discovery_table(scan_id, plan.shard, outcome),
                          "discovery_runs": _run_table(scan_id, prepared, step.targets, outcome, started, finished),
                          **step.extra_tables(scan_id)})
    if discover_only:
        with open_discovery_store(out) as store:
            store.finish_scan(scan_id)
    result = DiscoveryResult(scan_id, outcome, seconds_discovery=(finished - started).total_seconds())
    if discover_only:
        return result
    return handshake_discovered(out, result, settings, step.kind, netns, command_line, progress)


def handshake_discovered(out: str | Path, result: DiscoveryResult, settings: ScanSettings, kind: str,
                         netns: str | None, command_line: str | None, progress: bool) -> DiscoveryResult:
    """The handshakes with what discovery found, into the same scan (ipv4's and ipv6's second phase)."""
    targets = [Target(d.ip, d.port) for d in result.discovery.found]
    with in_namespace(netns) if netns else contextlib.nullcontext():
        handshakes = scan_into(out, targets, settings, kind=kind, resume=True, command_line=command_line,
                               progress=progress)
    if handshakes.scan_id != result.scan_id:
        raise AssertionError(f"handshakes went to scan {handshakes.scan_id}, discovery to {result.scan_id}")
    result.handshakes_attempted = handshakes.attempted
    result.handshakes_ok = handshakes.ok
    result.seconds_handshakes = handshakes.seconds
    return result


# What makes two runs the same scan (the rest, e.g. the probe's random version, may differ): ipv4's
# targets, ipv6's hitlist and aliased prefixes (each kind's settings hold only its own).
_SCAN_IDENTITY = ("targets", "hitlist", "aliased", "port", "shard", "shards", "seed")


def _resumable_scan(store: ScanStore, out: str | Path, kind: str, asked: dict) -> int | None:
    """The latest ``kind`` scan in ``out`` if it is the one ``asked`` describes; None if there is none."""
    row = store.con.execute("SELECT scan_id, settings FROM scans WHERE kind = ? "
                            "ORDER BY scan_id DESC LIMIT 1", [kind]).fetchone()
    if row is None:
        return None
    held = json.loads(row[1]).get("discovery", {})
    # One shard: any seed walks all.
    keys = [key for key in _SCAN_IDENTITY if key in asked and (key != "seed" or asked["shards"] > 1)]
    differs = [f"{key} {held.get(key)} (asked {asked[key]})" for key in keys if held.get(key) != asked[key]]
    if differs:
        raise ToolError(f"{out} holds another scan: {', '.join(differs)}; refusing to resume it with this one")
    return int(row[0])


def _stored_outcome(store: ScanStore, scan_id: int) -> Outcome | None:
    """What a finished ZMap run of ``scan_id`` found, from the store; None if it never finished."""
    run = store.con.execute("SELECT probes_sent, map_keys(answers), map_values(answers) FROM discovery_runs "
                            "WHERE scan_id = ?", [scan_id]).fetchone()
    if run is None:
        return None
    # TIMESTAMPTZ would come back through pytz; the naive UTC value is made aware here instead.
    found = [Discovered(ip, port, tuple(versions), time.replace(tzinfo=dt.timezone.utc))
             for ip, port, versions, time in store.con.execute(
                 "SELECT ip, port, versions, timezone('UTC', time) FROM discovery WHERE scan_id = ? ORDER BY time, ip",
                 [scan_id]).fetchall()]
    return Outcome(found, collections.Counter(dict(zip(run[1], run[2]))), run[0])


def _discovery_settings(prepared: Prepared) -> dict:
    plan = prepared.plan
    return {
        "targets": [str(t) for t in plan.targets], "port": plan.port, "rate": plan.rate, "cooldown": plan.cooldown,
        "shard": plan.shard, "shards": plan.shards, "seed": prepared.seed, "blocklist": plan.blocklist_source,
        "interface": prepared.route.interface, "source_ip": prepared.route.source_ip,
        "gateway_mac": prepared.route.gateway_mac, "probe_version": f"0x{prepared.probe.version:08x}",
    }


def discovery_table(scan_id: int, shard: int, outcome: Outcome) -> pa.Table:
    found = outcome.found
    return pa.Table.from_pydict({
        "scan_id": [scan_id] * len(found), "shard": [shard] * len(found),
        "ip": [d.ip for d in found], "port": [d.port for d in found],
        "versions": [list(d.versions) for d in found], "time": [d.time for d in found],
    }, schema=DISCOVERY_ARROW)


def _run_table(scan_id: int, prepared: Preparation, targets: list[str], outcome: Outcome, started: dt.datetime,
               finished: dt.datetime) -> pa.Table:
    """One discovery_runs row (a ZMap run, or our IPv6 prober's) as Arrow."""
    plan = prepared.plan
    return pa.Table.from_pylist([{
        "scan_id": scan_id, "shard": plan.shard, "shards": plan.shards, "seed": prepared.seed,
        "targets": targets, "blocklist": [str(b) for b in plan.blocklist],
        "port": plan.port, "rate": plan.rate, "probe_version": prepared.probe.version,
        "probe_hex": prepared.probe.hex, "probes_sent": outcome.probes_sent, "answers": sorted(outcome.answers.items()),
        "started_at": started, "finished_at": finished, "zmap_command": prepared.command,
    }], schema=pa.schema([
        ("scan_id", pa.int32()), ("shard", pa.int32()), ("shards", pa.int32()), ("seed", pa.int64()),
        ("targets", pa.list_(pa.string())), ("blocklist", pa.list_(pa.string())), ("port", pa.int32()),
        ("rate", pa.int32()), ("probe_version", pa.int64()), ("probe_hex", pa.string()),
        ("probes_sent", pa.int64()), ("answers", pa.map_(pa.string(), pa.int64())),
        ("started_at", TIMESTAMP), ("finished_at", TIMESTAMP), ("zmap_command", pa.string()),
    ]))
