"""What held a run back: its transfer's time split by the limit the sender was at, from its trace.

A pure function over what a traced run already yields (replay/trace.py's sender series: one point per 1-RTT
packet the server's namespace saw, with the sender's bytes sent, in flight and its credits after it) and the
run's own counters (each end's CPU seconds, the client's socket drops, the link's drops and configured rate),
so that a notebook, ``qreplay why`` and a test compute the same thing. No I/O.

The transfer runs from the request's arrival at the server (the series' t = 0) to the last packet that
carried download-stream bytes. Each stretch between two consecutive points of that span (either direction:
an update coming up ends a stretch too) is charged whole to one limit, judged from the sender's state after
the point that opens it, by the first rule that holds:

1. ``receive_window_stream`` / ``receive_window_connection``: the sender within one MSS (the run's largest
   STREAM frame) of the credit the receiver gave (MAX_STREAM_DATA of the download stream, MAX_DATA), or
   blocked by it as a STREAM_DATA_BLOCKED / DATA_BLOCKED frame said, until the credit rose past that limit.
   The download stream carries nearly all of the connection's bytes (the rest: HTTP/3's control and QPACK
   streams, tens of bytes), so both are held against the stream's highest offset sent. Where both bind, the
   one with less room left (a blocked frame names it); an exact tie is the stream's. A blocked frame counts only
   where the bytes sent are within BLOCKED_WITHIN MSS of its limit: a sender may declare itself blocked when its
   application's writes reach the credit, while its packets are far below it (quinn).
2. ``loss_recovery``: from a retransmission (a packet whose stream bytes lie below the highest offset sent
   before it) until the bytes acknowledged reach the highest offset sent when it was sent (NewReno's recovery
   point, RFC 6582: what was in flight at the loss has been delivered). Where the client's socket dropped
   datagrams and the link did not, the loss was the receiver's: that time is charged to
   ``receiver_cpu_socket`` instead (in proportion when both dropped). After that, as long as the sender's
   window (its qlog's congestion window, else its bytes in flight) has not regained the largest it had before
   the loss, time that rules 4 and 7 would charge to the congestion window is the loss's too (the socket's, in
   the same proportion): the window that binds is the one the loss cut (a multiplicative decrease), not one
   the path set. A socket's drops reach the breakdown only so, through the losses they caused: a run-level
   count says nothing of when the rest of the run was held by what.
3. ``link``: the link has a configured rate and the bytes in flight exceed its bandwidth-delay product (the
   rate x the run's smallest RTT sample) by more than one MSS: the excess waits in the emulator's queue,
   which is non-empty, so the link's rate is what delivers. An upload's capture is the receiver's, behind the
   queue: the bytes queued on the way up have not arrived and are not in its in flight (trace.receiver_series),
   so there they are the queue the latest RTT sample waited in, (the sample - the smallest) x the rate,
   added to the bytes in flight. Measured 2026-11-29 09:30 (quinn uploading 4 MB through 50 Mbit/s up, 10 ms):
   in flight as the capture tells it stayed at the BDP (64 kB) while the RTT samples grew from 10 to 195 ms,
   the queue filling; without the queue 99.7% of the transfer was charged to the congestion window.
4. ``congestion_window``, when the sender's qlog gave its window: in flight within one MSS of it.
   ``sender_cpu`` where the capture shows room in that window only because ACKs have reached the server that
   the sender has not read yet (its qlog says when it read each, trace.attach_congestion_window's ``read_s``):
   counting their bytes as still in flight, as the sender does until it reads them, it would be at the window
   it had before them. From the stretch's start until the sender read enough of them to see room, the sender
   had credit and window on the wire and sent nothing because it had not run: its CPU, not its window (the
   rest of the stretch by the rules below). Measured 2026-11-28 15:12-15:32 at 30 ms with busy loops pinned
   to both cores (scripts/qlog_unread_acks.py, load 12-27): the servers read ACKs up to 29 ms after they
   arrived; the capture's share at the window lay 0.3-15 points below the stack's own qlog's (quiche 15 with
   ACKs up to 20 ms late, quic-go 9.7, ngtcp2 8.6); the stretches the qlog counts at its window and the
   capture does not were nearly all with an ACK unread, and with them charged here the capture's share plus
   theirs came within 1.8 points of the qlog's in all 23 runs (quiche 10, quic-go 10, ngtcp2 3). Before, that
   time was the congestion window's. Most ACKs are read 0.1-0.2 ms after they arrive (quic-go's median, the
   same runs): where the sender was at its window that is charged so too, 1-4% of quic-go's transfer; without
   busy loops (15:38, load 4-5) 0.2-2.2% of quiche's and quic-go's, the sum within 1.7 points in 6 runs.
   The window it had before them is the one from before the earliest ACK still unread (it has read every one
   before that), not the one from when it fell behind: a sender that never catches up (aioquic at 30 ms,
   2026-11-29) grew its window from 209 to 375 kB meanwhile, and held against 209 kB 78% of its transfer was
   charged here where its qlog was at its window 44% of it.
   Likewise the packets the sender counted in flight before they reached the wire (its qlog logged them sent,
   trace ``logged_s``, the capture saw them later): aioquic builds a burst, logging each packet, before it
   writes any, and a sender that loses its core in between had them in flight by its own count up to 37 ms
   before the capture did (2026-11-29 09:38, aioquic at 100 ms, load 5-7): at its window, not at room; its CPU.
   Counted, the capture's share plus this came -4.0 to -0.8 points from the qlog's in 10 runs (-7.7 to -0.3
   without).
5. ``sender_cpu``: a core near saturation at the sender over the run (the server's CPU seconds over the
   client's lifetime at least CPU_SATURATED); then ``receiver_cpu_socket``: the client's likewise. (Run-level:
   the counters say how busy an end was, not when.) Also an end's CPU,
   the busier one's, when the link has no rate (no queue to wait in) and the latest RTT sample is at least
   RTT_INFLATED times the smallest: the packets waited in an endpoint, not on the path (a machine whose cores
   are shared shows so where no process reaches CPU_SATURATED).
6. ``application``: nothing in flight (less than one MSS), the sender at no credit: it had nothing to send
   (before the first body byte, too). ``sender_cpu`` instead where the request had reached the server and the
   sender had not read it yet (its qlog's ``read_s`` of the request, as for an ACK in rule 4): it had the
   request and did not run. Measured 2026-11-29 00:33-00:40 (quic-go at 30 ms beside three test workers at
   SCHED_IDLE, load 2-6, scripts/qlog_unread_acks.py): one run of ten read its request 21 ms after it arrived,
   11.5% of its transfer charged here before.
7. ``congestion_window``: what is left: data in flight, the sender at no credit, queue or CPU limit (RFC
   4898's SndLimTimeCwnd is likewise the remainder once the receiver's window and the sender's application
   are accounted for).

``stream_limit`` (between rules 2 and 3): requests waiting for a stream. While the client has opened as many
bidirectional streams as the server had allowed one smallest RTT before (its initial_max_streams_bidi, raised
by MAX_STREAMS: the capture is the server's, and a raise it sends can bring a request no sooner than a round
trip later) and has requests left (the run's requests beyond the streams opened, or a STREAMS_BLOCKED frame
at that limit, until the credit rises past it), the time is the stream limit's: the sender sends only the responses of the
streams it was allowed, and whatever paces those (its congestion window, an idle wait for the next request)
paces them because the requests behind them cannot be made: each admitted round of requests takes its
round trips however large the window. Like a receive window, a credit the receiver gave. Inferred from the
trace and the run's request count; a STREAMS_BLOCKED frame is the evidence where the request count is not
known.

A run of many requests is one transfer: its span ends with the last packet carrying any stream's bytes.

An upload (RunFacts.upload) is read the same way with the roles turned: its data goes ``up``, the client is the
sender (its CPU the sender's, the server's the receiver's, the server's socket drops and the link's drops going
up the receiver's and the loss's), and the sender's and receiver's frames are the other way round. Its series
is the client's state as the server's capture can tell it (trace.upload_series, trace.tcp_upload_series: what it
knew of the server's ACKs and credits one smallest RTT late). Its link's rate is the up direction's (runs.rate_up_bps,
--rate-up): the testbed's --rate shapes the down direction only, so an upload without --rate-up is never the link's.
A two-host download (RunFacts.at_receiver) is captured at its receiver too, the client's host (the server's is not
ours): its series is the server's state as the client's capture can tell it (trace.receiver_series, the roles as
an upload's turned back), its rule 3 likewise the queue its RTT samples waited in, its rate the one measured.

Points thinned out of a long trace (trace.downsample keeps every flow-control frame and RTT sample, thins the
rest evenly) lengthen the stretches around them; the shares stay those of the kept points.
"""

