"""qreplay --trace on the real testbed: capture, decryption, the sender's series, the update rule, the plot."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import duckdb
import pytest

from common import pcap as common_pcap
from replay import sets, trace
from replay.commands.plot import plot_traces
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, run_experiment
from replay.stacks import get_stack
from replay.stacks.base import RunOptions

WINDOW = 131_072
pytestmark = pytest.mark.skipif(get_stack("ngtcp2").unavailable_reason() is not None, reason="ngtcp2 missing")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """One traced window-limited ngtcp2 download at 30 ms; (results file, run row, points)."""
    results = tmp_path_factory.mktemp("trace") / "r.duckdb"
    client = sets.with_overrides(sets.resolve_one("firefox"), [f"initial_max_stream_data_bidi_local={WINDOW}"])
    experiment = Experiment("single", get_stack("ngtcp2"), [Condition(client, None, LinkConfig(delay_down_ms=30))],
                            RunOptions(size=1_000_000, timeout_s=30, trace=True), reps=1)
    row = run_experiment(experiment, results)[0]
    assert row["status"] == "ok", row.get("error")
    con = duckdb.connect(str(results), read_only=True)
    info = con.sql(f"SELECT * FROM traces WHERE run_id = '{row['run_id']}'").pl().to_dicts()
    points = con.sql(f"SELECT * FROM trace_points WHERE run_id = '{row['run_id']}' ORDER BY seq").pl().to_dicts()
    con.close()
    assert len(info) == 1, row["warnings"]
    return results, info[0], points


def test_trace_of_a_window_limited_run(traced):
    _, info, points = traced
    assert info["initial_max_stream_data_bidi_local"] == WINDOW
    assert '"server": "off"' in info["capture"] and info["undecrypted"] == 0
    down = [p for p in points if p["direction"] == "down"]
    # HTTP/3 frames its body: a few hundred bytes of HEADERS and DATA headers on the stream
    assert 1_000_000 <= down[-1]["sent_max"] < 1_001_000 
    # the client closes without acknowledging the last flight
    assert down[-1]["sent_total"] - 64_000 < points[-1]["acked"] <= down[-1]["sent_total"]
    # The receiver's credit is never overrun: every byte sent lies below the MAX_STREAM_DATA seen so far.
    assert all(p["sent_max"] <= p["stream_credit"] for p in points)
    rtts = [p["rtt_ms"] for p in points if p["rtt_ms"] is not None]
    assert rtts and 29 < min(rtts) < 40


def test_ngtcp2_updates_at_half_the_window(traced):
    _, _, points = traced
    rule = trace.flow_control_rule(points, WINDOW, "stream")
    # ngtcp2 re-opens once half the window is read (replay/flowcontrol.py): each update grants about half
    # a window, a little more for what arrived in the same burst; about one update per round trip.
    assert rule["n_updates"] >= 8
    assert 0.5 <= rule["fraction_p10"] and rule["fraction_median"] < 0.65
    assert 0.9 < rule["consumed_vs_sent_rtt_before"] < 1.1
    assert 0.7 < rule["updates_per_rtt"] < 1.3


def test_plot_draws_the_trace(traced, tmp_path):
    results, info, _ = traced
    written = plot_traces(results, tmp_path, info["run_id"][:8])
    png = next(p for p in written if p.suffix == ".png")
    assert png.stat().st_size > 30_000
    assert "Trace" in (tmp_path / "report.html").read_text()


# --- the pure functions, on packets made here ----------------------------------------------------------

def _packet(t, down, number, streams=(), acks=(), **frames):
    return trace.Packet(t, down, number, 1200 if down else 50, streams=streams, acks=acks, **frames)


def test_sender_series_from_made_packets():
    request = _packet(0.0, False, 0, streams=(trace.StreamFrame(0, 0, 30, True),))
    data = [_packet(0.01 + i / 1000, True, i, streams=(trace.StreamFrame(0, 1000 * i, 1000, False),)) for i in range(4)]
    ack = _packet(0.05, False, 1, acks=(trace.AckFrame(3, 1250, ((2, 3), (0, 0))),), max_stream_data=((0, 6000),))
    points, summary = trace.sender_series([request, *data, ack], {"initial_max_stream_data_bidi_local": 4000,
                                                                  "initial_max_data": 10_000})
    assert summary["download_stream"] == 0
    last = points[-1]
    assert last["sent_max"] == 4000 and last["acked"] == 3000 and last["stream_credit"] == 6000
    assert last["in_flight"] == 1200  # packet 1: neither acknowledged nor PACKET_THRESHOLD below packet 3
    assert last["rtt_ms"] == pytest.approx((0.05 - 0.013) * 1000 - 10, abs=1e-6)  # ack_delay 1250 << 3 us = 10 ms


def test_bursts_are_split_into_their_datagrams():
    cid = bytes(range(1, 9))
    segments = [bytes([0x45]) + cid + bytes([i]) * 40 for i in range(3)] + [bytes([0x52]) + cid + b"x" * 20]
    assert trace.split_burst(b"".join(segments)) == segments
    single = bytes([0x45]) + cid + b"y" * 60
    assert trace.split_burst(single) == [single]
    udp = struct.pack("!HHHH", 50000, 4433, 8 + len(b"".join(segments)), 0) + b"".join(segments)
    ip = bytes([0x45, 0, 0, 0]) + b"\0" * 5 + bytes([17]) + b"\0" * 10
    pcap = common_pcap.file_header(common_pcap.LINKTYPE_RAW)
    frame = ip + udp
    pcap += common_pcap.record(1, 0, frame)
    split, count = trace.split_bursts(pcap)
    assert count == 1 and split.count(cid) == 4


def test_a_burst_of_long_header_datagrams_is_split_too():
    """A client's ClientHello padded into two Initial datagrams that linkem wrote as one burst (Firefox's):
    split at the second Initial's header, whose DCID's byte before could pass for a short header; a
    handshake datagram followed by a 1-RTT one to the same DCID splits as well."""
    dcid = bytes(range(10, 23))
    initial = bytes([0xC7]) + (1).to_bytes(4, "big") + bytes([len(dcid)]) + dcid + bytes([3]) + b"\x00" * 40
    first, second = initial + b"\x11" * 1180, initial[:-40] + b"\x22" * 40 + b"\x33" * 1180
    assert trace.split_burst(first + second) == [first, second]
    handshake = bytes([0xE2]) + (1).to_bytes(4, "big") + bytes([len(dcid)]) + dcid + b"h" * 200
    short = bytes([0x44]) + dcid + b"s" * 60
    assert trace.split_burst(handshake + short) == [handshake, short]
    assert trace.split_burst(first) == [first]


def test_a_datagram_of_two_short_header_packets_is_counted_apart(tmp_path):
    """Firefox 153 in a traced run (tests/data/firefox_joined: the run's first 16 captured datagrams and its
    key log): one GSO burst of 95 + 39 + 39 bytes with a segment size of 95, so its second segment held two
    39-byte 1-RTT packets, which no receiver can decrypt (packet numbers 4 and 5 never reached the server).
    Such a datagram is the sender's, not a gap in the key log: counted for its sender, not as undecrypted."""
    capture = tmp_path / "trace.pcap"  # decrypt writes the split capture beside it
    capture.write_bytes(Path("tests/data/firefox_joined/trace.pcap").read_bytes())
    decoded = trace.decrypt(capture, Path("tests/data/firefox_joined/keylog"), server_ip="198.18.100.2")
    assert decoded.joined == {"client": 1, "server": 0} and decoded.undecrypted == 0
    numbers = sorted(p.number for p in decoded.packets if not p.down)
    assert 4 not in numbers and 5 not in numbers and {3, 6} <= set(numbers)


