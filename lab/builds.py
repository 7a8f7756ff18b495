"""Lab servers that scripts/setup.sh builds from lab/servers/<library>/ into
the user's cache, outside the clone, so that a fresh clone reuses them.

A build is named by the hash of its sources, so an edited server is never
run from an old build: setup.sh builds ``<cache>/<library>-<hash>.jar`` and
the kind looks for exactly that file. setup.sh computes the same hash:

    (cd lab/servers/LIB && find . ../java-common -type f -not -path './target/*' | LC_ALL=C sort
     | xargs sha256sum | sha256sum | cut -c1-16)

(lab/servers/java-common holds the command line every Java server shares.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import ClassVar

from lab.kinds import LabContext, Launch, ServerKind, asked_parameters, server_arguments
from lab.topology import ServerSpec

SOURCES = Path(__file__).resolve().parent / "servers"


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "quictp" / "lab-servers"


def source_hash(library: str) -> str:
    root = SOURCES / library
    files = sorted(["./" + p.relative_to(root).as_posix() for p in root.rglob("*")
                    if p.is_file() and "target" not in p.relative_to(root).parts[:1]]
                   + ["../java-common/" + p.name for p in (SOURCES / "java-common").iterdir() if p.is_file()])
    listing = "".join(f"{hashlib.sha256((root / name).read_bytes()).hexdigest()}  {name}\n" for name in files)
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def built_jar(library: str) -> Path:
    return cache_dir() / f"{library}-{source_hash(library)}.jar"


def jar_unavailable(library: str) -> str | None:
    """Why the ``library`` lab server cannot run here, or None."""
    if shutil.which("java") is None:
        return "no `java` (scripts/setup.sh installs Debian's JDK)"
    if not built_jar(library).is_file():
        return f"the {library} lab server is not built for its current sources (run scripts/setup.sh)"
    return None


class JarServerKind(ServerKind):
    """A kind whose server is a jar built from lab/servers/<library> (with
    lab/servers/java-common): the lab-server command line, its flow control the
    ``SETTABLE`` parameters, with ``ASKED_BY_DEFAULT`` under what the spec asks."""

    role = "lab-server"
    SETTABLE: ClassVar[frozenset[str]]
    ASKED_BY_DEFAULT: ClassVar[dict[str, int]] = {}

    def unavailable_reason(self) -> str | None:
        return jar_unavailable(self.library)

    def asked(self, spec: ServerSpec) -> dict[str, int | bool]:
        return asked_parameters(spec, self.ASKED_BY_DEFAULT)

    def program(self) -> list[str]:
        # A lab server answers handshakes, a few each scan: the optimising compiler's threads and the
        # parallel collector cost more CPU than they ever save it (measured idle for 4 s: kwik 0.65 s of
        # CPU by default, 0.27 s with these; netty 0.87 s and 0.44 s), and a lab comes up dozens of times a
        # test run.
        return ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-jar", str(built_jar(self.library))]

    def launch(self, spec: ServerSpec, ctx: LabContext) -> Launch:
        return Launch([*self.program(), *server_arguments(spec, ctx, self.asked(spec), self.SETTABLE, self.offered)])