from __future__ import annotations

import bisect
import heapq
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: the categories, in the order reports show them
LIMITS = ("receive_window_stream", "receive_window_connection", "stream_limit", "congestion_window",
          "loss_recovery", "link", "sender_cpu", "receiver_cpu_socket", "application")
#: CPU seconds per second of the run at which an end counts as saturated (one core; the rest is the
#: process's start and end, which its CPU seconds include and the transfer does not)
CPU_SATURATED = 0.85
DEFAULT_MSS = 1200  # RFC 9000's smallest datagram, when the trace carries no STREAM frame
#: an RTT sample this many times the run's smallest, on a link without a rate, is time spent in an endpoint
RTT_INFLATED = 2.0
#: a *_BLOCKED frame binds where the sender's bytes sent are within this many MSS of the credit: quinn sends
#: STREAM_DATA_BLOCKED when its application's writes reach the credit, long before its packets do (an upload at
#: 30 ms, 2026-11-29: 1,250,000 declared with 1,166 bytes sent, then at each credit while 0.5 MB short of it)
BLOCKED_WITHIN = 2


@dataclass(frozen=True)
class RunFacts:
    """What a run's counters say beside its trace (runs columns; None where not measured)."""

    wall_s: float | None = None  # the client's lifetime
    server_cpu_s: float | None = None
    client_cpu_s: float | None = None
    rate_bps: int | None = None  # the link's configured rate on the data's way (down; an upload's: up, rate_up_bps)
    client_socket_drops: int = 0  # datagrams the receiver's full receive buffer dropped (an upload's: the server's)
    link_drops: int = 0  # datagrams the link dropped (loss and queue) on the data's way (down; an upload's up)
    requests: int | None = None  # the requests the run made (one a stream)
    #: an upload: the client the sender, the data going up (the points' ``up`` direction); the rest of these
    #: facts are still named by end, and the breakdown takes the sender's and the receiver's from them
    upload: bool = False
    #: a download captured at its receiver, the client (a two-host run's: trace.receiver_series), as an upload is
    #: at the server: the bytes queued on the data's way have not arrived (rule 3)
    at_receiver: bool = False

    @classmethod
    def from_run(cls, run: Mapping) -> "RunFacts":
        """From a runs row (its ``counters``: the JSON text of the flattened counter deltas). Of an upload the
        receiver's socket is the server's, the link's drops those going up and its rate the up direction's
        (rate_up_bps; --rate shapes the down direction only)."""
        counters = json.loads(run.get("counters") or "{}")
        upload = run.get("workload") == "upload"
        receiver, way = ("server", "up") if upload else ("client", "down")
        return cls(run.get("wall_s"), run.get("server_cpu_s"), run.get("client_cpu_s"),
                   run.get("rate_up_bps" if upload else "rate_bps"),
                   int(counters.get(f"{receiver}_udp_rcvbuf_errors") or 0),
                   int((counters.get(f"link_{way}_dropped_loss") or 0) + (counters.get(f"link_{way}_dropped_queue") or 0)),
                   run.get("requests"), upload, not upload and run.get("link_backend") == "measured")

    def share(self, cpu_s: float | None) -> float | None:
        return cpu_s / self.wall_s if cpu_s is not None and self.wall_s else None


