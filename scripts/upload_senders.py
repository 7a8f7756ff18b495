"""What each browser does as an upload's sender when the server's stream window binds, written to
datasets/flowcontrol/upload_senders.csv.

One run per browser and window: the page PUTs --size bytes to aioquic's HTTP/3 server advertising
initial_max_stream_data_bidi_remote = WINDOW (windows pinned: it re-opens the stream as it receives), over
the testbed at --delay; the path captured in the server's namespace and decrypted with the browser's key
log (replay/trace.py). Counted from the client's packets: STREAM_DATA_BLOCKED and DATA_BLOCKED frames and the
limits they name; from the server's: MAX_STREAM_DATA updates. (How long the browser waited at a limit cannot
be read at the server's end, where every limit is raised as the data reaches it; it is not counted.)

    .venv/bin/python scripts/upload_senders.py [--delay-ms 30] [--size 2000000] [--windows 16384,65536]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import trace
from replay.link import LinkConfig
from replay.runner import Condition, captured_run
from replay.sets import NamedSet, own_set
from replay.stacks import get_stack
from replay.stacks.base import RunOptions
from replay.testbed import Testbed
from tparams.paramset import ParamSet
from tparams.workloads import UPLOAD

OUT = Path(__file__).resolve().parents[1] / "datasets" / "flowcontrol" / "upload_senders.csv"
COLUMNS = ("browser", "browser_version", "server", "delay_ms", "window", "size_bytes", "status", "goodput_mbps",
           "model_mbps", "stream_data_blocked", "stream_data_blocked_at_limit", "data_blocked",
           "max_stream_data_updates", "client_packets", "date", "load_1min")


def sender_view(decoded: trace.Decoded, window: int) -> dict:
    """The upload stream's (the client's first bidirectional stream carrying the body) limit and what the
    client did at it."""
    up = [p for p in decoded.packets if not p.down]
    down = [p for p in decoded.packets if p.down]
    sizes: dict[int, int] = {}
    for packet in up:
        for frame in packet.streams:
            if frame.stream_id % 4 == 0:
                sizes[frame.stream_id] = max(sizes.get(frame.stream_id, 0), frame.offset + frame.length)
    stream = max(sizes, key=sizes.get)
    blocked = [limit for p in up for sid, limit in p.stream_data_blocked if sid == stream]
    updates = sorted((p.time, limit) for p in down for sid, limit in p.max_stream_data if sid == stream)
    known = {window, *(limit for _, limit in updates)}
    return {"stream_data_blocked": len(blocked), "stream_data_blocked_at_limit": sum(b in known for b in blocked),
            "data_blocked": sum(len(p.data_blocked) for p in up), "max_stream_data_updates": len(updates),
            "client_packets": len(up)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--size", type=int, default=2_000_000)
    parser.add_argument("--windows", default="16384,65536")
    args = parser.parse_args()
    server = get_stack("aioquic")
    rows = []
    with Testbed(link=LinkConfig(delay_down_ms=args.delay_ms)) as tb:
        for browser in ("chromium", "firefox"):
            stack = get_stack(browser)
            for window in (int(w) for w in args.windows.split(",")):
                named = NamedSet(f"bidi_remote={window}", ParamSet(initial_max_stream_data_bidi_remote=window),
                                 "upload_senders", "server")
                load = round(os.getloadavg()[0], 2)
                with captured_run(stack, tb, Condition(own_set(stack), named, tb.link),
                                  RunOptions(size=args.size, timeout_s=120, workload=UPLOAD), "upload_senders",
                                  server) as (row, pcap, keylog):
                    view = sender_view(trace.decrypt(pcap, keylog, tb.server_ip), window)
                rows.append({"browser": browser, "browser_version": row.get("browser_version"), "server": server.name,
                             "delay_ms": args.delay_ms, "window": window, "size_bytes": args.size,
                             "status": row["status"], "goodput_mbps": round(row.get("goodput_mbps") or 0, 3),
                             "model_mbps": round(window * 8 / (args.delay_ms / 1000) / 1e6, 3), **view,
                             "date": datetime.date.today().isoformat(), "load_1min": load})
                print(rows[-1], flush=True)
    with open(OUT, "w", newline="") as out:
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
