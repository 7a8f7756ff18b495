"""How an auto-tuning h3 server's receive window grows under a browser's upload, measured from traced runs,
written to datasets/flowcontrol/upload_window_growth.csv, each run beside the impact model's prediction with the
window as advertised (fixed) and with the window grown as the library's source has it (replay.flowcontrol's
UpdateRule.max_stream_window; issue 34).

One run per browser and repetition: the page PUTs --size bytes to the server (caddy by default: quic-go 0.29 in
Debian's caddy 2.6.2, its own 512 KiB stream and 768 KiB connection windows) at --delay (on the server-to-client
direction, --rate there), the path captured in the server's namespace and decrypted with the browser's key log
(replay/trace.py): the window the server ran at after each MAX_STREAM_DATA (its limit less the bytes it had
received, replay.trace.receiver_credit). Whether the browser's first datagram was a burst of two Initials is
noted (`initial_burst`): caddy's quic-go drops the second (quic-go#3760), and the browser then runs its upload in
congestion avoidance, which the model does not know (docs/results.md).

    .venv/bin/python scripts/upload_window_growth.py [--browser chromium] [--delay-ms 100] [--size 2000000] [--reps 3]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import pcap as pcapfile
from replay import trace
from replay.impact_report import predict_sent
from replay.link import LinkConfig
from replay.measured_rules import load_update_rules
from replay.runner import Condition, captured_run
from replay.sets import own_set
from replay.stacks import get_stack
from replay.stacks.base import RunOptions
from replay.testbed import Testbed
from tparams.workloads import UPLOAD

OUT = Path(__file__).resolve().parents[1] / "datasets" / "flowcontrol" / "upload_window_growth.csv"
COLUMNS = ("server", "server_version", "library", "browser", "browser_version", "delay_ms", "rate_mbps", "size_bytes",
           "status", "goodput_mbps", "predicted_fixed_mbps", "predicted_grown_mbps", "initial_burst",
           "initial_stream_window", "largest_stream_credit", "least_stream_credit_left", "max_stream_data_updates",
           "stream_window_over_time", "largest_conn_credit", "date", "load_1min")


def first_client_datagram(capture: Path, client_ip: str) -> int | None:
    """The UDP payload size of the client's first datagram in the capture (above 1,500: a GSO burst of two)."""
    data = capture.read_bytes()
    link = pcapfile.linktype(data)
    for _, _, _, frame, _ in pcapfile.CaptureReader.in_memory(data):
        udp = pcapfile.udp_datagram(link, frame)
        if udp and socket.inet_ntoa(udp[0]) == client_ip:
            return len(udp[4])
    return None


def predictions(sent: dict, library: str, server: str, browser: str, delay_ms: float, rate_mbps: float,
                size: int) -> tuple[float, float]:
    """The impact model's upload goodput for what the server sent: with its windows as advertised, and grown."""
    rules = load_update_rules()
    fixed = {name: dataclasses.replace(rule, max_stream_window=0, max_conn_window=0) for name, rule in rules.items()}
    return tuple(round(predict_sent(sent, library, server, browser, delay_ms, rate_mbps, upload_bytes=size,
                                    rules=which)["upload_mbps"], 2) for which in (fixed, rules))


def measure(tb: Testbed, server_name: str, browser_name: str, args) -> dict | None:
    server, browser = get_stack(server_name), get_stack(browser_name)
    load = round(os.getloadavg()[0], 2)
    with captured_run(browser, tb, Condition(own_set(browser), None, tb.link),
                      RunOptions(size=args.size, timeout_s=60, workload=UPLOAD), "upload_window_growth",
                      server) as (row, pcap, keylog):
        sent = json.loads(row.get("transport_seen") or "{}").get("server_sent") or {}
        if row["status"] != "ok" or not sent:
            print(f"{server_name} ({browser_name}): {row['status']} ({row.get('error') or 'nothing decrypted'})",
                  file=sys.stderr)
            return None
        burst = first_client_datagram(pcap, tb.client_ip)
        credit = trace.receiver_credit(trace.decrypt(pcap, keylog, tb.server_ip).packets, sent)
    library = server.library.identified_as
    fixed, grown = predictions(sent, library, server_name, browser_name, args.delay_ms, args.rate_mbps, args.size)
    return {"server": server_name, "server_version": server.version(), "library": library, "browser": browser_name,
            "browser_version": row.get("browser_version"), "delay_ms": args.delay_ms, "rate_mbps": args.rate_mbps,
            "size_bytes": args.size, "status": row["status"], "goodput_mbps": round(row["goodput_mbps"], 2),
            "predicted_fixed_mbps": fixed, "predicted_grown_mbps": grown,
            "initial_burst": burst is not None and burst > 1500,
            "initial_stream_window": credit["initial_stream_window"],
            "largest_stream_credit": credit["largest_stream_credit"],
            "least_stream_credit_left": credit["least_stream_credit_left"],
            "max_stream_data_updates": credit["max_stream_data_updates"],
            "stream_window_over_time": ";".join(f"{t * 1000:.0f}:{c}" for t, _, c in credit["stream_credit_over_time"]),
            "largest_conn_credit": credit["largest_conn_credit"],
            "date": datetime.date.today().isoformat(), "load_1min": load}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="caddy")
    parser.add_argument("--browser", action="append", choices=("chromium", "firefox"))
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--rate-mbps", type=float, default=100.0)
    parser.add_argument("--size", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = []
    with Testbed(link=LinkConfig(delay_down_ms=args.delay_ms, rate_bps=int(args.rate_mbps * 1e6))) as tb:
        for browser in args.browser or ("chromium",):
            for _ in range(args.reps):
                if row := measure(tb, args.server, browser, args):
                    print({k: row[k] for k in ("browser", "goodput_mbps", "predicted_fixed_mbps",
                                               "predicted_grown_mbps", "initial_burst", "largest_stream_credit",
                                               "load_1min")}, flush=True)
                    rows.append(row)
    kept = []
    if args.out.is_file():  # runs of other conditions stay
        with open(args.out, newline="") as f:
            done = {(r["server"], r["browser"], float(r["delay_ms"]), int(r["size_bytes"])) for r in rows}
            kept = [r for r in csv.DictReader(f)
                    if (r["server"], r["browser"], float(r["delay_ms"]), int(r["size_bytes"])) not in done]
    with open(args.out, "w", newline="") as out:
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows([*kept, *rows])
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