@dataclass(frozen=True)
class Breakdown:
    fractions: dict[str, float]  # every category of LIMITS, summing to 1
    limited_by: str  # the largest
    transfer_s: float
    basis: dict = field(default_factory=dict)  # what the rules used: mss, min_rtt_ms, bdp_bytes, cpu shares


def breakdown(points: Iterable[Mapping], facts: RunFacts = RunFacts()) -> Breakdown | None:
    """The run's transfer time split by limit (the module's rules); None when the trace holds no
    download-stream byte after t = 0."""
    sending = "up" if facts.upload else "down"  # the data's direction
    points, data = _transfer(points, sending)
    if not data:
        return None
    end = data[-1]["t_s"]
    points = [p for p in points if p["t_s"] <= end]
    mss = max(p.get("stream_bytes_all") or p["stream_bytes"] for p in data) or DEFAULT_MSS
    rtts = [p["rtt_ms"] for p in points if p.get("rtt_ms") is not None and p["rtt_ms"] > 0]
    min_rtt_ms = min(rtts) if rtts else None
    bdp = facts.rate_bps / 8 * min_rtt_ms / 1000 if facts.rate_bps and min_rtt_ms else None
    sender_share, receiver_share = facts.share(facts.server_cpu_s), facts.share(facts.client_cpu_s)
    if facts.upload:
        sender_share, receiver_share = receiver_share, sender_share
    drops = facts.client_socket_drops + facts.link_drops
    socket_loss = facts.client_socket_drops / drops if drops else 0.0
    seconds = dict.fromkeys(LIMITS, 0.0)
    seconds["application"] = points[0]["t_s"]  # the request's arrival to the first point: nothing sent yet
    blocked: dict[str, int] = {}  # which credit a *_BLOCKED frame named, and at what limit
    streams_blocked = None  # the stream limit a STREAMS_BLOCKED frame named, until the credit rises past it
    credit_times = [(p["t_s"], p["streams_credit"]) for p in points if p.get("streams_credit") is not None]
    sent_before, recovery_point, rtt_ms = 0, None, None
    peak, cut = 0, None  # the sender's largest window since the last loss began; the one a loss cut
    at_window = 0.0  # time with in flight within one MSS of the qlog's window, whatever rule charged it
    # (read_s, the bytes it took out of flight, the window before it) of ACKs the sender has not read
    unread: list[tuple[float, int, int | None]] = []
    flight_before, window_before, ack_unread = 0, None, 0.0
    # when the sender read the request (its qlog's, as for an ACK): before that, nothing to send was its CPU's
    # packets the sender counted in flight (its qlog logged them sent) before they reached the wire (rule 4)
    unsent = _Unsent(sorted((p["logged_s"], p["t_s"], p.get("packet_bytes") or mss) for p in points
                            if p["direction"] == sending and p.get("logged_s") is not None and p["logged_s"] < p["t_s"]))
    request_read = points[0].get("read_s") if points[0]["direction"] != sending else None
    request_unread = 0.0
    for point, after in zip(points, points[1:]):
        span = after["t_s"] - point["t_s"]
        unread = [u for u in unread if u[0] > point["t_s"]]
        if point["direction"] != sending and (point.get("read_s") or 0) > point["t_s"]:
            unread.append((point["read_s"], max(0, flight_before - (point.get("in_flight") or 0)), window_before))
        flight_before, window_before = point.get("in_flight") or 0, point.get("cwnd")
        if point["direction"] == sending:
            if point.get("stream_data_blocked") is not None:
                blocked["stream"] = point["stream_data_blocked"]
            if point.get("data_blocked") is not None:
                blocked["connection"] = point["data_blocked"]
        if point.get("streams_blocked") is not None:
            streams_blocked = point["streams_blocked"]
        credit = _answerable(credit_times, point["t_s"] - (min_rtt_ms or 0) / 1000)
        opened = point.get("streams_open") or 0
        if streams_blocked is not None and credit is not None and credit > streams_blocked:
            streams_blocked = None
        waiting = credit is not None and opened >= credit and (
            streams_blocked is not None or (facts.requests or 0) > opened)
        window_now = point.get("cwnd") if point.get("cwnd") is not None else point.get("in_flight") or 0
        if point["direction"] == sending and point.get("stream_bytes") and point["sent_max"] <= sent_before:
            if recovery_point is None:  # a loss episode begins: the window it cuts is the largest before it
                cut, peak = max(cut or 0, peak), 0
            recovery_point = max(recovery_point or 0, sent_before)  # a retransmission
        elif recovery_point is not None and (point.get("acked") or 0) >= recovery_point:
            recovery_point = None
        peak = max(peak, window_now)
        if cut is not None and recovery_point is None and window_now >= cut:
            cut = None  # regained
        sent_before = max(sent_before, point.get("sent_max") or 0)
        rtt_ms = point.get("rtt_ms") or rtt_ms
        if point.get("cwnd") is not None and (point.get("in_flight") or 0) >= point["cwnd"] - mss:
            at_window += span
        window = _window(point, mss, blocked)
        if window:
            seconds[window] += span
        elif recovery_point is not None:
            seconds["receiver_cpu_socket"] += span * socket_loss
            seconds["loss_recovery"] += span * (1 - socket_loss)
        elif waiting:
            seconds["stream_limit"] += span
        else:
            inflated = not facts.rate_bps and rtt_ms is not None and min_rtt_ms and rtt_ms >= RTT_INFLATED * min_rtt_ms
            # an upload's: the bytes queued on the way up, which its receiver's capture has not seen (rule 3)
            queued = (rtt_ms - min_rtt_ms) / 1000 * facts.rate_bps / 8 \
                if (facts.upload or facts.at_receiver) and bdp and rtt_ms else 0.0
            limit = _sender_limit(point, mss, bdp, sender_share, receiver_share, inflated, queued)
            late = 0.0 if limit == "link" else _not_yet_read(point, unread, mss, after["t_s"], unsent.at(point["t_s"]))
            seconds["sender_cpu"] += late
            ack_unread += late
            span -= late
            if limit == "application" and request_read is not None and point["t_s"] < request_read:
                waited = min(request_read, after["t_s"]) - point["t_s"]
                seconds["sender_cpu"] += waited
                request_unread += waited
                span -= waited
            if limit == "congestion_window" and cut is not None:  # the window a loss cut: the loss's
                seconds["receiver_cpu_socket"] += span * socket_loss
                seconds["loss_recovery"] += span * (1 - socket_loss)
            else:
                seconds[limit] += span
    total = sum(seconds.values())
    if total <= 0:  # one packet: the whole body in the first datagram
        seconds["application"] = total = 1.0
    fractions = {name: value / total for name, value in seconds.items()}
    cwnd_known = any(p.get("cwnd") is not None for p in points)
    basis = {"mss": mss, "min_rtt_ms": min_rtt_ms, "bdp_bytes": bdp, "sender_cpu_share": sender_share,
             "receiver_cpu_share": receiver_share, "client_socket_drops": facts.client_socket_drops,
             "link_drops": facts.link_drops, "cwnd_known": cwnd_known,
             # the share of the transfer at the window itself: what a stack's own qlog can be held against (the
             # congestion window's share is larger where the remainder, rule 7, is paced or ACK-clocked sending)
             "at_window_share": at_window / total if cwnd_known else None,
             # the share charged to the sender's CPU for ACKs it had not read (rule 4): the stack's own qlog counts
             # it at the window, so the qlog's share at the window is at_window_share plus this
             "ack_unread_share": ack_unread / total if cwnd_known else None,
             # the share before the sender read the request (rule 6), charged to its CPU: the stack's own qlog
             # starts its transfer where it read it, so its share at the window over this span is its own x (1 -
             # this)
             "request_unread_share": request_unread / total}
    return Breakdown(fractions, max(LIMITS, key=fractions.get), end, basis)


