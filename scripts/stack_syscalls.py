"""Which system calls each replay stack sends and receives with, and whether it uses UDP GSO and GRO.

Profiles show the system call a sample was in (the view profile_syscalls), but not the control messages
and socket options that turn GSO and GRO on, so each stack's own client and server download --size once
at 0 ms under strace, from their first system call: the calls counted, the bytes (or messages) each one
moved, a sendmsg carrying a UDP_SEGMENT control message (GSO per call), setsockopt(SOL_UDP, UDP_SEGMENT)
(GSO for the socket), setsockopt(SOL_UDP, UDP_GRO) and a received UDP_GRO control message (GRO). strace
slows every call down: the run is for what is called, not for its speed.

    .venv/bin/python scripts/stack_syscalls.py [--stacks ngtcp2,quic-go,...] [--size 20MB] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import sets  # noqa: E402
from replay.link import LinkConfig, parse_size  # noqa: E402
from replay.runner import SERVER_PORT  # noqa: E402
from replay.stacks import all_stacks, get_stack  # noqa: E402
from replay.stacks.base import RunOptions  # noqa: E402
from replay.testbed import Testbed  # noqa: E402

SOCKET_CALLS = ("sendmsg", "sendmmsg", "sendto", "recvmsg", "recvmmsg", "recvfrom", "write", "writev", "read")
_CALL = re.compile(r"^(?:\d+ +)?(\w+)\((.*)\) += (-?\d+)")
UDP_SEGMENT, UDP_GRO = 103, 104  # linux/udp.h


def strace_argv(out: Path, argv: list[str]) -> list[str]:
    calls = ",".join((*SOCKET_CALLS, "setsockopt"))
    return ["strace", "-f", "-qq", "-s", "4", "-X", "raw", "-e", f"trace={calls}", "-e", "signal=none",
            "-o", str(out), "--", *argv]


def summarise(path: Path) -> dict:
    """Per call: count and mean return value (bytes, or messages for *mmsg); GSO and GRO evidence."""
    counts, returned = Counter(), Counter()
    gso_sends = gso_socket = gro_socket = gro_received = 0
    for line in path.read_text(errors="replace").splitlines():
        found = _CALL.match(line)
        if not found:
            continue
        call, args, result = found.group(1), found.group(2), int(found.group(3))
        if call == "setsockopt":
            # raw: setsockopt(fd, 0x11 (SOL_UDP), 0x67 (UDP_SEGMENT), ...)
            fields = [f.strip() for f in args.split(",")]
            if len(fields) > 2 and fields[1] == "0x11":
                gso_socket += fields[2] == hex(UDP_SEGMENT)
                gro_socket += fields[2] == hex(UDP_GRO)
            continue
        if result < 0 or (call in ("write", "read") and "msg" in call):
            continue
        counts[call] += 1
        returned[call] += result
        if call.startswith("send") and f"cmsg_level=0x11, cmsg_type={hex(UDP_SEGMENT)}" in args:
            gso_sends += 1
        if call.startswith("recv") and f"cmsg_level=0x11, cmsg_type={hex(UDP_GRO)}" in args:
            gro_received += 1
    return {"calls": {c: {"count": counts[c], "mean_returned": returned[c] / counts[c]} for c in counts},
            "gso_sends": gso_sends, "gso_socket_option": gso_socket, "gro_socket_option": gro_socket,
            "gro_received": gro_received}


def trace_stack(name: str, size: int, keep: Path | None = None) -> dict:
    stack = get_stack(name)
    options = RunOptions(size=size, timeout_s=120)
    with Testbed(link=LinkConfig(), backend="veth") as bed, tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        server_argv, _ = stack.server_command(None, options, bed.server_ip, SERVER_PORT, workdir)
        plan, _ = stack.client_command(sets.resolve_one("firefox").params, options, bed.server_ip, SERVER_PORT,
                                       workdir)
        server = subprocess.Popen(["ip", "netns", "exec", bed.server_ns,
                                   *strace_argv(workdir / "server.strace", server_argv)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while not subprocess.run(["ip", "netns", "exec", bed.server_ns, "ss", "-Hnlu", f"sport = :{SERVER_PORT}"],
                                 capture_output=True, text=True).stdout.strip():
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit(f"stack_syscalls: {name}'s server did not listen")
            time.sleep(0.05)
        drain = None
        if plan.body_fifo:  # the client writes its body into a FIFO: read it away
            os.mkfifo(plan.body_fifo)
            drain = subprocess.Popen(["sh", "-c", f"cat '{plan.body_fifo}' > /dev/null"])
        client = subprocess.run(["ip", "netns", "exec", bed.client_ns,
                                 *strace_argv(workdir / "client.strace", plan.argv)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        if drain:
            drain.wait(10)
        os.killpg(server.pid, signal.SIGTERM)  # strace and the server it runs
        server.wait(10)
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
            for endpoint in ("server", "client"):
                shutil.copy(workdir / f"{endpoint}.strace", keep / f"{name}-{endpoint}.strace")
        return {"stack": name, "client_status": client.returncode, "client": summarise(workdir / "client.strace"),
                "server": summarise(workdir / "server.strace")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", default=",".join(n for n, s in all_stacks().items() if not s.unavailable_reason()))
    parser.add_argument("--size", default="20MB")
    parser.add_argument("--out", type=Path, help="Write the summaries as JSON.")
    parser.add_argument("--keep", type=Path, help="Keep each endpoint's strace output in this directory.")
    args = parser.parse_args()
    results = [trace_stack(name.strip(), parse_size(args.size), args.keep) for name in args.stacks.split(",")]
    for r in results:
        for endpoint in ("server", "client"):
            s = r[endpoint]
            calls = ", ".join(f"{c} {v['count']} ({v['mean_returned']:.0f})" for c, v in
                              sorted(s["calls"].items(), key=lambda kv: -kv[1]["count"]) if c in SOCKET_CALLS)
            print(f"{r['stack']:9} {endpoint:6} GSO sends {s['gso_sends']}, UDP_SEGMENT opt {s['gso_socket_option']}, "
                  f"UDP_GRO opt {s['gro_socket_option']}, GRO received {s['gro_received']}; {calls}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
