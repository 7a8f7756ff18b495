"""The other node of a two-node Slurm allocation (`sbatch --nodes=2`, `salloc -N2`): one job step a server,
started with Slurm's own step launching on the node named. The client runs in the batch script, on the first
node."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from common.launchers.base import Launcher


class SrunLauncher(Launcher):
    kind = "srun"
    # Cluster nodes share the checkout, and usually /home, but not the run's /tmp.
    shares_files = False

    def command(self, argv: Sequence[str]) -> list[str]:
        # --overlap: the readiness check (`ss`) and the server are steps at once on the node; --quiet: srun's
        # own notes would mix into the server's output, which some stacks' results are read from.
        return ["srun", "--nodes=1", "--ntasks=1", "-w", self.where, "--overlap", "--quiet", "--kill-on-bad-exit=1",
                *argv]

    def unavailable_reason(self) -> str | None:
        if not shutil.which("srun"):
            return "srun is missing (Debian slurm-client)"
        if "SLURM_JOB_ID" not in os.environ:
            return "not inside a Slurm allocation (run under `sbatch --nodes=2` or `salloc -N2`)"
        return None


LAUNCHER = SrunLauncher
