"""Our IPv6 prober: Debian's ZMap 2.1.1 has no IPv6, so `qscan ipv6` sends the same
Version Negotiation probe itself, with ZMap's conventions.

Stateless as ZMap's udp module is: one payload for every address, nothing kept per
probe; an answer proves itself by echoing the probe's connection IDs
(scanner/discovery/response.py). Rate-limited (``rate`` probes/s, paced, not bursts),
the order a permutation drawn from ``seed``, shard I of N taking every N-th address of
it (so the shards of one seed cover the list once), ``cooldown`` seconds of listening
after the last probe. It writes ZMap's CSV (the fields of zmap.OUTPUT_FIELDS, ICMPv6
errors as ``icmp-unreach`` rows) and metadata, so zmap.read_results judges both alike.

One UDP socket (no raw socket: the kernel's IPv6 stack routes, and the namespace's
routes decide where a probe may go); ICMPv6 errors come back on its error queue.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
import select
import socket
import time
from collections.abc import Sequence

from scanner.discovery.zmap import OUTPUT_FIELDS, ZMapFiles
from scanner.engine import _icmp_errors

_IPV6_RECVERR = getattr(socket, "IPV6_RECVERR", 25)
_DRAIN_BATCH = 256  # datagrams read before the pacing clock is looked at again


def shard_order(addresses: Sequence[str], seed: int, shard: int, shards: int) -> list[str]:
    """This shard's addresses in the order it probes them."""
    order = list(addresses)
    random.Random(seed).shuffle(order)
    return order[shard::shards]


def command_text(rate: int, cooldown: int, seed: int, shard: int, shards: int, port: int) -> str:
    """The prober's settings in ZMap's spelling (discovery_runs.zmap_command)."""
    return (f"qscan-prober6 --target-port={port} --rate={rate} --cooldown-time={cooldown} --seed={seed} "
            f"--shards={shards} --shard={shard}")


def probe(addresses: Sequence[str], payload: bytes, port: int, rate: int, cooldown: float, files: ZMapFiles) -> dict:
    """Send ``payload`` to every address in order, paced at ``rate``/s, listen ``cooldown`` s more;
    write ZMap's CSV and metadata into ``files``; return the metadata."""
    files.directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    seen: set[str] = set()
    sent = failed = 0
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock, \
            open(files.results, "w", newline="") as handle:
        sock.setsockopt(socket.IPPROTO_IPV6, _IPV6_RECVERR, 1)
        sock.setblocking(False)
        rows = csv.writer(handle)
        rows.writerow(OUTPUT_FIELDS)

        def record(address: str, sport: str, data: str, classification: str, success: int) -> None:
            repeat = int(address in seen)
            seen.add(address)
            stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f%z")
            rows.writerow((address, sport, data, classification, success, repeat, stamp))

        def drain(until: float) -> None:
            while True:
                for _, error in _icmp_errors(sock):
                    if error.type == 1:  # destination unreachable: ZMap's udp module records these
                        record(error.sender, "", "", "icmp-unreach", 0)
                for _ in range(_DRAIN_BATCH):
                    try:
                        data, source = sock.recvfrom(65535)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:  # a pending ICMP error surfacing here: read from the queue above
                        continue
                    record(source[0], str(source[1]), data.hex(), "udp", 1)
                wait = until - time.monotonic()
                if wait <= 0:
                    return
                select.select([sock], [], [sock], wait)

        def send(address: str) -> bool:
            for _ in range(3):
                try:
                    sock.sendto(payload, (address, port))
                    return True
                except BlockingIOError:
                    select.select([], [sock], [], 1.0)
                except OSError:
                    # An ICMP error about an earlier probe fails the next send once (the socket's pending
                    # error, cleared by reporting it; the error itself waits on the queue): send again.
                    # No route to this address fails every time.
                    pass
            return False

        for index, address in enumerate(addresses):
            due = started + index / rate
            now = time.monotonic()
            if due > now:
                drain(due)
            elif index % _DRAIN_BATCH == 0:  # behind the rate: still read what came back, now and then
                drain(now)
            if send(address):
                sent += 1
            else:
                failed += 1
        drain(time.monotonic() + cooldown)
    metadata = {"total_sent": sent, "send_failed": failed, "rate": rate, "cooldown": cooldown, "port": port,
                "seconds": round(time.monotonic() - started, 3)}
    files.metadata.write_text(json.dumps(metadata))
    return metadata
