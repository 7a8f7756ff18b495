"""Our IPv6 prober: Debian's ZMap 2.1.1 has no IPv6, so `qscan ipv6` sends the same
Version Negotiation probe itself, with ZMap's conventions.

Stateless as ZMap's udp module is: one payload for every address, nothing kept per
probe; an answer proves itself by echoing the probe's connection IDs
(scanner/discovery/response.py). Rate-limited (``rate`` probes/s, paced, not bursts),
the order a permutation drawn from ``seed``, shard I of N taking every N-th address of
it (so the shards of one seed cover the list once), ``cooldown`` seconds of listening
after the last probe. It writes ZMap's CSV (the fields of zmap.OUTPUT_FIELDS, ICMPv6
errors as ``icmp-unreach`` rows) and metadata, so zmap.read_results judges both alike.

Probes go out of one UDP socket (the kernel's IPv6 stack routes, so the namespace's routes
decide where a probe may go); ICMPv6 destination-unreachable errors about them are read,
as ZMap reads ICMP, from a raw ICMPv6 socket (root or CAP_NET_RAW). An error queue on the
UDP socket would do without the raw socket, but then every error fails the next send once:
half the sends, measured (bench/bench_ipv6.py).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
import select
import shlex
import socket
import struct
import time
from collections.abc import Sequence

from tparams.errors import ToolError

from scanner.discovery.zmap import OUTPUT_FIELDS, ZMapFiles

_DRAIN_BATCH = 256  # datagrams read from a socket before the clock is looked at again
_ICMP6_FILTER = 1  # linux/icmpv6.h: a bitmap of the ICMPv6 types a raw socket blocks
_DESTINATION_UNREACHABLE = 1
# Every type blocked but destination unreachable (bit 1 of the first word).
_ONLY_UNREACHABLE = struct.pack("=8I", 0xFFFFFFFF & ~(1 << _DESTINATION_UNREACHABLE), *[0xFFFFFFFF] * 7)


def shard_order(addresses: Sequence[str], seed: int, shard: int, shards: int) -> list[str]:
    """This shard's addresses in the order it probes them."""
    order = list(addresses)
    random.Random(seed).shuffle(order)
    return order[shard::shards]


def command_text(rate: int, cooldown: int, seed: int, shard: int, shards: int, port: int, files: ZMapFiles) -> str:
    """The prober's settings and files in ZMap's spelling (discovery_runs.zmap_command, a dry run's command)."""
    return shlex.join(["qscan-prober6", f"--target-port={port}", f"--rate={rate}", f"--cooldown-time={cooldown}",
                       f"--seed={seed}", f"--shards={shards}", f"--shard={shard}", f"--output-file={files.results}",
                       f"--metadata-file={files.metadata}"])


def probe(addresses: Sequence[str], payload: bytes, port: int, rate: int, cooldown: float, files: ZMapFiles) -> dict:
    """Send ``payload`` to every address in order, paced at ``rate``/s (in steps of a millisecond's
    worth), listen ``cooldown`` s more; write ZMap's CSV and metadata into ``files``; return the metadata."""
    files.directory.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    sent = failed = 0
    try:
        icmp = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    except PermissionError:
        raise ToolError("no permission to open raw sockets (the IPv6 prober reads ICMPv6 errors on one: "
                        "root or CAP_NET_RAW)") from None
    with icmp, socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock, \
            open(files.results, "w", newline="") as handle:
        icmp.setsockopt(socket.IPPROTO_ICMPV6, _ICMP6_FILTER, _ONLY_UNREACHABLE)
        icmp.setblocking(False)
        sock.bind(("::", 0))
        source_port = sock.getsockname()[1]
        sock.setblocking(False)
        rows = csv.writer(handle)
        rows.writerow(OUTPUT_FIELDS)

        def record(address: str, sport: str, data: str, classification: str, success: int, stamp: str) -> None:
            repeat = int(address in seen)
            seen.add(address)
            rows.writerow((address, sport, data, classification, success, repeat, stamp))

        def drain(until: float) -> None:
            while True:
                # One time for what one pass reads (up to _DRAIN_BATCH datagrams a socket).
                stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f%z")
                for _ in range(_DRAIN_BATCH):
                    try:
                        data, source = sock.recvfrom(65535)
                    except (BlockingIOError, InterruptedError):
                        break
                    record(source[0], str(source[1]), data.hex(), "udp", 1, stamp)
                for _ in range(_DRAIN_BATCH):
                    try:
                        message = icmp.recv(2048)
                    except (BlockingIOError, InterruptedError):
                        break
                    # ICMPv6 header (8 bytes), then our datagram: IPv6 header (40), UDP header.
                    inner = message[8:]
                    if len(inner) >= 44 and inner[6] == socket.IPPROTO_UDP and \
                            struct.unpack_from("!HH", inner, 40) == (source_port, port):
                        record(socket.inet_ntop(socket.AF_INET6, inner[24:40]), "", "", "icmp-unreach", 0, stamp)
                wait = until - time.monotonic()
                if wait <= 0:
                    return
                select.select([sock, icmp], [], [], wait)

        step = max(1, rate // 1000)
        sendto = sock.sendto
        started = time.monotonic()
        for first in range(0, len(addresses), step):
            due = started + first / rate
            now = time.monotonic()
            if due > now:
                drain(due)
            elif first % _DRAIN_BATCH < step:  # behind the rate: still read what came back, now and then
                drain(now)
            for address in addresses[first:first + step]:
                try:
                    sendto(payload, (address, port))
                    sent += 1
                except BlockingIOError:
                    select.select([], [sock], [], 1.0)
                    try:
                        sendto(payload, (address, port))
                        sent += 1
                    except OSError:
                        failed += 1
                except OSError:  # no route to it from here
                    failed += 1
        drain(time.monotonic() + cooldown)
    metadata = {"total_sent": sent, "send_failed": failed, "rate": rate, "cooldown": cooldown, "port": port,
                "seconds": round(time.monotonic() - started, 3)}
    files.metadata.write_text(json.dumps(metadata))
    return metadata
