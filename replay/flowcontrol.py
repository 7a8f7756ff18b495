"""What a fixed flow-control window allows: goodput predicted from the window, the round-trip time and
the receiver's window-update rule. Pure arithmetic, no I/O, so a notebook, the report and a test agree.

A receiver that never grows its windows re-opens one (MAX_DATA, MAX_STREAM_DATA) to ``read offset +
window`` once a share ``f`` of the window has been read since its last update. The sender can then have
at most one window in flight, and gets new credit in chunks of ``f x window``:

- If the chunks a round trip delivers arrive as one burst (a fast link, the sender free to send at
  once), the sender's next burst is the credit this burst's reading re-opened: whole updates of
  ``f x window``, and only as many as a burst of less than one window triggers (an update fires once
  *more* than ``f x window`` was read, so the last chunk of a full window never completes another). The
  sender gets ``k x f x window`` a round trip, k the largest whole number below 1/f: half a window
  for f = 0.5 (LSQUIC's stream window, ngtcp2), 0.9 of it for f = 0.3, 0.55 for a measured 0.55. That
  is the lower bound; for f = 1/n it equals the ``(1 - f) x window`` of a single late update.
- If the data arrives spread over the round trip (pacing, a bottleneck, slow start leaving the
  chunks out of phase), each chunk is re-opened as it is read and up to a whole window is in
  flight: ``window`` a round trip, the upper bound.

Where between the two a stack lands depends on how the arriving data bunches and on when the receiver
checks its windows, not on the machine's speed. A finite download also pays its start, timed from
client start as the runner does: the handshake and the request (two round trips), and slow start,
doubling from the sender's initial congestion window each round trip until its flight reaches what the
window allows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class UpdateRule:
    """When a stack's receiver re-opens a fixed window (after ``consumed_fraction`` of it was read), and
    the congestion window its sender starts from."""

    consumed_fraction: float
    source: str  # where the rule is written down, for the report
    initial_cwnd: int = 12_000  # RFC 9002: ten 1,200-byte datagrams
    #: the stream and connection windows the receiver grows to when it runs with its library's defaults (auto-
    #: tuning); 0: it keeps the advertised ones. The replay runs pin every window (the thesis's model), so only
    #: the impact prediction (servers as deployed: the scan's, caddy) takes them.
    max_stream_window: int = 0
    max_conn_window: int = 0


# Each stack's receiver, as its source has it (windows pinned: no auto-tuning in the replay runs the model is for;
# what an unpinned one grows to is in max_stream_window and max_conn_window).
UPDATE_RULES: dict[str, UpdateRule] = {
    "lsquic": UpdateRule(0.5, "LSQUIC 4.9.3 lsquic_sfcw.c / lsquic_cfcw.c: a new limit read offset + window once "
                              "the unread credit falls below half the window (max_sfcw/max_cfcw 0: never grows). "
                              "The stream window is checked at every read (lsquic_stream.c stream_consumed_bytes), "
                              "so each update grants half the window: the burst bound. The connection window is "
                              "checked once per tick, after all of the tick's reads (lsquic_full_conn_ietf.c), so "
                              "an update grants half the window plus what the tick read beyond it: up to a whole "
                              "window, the more packets a tick handles",
                         initial_cwnd=32 * 1460),  # lsquic_cubic.c: 32 * TCP_MSS
    "ngtcp2": UpdateRule(0.5, "ngtcp2 conn_should_send_max_(stream_)data: once the remaining window is below "
                              "twice the pending increment, i.e. half the window was read"),
    "quic-go": UpdateRule(0.25, "quic-go flowcontrol: WindowUpdateThreshold 0.25 of the window read. Unpinned, "
                                "it auto-tunes (maybeAdjustWindowSize, v0.29.0 as in Debian's caddy 2.6.2 to v0.65): "
                                "at an update, once more than half the window was read since the last adjustment, "
                                "the window doubles if that took less than 4 x (the share read) x the smoothed RTT, "
                                "i.e. whenever the sender delivered more than a quarter window a round trip, which a "
                                "window-bound sender always does; up to DefaultMaxReceiveStreamFlowControlWindow 6 MiB "
                                "and DefaultMaxReceiveConnectionFlowControlWindow 15 MiB (caddy 2.6.2's quic.Config "
                                "sets only the versions). Its sender starts at initialCongestionWindow 32 packets "
                                "(congestion/cubic_sender.go) of 1,280 bytes (1,252 in v0.29.0)",
                          initial_cwnd=32 * 1280, max_stream_window=6 * 2**20, max_conn_window=15 * 2**20),
}

STARTUP_RTTS = 2  # handshake, then the request: the first body byte comes two round trips after the client starts


@dataclass(frozen=True)
class WindowBound:
    """The goodput a window allows at one round-trip time, Mbit/s (low: bursts, high: spread arrivals)."""

    window: int
    binding: str  # which window: initial_max_data or initial_max_stream_data_bidi_local
    rtt_ms: float
    low_mbps: float
    high_mbps: float

    @property
    def span(self) -> tuple[float, float]:
        """The bounds in ascending order: with a download's start charged, the burst bound (fewer bytes a
        round trip, so fewer slow-start round trips) can be the higher of the two."""
        return min(self.low_mbps, self.high_mbps), max(self.low_mbps, self.high_mbps)

    def text(self) -> str:
        low, high = self.span
        return f"{low:,.1f} to {high:,.1f}"

    def contains(self, mbps: float, slack: float = 0.1) -> bool:
        """Whether a measurement lies within the bounds, widened by ``slack`` (processing adds to the RTT)."""
        low, high = self.span
        return low * (1 - slack) <= mbps <= high * (1 + slack)

    def position(self, mbps: float) -> float:
        """Where a measurement lies between the bounds: 0 at the burst bound, 1 at a whole window per RTT."""
        return (mbps - self.low_mbps) / (self.high_mbps - self.low_mbps)


def window_bound(window: int, rtt_ms: float, rule: UpdateRule, size: int | None = None,
                 binding: str = "") -> WindowBound | None:
    """The bounds for one window; with ``size`` the download's start is charged. None at no RTT."""
    if rtt_ms <= 0 or window <= 0:
        return None
    rtt_s = rtt_ms / 1000

    def rate(bytes_per_rtt: float) -> float:
        steady = bytes_per_rtt * 8 / rtt_s
        if size is None:
            return steady / 1e6
        start = (STARTUP_RTTS + slow_start_rtts(bytes_per_rtt, rule.initial_cwnd)) * rtt_s
        return size * 8 / (size * 8 / steady + start) / 1e6

    return WindowBound(window, binding, rtt_ms, rate(burst_share(rule.consumed_fraction) * window), rate(window))


