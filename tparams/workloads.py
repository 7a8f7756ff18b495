"""Workloads: what a qreplay run asks of the connection, declared once, and the one protocol our programs speak.

The replay protocol is hq-interop's HTTP/0.9 GET with an upload beside it, spoken by every replay client and
server of ours (Rust lab/servers/common/src/replay.rs and its libraries, Go replay/quicgo/bulk, Python
replay/aioquic_endpoints); tests/test_workloads.py runs each client against each server:

- Every request is a client-initiated bidirectional stream of its own.
- ``GET /<size>\\r\\n`` and FIN: the server sends ``<size>`` bytes and FIN (a download).
- ``PUT /<size>\\r\\n``, then ``<size>`` bytes, then FIN: the server, once it has read the whole body, sends the
  number of body bytes it received in decimal ASCII and FIN (an upload).
- A client makes ``--requests`` requests (default 1) on one connection, at most ``--concurrency`` of them
  open at once (default 1), each of ``--size`` bytes, GET for ``--direction=down`` (the default), PUT for
  ``up``. It prints one JSON line::

    {"bytes": payload moved (down: received; up: the server's counts summed), "duration_s": first request
     sent to last response finished, "handshake_s": ..., "requests": requests completed, "ttfb_s": the first
     request sent to the first byte of its response, "latencies_s": [each request sent to its response
     finished, in completion order]}

  (a program may add fields of its own, e.g. quinn's ``acks_sent``) and exits 0 when every request completed,
  1 otherwise.
- ``GET /<size>?bitrate=<bits/s>\r\n`` (a stream, QuicSand's streaming workload): the server sends ``<size>``
  bytes paced at that bitrate (on a timer, whatever the link would take); the client plays them back as
  ``Player`` says and adds ``stalls``, ``stall_s`` and ``startup_s`` to its line, or adds ``bitrate`` and its
  reads' ``arrivals`` ([seconds since the request, bytes] each) for qreplay to play them (``played``). Every
  pacing server follows one rule, aioquic's (replay/aioquic_endpoints/common.py, send_at_bitrate). A client
  asked for it is of
  role ``replay-stream-client`` (tparams.program_cli: ``--bitrate`` beside the replay client's options);
  a stack whose server cannot pace, or whose client cannot play, refuses it in one line (its
  ``replay_protocol``/``page_protocol`` lacks ``paced``).

A workload is a combination of those primitives with its own success test and metrics; adding one is one
declaration here (or in the caller's own file: the runner takes the object).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Direction = Literal["down", "up"]


@dataclass(frozen=True)
class Workload:
    """One workload: its name (the runs' ``workload`` column, ``--workload``), how its client is asked, what
    counts as success and which metrics its runs store."""

    name: str
    help: str
    direction: Direction = "down"
    #: how many requests: a number, or None for --requests to choose
    requests: int | None = 1
    #: how many open at once: a number, or None for --concurrency to choose
    concurrency: int | None = 1
    #: the runs columns it fills beside goodput (statistics.WORKLOAD_METRICS defines each)
    metrics: tuple[str, ...] = ()
    #: a stream: the server paces the body at --bitrate, the client plays it back (Player)
    paced: bool = False

    def asked(self, requests: int, concurrency: int) -> tuple[int, int]:
        """(requests, concurrency) of a run, the workload's own where it fixes them, else the command line's."""
        return (self.requests or requests, self.concurrency or concurrency)

    def client_options(self, size: int, requests: int, concurrency: int) -> dict[str, object]:
        """The replay client's options (tparams.program_cli) asking for this workload; a download's are none
        besides --size, so every client speaks it, the old ones too."""
        requests, concurrency = self.asked(requests, concurrency)
        options: dict[str, object] = {}
        if self.direction != "down":
            options["direction"] = self.direction
        if requests != 1:
            options["requests"] = requests
        if concurrency != 1:
            options["concurrency"] = concurrency
        return options

    @property
    def client_role(self) -> str:
        """The tparams.program_cli role of a client asked for it."""
        return "replay-stream-client" if self.paced else "replay-client"

    def expected_bytes(self, size: int, requests: int, concurrency: int) -> int:
        return size * self.asked(requests, concurrency)[0]

    def succeeded(self, result: Mapping[str, object], size: int, requests: int, concurrency: int) -> bool:
        """Whether a client's result is the whole workload: every request completed, every byte moved."""
        wanted = self.asked(requests, concurrency)[0]
        return (result.get("bytes") == self.expected_bytes(size, requests, concurrency)
                and int(result.get("requests", 1)) == wanted)


DOWNLOAD = Workload("download", "one GET of --size bytes: the thesis's bulk download")
UPLOAD = Workload("upload", "one PUT of --size bytes: the client sends (QuicSand's upload)", direction="up")
REQUESTS = Workload("requests", "--requests GETs of --size bytes each on one connection, --concurrency at once "
                    "(QuicSand's request-response): requests per second, time to first byte, latency percentiles",
                    requests=None, concurrency=None,
                    metrics=("requests_per_s", "ttfb_ms", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms"))

STREAM = Workload("stream", "one GET of --size bytes that the server paces at --bitrate, played back by the "
                  "client after a start-up buffer (QuicSand's streaming): stalls, their total time, start-up delay",
                  paced=True, metrics=("stalls", "stall_ms", "startup_ms"))

WORKLOADS: dict[str, Workload] = {w.name: w for w in (DOWNLOAD, UPLOAD, REQUESTS, STREAM)}

#: media seconds a player holds before it starts playing, and again before it resumes after a stall
STARTUP_BUFFER_S = 0.5


class Player:
    """A stream's playback as its client sees the bytes arrive (tparams.workloads' stream): it starts once it
    holds STARTUP_BUFFER_S of media (or the whole rest of it), plays at the bitrate, and stalls when it has
    played everything received before the end; it resumes once it holds STARTUP_BUFFER_S again. Times are
    seconds since the request. The browser's page mirrors this rule in JavaScript (browser_driver's PAGE,
    qreplayStream): change both together."""

    def __init__(self, bitrate: int, size: int) -> None:
        self.media_s = size * 8 / bitrate  # the whole stream's length
        self.bitrate, self.received_s = bitrate, 0.0
        self.playing_since: float | None = None  # while playing: when it (re)started, at position self.position_s
        self.position_s, self.stalled_since = 0.0, 0.0
        self.startup_s: float | None = None
        self.stalls, self.stall_s = 0, 0.0

    def received(self, t: float, nbytes: int) -> None:
        """``nbytes`` more arrived at ``t``."""
        if self.playing_since is not None:
            dry_at = self.playing_since + (self.received_s - self.position_s)
            if dry_at < t and self.received_s < self.media_s:  # it ran dry before these bytes came
                self.stalls += 1
                self.position_s, self.stalled_since, self.playing_since = self.received_s, dry_at, None
        self.received_s = min(self.media_s, self.received_s + nbytes * 8 / self.bitrate)
        if self.playing_since is None and (
                self.received_s - self.position_s >= min(STARTUP_BUFFER_S, self.media_s - self.position_s - 1e-9)):
            if self.startup_s is None:
                self.startup_s = t
            else:
                self.stall_s += t - self.stalled_since
            self.playing_since = t

    def result(self) -> dict[str, object]:
        """What the client's line adds: stalls, their total seconds, the start-up delay."""
        return {"stalls": self.stalls, "stall_s": self.stall_s, "startup_s": self.startup_s}


def played(bitrate: int, size: int, arrivals: list[list[float]]) -> dict[str, object]:
    """Player's result for a stream whose bytes arrived as ``arrivals`` ([seconds since the request, bytes],
    in order): what a client that records arrivals but does not play (quic-go's qgstream) reports, played
    here by the one rule."""
    player = Player(bitrate, size)
    for t, nbytes in arrivals:
        player.received(t, int(nbytes))
    return player.result()


def percentile(ordered: list[float], pct: float) -> float:
    """The nearest-rank percentile of sorted values (each one a value that occurred)."""
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def workload_metrics(result: Mapping[str, object]) -> dict[str, float]:
    """A run's request metrics from its client's result (the replay protocol's JSON line): requests per second
    over duration_s, the first response's time to first byte, latency percentiles; only those it reports."""
    metrics: dict[str, float] = {}
    requests, duration = result.get("requests"), result.get("duration_s")
    if requests and duration:
        metrics["requests_per_s"] = int(requests) / float(duration)  # type: ignore[arg-type]
    if result.get("ttfb_s") is not None:
        metrics["ttfb_ms"] = float(result["ttfb_s"]) * 1000  # type: ignore[arg-type]
    latencies = sorted(float(x) for x in result.get("latencies_s") or [])  # type: ignore[union-attr]
    for pct in (50, 90, 99) if latencies else ():
        metrics[f"latency_p{pct}_ms"] = percentile(latencies, pct) * 1000
    if result.get("stalls") is not None:  # a stream's playback (Player)
        metrics["stalls"] = int(result["stalls"])  # type: ignore[call-overload]
        metrics["stall_ms"] = float(result["stall_s"]) * 1000  # type: ignore[arg-type]
    if result.get("startup_s") is not None:
        metrics["startup_ms"] = float(result["startup_s"]) * 1000  # type: ignore[arg-type]
    return metrics
