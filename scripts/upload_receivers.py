"""Each HTTP/3 server's window-update rule as the *receiver* of an upload, measured from a traced browser
upload, written to datasets/flowcontrol/upload_receivers.csv (beside rules.csv, the same rule measured for
downloads, whose columns it shares).

One run per server and browser: Chromium's and Firefox's page PUTs --size bytes to the server advertising
initial_max_stream_data_bidi_remote = --window (caddy takes no set: its own windows, quic-go's auto-tuned
ones) at --delay, the path captured in the server's namespace and decrypted with the browser's key log
(replay/trace.py). The trace is read with its directions swapped, the browser as the sender and the server as
the receiver, so replay.trace.flow_control_rule measures the server's MAX_STREAM_DATA and MAX_DATA updates as it
measures a browser's for a download: the credit each update granted over the window (fraction_*), updates per
path round trip. The windows are the ones the server sent (its EncryptedExtensions).

    .venv/bin/python scripts/upload_receivers.py [--server NAME ...] [--delay-ms 30] [--size 2000000]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import datetime
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import trace
from replay.link import LinkConfig
from replay.runner import Condition, captured_run
from replay.sets import NamedSet, own_set
from replay.stacks import every_stack, get_stack
from replay.stacks.base import RunOptions
from replay.testbed import Testbed
from tparams.paramset import ParamSet
from tparams.workloads import UPLOAD

OUT = Path(__file__).resolve().parents[1] / "datasets" / "flowcontrol" / "upload_receivers.csv"
BROWSERS = ("chromium", "firefox")
# rules.csv's columns that hold at the receiver's end: the others look back one round trip from the update as the
# capture saw it, which is the sender's end for a download and the receiver's here
COLUMNS = ("server", "server_version", "browser", "browser_version", "which", "delay_ms", "window", "rtt_ms",
           "n_updates", "fraction_median", "fraction_p10", "fraction_p90", "updates_per_rtt", "goodput_mbps",
           "size_bytes", "undecrypted", "status", "date", "load_1min")


def upload_servers() -> list[str]:
    """The stacks whose HTTP/3 server answers a browser's upload with its count."""
    return [name for name, stack in every_stack().items()
            if stack.serves_page and stack.serves("h3") and "up" in stack.page_protocol]


def receiver_rules(decoded: trace.Decoded, server_sent: dict[str, int], delay_ms: float) -> list[dict]:
    """The server's stream and connection rule, from the trace read with the browser as the sender."""
    swapped = [dataclasses.replace(p, down=not p.down) for p in decoded.packets]
    # sender_series reads the receiver's initial windows under the client's names
    windows = {"initial_max_data": server_sent.get("initial_max_data"),
               "initial_max_stream_data_bidi_local": server_sent.get("initial_max_stream_data_bidi_remote"),
               "ack_delay_exponent": server_sent.get("ack_delay_exponent", 3)}
    points, _ = trace.sender_series(swapped, windows)
    # the path's round trip (the delay is on the server-to-client direction alone): the RTT samples of the swapped
    # trace are the server's ACK delays, the capture being at its end
    return [{**trace.flow_control_rule(points, window, which, rtt_ms=delay_ms), "delay_ms": delay_ms}
            for which, window in (("stream", windows["initial_max_stream_data_bidi_local"]),
                                  ("connection", windows["initial_max_data"])) if window]


def measure(tb: Testbed, server_name: str, browser_name: str, args) -> list[dict]:
    server, browser = get_stack(server_name), get_stack(browser_name)
    named = NamedSet(f"bidi_remote={args.window}", ParamSet(initial_max_stream_data_bidi_remote=args.window),
                     "upload_receivers", "server")
    load = round(os.getloadavg()[0], 2)
    with captured_run(browser, tb, Condition(own_set(browser), None if server_name == "caddy" else named, tb.link),
                      RunOptions(size=args.size, timeout_s=120, workload=UPLOAD), "upload_receivers",
                      server) as (row, pcap, keylog):
        server_sent = json.loads(row.get("transport_seen") or "{}").get("server_sent") or {}
        if row["status"] != "ok" or not server_sent:
            why = row.get("error") or "no EncryptedExtensions decrypted"
            print(f"{server_name} ({browser_name}): {row['status']} ({why})", file=sys.stderr)
            return []
        decoded = trace.decrypt(pcap, keylog, tb.server_ip)
        # A rule read from none of the server's packets would be no updates (quiche's to Chromium, before
        # trace.handshake_part: tshark's key phase thrown by the first flight's 0.5-RTT packet).
        if not any(p.down for p in decoded.packets):
            print(f"{server_name} ({browser_name}): none of the server's packets decrypted "
                  f"({decoded.undecrypted} undecrypted)", file=sys.stderr)
            return []
        rules = receiver_rules(decoded, server_sent, args.delay_ms)
    common = {"server": server_name, "server_version": server.version(), "browser": browser_name,
              "browser_version": row.get("browser_version"), "goodput_mbps": round(row.get("goodput_mbps") or 0, 3),
              "size_bytes": args.size, "undecrypted": decoded.undecrypted, "status": row["status"],
              "date": datetime.date.today().isoformat(), "load_1min": load}
    return [{**{k: rule[k] for k in COLUMNS if k in rule}, **common} for rule in rules]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", action="append", help="only these servers (default: every h3 server that "
                                                          "counts an upload and is usable here)")
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--size", type=int, default=2_000_000)
    parser.add_argument("--window", type=int, default=131_072, help="the server's "
                        "initial_max_stream_data_bidi_remote (not caddy's)")
    args = parser.parse_args()
    rows = []
    with Testbed(link=LinkConfig(delay_down_ms=args.delay_ms)) as tb:
        for name in args.server or upload_servers():
            if reason := get_stack(name).unavailable_reason():
                print(f"{name}: skipped ({reason})", file=sys.stderr)
                continue
            measured = [row for browser in BROWSERS for row in measure(tb, name, browser, args)]
            for row in measured:
                print(f"{name} {row['browser']} {row['which']}: {row['n_updates']} updates, median "
                      f"{row['fraction_median']}, "
                      f"{row['updates_per_rtt']} a round trip, {row['goodput_mbps']} Mbit/s", flush=True)
            rows += measured
    kept = []
    if OUT.is_file():  # a server and browser not measured now keep their earlier rows
        with open(OUT, newline="") as f:
            kept = [row for row in csv.DictReader(f)
                    if (row["server"], row["browser"]) not in {(r["server"], r["browser"]) for r in rows}]
    with open(OUT, "w", newline="") as out:
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(sorted([*kept, *rows], key=lambda r: (r["server"], r["browser"], r["which"])))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
