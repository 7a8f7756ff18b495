"""Each HTTP/3 server as the *sender* of a browser's page load, measured from a traced run, written to
datasets/flowcontrol/page_senders.csv: how many bytes it sends in its first round trip after the requests (its
initial congestion window as it uses it), how its flight grows round by round, and when each request reached it
and was answered (issue 34: the page-load prediction's slow start takes each server library's initial window).

One run per server, browser and repetition: the page fetches --objects objects of --size bytes, all at once
(the spot checks' page load, replay/impact_check.py), from the server's own set at --delay (on the
server-to-client direction, --rate there), the path captured in the server's namespace and decrypted with the
browser's key log (replay/trace.py). The capture is at the server's end, so a server packet's time is when it
was sent and a client packet's when it arrived.

    .venv/bin/python scripts/page_load_senders.py [--server NAME ...] [--delay-ms 100] [--reps 2]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import trace
from replay.impact_report import predict_sent
from replay.link import LinkConfig
from replay.runner import Condition, captured_run
from replay.sets import own_set
from replay.stacks import every_stack, get_stack
from replay.stacks.base import RunOptions
from replay.testbed import Testbed
from tparams.workloads import REQUESTS

OUT = Path(__file__).resolve().parents[1] / "datasets" / "flowcontrol" / "page_senders.csv"
BROWSERS = ("chromium", "firefox")
COLUMNS = ("server", "server_version", "browser", "browser_version", "delay_ms", "rate_mbps", "objects",
           "object_bytes", "status", "page_ms", "predicted_ms", "ratio", "model_initial_cwnd", "requests_seen",
           "request_spread_ms", "streams_blocked", "max_streams_updates", "first_flight_bytes",
           "first_flight_packets", "first_flight_ms", "first_flight_wait_ms", "response_bytes", "bytes_per_round",
           "rounds_to_last_byte", "ttfb_ms_median", "ttfb_ms_max", "last_byte_sent_ms", "undecrypted", "date",
           "load_1min")


def page_servers() -> list[str]:
    """The stacks whose HTTP/3 server serves a browser's page of many objects."""
    return [name for name, stack in every_stack().items()
            if stack.serves_page and stack.serves("h3") and "many" in stack.page_protocol]


def measure(tb: Testbed, server_name: str, browser_name: str, args) -> dict | None:
    server, browser = get_stack(server_name), get_stack(browser_name)
    load = round(os.getloadavg()[0], 2)
    options = RunOptions(size=args.size, requests=args.objects, concurrency=args.objects, timeout_s=60,
                         workload=REQUESTS)
    with captured_run(browser, tb, Condition(own_set(browser), None, tb.link), options, "page_load_senders",
                      server) as (row, pcap, keylog):
        if row["status"] != "ok":
            print(f"{server_name} ({browser_name}): {row['status']} ({row.get('error')})", file=sys.stderr)
            return None
        decoded = trace.decrypt(pcap, keylog, tb.server_ip)
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for kept in (pcap, keylog):
                shutil.copy(kept, args.keep / f"{server_name}-{browser_name}-{row['run_id'][:8]}-{kept.name}")
    seen = trace.page_flights(decoded.packets, args.delay_ms, args.size)
    sent = json.loads(row.get("transport_seen") or "{}").get("server_sent") or {}
    if not seen:
        print(f"{server_name} ({browser_name}): no request decrypted ({decoded.undecrypted} undecrypted)",
              file=sys.stderr)
        return None
    library = server.library.identified_as
    model = predict_sent(sent, library, server_name, browser_name, args.delay_ms, args.rate_mbps,
                         objects=args.objects, object_bytes=args.size)
    # as the spot checks hold it: the page's load opened the connection, so the handshake's round trip is out
    predicted = model["page_load_ms"] - args.delay_ms if model["page_load_ms"] is not None else None
    page_ms = row["duration_s"] * 1000
    return {"server": server_name, "server_version": server.version(), "browser": browser_name,
            "browser_version": row.get("browser_version"), "delay_ms": args.delay_ms, "rate_mbps": args.rate_mbps,
            "objects": args.objects, "object_bytes": args.size, "status": row["status"], "page_ms": round(page_ms, 1),
            "predicted_ms": predicted and round(predicted, 1), "ratio": predicted and round(page_ms / predicted, 3),
            "model_initial_cwnd": model["server_initial_cwnd"], **seen, "undecrypted": decoded.undecrypted,
            "date": datetime.date.today().isoformat(), "load_1min": load}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", action="append", help="only these servers (default: every h3 server that "
                                                          "serves a page of many objects and is usable here)")
    parser.add_argument("--browser", action="append", choices=BROWSERS)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--rate-mbps", type=float, default=100.0)
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--keep", type=Path, help="copy each run's capture and key log into this directory")
    args = parser.parse_args()
    rows = []
    link = LinkConfig(delay_down_ms=args.delay_ms, rate_bps=int(args.rate_mbps * 1e6))
    with Testbed(link=link) as tb:
        for name in args.server or page_servers():
            if reason := get_stack(name).unavailable_reason():
                print(f"{name}: skipped ({reason})", file=sys.stderr)
                continue
            for browser in args.browser or BROWSERS:
                for _ in range(args.reps):
                    if row := measure(tb, name, browser, args):
                        print({k: row[k] for k in ("server", "browser", "page_ms", "predicted_ms", "first_flight_bytes",
                                                   "first_flight_packets", "first_flight_ms", "bytes_per_round",
                                                   "ttfb_ms_median", "ttfb_ms_max", "load_1min")}, flush=True)
                        rows.append(row)
    kept = []
    if args.out.is_file():  # a server and browser not measured now keep their earlier rows
        with open(args.out, newline="") as f:
            done = {(r["server"], r["browser"], float(r["delay_ms"])) for r in rows}
            kept = [row for row in csv.DictReader(f)
                    if (row["server"], row["browser"], float(row["delay_ms"])) not in done]
    with open(args.out, "w", newline="") as out:
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(sorted([*kept, *rows], key=lambda r: (r["server"], r["browser"], float(r["delay_ms"]))))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
