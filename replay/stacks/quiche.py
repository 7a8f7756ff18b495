"""quiche 0.30 (Cloudflare, bundled BoringSSL) through our own bulk client and server
(lab/servers/replay-quiche, built by scripts/setup.sh).

quiche's Config sets all twelve transport parameters on either side. It
refuses nothing, but silently clamps an ack_delay_exponent above 20, ignores an
active_connection_id_limit below 2 and clamps values above 2^62-1; the programs
refuse those. Absent flow-control and idle values take quiche's example
programs' (10 MB, 1 MB per stream, 100 streams, 30 s), as quiche's own are 0.

quiche always auto-tunes its receive windows (doubling one that is used up
within two RTTs) up to a connection ceiling and ONE stream ceiling for all
streams. Pinned, the ceilings are initial_max_data and the window of the
stream the endpoint receives on (client bidi_local, server bidi_remote);
--autotune raises them to 24 MiB / 16 MiB. --cc bbr is quiche's BBRv2
(gcongestion); qlog is the crate's ``qlog`` feature, one .sqlog per connection.

Its server speaks HTTP/3 beside hq-interop (quiche's own h3 module, chosen by the client's ALPN): a browser
loads its page, downloads and uploads through quiche configured with any set (lab_server_common::page).

Its hq-interop server paces a stream at the bitrate asked (tparams.workloads' stream, aioquic's rule:
lab_server_common::replay::Paced, on its event loop's timer); its stream client (``replay-quiche stream-client``)
records when the bytes arrive and qreplay plays them (tparams.workloads.played). Its h3 server paces a browser's
stream by the same schedule (page::Body::Paced).
"""

from __future__ import annotations

from replay.stacks.base import ReplayProgram

PARAMETERS = frozenset({
    "max_idle_timeout", "max_udp_payload_size", "initial_max_data", "initial_max_stream_data_bidi_local",
    "initial_max_stream_data_bidi_remote", "initial_max_stream_data_uni", "initial_max_streams_bidi",
    "initial_max_streams_uni", "ack_delay_exponent", "max_ack_delay", "disable_active_migration",
    "active_connection_id_limit",
})


class Quiche(ReplayProgram):
    name = "quiche"
    settable = {"client": PARAMETERS, "server": PARAMETERS}
    writes_qlog = True
    serves_page = True  # over h3: the files of workdir/htdocs (QREPLAY_HTDOCS)
    page_protocol = frozenset({"down", "up", "many", "paced"})
    replay_protocol = frozenset({"down", "paced"})


STACK = Quiche()
