"""Replay campaigns: experiments written down as one TOML file, planned into runs, spread over hosts.

A campaign file names experiments with the replay command line's own option
names (``stacks``, ``sets``, ``server-set``, ``delays``, ``losses``, ``rate``,
``rate-up``, ``size``, ``reps``, ``workload``, ``link``, ``server-host`` and ``launcher``
(its runs' servers on another host), each knob by its option, e.g. ``cc``);
``size``, ``server-stack``, ``server-set`` and each knob take one value or a
list (a list is one more axis of conditions: every client set against every
server set, an experiment a size and a server stack); a sweep is ``qreplay
sweep``'s ``param``, ``values`` and ``side``; ``set-pairs`` lists [client set, server
set] pairs that are no product; ``fidelity = true`` makes an experiment ``qreplay fidelity``'s comparison
(:func:`_expand_fidelity`). :func:`plan` expands it into runs, each with a plan id
(its ``run_id``), checking every stack, set, knob and sweep before any run; runs
of a stack not usable here stay in the plan (:func:`needs`).

Order: per experiment, as ``qreplay`` runs one (replay/runner.py's
``run_order``): conditions sharing a link together, rounds of one run per
condition, the round's order rotated by one each repetition. The deal
(:meth:`Plan.deal`): where the campaign file names run times (``measured``),
each run's projected time (as :func:`project` estimates it) and the longest
first to the host with the least so far; else the k-th run to shard k mod N.
Either way a host runs its share in the campaign's order, so each host runs
rounds over the conditions as one host does, and a condition's repetitions
land on different hosts.

A shard (:func:`run_shard`) stores each run on its own under its plan id in
its own results file (``DIR/_work/main/shard-I.duckdb``), skipping the ids
it holds (resume after kill -9), then exports it as its partition of the
Parquet campaign directory ``DIR`` (scanner/campaign_store.py's layout and
rules); :func:`merge` makes the partitions one results file again.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import hashlib
import heapq
import itertools
import json
import os
import shlex
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import duckdb

from replay import store
from replay.runner import Condition, Experiment, run_experiment, run_order
from replay.sets import NamedSet
from tparams.errors import ToolError, first_line
from tparams.knobs import KNOBS

VANTAGE = "main"  # the layout's vantage key: a replay campaign has one
#: the campaign file's keys of an experiment (the replay command line's option names) and their defaults
LIST_OPTIONS = {"stacks": ["ngtcp2"], "sets": ["firefox"], "delays": ["0ms"], "losses": ["0%"]}
VALUE_OPTIONS = {"server-set": None, "server-stack": None, "delay-up": "0ms", "jitter": "0ms", "rate": None,
                 "rate-up": None, "queue": None, "size": "5MB", "reps": 10, "workload": "download", "requests": 1,
                 "concurrency": 1, "clients": 1, "link": "auto", "timeout": None, "udp-buffer": "1664KiB",
                 "server-host": None, "launcher": None}
#: of them, those that take one value or a list (a list is one more axis): the size and the server's stack
#: (one experiment each), the server set (each client set against each: set pairs)
AXIS_OPTIONS = ("size", "server-stack", "server-set")
#: `qreplay sweep`'s options: one transport parameter over a list of values, on one side; `set-pairs`: the series as
#: [client set, server set] pairs, where they are no product of `sets` and `server-set` (the same set on both sides)
SWEEP_OPTIONS = {"param": None, "values": None, "side": "client"}
PAIRS_OPTION = "set-pairs"  # not `pairs`: `qreplay pairs` and the experiment kind pairs are of stacks
KNOB_OPTIONS = {knob.option[2:]: knob for knob in KNOBS.values()}
#: the keys of a `fidelity = true` experiment: `qreplay fidelity`'s comparison, its browsers and replay stacks both
#: in `stacks`
FIDELITY_OPTIONS = ("name", "fidelity", "stacks", "sets", "delays", "losses", "size", "reps", "link", "udp-buffer")


@dataclass(frozen=True)
class PlannedRun:
    index: int  # position in the campaign's order
    run_id: str
    experiment: int  # index into Plan.experiments
    condition: Condition
    rep: int

    @property
    def condition_id(self) -> str:
        """Its condition's plan id (its run id up to the repetition), its repetitions' too."""
        return self.run_id.rpartition("-r")[0]


@dataclass(frozen=True)
class Plan:
    name: str
    experiments: list[Experiment]
    runs: list[PlannedRun]
    digest: str  # of the expanded plan (its weights included): shards of one campaign must agree on it
    #: each run's projected seconds, from the run times the campaign file names (`measured`): the deal weighs runs
    #: by them; None: the deal counts runs
    weights: tuple[float, ...] | None = None
    measured: Path | None = None  # where the weights came from: the campaign file's `measured`
    _deals: dict[int, list[int]] = field(default_factory=dict, compare=False, repr=False)

    def deal(self, shards: int) -> list[int]:
        """Each run's shard of ``shards`` (by its index). By count, the k-th run to shard k mod N. By weight, the
        longest projected run first (ties: the earlier in the plan) to the shard with the least projected time so
        far (ties: the lower shard), or to the least loaded of those holding none of its condition's runs yet (once
        every shard holds one, anew) where that costs no more than the run's own time: the slowest shard's share is
        within two runs of the mean, where a deal by count left one up to a fifth above it on 64 hosts, and a
        condition's repetitions still go to different hosts. Made of the plan alone, so every host deals the same;
        each shard runs its share in the plan's order."""
        if shards not in self._deals:
            if self.weights is None:
                self._deals[shards] = [run.index % shards for run in self.runs]
            else:
                self._deals[shards] = _deal_by_weight(self.runs, self.weights, shards)
        return self._deals[shards]

    def share(self, shard: int, shards: int) -> list[PlannedRun]:
        dealt = self.deal(shards)
        return [run for run in self.runs if dealt[run.index] == shard]

    def part(self, keep: Callable[[PlannedRun], bool]) -> Plan:
        """The runs ``keep`` holds, in the plan's order, dealt anew as a campaign of their own (a figure's or a
        stack's part of a campaign, projected alone)."""
        kept = [run for run in self.runs if keep(run)]
        return Plan(self.name, self.experiments, [replace(run, index=index) for index, run in enumerate(kept)],
                    self.digest, None if self.weights is None else tuple(self.weights[run.index] for run in kept),
                    self.measured)


