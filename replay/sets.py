"""Resolve what the user typed after --set into concrete, named parameter sets.

Accepted: a built-in name (datasets/sets/NAME.json), a set file path, a
scan's top-N (``scan.duckdb:topN``: the N most common server sets of the
scan's ``server_params`` view), and the browser aliases ``firefox``,
``chrome`` and ``chromium``, meaning the newest captured set of that browser
(falling back to the thesis's 109 sets when none was captured).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tparams.errors import ToolError
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet
from tparams.setfile import paramset_from_document
from common.setfiles import SETS_DIR, read_set_document

# alias -> (file-name prefixes of captured sets, newest first by version; thesis fallback)
ALIASES = {
    "firefox": (("firefox-esr-", "firefox-"), "firefox-109"),
    "chrome": (("chromium-", "chrome-"), "chrome-109"),
    "chromium": (("chromium-", "chrome-"), "chrome-109"),
}
TOP_N = re.compile(r"^(?P<path>.+\.duckdb):top(?P<n>\d+)$")


@dataclass(frozen=True)
class NamedSet:
    name: str
    params: ParamSet
    source: str  # where it came from, for the banner and the results
    role: str | None = None  # who sends it: client | server (a set file's "role"; scan sets are servers')


def own_set(stack) -> NamedSet:
    """A browser stack's condition: no set of ours, its own parameters (each run records its ClientHello)."""
    return NamedSet(f"{stack.name}-own", ParamSet(), f"{stack.name}'s own transport parameters, recorded from "
                                                     "each run's ClientHello", "client")


def builtin_names(sets_dir: Path = SETS_DIR) -> list[str]:
    return sorted(p.stem for p in sets_dir.glob("*.json"))


def _version_key(text: str) -> tuple:
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.\-]", text))


def resolve_alias(alias: str, sets_dir: Path = SETS_DIR) -> str:
    prefixes, fallback = ALIASES[alias]
    candidates = []
    for prefix in prefixes:
        for name in builtin_names(sets_dir):
            version = name[len(prefix):]
            if name.startswith(prefix) and version[:1].isdigit():
                candidates.append((_version_key(version), name))
        if candidates:  # a captured set (first prefix) wins over older naming
            return max(candidates)[1]
    return fallback


def load_file(path: Path) -> NamedSet:
    document = read_set_document(path)
    return NamedSet(str(document.get("name") or path.stem), paramset_from_document(document), str(path),
                    document.get("role"))


def top_sets(scan: Path, n: int) -> list[NamedSet]:
    import duckdb

    if not scan.exists():
        raise ToolError(f"scan file {scan} does not exist")
    cols = ", ".join(PERFORMANCE_PARAMETERS)
    try:
        con = duckdb.connect(str(scan), read_only=True)
        rows = con.execute(
            f"SELECT set_fingerprint, {cols}, count(*) AS servers FROM server_params "
            f"GROUP BY ALL ORDER BY servers DESC, set_fingerprint LIMIT ?", [n]).fetchall()
    except Exception as exc:  # duckdb raises several types for a missing view or a non-DuckDB file
        raise ToolError(f"{scan} has no usable server_params view: {str(exc).splitlines()[0]}") from None
    result = []
    for rank, row in enumerate(rows, 1):
        values = dict(zip(PERFORMANCE_PARAMETERS, row[1:-1]))
        result.append(NamedSet(f"{scan.stem}-top{rank}-{row[0]}", ParamSet.from_mapping(values),
                               f"{scan}: rank {rank}, {row[-1]} servers", "server"))
    return result


def resolve(spec: str, sets_dir: Path = SETS_DIR) -> list[NamedSet]:
    """One spec -> one or more sets (top-N gives N)."""
    spec = spec.strip()
    match = TOP_N.match(spec)
    if match:
        found = top_sets(Path(match["path"]), int(match["n"]))
        if len(found) < int(match["n"]):  # running fewer than asked, unsaid, would pass for the top N
            raise ToolError(f"{match['path']} holds {len(found)} distinct server sets, fewer than the top "
                            f"{match['n']} asked for: give {match['path']}:top{len(found)} or fewer")
        return found
    if spec in ALIASES:
        spec = resolve_alias(spec, sets_dir)
    builtin = sets_dir / f"{spec}.json"
    if "/" not in spec and builtin.exists():
        named = load_file(builtin)
        return [NamedSet(spec, named.params, named.source, named.role)]
    path = Path(spec)
    if path.exists():
        return [load_file(path)]
    if "/" in spec or path.suffix == ".json":
        raise ToolError(f"set file {spec} does not exist")
    raise ToolError(f"unknown set {spec!r}: known sets: {', '.join(builtin_names(sets_dir))}; "
                    f"aliases: {', '.join(ALIASES)}; or give a set file or scan.duckdb:topN")


def resolve_one(spec: str, sets_dir: Path = SETS_DIR) -> NamedSet:
    found = resolve(spec, sets_dir)
    if len(found) != 1:
        raise ToolError(f"{spec!r} names {len(found)} sets where one is needed")
    return found[0]


def list_sets(sets_dir: Path = SETS_DIR) -> list[dict]:
    """Built-in sets and what each alias currently means (for `qreplay sets`)."""
    rows = []
    for name in builtin_names(sets_dir):
        try:
            document = read_set_document(sets_dir / f"{name}.json")
        except ToolError as exc:  # one damaged file names itself; the other sets are still listed
            rows.append({"name": name, "role": "damaged", "description": str(exc), "parameters": {}})
            continue
        rows.append({"name": name, "role": document.get("role"), "description": document.get("description", ""),
                     "parameters": document.get("parameters", {})})
    aliases = {alias: resolve_alias(alias, sets_dir) for alias in ALIASES}
    return [*rows, *({"name": a, "role": "alias", "description": f"= {t}", "parameters": {}} for a, t in aliases.items())]


def with_overrides(named: NamedSet, assignments: list[str]) -> NamedSet:
    """Apply NAME=VALUE overrides; the name records them so results stay distinguishable."""
    if not assignments:
        return named
    values = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ToolError(f"expected NAME=VALUE, got {item!r}")
        values[name.strip()] = value.strip()
    params = named.params.with_overrides(**values)
    suffix = ",".join(f"{k}={v}" for k, v in values.items())
    return NamedSet(f"{named.name}+{suffix}", params, named.source, named.role)