def _transfer(points: Iterable[Mapping], sending: str = "down") -> tuple[list[Mapping], list[Mapping]]:
    """The points from the request's arrival (t = 0) in time order, and those of them carrying stream bytes in
    the data's direction (``sending``: "down" for a download, "up" for an upload)."""
    points = sorted((p for p in points if p["t_s"] >= 0), key=lambda p: p["t_s"])
    return points, [p for p in points
                    if p["direction"] == sending and (p.get("stream_bytes_all") or p.get("stream_bytes"))]


def span_packets(points: Iterable[Mapping]) -> tuple[int | None, int | None] | None:
    """The breakdown's span as 1-RTT packet numbers: (the request received, the last packet sent with stream
    bytes); None where the points hold no transfer. They mark the same span in a qlog that names no frames
    (quinn's: trace.qlog_window_share's ``ends``)."""
    points, data = _transfer(points)
    if not data:
        return None
    return points[0].get("packet_number") if points[0]["direction"] == "up" else None, data[-1].get("packet_number")


def against_own_qlog(basis: Mapping, qlog_share: float) -> tuple[float, float]:
    """(the capture's share at the congestion window as the sender's own qlog counts it, that qlog's share over
    the breakdown's span), for holding one against the other: the qlog counts at its window the time the sender
    sat on ACKs it had not read (rule 4's sender_cpu), and starts its transfer where it read the request, not
    where the request arrived (rule 6), so its share covers only that part of the span."""
    return (basis["at_window_share"] + basis["ack_unread_share"],
            qlog_share * (1 - basis["request_unread_share"]))


