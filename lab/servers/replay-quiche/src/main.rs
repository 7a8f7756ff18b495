//! qreplay's quiche client and server (lab_server_common::replay).
//!
//! quiche 0.30 has no I/O of its own: each role is a loop around one
//! nonblocking UDP socket, waiting in ppoll(2) until a datagram arrives or
//! quiche's next timer is due.

mod client;
mod h3;
mod server;

use std::collections::hash_map::RandomState;
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{ErrorKind, LineWriter};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use lab_server_common::refuse;
use lab_server_common::replay::{self, CongestionControl, Options, Role, ALPN};

/// The largest value a QUIC varint holds; quiche silently clamps larger settings to it.
const MAX_VARINT: u64 = (1 << 62) - 1;
/// Ceilings of quiche's own window auto-tuning (its MAX_CONNECTION_WINDOW and MAX_STREAM_WINDOW),
/// the same as quic-go's, which the other replay programs use.
const AUTOTUNE_CONNECTION_WINDOW: u64 = 24 << 20;
const AUTOTUNE_STREAM_WINDOW: u64 = 16 << 20;
/// What we send at most: a full 1500-byte Ethernet frame over IPv6 (quiche's default is 1200).
const MAX_SEND_UDP_PAYLOAD: usize = 1452;
/// Packets the pacer releases within this time go out at once: a wake-up per packet costs more
/// than the gap between packets at hundreds of Mbit/s.
const PACING_HORIZON: Duration = Duration::from_millis(1);

fn main() {
    match replay::start().role {
        Role::Server(args) => server::run(args),
        Role::Client(args) => client::run(args),
        Role::StreamClient(args) => client::run_stream(args),
    }
}

/// A quiche configuration carrying the options. `download_window` is the initial window of the
/// stream this endpoint receives on (the client's bidi_local, the server's bidi_remote): quiche
/// has one stream-window ceiling for all streams, and pinning means that ceiling is this window.
fn config(options: &Options, download_window: Option<u64>) -> quiche::Config {
    options.refuse_knobs(
        "quiche",
        &[
            ("cipher", "its TLS, BoringSSL, offers its own TLS 1.3 suites and lets no application choose them"),
            ("gso", "this program hands quiche's packets to the kernel one datagram a send_to, with no GSO to switch"),
            ("gro", "this program reads one datagram a recv_from, with no GRO to switch"),
            ("ack_frequency", "quiche 0.30 does not speak the ACK frequency extension (no ACK_FREQUENCY frame)"),
        ],
    );
    let parameters = &options.parameters;
    let flow = &parameters.flow_control;
    let numbers = [
        ("max-idle-timeout", flow.max_idle_timeout),
        ("initial-max-data", flow.initial_max_data),
        ("initial-max-stream-data-bidi-local", flow.initial_max_stream_data_bidi_local),
        ("initial-max-stream-data-bidi-remote", flow.initial_max_stream_data_bidi_remote),
        ("initial-max-stream-data-uni", flow.initial_max_stream_data_uni),
        ("initial-max-streams-bidi", flow.initial_max_streams_bidi),
        ("initial-max-streams-uni", flow.initial_max_streams_uni),
        ("max-udp-payload-size", parameters.max_udp_payload_size),
        ("max-ack-delay", parameters.max_ack_delay),
        ("active-connection-id-limit", parameters.active_connection_id_limit),
    ];
    for (name, value) in numbers {
        if value.is_some_and(|v| v > MAX_VARINT) {
            refuse(&format!("--{name} above 2^62-1: quiche would clamp it"));
        }
    }
    // quiche clamps the exponent to 20 and ignores connection ID limits below 2 (quiche/src/lib.rs).
    if parameters.ack_delay_exponent.is_some_and(|v| v > quiche::MAX_ACK_DELAY_EXPONENT) {
        refuse("--ack-delay-exponent above 20: quiche would clamp it");
    }
    if parameters.active_connection_id_limit.is_some_and(|v| v < 2) {
        refuse("--active-connection-id-limit below 2: quiche ignores it");
    }

    let mut config = quiche::Config::new(quiche::PROTOCOL_VERSION).expect("quiche config");
    config.set_application_protos(&[ALPN]).expect("ALPN");
    // quiche's own defaults are 0 (no data, no streams, no idle timeout): these are its example programs'.
    let initial_max_data = flow.initial_max_data.unwrap_or(10_000_000);
    config.set_max_idle_timeout(flow.max_idle_timeout.unwrap_or(30_000));
    config.set_initial_max_data(initial_max_data);
    config.set_initial_max_stream_data_bidi_local(flow.initial_max_stream_data_bidi_local.unwrap_or(1_000_000));
    config.set_initial_max_stream_data_bidi_remote(flow.initial_max_stream_data_bidi_remote.unwrap_or(1_000_000));
    config.set_initial_max_stream_data_uni(flow.initial_max_stream_data_uni.unwrap_or(1_000_000));
    config.set_initial_max_streams_bidi(flow.initial_max_streams_bidi.unwrap_or(100));
    config.set_initial_max_streams_uni(flow.initial_max_streams_uni.unwrap_or(100));
    if let Some(size) = parameters.max_udp_payload_size {
        config.set_max_recv_udp_payload_size(size as usize);
    }
    if let Some(exponent) = parameters.ack_delay_exponent {
        config.set_ack_delay_exponent(exponent);
    }
    if let Some(delay) = parameters.max_ack_delay {
        config.set_max_ack_delay(delay);
    }
    if let Some(limit) = parameters.active_connection_id_limit {
        config.set_active_connection_id_limit(limit);
    }
    config.set_disable_active_migration(parameters.disable_active_migration);
    config.set_max_send_udp_payload_size(MAX_SEND_UDP_PAYLOAD);

    // quiche always auto-tunes (it doubles a window that is used up within two RTTs), up to these
    // ceilings; a ceiling at the advertised value pins the window (quiche/src/flowcontrol.rs).
    let stream_window = download_window.unwrap_or(1_000_000);
    if options.autotune {
        config.set_max_connection_window(initial_max_data.max(AUTOTUNE_CONNECTION_WINDOW));
        config.set_max_stream_window(stream_window.max(AUTOTUNE_STREAM_WINDOW));
    } else {
        config.set_max_connection_window(initial_max_data);
        config.set_max_stream_window(stream_window);
    }

    config.set_cc_algorithm(match options.cc {
        CongestionControl::Cubic => quiche::CongestionControlAlgorithm::CUBIC,
        CongestionControl::Bbr => quiche::CongestionControlAlgorithm::Bbr2Gcongestion,
    });
    if options.keylog.is_some() {
        config.log_keys();
    }
    config
}

