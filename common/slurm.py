"""Slurm, as the campaigns use it: an array job file (one task a shard) and a one-node cluster for tests.

The array job is what `qscan campaign plan --slurm` and `qreplay campaign plan --slurm` write: task I runs
shard I, one task at a time a node, a requeued task resumes its shard. The cluster is Debian's
slurm-wlm (slurmctld and slurmd, auth/none: no munge key), its config and state in a directory of the
caller's, stopped when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from common.process import STARTED_PIDS, ns_command

DAEMONS = ("slurmctld", "slurmd")


def array_job(name: str, tasks: int, minutes: int, command: str, comment: str, exclusive: bool = False) -> str:
    """An sbatch file: ``tasks`` array tasks running ``command`` (a shell line that reads
    ``${SLURM_ARRAY_TASK_ID}``), limited to ``minutes``; ``exclusive``: each task has its node to itself (a
    replay run measures the machine it runs on)."""
    minutes = max(10, minutes)
    return "\n".join([
        "#!/bin/bash",
        f"# {comment}",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --array=0-{tasks - 1}",
        "#SBATCH --ntasks=1",
        "#SBATCH --exclusive" if exclusive else "#SBATCH --cpus-per-task=1",
        f"#SBATCH --time={minutes // 60}:{minutes % 60:02d}:00",
        f"#SBATCH --output={name}-%A_%a.log",
        "#SBATCH --requeue",
        "set -euo pipefail",
        f"exec {command}",
        "",
    ])


def unavailable_reason() -> str | None:
    missing = [tool for tool in (*DAEMONS, "sbatch", "sinfo") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} missing (Debian slurm-wlm; scripts/setup.sh installs it)"
    if os.geteuid() != 0:
        return "a one-node Slurm here runs its daemons as root"
    return None


@contextlib.contextmanager
def single_node_cluster(state: Path, name: str = "qcampaign", up_timeout_s: float = 30, address: str = "127.0.0.1",
                        ns: str | None = None) -> Iterator[dict[str, str]]:
    """A one-node Slurm cluster (this host, on ``address``; its daemons in namespace ``ns``, where that address
    is) whose config and state live in ``state``; yields the environment its client commands (sbatch, sinfo)
    need. RuntimeError if it does not come up."""
    (state / "state").mkdir(parents=True, exist_ok=True)
    (state / "spool").mkdir(exist_ok=True)
    host = socket.gethostname().split(".")[0]
    ports = [_free_port() for _ in range(2)]
    conf = state / "slurm.conf"
    conf.write_text("\n".join([
        f"ClusterName={name}", f"SlurmctldHost={host}({address})", "AuthType=auth/none", "CredType=cred/none",
        "SlurmUser=root", "SlurmdUser=root", f"SlurmctldPort={ports[0]}", f"SlurmdPort={ports[1]}",
        f"StateSaveLocation={state / 'state'}", f"SlurmdSpoolDir={state / 'spool'}",
        f"SlurmctldPidFile={state / 'slurmctld.pid'}", f"SlurmdPidFile={state / 'slurmd.pid'}",
        f"SlurmctldLogFile={state / 'slurmctld.log'}", f"SlurmdLogFile={state / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SchedulerType=sched/builtin", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "ReturnToService=2", "MpiDefault=none",
        f"NodeName={host} NodeAddr={address} CPUs={os.cpu_count()} State=UNKNOWN",
        f"PartitionName=main Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = []
    try:
        for daemon in DAEMONS:
            # nsenter, not `ip netns exec`: that mounts the namespace's own /sys, without the cgroup file system
            # slurmd needs ("No filesystem mounted on /sys/fs/cgroup")
            entered = ["nsenter", f"--net=/run/netns/{ns}"] if ns else []
            process = subprocess.Popen([*entered, daemon, "-D"], env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)
            STARTED_PIDS.add(process.pid)
            daemons.append(process)
        deadline = time.monotonic() + up_timeout_s
        while "idle" not in subprocess.run(ns_command(ns, ["sinfo", "-h", "-o", "%t"]), env=env,
                                           capture_output=True, text=True).stdout:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the one-node Slurm did not come up in {up_timeout_s:.0f} s "
                                   f"(see {state}/slurmctld.log)")
            time.sleep(0.5)
        yield env
    finally:
        for process in daemons:
            process.terminate()
        for process in daemons:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            STARTED_PIDS.discard(process.pid)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