def merged(found: list[Breakdown | None]) -> Breakdown | None:
    """Several connections' breakdowns as one run's (a run of several clients, one connection each): each
    limit's seconds summed over the connections over their transfers' seconds summed, so that every connection
    weighs by its own transfer's time; the largest the label, the longest transfer the run's. The basis is the
    first connection's, with ``connections``: each one's transfer_s, label and whether its sender's qlog gave its
    congestion window (cwnd_known). None where none had a transfer."""
    found = [b for b in found if b is not None]
    if len(found) <= 1:
        return found[0] if found else None
    weights = [b.transfer_s for b in found] if sum(b.transfer_s for b in found) > 0 else [1.0] * len(found)
    fractions = {name: sum(b.fractions[name] * w for b, w in zip(found, weights)) / sum(weights) for name in LIMITS}
    basis = {**found[0].basis, "connections": [{"transfer_s": b.transfer_s, "limited_by": b.limited_by,
                                                "cwnd_known": b.basis.get("cwnd_known")} for b in found]}
    return Breakdown(fractions, max(LIMITS, key=fractions.get), max(b.transfer_s for b in found), basis)


def columns(points: Iterable[Mapping], facts: RunFacts) -> dict:
    """The runs columns of a traced run's breakdown: ``limited_by`` and ``limits`` (JSON: fractions, transfer_s
    and basis); both None when the trace holds no transfer."""
    return as_columns(breakdown(points, facts))