/// Key log and qlog for a new connection, where the options ask for them.
fn trace(connection: &mut quiche::Connection, options: &Options, role: &str) {
    if let Some(path) = &options.keylog {
        connection.set_keylog(Box::new(replay::keylog_file(path)));
    }
    if let Some(dir) = &options.qlog_dir {
        let id: String = connection.source_id().iter().map(|b| format!("{b:02x}")).collect();
        let path = dir.join(format!("{role}-{id}.sqlog"));
        let file = File::create(&path).unwrap_or_else(|e| refuse(&format!("qlog {}: {e}", path.display())));
        // One write per event (each ends in a newline): a SIGTERM loses nothing written, and
        // quiche's serializer's many small writes do not each cost a system call.
        connection.set_qlog(Box::new(LineWriter::new(file)), format!("replay-quiche {role}"), id);
    }
}

/// A nonblocking UDP socket bound to `address`, or a one-line refusal.
fn bind(address: SocketAddr) -> UdpSocket {
    let socket = UdpSocket::bind(address).unwrap_or_else(|e| refuse(&format!("bind {address}: {e}")));
    socket.set_nonblocking(true).expect("nonblocking socket");
    socket
}

/// Sleeps until the socket has `events` (POLLIN, POLLOUT) or `until` passes (None: no limit).
fn wait(socket: &UdpSocket, events: libc::c_short, until: Option<Instant>) {
    let mut poll = libc::pollfd { fd: socket.as_raw_fd(), events, revents: 0 };
    let left = until.map(|t| t.saturating_duration_since(Instant::now()));
    let timespec = left.map(|d| libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as _ });
    let timeout = timespec.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: one valid pollfd, a timespec that outlives the call, no signal mask.
    unsafe { libc::ppoll(&mut poll, 1, timeout, std::ptr::null()) };
}

/// Sends the packets quiche has for this connection now, up to the first one its pacer releases
/// later (that one goes out early; the sender then waits for its release time, which this returns).
/// Only BBR paces; quiche's CUBIC releases every packet at once. A full socket buffer waits rather
/// than drops, so that quiche's loss detection sees only the link's losses.
fn flush(socket: &UdpSocket, connection: &mut quiche::Connection, out: &mut [u8]) -> Option<Instant> {
    loop {
        let (len, info) = match connection.send(out) {
            Ok(v) => v,
            Err(quiche::Error::Done) => return None,
            Err(e) => {
                let _ = connection.close(false, 0x1, e.to_string().as_bytes());
                return None;
            }
        };
        loop {
            match socket.send_to(&out[..len], info.to) {
                Ok(_) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait(socket, libc::POLLOUT, None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // The packet is lost; quiche recovers as from any loss.
                Err(_) => break,
            }
        }
        let horizon = Instant::now() + PACING_HORIZON;
        if info.at > horizon {
            return Some(info.at - PACING_HORIZON);
        }
    }
}

/// `len` unpredictable bytes derived from `seed` (std's hasher keys come from the OS's random source).
fn derive_id(keys: &RandomState, seed: &[u8], len: usize) -> Vec<u8> {
    (0..len.div_ceil(8)).flat_map(|i| keys.hash_one((seed, i)).to_le_bytes()).take(len).collect()
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