def test_a_capture_without_1rtt_packets_says_how_far_the_handshake_was_read(tmp_path):
    """A trace with no 1-RTT packet names each handshake step tshark read and the key log's secrets, so that a
    run that lacks its breakdown shows where decryption stopped: here (tests/data/firefox_joined) the key log
    without its traffic secrets reads the whole handshake; with the exporter secret alone, the server's
    EncryptedExtensions stays unread."""
    capture = tmp_path / "trace.pcap"
    capture.write_bytes(Path("tests/data/firefox_joined/trace.pcap").read_bytes())
    lines = Path("tests/data/firefox_joined/keylog").read_text().splitlines()
    for kept, expected in (("HANDSHAKE_TRAFFIC_SECRET", "the server's parameters read;"),
                           ("EXPORTER_SECRET", "the server's parameters not read;")):
        keylog = tmp_path / "keylog"
        keylog.write_text("".join(line + "\n" for line in lines if kept in line or "EXPORTER" in line))
        decoded = trace.decrypt(capture, keylog, server_ip="198.18.100.2")
        note = trace.no_packets_note(decoded, keylog)
        assert not decoded.packets and "the client's parameters read, the server's cipher read" in note, note
        assert expected in note and "TRAFFIC_SECRET_0" not in note and "1 EXPORTER_SECRET" in note, note


