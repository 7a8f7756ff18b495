"""A network namespace standing for the server's host (the two-host test, or a host's own namespaces):
``ip netns exec``, the same files as this host."""

from __future__ import annotations

from collections.abc import Sequence

from common import netns
from common.launchers.base import Launcher
from common.process import ns_command


class NamespaceLauncher(Launcher):
    kind = "netns"
    shares_files = True

    def __init__(self, where: str):
        super().__init__(where)
        self.namespace = where

    def command(self, argv: Sequence[str]) -> list[str]:
        return ns_command(self.where, argv)

    def unavailable_reason(self) -> str | None:
        if self.where not in netns.list_namespaces():
            return f"no network namespace {self.where}"
        return None


LAUNCHER = NamespaceLauncher
