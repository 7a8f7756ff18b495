"""tquic 1.6 (Tencent, BoringSSL) through our own bulk client and server (lab/servers/replay-tquic).

tquic's Config sets eleven of the twelve parameters on either side; it has no
setter for disable_active_migration (Config keeps its TransportParams private,
src/lib.rs), and it advertises migration as allowed though its server never
moves to a client's new path (connection.rs: "TODO: try to do connection
migration"): when the client retires the old path's connection ID, tquic
closes with INTERNAL_ERROR (Chromium's port migration on a degrading path,
docs/qreplay.md). Values tquic cannot put on the wire are refused: a zero
ack_delay_exponent, max_ack_delay or max_udp_payload_size (it omits zeros, and
the peer then reads the default; src/trans_param.rs), an
active_connection_id_limit below 2 (its setter ignores it).

Windows: tquic doubles a window up to a ceiling (max_connection_window,
max_stream_window); pinned runs put the ceilings at the advertised values,
--autotune at 24 MiB / 16 MiB. What stays on either way: when tquic re-opens
a stream window it raises the connection window to at least 1.5 times the
stream window (connection.rs, ensure_window_lower_bound), so an
initial_max_data below 1.5 x the download stream's window does not stay put.
Congestion control: CUBIC and BBR (v1; tquic's default is BBR, so cubic is set
explicitly). qlog: one JSON-SEQ file per connection; an update logged right after a packet sent leaves that
packet out of its bytes in flight. Key log: both sides.

Its server speaks HTTP/3 beside hq-interop (tquic's own h3 module, chosen by the client's ALPN): a browser
loads its page, downloads and uploads through tquic configured with any set (lab_server_common::page).

Its servers, hq-interop and h3, pace a stream at the bitrate asked (tparams.workloads' stream, aioquic's rule:
lab_server_common::replay::Pace). tquic gives the application no timer: a stream its pace lets nothing more go
stops asking to write, and the program's own event loop makes it writable again at the next tick. Its stream
client (``replay-tquic stream-client``) records when the bytes arrive and qreplay plays them
(tparams.workloads.played).
"""

from __future__ import annotations

from replay.stacks.base import ReplayProgram

PARAMETERS = frozenset({
    "max_idle_timeout", "max_udp_payload_size", "initial_max_data", "initial_max_stream_data_bidi_local",
    "initial_max_stream_data_bidi_remote", "initial_max_stream_data_uni", "initial_max_streams_bidi",
    "initial_max_streams_uni", "ack_delay_exponent", "max_ack_delay", "active_connection_id_limit",
})


class Tquic(ReplayProgram):
    name = "tquic"
    settable = {"client": PARAMETERS, "server": PARAMETERS}
    autotune_note = None
    writes_qlog = True
    # tquic 1.6.0 logs the metrics update after a packet it sends before it counts the packet in flight
    # (Connection::send_packet: qlog_recovery_metrics_updated, then recovery.on_packet_sent): each update logged
    # right after a send leaves that packet out; 4-7 points of the share at the window, 5 of 5 runs, 2026-11-29
    qlog_in_flight_omits = "sent"
    cc_names = frozenset({"cubic", "bbr"})
    replay_protocol = frozenset({"down", "paced"})
    serves_page = True  # over h3: the files of workdir/htdocs (QREPLAY_HTDOCS)
    page_protocol = frozenset({"down", "up", "many", "paced"})


STACK = Tquic()