def test_the_senders_congestion_window_comes_from_its_qlog(traced):
    """ngtcp2's server writes qlog: every point carries the window it had then, and it grew in slow start
    from ngtcp2's initial 14,520 bytes while the flow-control window, not it, held the flight down."""
    _, info, points = traced
    assert json.loads(info["capture"])["cwnd_from_qlog"] is True
    windows = [p["cwnd"] for p in points if p["cwnd"] is not None]
    # (the first 1-RTT packet may leave after the handshake's ACKs already grew it a little)
    assert len(windows) >= 0.9 * len(points) and windows[0] < 2 * 14_520 and max(windows) > 4 * 14_520
    assert max(p["in_flight"] for p in points) < max(windows)


def test_qlog_clock_is_matched_through_packet_numbers():
    points = [{"t_s": 0.100 + 0.001 * n, "direction": "down", "packet_number": n} for n in range(10)]
    sent = {n: 5.0 + 1.0 * n for n in range(10)}  # milliseconds since the qlog's own start
    assert trace.attach_congestion_window(points, sent, [(4.0, 12_000), (8.5, 24_000)])
    assert [p["cwnd"] for p in points] == [12_000] * 4 + [24_000] * 6
    late = [{**p, "cwnd": None} for p in points]
    jumbled = {n: 5.0 + (0 if n % 2 else 40.0) for n in range(10)}  # no unit lines these up
    assert not trace.attach_congestion_window(late, jumbled, [(4.0, 12_000)])
    assert all(p["cwnd"] is None for p in late)


def _qlog(*events: tuple) -> list[str]:
    """qlog lines (JSON-SEQ) of (time, name, data) events; a packet's data as ("1RTT", number, frames)."""
    lines = []
    for when, name, data in events:
        if isinstance(data, tuple):
            kind, number, frames = data
            data = {"header": {"packet_type": kind, "packet_number": number}, "frames": frames}
        lines.append("\x1e" + json.dumps({"time": when, "name": name, "data": data}))
    return lines


def test_the_window_is_the_one_the_stack_had_for_each_packet_in_the_captures_order():
    """ngtcp2's order, in whole milliseconds: an ACK arrives (0.0100 s in the capture) before a burst the stack
    sends under its old window and handles only after it; the burst's flight is held against the window the
    ACK raised, as the capture has taken the ACK's bytes out of flight. quic-go's order: a received packet's
    update logged before the packet itself."""
    stream = [{"frame_type": "stream", "stream_id": 0}]
    ngtcp2 = _qlog((10, "transport:packet_sent", ("1RTT", 1, stream)),
                   (10, "recovery:metrics_updated", {"congestion_window": 12_000, "bytes_in_flight": 1200}),
                   (15, "transport:packet_sent", ("1RTT", 2, stream)),
                   (15, "recovery:metrics_updated", {"congestion_window": 12_000, "bytes_in_flight": 2400}),
                   (15, "transport:packet_received", ("1RTT", 7, [{"frame_type": "ack"}])),
                   (15, "recovery:metrics_updated", {"congestion_window": 13_200, "bytes_in_flight": 1200}))
    sent, windows, handled, _ = trace.qlog_events(ngtcp2)
    assert sent == {1: 10, 2: 15} and handled[("down", 2)][1] == 12_000 and handled[("up", 7)][1] == 13_200
    points = [{"t_s": 0.0003, "direction": "down", "packet_number": 1},
              {"t_s": 0.0050, "direction": "up", "packet_number": 7},  # read by the stack after packet 2
              {"t_s": 0.0051, "direction": "down", "packet_number": 2},
              {"t_s": 0.0060, "direction": "up", "packet_number": 8}]  # not in the qlog: by the clock
    assert trace.attach_congestion_window(points, sent, windows, handled)
    assert [p["cwnd"] for p in points] == [12_000, 13_200, 13_200, 13_200]
    quic_go = _qlog((10.0, "transport:packet_sent", ("1RTT", 1, stream)),
                    (10.1, "recovery:metrics_updated", {"congestion_window": 12_000, "bytes_in_flight": 1200}),
                    (40.0, "recovery:metrics_updated", {"congestion_window": 13_200, "bytes_in_flight": 0}),
                    (40.1, "transport:packet_received", ("1RTT", 7, [{"frame_type": "ack"}])),
                    (40.2, "transport:packet_sent", ("1RTT", 2, stream)))
    _, _, handled, _ = trace.qlog_events(quic_go)
    assert ("down", 1) not in handled  # sent before any update: by the clock
    assert handled[("up", 7)][1] == 13_200 and handled[("down", 2)][1] == 13_200


