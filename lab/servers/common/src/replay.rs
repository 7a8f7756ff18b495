//! What every qreplay program shares: its command line (one subcommand per
//! role, the twelve transport parameters by their RFC 9000 names with dashes),
//! the bulk download it speaks, and the one JSON line it prints.
//!
//! The download is hq-interop (HTTP/0.9 over QUIC, as the Interop Runner's
//! goodput test): the client opens one bidirectional stream, sends
//! `GET /<size>\r\n` and a FIN, and the server answers with `<size>` bytes and
//! a FIN. Every replay program speaks it, so any client can download from any
//! server.

use std::fs::{File, OpenOptions};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

/// The ALPN of the bulk download (the Interop Runner's name for HTTP/0.9).
pub const ALPN: &[u8] = b"hq-interop";
/// Longest request line a server reads before giving up on the stream.
pub const MAX_REQUEST: usize = 64;

/// A qreplay program: a bulk-download server or client of one QUIC library.
#[derive(Parser, Debug)]
pub struct Cli {
    #[command(subcommand)]
    pub role: Role,
}

#[derive(Subcommand, Debug)]
pub enum Role {
    /// Serve `GET /<size>` with <size> bytes, to any number of connections.
    Server(ServerArgs),
    /// Download <size> bytes once, then print {"bytes", "duration_s", ...} as one JSON line.
    Client(ClientArgs),
}

#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    #[command(flatten)]
    pub listener: crate::Listener,
    #[command(flatten)]
    pub options: Options,
}

#[derive(clap::Args, Debug)]
pub struct ClientArgs {
    /// The server's UDP address, ip:port.
    pub connect: SocketAddr,
    /// Bytes to download.
    #[arg(long)]
    pub size: u64,
    /// Give up (exit 1) after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
    #[command(flatten)]
    pub options: Options,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CongestionControl {
    Cubic,
    Bbr,
}

/// What both roles take besides their addresses.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Congestion control of this endpoint's sender.
    #[arg(long, value_enum, default_value_t = CongestionControl::Cubic)]
    pub cc: CongestionControl,
    /// Let the library grow its flow-control windows; without it they stay at the advertised values.
    #[arg(long)]
    pub autotune: bool,
    /// Append the TLS secrets in NSS key log format (what tshark reads) to this file.
    #[arg(long)]
    pub keylog: Option<PathBuf>,
    /// Write qlog files into this directory, where the library can.
    #[arg(long)]
    pub qlog_dir: Option<PathBuf>,
    #[command(flatten)]
    pub parameters: ReplayParameters,
}

/// The twelve transport parameters qreplay sets; absent ones keep the library's own value.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ReplayParameters {
    #[command(flatten)]
    pub flow_control: crate::TransportParameters,
    #[arg(long)]
    pub max_udp_payload_size: Option<u64>,
    #[arg(long)]
    pub ack_delay_exponent: Option<u64>,
    /// milliseconds
    #[arg(long)]
    pub max_ack_delay: Option<u64>,
    #[arg(long)]
    pub disable_active_migration: bool,
    #[arg(long)]
    pub active_connection_id_limit: Option<u64>,
}

/// The parsed command line, with SIGTERM and SIGINT ending the process at once (status 0).
pub fn start() -> Cli {
    let cli = Cli::parse();
    crate::exit_on_signals();
    cli
}

/// The request line for a download of `size` bytes.
pub fn request(size: u64) -> Vec<u8> {
    format!("GET /{size}\r\n").into_bytes()
}

/// The size a request asks for: `Ok(None)` while the line is incomplete, `Err` for anything that is
/// not `GET /<digits>` (HTTP/0.9 clients may end the line with `\n` alone, or end the stream instead).
pub fn requested_size(received: &[u8], finished: bool) -> Result<Option<u64>, String> {
    let end = received.iter().position(|b| *b == b'\n').or(finished.then_some(received.len()));
    let Some(end) = end else {
        return if received.len() > MAX_REQUEST { Err("request line too long".into()) } else { Ok(None) };
    };
    let line = String::from_utf8_lossy(&received[..end]);
    line.trim_end()
        .strip_prefix("GET /")
        .and_then(|size| size.parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| format!("not a request for /<size>: {:?}", line.trim_end()))
}

/// A buffer of body bytes to send from; the content is not part of any measurement.
pub fn body_chunk() -> Vec<u8> {
    vec![b'q'; 64 * 1024]
}

/// The key log file, opened for appending (created if needed), or a one-line refusal.
pub fn keylog_file(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| crate::refuse(&format!("key log {}: {e}", path.display())))
}

/// The client's result, as qreplay reads it: the last JSON line on stdout. `duration` runs from the
/// request to the last byte of the body.
pub fn print_client_result(bytes: u64, duration: Duration, handshake: Duration) {
    println!(
        "{{\"bytes\": {bytes}, \"duration_s\": {:.6}, \"handshake_s\": {:.6}}}",
        duration.as_secs_f64(),
        handshake.as_secs_f64()
    );
}

/// The sender's statistics of a finished connection, for qreplay's counters: one JSON line of
/// `sender_<name>` fields (packets sent and lost, RTT, congestion window: whatever the library tells).
pub fn print_sender_stats(stats: &[(&str, f64)]) {
    let fields: Vec<String> = stats.iter().map(|(name, value)| format!("\"sender_{name}\": {value}")).collect();
    println!("{{{}}}", fields.join(", "));
}

/// A client that failed: one line on stderr, exit status 1.
pub fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        assert_eq!(requested_size(&request(3_000_000), false), Ok(Some(3_000_000)));
        assert_eq!(requested_size(b"GET /12", false), Ok(None));
        assert_eq!(requested_size(b"GET /12", true), Ok(Some(12)));
        assert_eq!(requested_size(b"GET /12\n", false), Ok(Some(12)));
        assert!(requested_size(b"GET /index.html\r\n", false).is_err());
        assert!(requested_size(&[b'x'; 100], false).is_err());
    }
}