def _deal_by_weight(runs: list[PlannedRun], weights: tuple[float, ...], shards: int) -> list[int]:
    dealt, loads = [0] * len(runs), [(0.0, shard) for shard in range(shards)]
    holding: dict[str, set[int]] = {}  # a condition's shards
    for index in sorted(range(len(runs)), key=lambda i: (-weights[i], i)):
        held = holding.setdefault(runs[index].condition_id, set())
        if len(held) == shards:
            held.clear()
        passed = []
        while loads[0][1] in held:  # some shard holds none of it: len(held) < shards
            passed.append(heapq.heappop(loads))
        load, shard = heapq.heappop(loads)
        if passed and load - passed[0][0] > weights[index]:  # spread at the cost of more than the run: not spread
            passed.append((load, shard))
            load, shard = passed.pop(0)
        for item in passed:
            heapq.heappush(loads, item)
        dealt[index] = shard
        held.add(shard)
        heapq.heappush(loads, (load + weights[index], shard))
    return dealt


def load(path: str | Path) -> Plan:
    """The campaign file ``path`` planned; every refusal one line (ToolError)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ToolError(f"no campaign file {path}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ToolError(f"{path} is not a TOML campaign file: {exc}") from None
    return plan(data, str(path), Path(path).parent)


def measured_source(data: dict, base: Path | None) -> Path | None:
    """The run times a campaign file names (``measured``: a results file, campaign directory or saved JSON, relative
    to the file), by which its runs are dealt and, without --measured, projected; None where it names none."""
    if "measured" not in data:
        return None
    if not isinstance(data["measured"], str) or not data["measured"]:
        raise ToolError('measured names the run times to deal the runs by, e.g. measured = "seeds-measured.json"')
    return (base or Path(".")) / data["measured"]


def plan(data: dict, source: str = "campaign", base: Path | None = None) -> Plan:
    """``data`` (a campaign file's tables) planned; ``base``: the file's directory (its `measured` is relative to
    it)."""
    name = data.get("campaign")
    if not isinstance(name, str) or not name:
        raise ToolError(f"{source}: give the campaign a name (campaign = \"NAME\")")
    unknown = set(data) - {"campaign", "experiment", "measured"}
    if unknown:
        raise ToolError(f"{source}: unknown key {sorted(unknown)[0]!r} (a campaign has `campaign`, `measured` and "
                        "[[experiment]] tables)")
    entries = data.get("experiment")
    if not isinstance(entries, list) or not entries:
        raise ToolError(f"{source}: no [[experiment]] tables")
    experiments: list[Experiment] = []
    for number, entry in enumerate(entries, 1):
        experiments += _expand(name, entry, f"{source}: experiment {entry.get('name', number)!r}")
    ids = [e.experiment_id for e in experiments]
    if len(set(ids)) != len(ids):
        raise ToolError(f"{source}: two experiments share a name and size; name each [[experiment]]")
    try:
        measured = measured_source(data, base)
        times = measured_durations([measured])[0] if measured else None
        if times == []:
            raise ToolError(f"measured: {measured} holds no run times to deal the runs by")
    except ToolError as exc:
        raise ToolError(f"{source}: {exc}") from None
    return replace(plan_of(name, experiments, times), measured=measured)


def plan_of(name: str, experiments: list[Experiment], measured: list[dict] | None = None) -> Plan:
    """Experiments as a campaign's runs, in its order (rotated_order), each with its plan id; ``measured``: run
    times to weigh the runs by for the deal (Plan.deal)."""
    runs: list[PlannedRun] = []
    for number, experiment in enumerate(experiments):
        # a condition's index in its experiment (the first of equal ones), looked up once: list.index a run
        # took 0.9 s of CPU for the seeds campaign's 7,200 runs, in every plan, shard and merge (2026-11-29)
        first: dict[Condition, int] = {}
        for index, condition in enumerate(experiment.conditions):
            first.setdefault(condition, index)
        for condition, rep in rotated_order(experiment.conditions, experiment.reps):
            index = first[condition]
            runs.append(PlannedRun(len(runs), f"{experiment.experiment_id}-c{index}-r{rep}", number, condition, rep))
    # a two-host experiment's server and launcher only when asked: the digests of earlier campaigns stay theirs
    described = [[e.experiment_id, e.tags, e.reps, e.link_backend,
                  *([e.server_host, e.launcher.describe()] if e.server_host else [])] for e in experiments]
    weights = None
    if measured is not None:  # to the millisecond: the same file gives the same weights on every host
        estimate, of = estimator(measured), {}
        for run in runs:  # a condition's once; none free (runs of no time would all go to one host)
            if run.condition_id not in of:
                of[run.condition_id] = max(0.001, round(estimate(planned_values(experiments, run))[1], 3))
        weights = tuple(of[run.condition_id] for run in runs)
    # the weights only where there are any: the digests of campaigns dealt by count stay theirs
    digest = hashlib.sha256(json.dumps([name, described, [r.run_id for r in runs], *([weights] if weights else [])],
                                       default=str).encode()).hexdigest()[:16]
    return Plan(name, experiments, runs, digest, weights)


def needs(plan_: Plan, runs: list[PlannedRun] | None = None) -> dict[str, tuple[str, int]]:
    """The stacks ``runs`` (by default the plan's) need that are not usable on this machine: each stack's name ->
    (why, how many of the runs need it), a client's or a server's. Such runs stay in the plan (another host may
    have the stack: LSQUIC needs its own build); a shard holding any is refused before its first run."""
    reasons: dict[str, str | None] = {}
    found: dict[str, int] = {}
    for run in plan_.runs if runs is None else runs:
        for stack in {s.name: s for s in plan_.experiments[run.experiment].stacks(run.condition)}.values():
            if stack.name not in reasons:
                reasons[stack.name] = stack.unavailable_reason()
            if reasons[stack.name]:
                found[stack.name] = found.get(stack.name, 0) + 1
    return {name: (first_line(reasons[name]), count) for name, count in sorted(found.items())}


def needs_lines(needed: dict[str, tuple[str, int]]) -> list[str]:
    return [f"needs:       {count:,} runs need {name}, not usable here: {why}" for name, (why, count) in needed.items()]


def rotated_order(conditions: list[Condition], reps: int) -> list[tuple[Condition, int]]:
    """runner.run_order, each round's conditions rotated by one a repetition: dealt to N hosts in turn, a
    condition's repetitions go to different hosts even when N divides the conditions."""
    order, rounds = [], itertools.groupby(run_order(conditions, reps), key=lambda pair: (pair[0].link, pair[1]))
    for _, members in rounds:
        members = list(members)
        shift = (members[0][1] - 1) % len(members)
        order += members[shift:] + members[:shift]
    return order


def _values(entry: dict, key: str, default) -> list:
    value = entry.get(key, default)
    return value if isinstance(value, list) else [value]


def _set(spec: object, one: bool = False) -> list[NamedSet]:
    """The sets a campaign names by ``spec``: any --set form, or the name a run stores for a set with overrides
    (``config4+initial_max_data=4294967295``: replay.sets.with_overrides' own spelling). ``one``: a pair's or a
    server's set, which must be one."""
    from replay import sets as sets_api

    text = str(spec)
    base, plus, overrides = text.partition("+")
    found = ([sets_api.with_overrides(sets_api.resolve_one(base), overrides.split(","))]
             if plus and "=" in overrides and "/" not in text else sets_api.resolve(text))
    if one and len(found) != 1:
        raise ToolError(f"{text!r} names {len(found)} sets where one is needed")
    return found


def _set_pairs(entry: dict) -> list[tuple]:
    """The experiment's series as (client set, server set or None) pairs: each of `sets` against each of
    `server-set` (one value or a list: set pairs by product), or the `set-pairs` as given."""
    if PAIRS_OPTION in entry:
        if "sets" in entry or "server-set" in entry:
            raise ToolError("set-pairs name each series' client and server set; leave sets and server-set out")
        pairs = entry[PAIRS_OPTION]
        if not isinstance(pairs, list) or not pairs or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise ToolError("set-pairs is a list of [client set, server set] pairs, e.g. "
                            'set-pairs = [["alpha", "alpha"]]')
        return [(_set(c, one=True)[0], _set(s, one=True)[0]) for c, s in pairs]
    clients = [c for spec in entry.get("sets", LIST_OPTIONS["sets"]) for c in _set(spec)]
    servers = [None if spec is None else _set(spec, one=True)[0] for spec in _values(entry, "server-set", None)]
    return [(c, s) for s in servers for c in clients]


def _sweep(entry: dict, stacks: list) -> tuple[str, list, str] | None:
    """`param`, `values` and `side` (`qreplay sweep`'s options) checked: (param, values, side), or None."""
    from replay.commands.run import refuse_sweep

    given = [key for key in SWEEP_OPTIONS if key in entry]
    if not given:
        return None
    if "param" not in entry or "values" not in entry:
        raise ToolError("a sweep takes param (the transport parameter) and values (a list), e.g. "
                        'param = "initial_max_data", values = [196608, 15728640]')
    param, values, side = entry["param"], entry["values"], entry.get("side", SWEEP_OPTIONS["side"])
    refuse_sweep(param, side, stacks, spelled=str)
    if not isinstance(values, list) or not values or not all(isinstance(v, (int, str)) and not isinstance(v, bool)
                                                             for v in values):
        raise ToolError(f"values: the values of {param} to sweep, a list of numbers, e.g. values = [196608, 15728640]")
    return param, values, side


def _series(stack, pairs: list[tuple], sweep: tuple[str, list, str] | None) -> list[tuple]:
    """A stack's series: (client set, server set, the sweep's fields of its Condition) for each set pair and each
    swept value; a browser's client set is its own."""
    from replay.commands.run import swept
    from replay.sets import own_set

    if stack.own_parameters:
        pairs = list(dict.fromkeys((own_set(stack), server) for _, server in pairs))
    if not sweep:
        return [(client, server, {}) for client, server in pairs]
    param, values, side = sweep
    return [(client, server, {"sweep_param": param, "sweep_value": value}) for c, s in pairs for v in values
            for client, server, value in [swept(c, s, param, v, side)]]


def _expand(campaign: str, entry: dict, where: str) -> list[Experiment]:
    """One [[experiment]] table as runner Experiments: one per size and server stack (a run's options hold one
    size, an experiment one server stack)."""
    from replay.commands.run import (
        make_link, make_options, optional_stack, refuse_unsweepable, two_hosts, warn_if_client_set,
    )
    from replay.link import parse_size
    from replay.stacks import get_stack

    if not isinstance(entry, dict):
        raise ToolError(f"{where}: an experiment is a table of options")
    known = {"name", "fidelity", PAIRS_OPTION, *LIST_OPTIONS, *VALUE_OPTIONS, *SWEEP_OPTIONS, *KNOB_OPTIONS}
    for key in entry:
        if key not in known:
            raise ToolError(f"{where}: unknown option {key!r} (known: {', '.join(sorted(known))})")
    for key in LIST_OPTIONS:
        if key in entry and (not isinstance(entry[key], list) or not entry[key]):
            raise ToolError(f"{where}: {key} is a list, e.g. {key} = [{LIST_OPTIONS[key][0]!r}]")
    if "fidelity" in entry:
        return _expand_fidelity(campaign, entry, where)
    label = str(entry.get("name", "experiment"))
    option = {key: entry.get(key, default) for key, default in VALUE_OPTIONS.items() if key not in AXIS_OPTIONS}
    try:
        for key in AXIS_OPTIONS:
            if isinstance(entry.get(key), list) and not entry[key]:
                raise ToolError(f"{key} takes one value or a list of them, not an empty list")
        stacks = [get_stack(str(name)) for name in entry.get("stacks", LIST_OPTIONS["stacks"])]
        pairs = _set_pairs(entry)
        for server in {server.name: server for _, server in pairs if server}.values():
            warn_if_client_set(server, f"{where}: server set {server.name}")
        links = [make_link(str(d), str(option["delay-up"]), str(option["jitter"]), str(x),
                         option["rate"] and str(option["rate"]), option["queue"] and str(option["queue"]),
                         option["rate-up"] and str(option["rate-up"]))
                 for d in entry.get("delays", LIST_OPTIONS["delays"]) for x in entry.get("losses", LIST_OPTIONS["losses"])]
        axes = {knob.name: [knob.parse(str(v).lower()) if knob.kind != "switch" else bool(v)
                            for v in _values(entry, key, None)] for key, knob in KNOB_OPTIONS.items() if key in entry}
        knob_points = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
        sweep = _sweep(entry, stacks)
        remote = two_hosts(*(option[key] and str(option[key]) for key in ("server-host", "launcher")))
        if remote and "link" in entry:
            raise ToolError("link chooses how a path is emulated; a two-host run's is the real network, measured")
        server_stacks = _values(entry, "server-stack", None)
        experiments = []
        for size, server_stack in itertools.product(_values(entry, "size", VALUE_OPTIONS["size"]), server_stacks):
            options = make_options(str(size), None, option["timeout"], workload=str(option["workload"]),
                                   requests=int(option["requests"]), concurrency=int(option["concurrency"]),
                                   clients=int(option["clients"]))
            conditions = [Condition(c, server, lk, stack=s, knobs=k, **swept) for lk in links for k in knob_points
                          for s in stacks for c, server, swept in _series(s, pairs, sweep)]
            # a list of server stacks is one experiment each; one server stack keeps the id it had before lists
            identity = f"{campaign}/{label}/{size}" + (f"/{server_stack}" if isinstance(entry.get("server-stack"),
                                                                                        list) else "")
            experiment = Experiment(
                "campaign", stacks[0], conditions, options, int(option["reps"]),
                "measured" if remote else str(option["link"]),
                f"qreplay campaign run ({campaign}, experiment {label}, size {size}"
                + (f", server {server_stack}" if len(server_stacks) > 1 else "") + ")",
                udp_buffer_bytes=parse_size(str(option["udp-buffer"]), "udp-buffer"),
                tags={"campaign": campaign, "campaign_experiment": label},
                experiment_id=hashlib.sha256(identity.encode()).hexdigest()[:12],
                server_stack=optional_stack(server_stack and str(server_stack)), **remote)
            if len(set(conditions)) < len(conditions):
                twice = next(c for c in conditions if conditions.count(c) > 1)
                raise ToolError(f"a condition is listed twice (set {twice.client.name}"
                                + (f", server set {twice.server.name}" if twice.server else "")
                                + "): each run must have a condition of its own")
            if sweep:
                refuse_unsweepable(sweep[0], sweep[2], map(experiment.stacks, experiment.conditions))
            experiments.append(experiment)
    except (ToolError, ValueError, TypeError) as exc:
        raise ToolError(f"{where}: {exc}") from None
    if not 1 <= experiments[0].reps:
        raise ToolError(f"{where}: reps must be at least 1")
    return experiments


def _expand_fidelity(campaign: str, entry: dict, where: str) -> list[Experiment]:
    """A `fidelity = true` experiment as `qreplay fidelity`'s comparison experiments (replay/fidelity.py's plan,
    conditions and tags: `qreplay fidelity --report-only` and the replay notebook read the merged file). Its
    `stacks` name the browsers and the replay stacks; each browser's replays take the set `sets` names for it (in
    the browsers' order; by default the sets library's set of the browser's name): every host must plan the same
    runs before any runs, so the set is not captured from the browser at run time as `qreplay fidelity` does.
    `losses`: one lossy link at fidelity's delay, beside the loss-free `delays`."""
    from replay import fidelity
    from replay import sets as sets_api
    from replay.link import parse_duration_ms, parse_percent, parse_size
    from replay.stacks import get_stack

    if entry["fidelity"] is not True:
        raise ToolError(f"{where}: fidelity = true makes an experiment `qreplay fidelity`'s comparison; leave it "
                        "out otherwise")
    other = [key for key in entry if key not in FIDELITY_OPTIONS]
    if other:
        raise ToolError(f"{where}: a fidelity experiment takes {', '.join(FIDELITY_OPTIONS)}, not {other[0]!r}")
    label = str(entry.get("name", "experiment"))
    try:
        stacks = [get_stack(str(name)) for name in entry.get("stacks", [])]
        browsers = [s for s in stacks if s.own_parameters]
        if not browsers or len(browsers) == len(stacks):
            raise ToolError("stacks name the browsers (chromium, firefox) and the replay stacks beside them, at "
                            "least one of each")
        names = entry.get("sets", [b.name for b in browsers])
        if len(names) != len(browsers):
            raise ToolError(f"sets: one set a browser, in their order ({', '.join(b.name for b in browsers)})")
        sets = {}
        for browser, name in zip(browsers, names):
            resolved = sets_api.resolve(str(name))
            if len(resolved) != 1:
                raise ToolError(f"sets: {name!r} is {len(resolved)} sets; {browser.name}'s replays take one")
            sets[browser.name] = resolved[0]
        losses = entry.get("losses", LIST_OPTIONS["losses"])
        sizes = _values(entry, "size", VALUE_OPTIONS["size"])
        if len(losses) != 1 or len(sizes) != 1:
            raise ToolError("a fidelity experiment has one size and one loss (its one lossy link, 0%: none)")
        plan_ = fidelity.plan_fidelity(
            browsers=[b.name for b in browsers], stacks=[s.name for s in stacks if not s.own_parameters],
            delays_ms=[parse_duration_ms(str(d), "delays") for d in entry.get("delays", LIST_OPTIONS["delays"])],
            loss_pct=parse_percent(str(losses[0]), "losses"), size=parse_size(str(sizes[0]), "size"),
            reps=int(entry.get("reps", VALUE_OPTIONS["reps"])))
        udp_buffer = parse_size(str(entry.get("udp-buffer", VALUE_OPTIONS["udp-buffer"])), "udp-buffer")
    except (ToolError, ValueError, TypeError) as exc:
        raise ToolError(f"{where}: {exc}") from None
    if plan_.reps < 1:
        raise ToolError(f"{where}: reps must be at least 1")
    # the fidelity campaign's id: the same on every host
    identity = hashlib.sha256(f"{campaign}/{label}/fidelity".encode()).hexdigest()[:12]
    # each part's id by its place in the plan, not its size: the lossy part may download the loss-free one's size
    return [replace(experiment, tags={**experiment.tags, "campaign": campaign, "campaign_experiment": label},
                    experiment_id=hashlib.sha256(f"{campaign}/{label}/{part}".encode()).hexdigest()[:12])
            for part, experiment in enumerate(fidelity.comparison_experiments(
                plan_, identity, sets, link_backend=str(entry.get("link", VALUE_OPTIONS["link"])),
                command_line=f"qreplay campaign run ({campaign}, experiment {label}, fidelity)",
                udp_buffer_bytes=udp_buffer))]


# --- projection ----------------------------------------------------------------------------------

#: what a run's time depends on, from the most exact match to the coarsest
KEYS = (("stack", "server_stack", "delay_ms", "loss_pct", "rate_bps", "size_bytes", "workload"),
        ("stack", "size_bytes"), ("stack",), ())
#: the runs of a condition's stacks, link and workload at another size: their transfer scaled to the size asked
#: (its seconds beside the transfer, server start and teardown, as they were), before the coarser KEYS
SCALED = ("stack", "server_stack", "delay_ms", "loss_pct", "rate_bps", "workload")
LEVELS = ("condition", "its link at another size, scaled", "stack and size", "stack", "any run")


def _key(values: dict, columns: tuple[str, ...]) -> tuple:
    return tuple(values[c] for c in columns)


def measured_durations(sources: list[str | Path]) -> tuple[list[dict], list[float], list[float]]:
    """Every stored run's seconds (its start to the next run's start on its host in its experiment: the
    server's start and the teardown included) with its conditions, and each experiment's overhead on a host
    (its start to its first run, and its end beyond a run's time after its last run), from results files or
    campaign directories (a campaign's hosts told apart by their partitions; a merged file interleaves them: give
    the directory)."""
    from scanner import campaign_store

    runs, setups, fixed = [], [], []
    for source in sources:
        if str(source).endswith(".json"):  # run times saved by save_measured
            try:
                saved = json.loads(Path(source).read_text())
                runs += saved["runs"]
                setups += saved["setups"]
                fixed += saved["fixed"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ToolError(f"cannot read run times from {source}: {first_line(exc)}") from None
            continue
        for done in sorted(Path(source).glob(f"{campaign_store.WORK}/{VANTAGE}/shard-*.json")):
            times = json.loads(done.read_text())
            fixed.append(times["outside_seconds"] + times.get("startup_seconds", 0.0))
        con = duckdb.connect() if campaign_store.is_campaign(source) else store.open_read_only(source)
        try:
            if campaign_store.is_campaign(source):
                _, shards = campaign_store.campaign_shards(con, source)
                for table in ("runs", "experiments"):
                    files = [tables[table]["file"] for tables in shards.values() if table in tables]
                    con.execute(f"CREATE TEMP VIEW host_{table} AS SELECT * FROM read_parquet({files!r}, "
                                "hive_partitioning = true, union_by_name = true)")
                host = "campaign_shard"
            else:
                con.execute("CREATE TEMP VIEW host_runs AS SELECT * FROM runs")
                con.execute("CREATE TEMP VIEW host_experiments AS SELECT * FROM experiments")
                host = "'one'"
            rows = con.execute(f"""
                SELECT r.stack, r.server_stack,
                       -- a two-host run's link columns hold what was measured; it asked for no emulation
                       CASE WHEN r.link_backend = 'measured' THEN 0 ELSE r.delay_ms END,
                       CASE WHEN r.link_backend = 'measured' THEN 0 ELSE r.loss_pct END,
                       CASE WHEN r.link_backend = 'measured' THEN NULL ELSE r.rate_bps END,
                       r.size_bytes, r.workload,
                       epoch(coalesce(lead(r.started_at) OVER w, e.finished_at) - r.started_at) AS seconds,
                       CASE WHEN row_number() OVER w = 1 THEN epoch(r.started_at - e.started_at) END AS setup,
                       lead(r.started_at) OVER w IS NULL AS last, r.experiment_id || '/' || r.host AS share,
                       TRY_CAST(json_extract_string(e.config, '$.load_1min') AS DOUBLE),
                       TRY_CAST(json_extract_string(e.config, '$.load_1min_end') AS DOUBLE),
                       CASE WHEN r.status = 'ok' THEN r.duration_s END
                FROM (SELECT *, {host} AS host FROM host_runs) r
                JOIN (SELECT *, {host} AS host FROM host_experiments) e USING (experiment_id, host)
                WINDOW w AS (PARTITION BY r.experiment_id, r.host ORDER BY r.started_at)
                ORDER BY share, r.started_at""").fetchall()
        except duckdb.Error as exc:
            raise ToolError(f"cannot read run times from {source}: {first_line(exc)}") from None
        finally:
            con.close()
        # The last run of an experiment on a host ends with the testbed's teardown, once an experiment:
        # what it took beyond the mean of the others counts with the set-up, not as a run.
        for _, members in itertools.groupby(rows, key=lambda row: row[10]):
            members = [row for row in members if row[7] is not None and row[7] > 0]
            others = [row[7] for row in members if not row[9]]
            overhead = sum(row[8] for row in members if row[8] is not None and row[8] >= 0)
            for *values, seconds, _, last, _, load_start, load_end, transfer in members:
                if last and others:
                    overhead += max(0.0, seconds - sum(others) / len(others))
                    seconds = sum(others) / len(others)
                # the machine's 1-minute load at its experiment's start and end (None: not recorded); of the
                # seconds, the transfer's own (the run's duration_s; None: it failed), which grows with the size
                runs.append(dict(zip(KEYS[0], values)) | {"seconds": seconds, "loads": (load_start, load_end),
                                                          "transfer": transfer})
            if members:
                setups.append(overhead)
    return runs, setups, fixed


def save_measured(sources: list[str | Path], out: str | Path, provenance: dict) -> dict:
    """The run times of ``sources`` (measured_durations) as one JSON file, ``provenance`` beside them (what ran,
    when, where, at what load): a measurement kept in the repository where the results files are not
    (datasets/campaign/seeds-measured.json); --measured reads it as it reads the results."""
    runs, setups, fixed = measured_durations(sources)
    saved = {"provenance": provenance, "setups": setups, "fixed": fixed, "runs": runs}
    head = json.dumps({key: saved[key] for key in ("provenance", "setups", "fixed")}, indent=1)[:-2]
    Path(out).write_text(head + ',\n "runs": [\n' + ",\n".join(json.dumps(run, default=str) for run in runs)
                         + "\n ]\n}\n")  # a run a line
    return saved


def planned_values(plan_: Plan | list[Experiment], run: PlannedRun) -> dict:
    experiment = (plan_.experiments if isinstance(plan_, Plan) else plan_)[run.experiment]
    client, server = experiment.stacks(run.condition)
    link = run.condition.link
    return {"stack": client.name, "server_stack": server.name, "delay_ms": link.delay_down_ms,
            "loss_pct": link.loss_pct, "rate_bps": link.rate_bps, "size_bytes": experiment.options.size,
            "workload": experiment.options.workload.name}


@dataclass(frozen=True)
class Projection:
    hosts: int
    runs: int
    host_seconds: list[float]  # each host's share, set-ups included
    one_host_seconds: float
    matched: dict[str, int]  # runs estimated at each match level
    measured_runs: int
    setup_seconds: float
    fixed_seconds: float
    #: the lowest and highest 1-minute load average recorded with the measured runs (None: none recorded): a
    #: projection holds at the load its runs were measured at (the same campaign took 5.3 and 8.7 s a minute apart
    #: at load 4.5, 2026-11-28: docs/scale.md)
    measured_load: tuple[float, float] | None
    load_now: float
    most_runs: int = 0  # the most runs the deal gives a host

    @property
    def wall_seconds(self) -> float:
        return max(self.host_seconds)


def project(plan_: Plan, hosts: int, measured: list[dict], setups: list[float],
            fixed: list[float] | None = None) -> Projection:
    """Each planned run's time is the mean of the measured runs of its conditions (falling back to coarser
    matches, KEYS: estimator); a host's time is its runs' (as the plan deals them, Plan.deal) plus one set-up per
    experiment it has runs of, plus a shard's fixed cost (the mean of ``fixed``, measured shards' time outside
    their experiments)."""
    if hosts < 1:
        raise ToolError(f"hosts must be at least 1, not {hosts}")
    if not measured:
        raise ToolError("no measured runs to project from: give --measured with an earlier results file or "
                        "campaign directory (a campaign's first runs, e.g. `qreplay campaign run` with reps = 1)")
    estimate = estimator(measured)
    setup = sum(setups) / len(setups) if setups else 0.0
    matched = dict.fromkeys(LEVELS, 0)
    seconds = [0.0] * hosts
    experiments: list[set[int]] = [set() for _ in range(hosts)]
    dealt = plan_.deal(hosts)
    for run in plan_.runs:
        level, estimated = estimate(planned_values(plan_, run))
        if level:
            matched[level] += 1
            seconds[dealt[run.index]] += estimated
            experiments[dealt[run.index]].add(run.experiment)
    once = sum(fixed) / len(fixed) if fixed else 0.0
    host_seconds = [s + setup * len(e) + once for s, e in zip(seconds, experiments)]
    loads = [load for run in measured for load in run.get("loads", ()) if load is not None]
    return Projection(hosts, len(plan_.runs), host_seconds, sum(seconds) + setup * len(plan_.experiments) + once,
                      {k: v for k, v in matched.items() if v}, len(measured), setup, once,
                      (min(loads), max(loads)) if loads else None, round(os.getloadavg()[0], 2),
                      max(collections.Counter(dealt).values(), default=0))


def estimator(measured: list[dict]) -> Callable[[dict], tuple[str | None, float]]:
    """(the match level, seconds) of a planned run's values (planned_values) from ``measured``: the mean of the
    measured runs of its conditions, falling back to coarser matches (KEYS, SCALED); each condition's once."""
    means = []
    for columns in KEYS:
        groups: dict[tuple, list[float]] = {}
        for run in measured:
            groups.setdefault(_key(run, columns), []).append(run["seconds"])
        means.append({key: sum(v) / len(v) for key, v in groups.items()})
    # (the seconds beside the transfer, the transfer's seconds a byte) of a stack, link and workload: a failed
    # run (no transfer) counts whole beside it
    parts: dict[tuple, list[tuple[float, float]]] = {}
    for run in measured:
        transfer = run.get("transfer") or 0.0
        parts.setdefault(_key(run, SCALED), []).append((run["seconds"] - transfer, transfer / run["size_bytes"]))
    scaled = {key: tuple(sum(p[i] for p in v) / len(v) for i in (0, 1)) for key, v in parts.items()}
    estimates: dict[tuple, tuple[str | None, float]] = {}  # a condition's estimate, once (a campaign repeats them)

    def estimate(values: dict) -> tuple[str | None, float]:
        condition = _key(values, KEYS[0])
        if condition not in estimates:
            estimates[condition] = _estimate(values, means, scaled)
        return estimates[condition]

    return estimate


def _estimate(values: dict, means: list[dict], scaled: dict) -> tuple[str | None, float]:
    """(the match level, seconds) of a planned run's conditions: LEVELS in order (None: nothing measured)."""
    if (key := _key(values, KEYS[0])) in means[0]:
        return LEVELS[0], means[0][key]
    if (key := _key(values, SCALED)) in scaled:
        beside, per_byte = scaled[key]
        return LEVELS[1], beside + per_byte * values["size_bytes"]
    for level, columns, table in zip(LEVELS[2:], KEYS[1:], means[1:]):
        if (key := _key(values, columns)) in table:
            return level, table[key]
    return None, 0.0


def projection_lines(plan_: Plan, p: Projection, file: str, directory: str) -> list[str]:
    from scanner.discovery.plan import duration

    conditions = sum(len(e.conditions) for e in plan_.experiments)
    return [
        f"campaign:    {plan_.name} ({plan_.digest}): {len(plan_.experiments)} experiments, {conditions} conditions, "
        f"{p.runs:,} runs",
        f"one host:    {duration(p.one_host_seconds)}",
        f"on {p.hosts}:{' ' * max(1, 8 - len(str(p.hosts)))}{duration(p.wall_seconds)} (the slowest host's share; "
        f"{p.most_runs:,} runs at most a host)",
        "estimated:   " + ", ".join(f"{n:,} runs by {level}" for level, n in p.matched.items())
        + f" (means of {p.measured_runs:,} measured runs; {p.setup_seconds:.1f} s set-up and teardown an experiment "
        "a host, "
        f"{p.fixed_seconds:.1f} s a host's own)",
        "load:        " + (f"{p.measured_load[0]:.1f}-{p.measured_load[1]:.1f} when measured" if p.measured_load
                           else "not recorded with the measured runs")
        + f", {p.load_now:.1f} now (1-minute load average on {os.cpu_count()} cores: the times hold at the load "
        "they were measured at)",
        f"each host:   {shlex.join(host_argv(file, '<I>', p.hosts, directory))}",
    ]


def host_argv(file: str, shard: int | str, shards: int, directory: str, qreplay: str = "qreplay") -> list[str]:
    return [qreplay, "campaign", "run", file, "--shard", f"{shard}/{shards}", "--out", directory]


# --- running a shard -----------------------------------------------------------------------------

@dataclass
class ShardResult:
    shard: int
    shards: int
    planned: int
    already: int  # stored before this process started (a resumed shard)
    ran: int
    failed: int
    seconds: float
    #: of them outside the experiments (opening the shard's file, exporting it): a host's fixed cost
    outside_seconds: float = 0.0
    #: the process's time before the shard began (the interpreter, imports, planning: `qreplay campaign run`'s
    #: start-up, 1-3 s here at load 10), a host's fixed cost too; 0 where the caller is no such process
    startup_seconds: float = 0.0


def process_age() -> float:
    """Seconds since this process started (Linux: its start in clock ticks since boot, /proc/self/stat)."""
    # the fields after the command's name, which may hold spaces and parentheses; starttime is the 22nd field
    started = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19]) / os.sysconf("SC_CLK_TCK")
    return float(Path("/proc/uptime").read_text().split()[0]) - started


def run_shard(plan_: Plan, shard: int, shards: int, directory: str | Path,
              on_run: Callable[[dict], None] | None = None, startup_seconds: float = 0.0) -> ShardResult:
    """Run (or resume) the shard's share of ``plan_`` into its own results file, then export it.
    ``startup_seconds``: what the calling process took before (stored with the shard's times for the projection)."""
    from scanner import campaign_store

    label = f"shard {shard}/{shards} of campaign {plan_.name}"
    # a stack missing here (LSQUIC needs its own build): refused before the campaign directory is touched
    if needed := needs(plan_, plan_.share(shard, shards)):
        raise ToolError(f"{label}: " + "; ".join(f"{count:,} of its runs need {name}, not usable here ({why})"
                                                 for name, (why, count) in needed.items()))
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    campaign_store.agree(root, {"name": plan_.name, "plan": plan_.digest, "shards": shards,
                                "runs": len(plan_.runs)})
    work = campaign_store.work_file(root, VANTAGE, shard)
    work.parent.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now()
    with campaign_store.only_runner(work.with_suffix(".lock"), label):
        con = store.connect(work)
        try:
            stored = {run_id for (run_id,) in con.execute("SELECT run_id FROM runs").fetchall()}
        finally:
            con.close()
        share = plan_.share(shard, shards)
        todo = [run for run in share if run.run_id not in stored]
        # every launcher this host needs, before its first run rather than at its experiment's
        for experiment in {plan_.experiments[run.experiment].experiment_id: plan_.experiments[run.experiment]
                           for run in todo}.values():
            if experiment.launcher and (reason := experiment.launcher.unavailable_reason()):
                raise ToolError(f"launcher {experiment.launcher.describe()}: {reason}")
        rows, inside = [], 0.0
        for number, experiment in enumerate(plan_.experiments):
            planned = [(run.condition, run.rep, run.run_id) for run in todo if run.experiment == number]
            if planned:
                begun = datetime.datetime.now()
                rows += run_experiment(experiment, work, on_run, planned=planned)
                inside += (datetime.datetime.now() - begun).total_seconds()
        campaign_store.export_shard(work, root, campaign=plan_.name, vantage=VANTAGE, shard=str(shard),
                                    open_file=read_only_results)
        seconds = (datetime.datetime.now() - started).total_seconds()
        result = ShardResult(shard, shards, len(share), len(share) - len(todo), len(rows),
                             sum(row["status"] != "ok" for row in rows), seconds, seconds - inside, startup_seconds)
        work.with_suffix(".json").write_text(json.dumps(asdict(result)) + "\n")  # the projection's fixed cost
    return result


@contextlib.contextmanager
def read_only_results(path: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    con = store.open_read_only(path)
    try:
        yield con
    finally:
        con.close()


# --- merging -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MergeResult:
    shards: int
    runs: int
    planned: int | None
    missing: int | None
    seconds: float


def merge(directory: str | Path, out: str | Path, partial: bool = False) -> MergeResult:
    """The campaign's partitions as one results file, as if one host had run every experiment: runs and
    every table keyed by run as they are, each experiment once (its first start, its last finish; no finish
    while a shard has not finished it). Refused in one line: an existing ``out``, overlapping shards, mixed
    schema versions (campaign_store's rules), and runs the plan lists that no shard holds (``partial``
    merges them anyway)."""
    from scanner import campaign_store

    started = datetime.datetime.now()
    root = Path(directory)
    if Path(out).exists():
        raise ToolError(f"{out} exists; merge writes a new file")
    if not campaign_store.is_campaign(root):
        raise ToolError(f"{root} is not a campaign directory (no {campaign_store.SCHEMA_FILE}): run "
                        "`qreplay campaign run` into it first")
    manifest = json.loads((root / campaign_store.MANIFEST).read_text()) \
        if (root / campaign_store.MANIFEST).is_file() else {}
    con = duckdb.connect()
    with campaign_store.merging_into(out, con, f"cannot merge {root} into {out}"):
        _, shards = campaign_store.campaign_shards(con, root)
        files: dict[str, list[str]] = {}
        for tables in shards.values():
            for table, meta in tables.items():
                files.setdefault(table, []).append(meta["file"])
        if "runs" not in files:
            raise ToolError(f"{root} holds no replay runs")
        runs = con.execute("SELECT count(*) FROM read_parquet(?)", [files["runs"]]).fetchone()[0]
        planned = manifest.get("runs")
        missing = planned - runs if planned is not None else None
        if missing and not partial:
            raise ToolError(f"{root} holds {runs:,} of the {planned:,} runs its plan lists ({missing:,} missing: "
                            "run their shards, or merge with --partial)")
        store.connect(out).close()
        con.execute(f"ATTACH '{str(out).replace(chr(39), chr(39) * 2)}' AS merged")
        for table, paths in files.items():
            source = f"read_parquet({paths!r}, hive_partitioning = false, union_by_name = true)"
            if table == "experiments":  # every shard's row of an experiment: one, from the first start to the last end
                source = (f"(SELECT e.* REPLACE (w.started_at AS started_at, w.finished_at AS finished_at) FROM (SELECT * "
                          f"FROM {source} QUALIFY row_number() OVER (PARTITION BY experiment_id ORDER BY started_at) = 1"
                          ") e JOIN (SELECT experiment_id, min(started_at) AS started_at, CASE WHEN count(finished_at) "
                          f"= count(*) THEN max(finished_at) END AS finished_at FROM {source} GROUP BY experiment_id) w "
                          "USING (experiment_id))")
            con.execute(f"INSERT INTO merged.{table} BY NAME SELECT * FROM {source}")
        con.execute("DETACH merged")
    return MergeResult(len(shards), runs, planned, missing, (datetime.datetime.now() - started).total_seconds())