def test_when_the_sender_read_each_packet_is_its_qlogs_time_bounded_by_what_it_sent_next():
    """quiche's order in milliseconds: ACK 7 logged read 6 ms after the capture saw it arrive; ACK 8 logged in
    whole milliseconds after the packet the stack sent next, which bounds it; ACK 9, not in the qlog, has none."""
    stream = [{"frame_type": "stream", "stream_id": 0}]
    qlog = _qlog((10.0, "transport:packet_sent", ("1RTT", 1, stream)),
                 (20.0, "transport:packet_sent", ("1RTT", 2, stream)),
                 (26.0, "transport:packet_received", ("1RTT", 7, [{"frame_type": "ack"}])),
                 (30.0, "transport:packet_sent", ("1RTT", 3, stream)),
                 (31.0, "transport:packet_received", ("1RTT", 8, [{"frame_type": "ack"}])),
                 (31.0, "recovery:metrics_updated", {"congestion_window": 13_200, "bytes_in_flight": 1200}),
                 (31.0, "transport:packet_sent", ("1RTT", 4, stream)))
    sent, windows, handled, reads = trace.qlog_events(qlog)
    assert reads == {7: (26.0, 3), 8: (31.0, 4)}
    points = [{"t_s": 0.0, "direction": "down", "packet_number": 1},
              {"t_s": 0.010, "direction": "down", "packet_number": 2},
              {"t_s": 0.010, "direction": "up", "packet_number": 7},
              {"t_s": 0.020, "direction": "down", "packet_number": 3},
              {"t_s": 0.0205, "direction": "up", "packet_number": 8},
              {"t_s": 0.0206, "direction": "down", "packet_number": 4},
              {"t_s": 0.025, "direction": "up", "packet_number": 9}]
    assert trace.attach_congestion_window(points, sent, windows, handled, reads=reads)
    assert points[2]["read_s"] == pytest.approx(0.016) and points[4]["read_s"] == pytest.approx(0.0206)
    assert "read_s" not in points[6]


def test_the_qlogs_share_at_the_window_runs_from_the_request():
    """ngtcp2 sends its HTTP/3 control streams at the handshake (time 0), a round trip before the request
    (stream 0, received at 30 ms): that time is not the transfer's. At its window from 30 to 40 ms of 30-50."""
    control = [{"frame_type": "stream", "stream_id": 3}]
    body = [{"frame_type": "stream", "stream_id": 0}]
    lines = _qlog((0, "transport:packet_sent", ("1RTT", 0, control)),
                  (0, "recovery:metrics_updated", {"congestion_window": 12_000, "bytes_in_flight": 100}),
                  (30, "transport:packet_received", ("1RTT", 2, body)),
                  (30, "transport:packet_sent", ("1RTT", 1, body)),
                  (30, "recovery:metrics_updated", {"congestion_window": 12_000, "bytes_in_flight": 12_000}),
                  (40, "recovery:metrics_updated", {"congestion_window": 24_000, "bytes_in_flight": 0}),
                  (50, "transport:packet_sent", ("1RTT", 3, body)))
    assert trace.qlog_window_share(lines, 1200) == pytest.approx(0.5)


def test_a_qlog_without_frames_marks_its_span_by_the_captures_packet_numbers():
    """quinn-proto 0.11 logs a packet's number and type, no frames: the request's packet (client's number 2)
    and the last one sent with stream bytes (3), the capture's (limits.span_packets), mark the same span; the
    control packet at time 0 and the ACK after the body lie outside it. At its window from 30 to 40 ms of
    30-50."""
    lines = _qlog((0, "transport:packet_sent", ("1RTT", 0, None)),
                  (0, "recovery:metrics_updated", {"congestion_window": 12_000, "bytes_in_flight": 100}),
                  (30, "transport:packet_received", ("1RTT", 2, None)),
                  (30, "transport:packet_sent", ("1RTT", 1, None)),
                  (30, "recovery:metrics_updated", {"congestion_window": 12_000, "bytes_in_flight": 12_000}),
                  (40, "recovery:metrics_updated", {"bytes_in_flight": 0, "congestion_window": 24_000}),
                  (50, "transport:packet_sent", ("1RTT", 3, None)),
                  (60, "transport:packet_sent", ("1RTT", 4, None)))
    assert trace.qlog_window_share(lines, 1200) is None
    assert trace.qlog_window_share(lines, 1200, (2, 3)) == pytest.approx(0.5)


