"""What every launcher is (see common/launchers/__init__.py)."""

from __future__ import annotations

from collections.abc import Sequence


class Launcher:
    kind: str = ""
    #: whether the server's host sees this host's files: only then can GNU time's usage file, written there, be
    #: read here (a run's server CPU and memory); elsewhere they are stored as unknown
    shares_files: bool = False
    #: the network namespace the launcher enters, if that is all it does: a knob's kernel settings (sysctls) are
    #: changed only there, never a host's own
    namespace: str | None = None

    def __init__(self, where: str):
        self.where = where

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on the server's host, ended by a SIGTERM to the returned command's process."""
        raise NotImplementedError

    def unavailable_reason(self) -> str | None:
        """Why this launcher cannot start anything here, or None."""
        return None

    def describe(self) -> str:
        return f"{self.kind}:{self.where}"
