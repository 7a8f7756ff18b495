//! What every lab server and qreplay program shares: the command line
//! (address, certificate, ALPN, flow-control values) and a clean exit on
//! SIGTERM. The qreplay programs' own part is in `replay`.

pub mod replay;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// The only ALPN the lab servers accept: the scanner offers h3, and library
/// identification keys on how each library refuses anything else.
pub const ALPN: &[u8] = b"h3";

/// A lab QUIC server. Transport parameters left out keep the library's own value.
#[derive(Parser, Debug)]
pub struct Args {
    #[command(flatten)]
    pub listener: Listener,
    #[command(flatten)]
    pub parameters: TransportParameters,
}

/// Where a server listens, and the certificate it shows.
#[derive(clap::Args, Debug)]
pub struct Listener {
    /// UDP address to listen on, ip:port.
    pub listen: SocketAddr,
    /// PEM certificate chain.
    #[arg(long)]
    pub cert: PathBuf,
    /// PEM private key (PKCS#8).
    #[arg(long)]
    pub key: PathBuf,
}

/// The flow-control transport parameters a lab server may be told to send.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct TransportParameters {
    /// milliseconds
    #[arg(long)]
    pub max_idle_timeout: Option<u64>,
    #[arg(long)]
    pub initial_max_data: Option<u64>,
    #[arg(long)]
    pub initial_max_stream_data_bidi_local: Option<u64>,
    #[arg(long)]
    pub initial_max_stream_data_bidi_remote: Option<u64>,
    #[arg(long)]
    pub initial_max_stream_data_uni: Option<u64>,
    #[arg(long)]
    pub initial_max_streams_bidi: Option<u64>,
    #[arg(long)]
    pub initial_max_streams_uni: Option<u64>,
}

/// The parsed command line; SIGTERM from now on ends the process with status 0
/// (the lab stops its servers with SIGTERM and expects them gone at once).
pub fn start() -> Args {
    let args = Args::parse();
    exit_on_signals();
    args
}

fn exit_on_signals() {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])
        .expect("signal handler");
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            // _exit: nothing needs flushing, and exit's library destructors can
            // hang (msquic's waits for the connections the main thread holds).
            signal_hook::low_level::exit(0);
        }
    });
}

/// A one-line error and status 2, for settings the library cannot express.
pub fn refuse(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(2);
}