def burst_share(consumed_fraction):
    """The share of a window a round trip re-opens when data arrives in bursts: whole updates of
    ``consumed_fraction``, as many as fit strictly inside one window. Takes a number or an array (the impact
    prediction's sets at once)."""
    f = np.asarray(consumed_fraction, dtype=float)
    inside = (f > 0) & (f < 1)  # else re-opened at every byte read, or only once all was: a whole window
    safe = np.where(inside, f, 0.5)
    share = np.where(inside, np.maximum(np.ceil(1 / safe) - 1, 1) * safe, 1.0)
    return _number(share)


def slow_start_rtts(flight, initial_cwnd):
    """Round trips slow start costs before the sender's flight reaches ``flight``: k doublings take k round
    trips and deliver initial_cwnd x (2^k - 1) bytes, which the steady flight would have sent sooner. Numbers
    or arrays."""
    flight, initial_cwnd = np.asarray(flight, dtype=float), np.asarray(initial_cwnd, dtype=float)
    grows = flight > initial_cwnd
    safe = np.where(grows, flight, 2 * initial_cwnd)
    doublings = np.ceil(np.log2(safe / initial_cwnd))
    return _number(np.where(grows, np.maximum(0.0, doublings - initial_cwnd * (2 ** doublings - 1) / safe), 0.0))


def _number(value: np.ndarray):
    """A 0-d result as a plain float (WindowBound's fields, the reports' formatting), an array as it is."""
    return float(value) if np.ndim(value) == 0 else value