def test_what_a_stacks_qlog_leaves_out_of_its_bytes_in_flight_is_added_back():
    """quinn-proto 0.11 logs no update after an MTU probe (1,389 bytes at 30 ms, after the burst's update): 9,600
    of 12,000 reported, it is at its window from then by its own count, 30-40 ms of 30-50. tquic 1.6 logs the
    update after a packet before it counts the packet: 9,600 reported right after packet 3 of 1,200 is 10,800."""
    body = [{"frame_type": "stream", "stream_id": 0}]
    def quinn(probe):
        return _qlog((30, "transport:packet_received", ("1RTT", 2, None)),
                     (30, "transport:packet_sent", ("1RTT", 1, None)),
                     (30, "recovery:metrics_updated", {"congestion_window": 12_000, "bytes_in_flight": 9_600}),
                     *([(30, "transport:packet_sent", {"header": {"packet_type": "1RTT", "packet_number": 2,
                                                                   "length": 1389}})] if probe else []),
                     (40, "recovery:metrics_updated", {"bytes_in_flight": 0, "congestion_window": 24_000}),
                     (50, "transport:packet_sent", ("1RTT", 3, None)))
    assert trace.qlog_window_share(quinn(True), 1200, (2, 3)) == 0.0
    assert trace.qlog_window_share(quinn(True), 1200, (2, 3), omits="probe") == pytest.approx(0.5)
    assert trace.qlog_window_share(quinn(False), 1200, (2, 3), omits="probe") == 0.0  # no probe, nothing added
    tquic = _qlog((30, "quic:packet_received", ("1RTT", 2, body)),
                  (30, "quic:packet_sent", {"header": {"packet_type": "1RTT", "packet_number": 3}, "frames": body,
                                            "raw": {"length": 1200}}),
                  (30, "recovery:metrics_updated", {"congestion_window": 12_000, "bytes_in_flight": 9_600}),
                  (40, "quic:packet_received", ("1RTT", 3, [{"frame_type": "ack"}])),
                  (40, "recovery:metrics_updated", {"bytes_in_flight": 0, "congestion_window": 24_000}),
                  (50, "quic:packet_sent", ("1RTT", 4, body)))
    assert trace.qlog_window_share(tquic, 1200) == 0.0
    assert trace.qlog_window_share(tquic, 1200, omits="sent") == pytest.approx(0.5)


def test_aioquics_qlog_is_one_json_document_naming_the_window_cwnd():
    """aioquic's QuicFileLogger writes one JSON document (its traces' events, times in milliseconds since the
    epoch) and names the congestion window ``cwnd``: read as the JSON-SEQ qlogs are."""
    body = [{"frame_type": "stream", "stream_id": 0}]
    events = [{"time": 1.8e12 + when, "name": name, "data": data} for when, name, data in (
        (30, "transport:packet_received", {"header": {"packet_type": "1RTT", "packet_number": 2}, "frames": body}),
        (30, "recovery:metrics_updated", {"cwnd": 12_000, "bytes_in_flight": 12_000}),
        (30, "transport:packet_sent", {"header": {"packet_type": "1RTT", "packet_number": 1}, "frames": body}),
        (40, "recovery:metrics_updated", {"cwnd": 24_000, "bytes_in_flight": 0}),
        (50, "transport:packet_sent", {"header": {"packet_type": "1RTT", "packet_number": 3}, "frames": body}))]
    lines = [json.dumps({"qlog_format": "JSON", "qlog_version": "0.3", "traces": [{"events": events}]})]
    sent, windows, _, reads = trace.qlog_events(lines)
    assert sent == {1: 1.8e12 + 30, 3: 1.8e12 + 50} and [w for _, w in windows] == [12_000, 24_000]
    assert reads == {2: (1.8e12 + 30, 1)}
    assert trace.qlog_window_share(lines, 1200) == pytest.approx(0.5)


def test_the_servers_first_flight_is_cut_before_its_coalesced_short_header_packet():
    """tshark never decrypts the 0.5-RTT packet quiche coalesces behind its Initial and Handshake, and may then
    read no other packet of the server: the datagram keeps its long-header packets only. A two-byte length
    (a varint) and an Initial's token are stepped over; a datagram of long-header packets alone, or of a short
    one alone, is left as it is."""
    scid = b"\x08" + bytes(range(8))
    initial = b"\xc1\x00\x00\x00\x01\x00" + scid + b"\x02ab" + b"\x40\x64" + bytes(100)  # token "ab", length 100
    handshake = b"\xe1\x00\x00\x00\x01\x00" + scid + b"\x1e" + bytes(30)
    short = b"\x41" + bytes(40)
    assert trace.handshake_part(initial + handshake + short) == initial + handshake
    assert trace.handshake_part(initial + handshake) == initial + handshake
    assert trace.handshake_part(short) == short