def as_columns(found: Breakdown | None) -> dict:
    """A breakdown as the runs columns ``limited_by`` and ``limits``."""
    if found is None:
        return {"limited_by": None, "limits": None}
    return {"limited_by": found.limited_by, "limits": json.dumps(
        {"fractions": found.fractions, "transfer_s": found.transfer_s, "basis": found.basis})}


def _answerable(credit_times: list[tuple[float, int]], before: float) -> int | None:
    """The stream credit the server had given by time ``before`` (the first known before the first point)."""
    at = bisect.bisect_right(credit_times, (before, float("inf")))
    return credit_times[max(at - 1, 0)][1] if credit_times else None


def _window(point: Mapping, mss: int, blocked: dict[str, int]) -> str | None:
    """Which receive window the sender is at after ``point`` (rule 1), or None."""
    room = {}
    for which, credit in (("stream", point.get("stream_credit")), ("connection", point.get("conn_credit"))):
        if credit is None:
            continue
        if which in blocked and credit > blocked[which]:
            del blocked[which]  # the credit rose past the limit the sender said it was blocked at
        left = credit - (point.get("sent_max") or 0)
        if left <= mss or (which in blocked and left <= BLOCKED_WITHIN * mss):
            room[which] = credit - (point.get("sent_max") or 0) - (mss if which in blocked else 0)
    if not room:
        return None
    return f"receive_window_{min(room, key=lambda w: (room[w], w != 'stream'))}"


