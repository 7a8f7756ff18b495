"""msquic 2.5.1 (the Rust crate msquic =2.5.1-beta, its own build of libmsquic with quictls) through our own
bulk client and server (lab/servers/replay-msquic).

msquic's QUIC_SETTINGS carry max_idle_timeout, initial_max_data, the three stream windows, both stream
counts and max_ack_delay on both sides, and disable_active_migration on a server only (MigrationEnabled; a
client never sends it). It fixes ack_delay_exponent (8) and active_connection_id_limit (4), and advertises
as max_udp_payload_size what the interface's MTU allows (QuicConnGenerateLocalTransportParameters in
connection.c): a request equal to a fixed value counts as applied, any other as not applied. msquic
advertises max_ack_delay as its delayed-ACK timer plus its 1 ms timer resolution; the program sets the
timer 1 ms lower, so that the request is what goes on the wire.

Stream windows must be powers of two (settings.c refuses others): any other request is reported not
applied and runs with the largest power of two below it, so that the window is never larger than asked.

msquic never grows the connection window, but doubles a stream's window whenever the application drains
it within an RTT, up to the connection's ConnFlowControlWindow setting (stream_recv.c). The program pins the
stream windows by lowering that setting once the handshake is done (the advertised initial_max_data is
fixed by then); --autotune lets them grow to initial_max_data or 16 MiB, whichever is smaller. CUBIC and
BBR; no qlog (msquic traces through LTTng/ETW only); the key log comes from QUIC_PARAM_CONN_TLS_SECRETS.

Its server paces a stream at the bitrate asked (tparams.workloads' stream, aioquic's rule:
lab_server_common::replay::Paced) from a thread of its own for each stream: msquic's API takes a send from
any thread and queues it behind the stream's earlier ones. Its stream client (``replay-msquic stream-client``)
records when each delivery arrives and qreplay plays them (tparams.workloads.played).
"""

from __future__ import annotations

from replay.stacks.base import Applied, ReplayProgram

STREAM_WINDOWS = ("initial_max_stream_data_bidi_local", "initial_max_stream_data_bidi_remote",
                  "initial_max_stream_data_uni")
BOTH = frozenset({"max_idle_timeout", "initial_max_data", *STREAM_WINDOWS, "initial_max_streams_bidi",
                  "initial_max_streams_uni", "max_ack_delay"})
LARGEST_STREAM_WINDOW = 1 << 31  # a u32


class MsQuic(ReplayProgram):
    name = "msquic"
    replay_protocol = frozenset({"down", "paced"})
    settable = {"client": BOTH, "server": BOTH | {"disable_active_migration"}}
    cc_names = frozenset({"cubic", "bbr"})

    def options(self, params, opts, role) -> tuple[dict, Applied]:
        values, out = super().options(params, opts, role)
        for name in STREAM_WINDOWS:
            window = out.applied.get(name)
            if window is None or (window > 0 and window & (window - 1) == 0):
                continue
            out.not_applied[name] = out.applied.pop(name)
            if window > 0:
                values[name] = min(1 << (window.bit_length() - 1), LARGEST_STREAM_WINDOW)
                out.notes.append(f"msquic takes only powers of two as stream windows: {name}={window} ran as "
                                 f"{values[name]}")
            else:
                del values[name]
                out.notes.append(f"msquic cannot hold {name}=0: it ran with its default, 65536")
        return values, out


STACK = MsQuic()
