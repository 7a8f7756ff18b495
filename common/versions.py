"""The versions of what runs, read where they are written (the I/O edge of tparams.libraries).

One look-up for every registry a library's version comes from, used by identification (the software
line a signatures file records) and by the replay stacks (``qreplay doctor``, each run's row).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import tomllib
from functools import cache
from pathlib import Path
from xml.etree import ElementTree

from tparams.libraries import Library, Package

ROOT = Path(__file__).resolve().parents[1]
_POM = {"m": "http://maven.apache.org/POM/4.0.0"}


def version(package: Package) -> str | None:
    """``package``'s version as its registry writes it (go.mod's ``v0.65.0``, Debian's
    ``0.12.1+dfsg-1``), or None where it is not to be found."""
    if package.registry == "cargo":
        return _cargo_lock().get(package.name)
    if package.registry == "go":
        for line in (ROOT / "go.mod").read_text().splitlines():
            words = line.split()
            if words[:1] == [package.name] or words[1:2] == [package.name]:
                return words[words.index(package.name) + 1]
        return None
    if package.registry == "dpkg":
        done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package.name], capture_output=True, text=True)
        return (done.stdout.strip() or None) if done.returncode == 0 else None
    if package.registry == "pip":
        found = (importlib.metadata.distributions(name=package.name, path=_site_packages(package.where))
                 if package.where else [_installed(package.name)])
        return next((d.version for d in found if d is not None), None)
    if package.registry == "maven":
        pom = ElementTree.parse(ROOT / "lab" / "servers" / package.where / "pom.xml")
        return next((d.findtext("m:version", None, _POM)
                     for d in pom.getroot().iterfind("m:dependencies/m:dependency", _POM)
                     if d.findtext("m:artifactId", "", _POM) == package.name), None)
    if package.registry == "aiopquic":
        return next((line.split("=")[1].strip(" '\"")
                     for build in _site_packages(package.where) for info in [Path(build, "aiopquic/_build_info.py")]
                     if info.is_file() for line in info.read_text().splitlines()
                     if line.startswith("PICOQUIC_VERSION")), None)
    if package.registry == "build":
        return _user_build(package)
    raise ValueError(f"no registry {package.registry!r}")


def software(library: Library) -> str:
    """The line that says what ran of ``library``, each version read now ("unknown" where none is found)."""
    versions = [version(package) or "unknown" for package in library.packages]
    return library.software.format(
        *versions, versions=", ".join(f"{p.shown} {v}" for p, v in zip(library.packages, versions)))


@cache
def _cargo_lock() -> dict[str, str]:
    """lab/servers/Cargo.lock's crates and versions (what set-up builds, --locked)."""
    lock = ROOT / "lab" / "servers" / "Cargo.lock"
    if not lock.is_file():
        return {}
    packages = tomllib.loads(lock.read_text()).get("package", [])
    return {p["name"]: p["version"] for p in reversed(packages)}  # a crate locked twice: its first version


def _installed(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _site_packages(environment: str) -> list[str]:
    return [str(path) for path in (ROOT / environment).glob("lib/python3*/site-packages")]


def _user_build(package: Package) -> str | None:
    """A build of the user's own (no registry has it; the variable ``package.name`` names its program):
    the title of the build's README and the program, as close to a version as such a build says."""
    configured = os.environ.get(package.name)
    binary = shutil.which(configured) if configured else None
    readme = Path(binary).parents[1] / "README.md" if binary else None
    title = readme.read_text().splitlines()[0].lstrip("# ") if readme and readme.is_file() else package.shown
    return f"{title}: {binary}"