class _Unsent:
    """The bytes of packets logged sent and not yet on the wire at a time, for times asked in increasing order:
    one pass over the (logged, wire, bytes) spans sorted by logged, where summing every span at each point took
    a traced ngtcp2 run's breakdown from 60 to 170-190 ms (bench_limits, 2026-11-29 11:16, 173 such packets)."""

    def __init__(self, spans: list[tuple[float, float, int]]):
        self.spans, self.next, self.open, self.bytes = spans, 0, [], 0

    def at(self, t: float) -> int:
        while self.next < len(self.spans) and self.spans[self.next][0] <= t:
            _, wire, size = self.spans[self.next]
            heapq.heappush(self.open, (wire, size))
            self.bytes += size
            self.next += 1
        while self.open and self.open[0][0] <= t:
            self.bytes -= heapq.heappop(self.open)[1]
        return self.bytes


def _not_yet_read(point: Mapping, unread: list[tuple[float, int, int | None]], mss: int, until: float,
                  unsent: int = 0) -> float:
    """How long from ``point`` (until ``until`` at most) the sender, at room in its window by the capture, had
    not yet read the ACKs that made the room (rule 4): counting the bytes of those it had not read as in flight,
    it is at the window it had before them (before the earliest still unread: it has read every ACK that came
    before that one, however long it has been behind), until it has read enough of them. 0 where that is not
    so. The earliest's, not the window when the backlog began: a sender that never catches up (aioquic at 30
    ms, 2026-11-29) had its window grow from 209 to 375 kB while ACKs stayed unread, and held against 209 kB
    the breakdown charged 78% of a transfer to unread ACKs where its own qlog was at its window 44%.

    ``unsent``: the bytes the sender had counted in flight (logged sent) and not yet got onto the wire, which the
    capture's in flight leaves out as it does unread ACKs' bytes (with none unread, held against the window of
    the point)."""
    window = unread[0][2] if unread else point.get("cwnd") if unsent else None
    if point.get("cwnd") is None or window is None or \
            (point.get("in_flight") or 0) >= point["cwnd"] - mss:
        return 0.0
    seen = (point.get("in_flight") or 0) + unsent + sum(taken for _, taken, _ in unread)
    if seen < window - mss:
        return 0.0  # room by its own count too: not the reading that held it
    read = None
    for read, taken, _ in sorted(unread):
        seen -= taken
        if seen < window - mss:
            break
    else:  # at the window once every ACK is read: by the bytes not yet on the wire, whose arrival ends the stretch
        read = until if unsent else read
    return max(0.0, min(read, until) - point["t_s"])


def _sender_limit(point: Mapping, mss: int, bdp: float | None, sender_share: float | None,
                  receiver_share: float | None, inflated: bool, queued: float = 0.0) -> str:
    """Rules 3-7 for a sender at no receive window and not in loss recovery; ``inflated``: the latest RTT
    sample grew in an endpoint; ``queued``: bytes in the link's queue that the point's in flight leaves out (an
    upload's, rule 3)."""
    in_flight = point.get("in_flight") or 0
    if bdp is not None and in_flight + queued > bdp + mss:
        return "link"
    if point.get("cwnd") is not None and in_flight >= point["cwnd"] - mss:
        return "congestion_window"
    if sender_share is not None and sender_share >= CPU_SATURATED:
        return "sender_cpu"
    if receiver_share is not None and receiver_share >= CPU_SATURATED:
        return "receiver_cpu_socket"
    if inflated:
        return "sender_cpu" if (sender_share or 0) > (receiver_share or 0) else "receiver_cpu_socket"
    if in_flight < mss:
        return "application"
    return "congestion_window"
