"""quinn 0.11 (quinn-proto 0.11.19, rustls 0.23 with ring) through our own bulk client and server
(lab/servers/replay-quinn, built to build/bin by scripts/setup.sh).

quinn lets an application set max_idle_timeout, initial_max_data (``receive_window``), the two stream
limits and max_udp_payload_size (``EndpointConfig``, 1200 to 65527; the programs refuse others) on both
sides, and disable_active_migration on a server only (``ServerConfig::migration``). It sends one stream window
(``stream_receive_window``) as all three stream parameters, so each side sets the one that governs the
download (the client's bidi_local, the server's bidi_remote) and reports the other two as not applied.
ack_delay_exponent (3), max_ack_delay (25) and active_connection_id_limit (5) are fixed in quinn-proto
(transport_parameters.rs, cid_queue.rs): a request for exactly that value is what the peer sees, so it
counts as applied, any other as not applied.

quinn has no window auto-tuning: a receiver re-opens a window as data is read but never grows it, so
the windows are always pinned and ``--autotune`` changes nothing. Congestion control: CUBIC (quinn's
default) and BBR. qlog: quinn-proto's ``qlog`` feature, one file per connection; it names no frames (a
packet's number, type and length), and leaves an MTU probe's bytes out of its metrics until its next update.

Its server speaks HTTP/3 beside hq-interop (the ``h3`` crate over quinn, ``h3-quinn``, chosen by the client's
ALPN): a browser loads its page, downloads and uploads through quinn configured with any set (lab_server_common::page).

Its hq-interop server paces a stream at the bitrate asked (tparams.workloads' stream, aioquic's rule:
lab_server_common::replay::paced_due); its stream client (``replay-quinn stream-client``) records when the bytes
arrive and qreplay plays them (tparams.workloads.played). Its h3 server paces a browser's stream by the same
schedule (replay::Paced).
"""

from __future__ import annotations

from replay.stacks.base import ReplayProgram

COMMON = ("max_idle_timeout", "max_udp_payload_size", "initial_max_data", "initial_max_streams_bidi",
          "initial_max_streams_uni")
STREAM_WINDOW = {"client": "initial_max_stream_data_bidi_local", "server": "initial_max_stream_data_bidi_remote"}


class Quinn(ReplayProgram):
    name = "quinn"
    replay_protocol = frozenset({"down", "up", "many", "paced"})
    settable = {"client": frozenset((*COMMON, STREAM_WINDOW["client"])),
                "server": frozenset((*COMMON, STREAM_WINDOW["server"], "disable_active_migration"))}
    autotune_note = "quinn 0.11 has no window auto-tuning: its windows stayed at the advertised values"
    writes_qlog = True
    # quinn-proto 0.11.19 sends a PLPMTUD probe (a padded PING) on a path of its own in poll_transmit that logs
    # no recovery metrics after it (connection/mod.rs): its qlog's bytes in flight lack the probe's until the
    # next update, up to a round trip in slow start; seen in 3 of 3 runs at 30 ms, 2026-11-29
    qlog_in_flight_omits = "probe"
    serves_page = True  # over h3: the files of workdir/htdocs (QREPLAY_HTDOCS)
    page_protocol = frozenset({"down", "up", "many", "paced"})


STACK = Quinn()
