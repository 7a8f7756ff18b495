"""s2n-quic 1.91 (AWS, s2n-tls) through our own client and server (lab/servers/replay-s2n-quic).

Its ``Limits`` set the idle timeout, max_ack_delay, disable_active_migration, the three stream
windows, the connection window and the two stream counts, on either side. It sends no
max_udp_payload_size at all, always sends active_connection_id_limit 3 (it overwrites the setting)
and has no setter for ack_delay_exponent: those three are reported not applied. Its receive windows
slide at their advertised size and never grow, so they are pinned as they are and --autotune has
nothing to switch on. It writes no qlog; it has CUBIC and BBR.

Its server paces a stream at the bitrate asked (tparams.workloads' stream, aioquic's rule:
lab_server_common::replay::Paced); its stream client (``replay-s2n-quic stream-client``) records when the bytes
arrive and qreplay plays them (tparams.workloads.played).
"""

from __future__ import annotations

from replay.stacks.base import ReplayProgram

SETTABLE = frozenset({
    "max_idle_timeout", "initial_max_data", "initial_max_stream_data_bidi_local",
    "initial_max_stream_data_bidi_remote", "initial_max_stream_data_uni", "initial_max_streams_bidi",
    "initial_max_streams_uni", "max_ack_delay", "disable_active_migration",
})


class S2nQuic(ReplayProgram):
    name = "s2n-quic"
    replay_protocol = frozenset({"down", "up", "many", "paced"})
    settable = {"client": SETTABLE, "server": SETTABLE}
    autotune_note = ("s2n-quic has no flow-control auto-tuning: its windows always slide at the advertised "
                     "size, so the run kept them pinned")
    writes_qlog = False
    cc_names = frozenset({"cubic", "bbr"})


STACK = S2nQuic()
