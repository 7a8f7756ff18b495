"""What each browser does as a many-stream client when the server's initial_max_streams_bidi binds, written to
datasets/flowcontrol/stream_limit_clients.csv (beside upload_senders.csv, the same question for windows).

One run per browser and limit: the page fetches --requests objects of --size bytes, all at once, from aioquic's
HTTP/3 server advertising initial_max_streams_bidi = LIMIT, over the testbed at --delay; the path captured in
the server's namespace and decrypted with the browser's key log. Counted: the client's STREAMS_BLOCKED (bidi)
frames and the limits they name, the server's MAX_STREAMS (bidi) frames, the client-initiated bidirectional
streams opened, and the connections the browser opened (its Initial packets' source ports): does it wait for
MAX_STREAMS, say it is blocked, or open another connection?

    .venv/bin/python scripts/stream_limit_clients.py [--delay-ms 30] [--requests 12] [--size 10000] [--limits 2,4]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.tshark import tshark_path
from replay import trace
from replay.link import LinkConfig
from replay.runner import Condition, captured_run
from replay.sets import NamedSet, own_set
from replay.stacks import get_stack
from replay.stacks.base import RunOptions
from replay.testbed import Testbed
from tparams.paramset import ParamSet
from tparams.workloads import REQUESTS

OUT = Path(__file__).resolve().parents[1] / "datasets" / "flowcontrol" / "stream_limit_clients.csv"
SERVER = "aioquic"
FRAME_STREAM_FIRST, FRAME_STREAM_LAST, FRAME_MAX_STREAMS_BIDI, FRAME_STREAMS_BLOCKED_BIDI = 0x08, 0x0F, 0x12, 0x16
COLUMNS = ("browser", "browser_version", "server", "delay_ms", "initial_max_streams_bidi", "requests", "size_bytes",
           "status", "requests_per_s", "duration_s", "streams_blocked", "streams_blocked_at_limit",
           "max_streams_updates", "bidi_streams_opened", "connections", "decrypted_packets", "date", "load_1min")


def client_view(pcap: Path, keylog: Path, server_ip: str, limit: int) -> dict:
    """The frames that tell what the client did at the stream limit (tshark's fields, one line a packet)."""
    data, _ = trace.split_bursts(pcap.read_bytes(), server_ip)  # as replay.trace.decrypt reads a capture
    pcap = pcap.with_suffix(".split.pcap")
    pcap.write_bytes(data)
    fields = ["ip.src", "udp.srcport", "quic.long.packet_type", "quic.frame_type", "quic.ms.max_streams",
              "quic.sib.stream_limit", "quic.stream.stream_id"]
    argv = [tshark_path(), "-n", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-Y", "quic", "-T", "fields",
            "-E", "occurrence=a", *(arg for f in fields for arg in ("-e", f))]
    lines = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()
    blocked, raised, streams, ports, decrypted = [], [], set(), set(), 0
    for line in lines:
        src, port, long_type, kinds, max_streams, stream_limits, stream_ids = (line.split("\t") + [""] * 7)[:7]
        kinds = [int(k) for k in kinds.split(",") if k]
        decrypted += bool(kinds)
        if src != server_ip:
            if "0" in long_type.split(","):  # an Initial: a connection (the browser's Initials of one share a port)
                ports.add(port)
            limits = [int(v) for v in stream_limits.split(",") if v]
            blocked += [limit for kind, limit in zip([k for k in kinds if k in (0x16, 0x17)], limits)
                        if kind == FRAME_STREAMS_BLOCKED_BIDI]
            streams |= {int(s) for s in stream_ids.split(",") if s and int(s) % 4 == 0}
        else:
            values = [int(v) for v in max_streams.split(",") if v]
            raised += [value for kind, value in zip([k for k in kinds if k in (0x12, 0x13)], values)
                       if kind == FRAME_MAX_STREAMS_BIDI]
    known = {limit, *raised}
    return {"streams_blocked": len(blocked), "streams_blocked_at_limit": sum(b in known for b in blocked),
            "max_streams_updates": len(raised), "bidi_streams_opened": len(streams), "connections": len(ports),
            "decrypted_packets": decrypted}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--limits", default="2,4")
    args = parser.parse_args()
    server = get_stack(SERVER)
    rows = []
    with Testbed(link=LinkConfig(delay_down_ms=args.delay_ms)) as tb:
        for browser in ("chromium", "firefox"):
            stack = get_stack(browser)
            for limit in (int(v) for v in args.limits.split(",")):
                named = NamedSet(f"streams_bidi={limit}", ParamSet(initial_max_streams_bidi=limit),
                                 "stream_limit_clients", "server")
                load = round(os.getloadavg()[0], 2)
                with captured_run(stack, tb, Condition(own_set(stack), named, tb.link),
                                  RunOptions(size=args.size, requests=args.requests, concurrency=args.requests,
                                             timeout_s=60, workload=REQUESTS),
                                  "stream_limit_clients", server) as (row, pcap, keylog):
                    view = client_view(pcap, keylog, tb.server_ip, limit)
                if not view["decrypted_packets"]:  # seen once, a first run of the testbed: not explained
                    print(f"{browser} at {limit} streams: nothing decrypted in the capture; not stored",
                          file=sys.stderr)
                    continue
                rows.append({"browser": browser, "browser_version": row.get("browser_version"), "server": server.name,
                             "delay_ms": args.delay_ms, "initial_max_streams_bidi": limit,
                             "requests": args.requests, "size_bytes": args.size, "status": row["status"],
                             "requests_per_s": round(row.get("requests_per_s") or 0, 2),
                             "duration_s": round(row.get("duration_s") or 0, 3), **view,
                             "date": datetime.date.today().isoformat(), "load_1min": load})
                print(rows[-1], row.get("error") or "", flush=True)
    with open(OUT, "w", newline="") as out:
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