def stream_credit_bound(limit: int, concurrency: int, rtt_ms: float) -> float:
    """Requests per second a server's initial_max_streams_bidi of ``limit`` allows a client keeping
    ``concurrency`` one-stream requests open over a round trip of ``rtt_ms``: a request holds its stream a round
    trip, and the stream's credit comes back a round trip later still (the server retires the stream once the
    response's ACK arrives, and its MAX_STREAMS crosses the path again), so ``limit`` streams carry
    limit / 2 RTT requests a second, and the concurrency never more than concurrency / RTT."""
    rtt_s = rtt_ms / 1000
    return min(limit / (2 * rtt_s), concurrency / rtt_s)


def stream_rounds(requests, concurrency, limit):
    """Round trips ``requests`` one-stream requests take under a stream ``limit`` with ``concurrency`` open at
    once: stream_credit_bound's model counted in whole round trips, for a finite page (arrays or numbers).

    A request sent at round k ends at k + 1 and its credit is back at k + 2, so the client opens
    n_k = min(concurrency, limit - n_(k-1)) at round k: rounds alternate between a = min(concurrency, limit)
    and b = min(concurrency, limit - a) requests (b = a when the limit is twice the concurrency, b = 0 when the
    concurrency reaches the limit). The last request ends one round after the last round that opened one.
    Infinite where the limit is 0: no request can be sent before the server raises it."""
    n, c, limit = (np.asarray(x, dtype=float) for x in (requests, concurrency, limit))
    a = np.minimum(c, limit)
    b = np.minimum(c, limit - a)
    pairs_size = np.where(a > 0, a + b, 1.0)
    pairs = np.floor(n / pairs_size)
    rest = n - pairs * pairs_size
    rounds = np.where(rest == 0, np.where(b > 0, 2 * pairs, 2 * pairs - 1),
                      np.where(rest <= a, 2 * pairs + 1, 2 * pairs + 2))
    return _number(np.where(a > 0, np.where(n > 0, rounds, 0.0), np.inf))


def delivery_rounds(size, initial_cwnd, flight):
    """Round trips a sender needs for ``size`` bytes: slow start from ``initial_cwnd`` doubling each round
    trip until it reaches ``flight`` bytes a round trip (the link's or a window's), then ``flight`` each."""
    size, initial_cwnd, flight = (np.asarray(x, dtype=float) for x in (size, initial_cwnd, flight))
    start = np.minimum(initial_cwnd, flight)
    doublings = np.ceil(np.log2(np.maximum(flight / start, 1.0)))  # rounds below ``flight``
    in_slow_start = start * (2 ** doublings - 1)
    within = np.ceil(np.log2(size / start + 1))
    after = doublings + np.ceil(np.maximum(size - in_slow_start, 0.0) / flight)
    return _number(np.where(size <= 0, 0.0, np.where(size <= in_slow_start, within, after)))


def client_window_bound(client: dict, rtt_ms: float, stack: str, size: int | None = None,
                        rules: dict[str, UpdateRule] = UPDATE_RULES) -> WindowBound | None:
    """The tighter of a download's two windows (the client's connection and stream windows), or None
    when the stack's rule is unknown, the set sends neither, or there is no round trip to bound.
    ``rules``: the written-down UPDATE_RULES, or measured ones (replay.measured_rules)."""
    rule = rules.get(stack)
    return None if rule is None else receiver_window_bound(
        client, rtt_ms, rule, ("initial_max_data", "initial_max_stream_data_bidi_local"), size)


def receiver_window_bound(sent: dict, rtt_ms: float, rule: UpdateRule, windows: tuple[str, ...],
                          size: int | None = None) -> WindowBound | None:
    """The tighter of a receiver's ``windows`` as ``sent`` (a download's client: its connection and local stream
    windows; an upload's server: its connection and remote stream windows), re-opened by ``rule``, the
    sender starting from ``rule.initial_cwnd``; None where the set sends none of them or there is no RTT."""
    bounds = [window_bound(int(sent[name]), rtt_ms, rule, size, name) for name in windows
              if sent.get(name) is not None]
    bounds = [b for b in bounds if b is not None]
    return min(bounds, key=lambda b: b.low_mbps) if bounds else None
