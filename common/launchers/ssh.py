"""The server's host over ssh, where no scheduler allocates hosts. The host must hold this checkout at the same
path (the stacks' programs, linkem, iperf3) and see the run's scratch directory (TMPDIR on a shared file
system) for the stacks that keep certificates there."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Sequence

from common.launchers.base import Launcher


class SshLauncher(Launcher):
    kind = "ssh"

    def command(self, argv: Sequence[str]) -> list[str]:
        # -tt: the remote program is the session's, so it gets SIGHUP when this ssh ends (a SIGTERM to it);
        # -n: stdin from /dev/null, so a forced terminal never puts the caller's own into raw mode;
        # BatchMode: a missing key is an error, never a password prompt in the middle of a campaign.
        return ["ssh", "-n", "-tt", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", self.where, "--", shlex.join(argv)]

    def unavailable_reason(self) -> str | None:
        return None if shutil.which("ssh") else "ssh is missing (Debian openssh-client)"


LAUNCHER = SshLauncher
