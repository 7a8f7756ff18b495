//! qreplay's tquic client and server (lab_server_common::replay). tquic 1.6's Endpoint does the
//! QUIC work through TransportHandler callbacks; `net` moves its datagrams and fires its timers.

mod client;
mod h3;
mod net;
mod server;

use std::cmp::max;
use std::fs::File;
use std::io::BufWriter;

use lab_server_common::refuse;
use lab_server_common::replay::{keylog_file, CongestionControl, Options, Role};
use tquic::{Config, CongestionControlAlgorithm, Connection, TlsConfig};

/// tquic's own windows (Config::new in its src/lib.rs): what a pinned receiver keeps when the set
/// leaves a window out.
const TQUIC_INITIAL_MAX_DATA: u64 = 10 * 1024 * 1024;
const TQUIC_INITIAL_MAX_STREAM_DATA_BIDI_LOCAL: u64 = 5 * 1024 * 1024;
const TQUIC_INITIAL_MAX_STREAM_DATA_BIDI_REMOTE: u64 = 2 * 1024 * 1024;
/// --autotune's ceilings, as quic-go's replay/quicgo/bulk/bulk.go.
const AUTOTUNE_MAX_DATA: u64 = 24 << 20;
const AUTOTUNE_MAX_STREAM_DATA: u64 = 16 << 20;

fn main() {
    match lab_server_common::replay::start().role {
        Role::Server(args) => server::run(args),
        Role::Client(args) => client::run(args),
        Role::StreamClient(args) => client::run_stream(args),
    }
}

/// The library's configuration for one role; a value tquic cannot put on the wire is refused.
fn config(options: &Options, tls: TlsConfig, is_server: bool) -> Config {
    options.refuse_knobs(
        "tquic",
        &[
            ("cipher", "its TLS, BoringSSL, offers its own TLS 1.3 suites and lets no application choose them"),
            ("gso", "this program hands tquic's packets to the kernel one datagram a send_to, with no GSO to switch"),
            ("gro", "this program reads one datagram a recv_from, with no GRO to switch"),
            // Config::set_ack_eliciting_threshold sets how this end acknowledges, not how its peer does.
            ("ack_frequency", "tquic 1.6 does not speak the ACK frequency extension (no ACK_FREQUENCY frame)"),
        ],
    );
    let p = &options.parameters;
    let flow = &p.flow_control;
    let mut config = Config::new().unwrap_or_else(|e| refuse(&e.to_string()));
    config.set_tls_config(tls);
    // The window setters clip at the auto-tuning ceilings: lift those while setting the windows.
    config.set_max_connection_window(u64::MAX);
    config.set_max_stream_window(u64::MAX);
    let setters: [(Option<u64>, fn(&mut Config, u64)); 7] = [
        (flow.max_idle_timeout, Config::set_max_idle_timeout),
        (flow.initial_max_data, Config::set_initial_max_data),
        (flow.initial_max_stream_data_bidi_local, Config::set_initial_max_stream_data_bidi_local),
        (flow.initial_max_stream_data_bidi_remote, Config::set_initial_max_stream_data_bidi_remote),
        (flow.initial_max_stream_data_uni, Config::set_initial_max_stream_data_uni),
        (flow.initial_max_streams_bidi, Config::set_initial_max_streams_bidi),
        (flow.initial_max_streams_uni, Config::set_initial_max_streams_uni),
    ];
    for (value, set) in setters {
        if let Some(value) = value {
            set(&mut config, value);
        }
    }
    // tquic leaves a zero out of its transport parameters (trans_param.rs), so the peer would
    // read the default instead; and it ignores a connection ID limit below 2 (lib.rs).
    if let Some(size) = p.max_udp_payload_size {
        match u16::try_from(size) {
            Ok(size) if size > 0 => config.set_recv_udp_payload_size(size),
            _ => refuse(&format!("tquic cannot send max_udp_payload_size {size} (1 to 65535)")),
        }
    }
    if let Some(exponent) = p.ack_delay_exponent {
        if exponent == 0 {
            refuse("tquic cannot send ack_delay_exponent 0 (it omits the parameter, which means 3)");
        }
        config.set_ack_delay_exponent(exponent);
    }
    if let Some(delay) = p.max_ack_delay {
        if delay == 0 {
            refuse("tquic cannot send max_ack_delay 0 (it omits the parameter, which means 25 ms)");
        }
        config.set_max_ack_delay(delay);
    }
    if let Some(limit) = p.active_connection_id_limit {
        if limit < 2 {
            refuse(&format!("tquic cannot send active_connection_id_limit {limit} (at least 2)"));
        }
        config.set_active_connection_id_limit(limit);
    }
    if p.disable_active_migration {
        refuse("tquic has no setting for disable_active_migration");
    }

    // The body arrives on the client's own bidirectional stream: its bidi_local window, the
    // server's bidi_remote one.
    let initial_max_data = flow.initial_max_data.unwrap_or(TQUIC_INITIAL_MAX_DATA);
    let download_window = if is_server {
        flow.initial_max_stream_data_bidi_remote.unwrap_or(TQUIC_INITIAL_MAX_STREAM_DATA_BIDI_REMOTE)
    } else {
        flow.initial_max_stream_data_bidi_local.unwrap_or(TQUIC_INITIAL_MAX_STREAM_DATA_BIDI_LOCAL)
    };
    if options.autotune {
        config.set_max_connection_window(max(AUTOTUNE_MAX_DATA, initial_max_data));
        config.set_max_stream_window(max(AUTOTUNE_MAX_STREAM_DATA, download_window));
    } else {
        // tquic doubles a window up to its ceiling (connection/flowcontrol.rs, autotune_window):
        // with the ceiling at the advertised value the window never grows.
        config.set_max_connection_window(initial_max_data);
        config.set_max_stream_window(download_window);
    }
    config.set_congestion_control_algorithm(match options.cc {
        CongestionControl::Cubic => CongestionControlAlgorithm::Cubic,
        CongestionControl::Bbr => CongestionControlAlgorithm::Bbr,
    });
    config
}

/// Key log and qlog for a new connection, where the command line asks for them.
fn attach_logs(conn: &mut Connection, options: &Options) {
    if let Some(path) = &options.keylog {
        conn.set_keylog(Box::new(keylog_file(path)));
    }
    if let Some(dir) = &options.qlog_dir {
        let path = dir.join(format!("{}.sqlog", conn.trace_id()));
        let file = File::create(&path).unwrap_or_else(|e| refuse(&format!("qlog {}: {e}", path.display())));
        let title = conn.trace_id().to_string();
        conn.set_qlog(Box::new(BufWriter::new(file)), title, "qreplay".into());
    }
}
