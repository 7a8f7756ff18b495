//! What every lab server and qreplay program shares: the command line
//! (address, certificate, flow-control values, what the application chooses)
//! and a clean exit on SIGTERM. The qreplay programs' own part is in `replay`.

pub mod page;
pub mod replay;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// A lab QUIC server. Transport parameters left out keep the library's own value.
#[derive(Parser, Debug)]
pub struct Args {
    #[command(flatten)]
    pub listener: Listener,
    #[command(flatten)]
    pub parameters: TransportParameters,
    #[command(flatten)]
    pub application: Application,
}

/// What an application picks beside flow control. Library identification must
/// not key on any of it, so the lab runs each library once more with other
/// choices (scanner/identify.py, the held-out configuration). A server refuses
/// a choice its library does not let an application make.
#[derive(clap::Args, Debug, Clone)]
pub struct Application {
    /// ALPN protocols accepted, in preference order, comma-separated. The
    /// scanner offers h3; identification keys on how a library refuses the rest.
    #[arg(long = "alpn", value_delimiter = ',', default_value = "h3")]
    pub alpn: Vec<String>,
    /// Length in bytes of the server's connection IDs (absent: the library's choice).
    #[arg(long)]
    pub cid_length: Option<usize>,
    /// Accept DATAGRAM frames (RFC 9221), i.e. send max_datagram_frame_size (absent: the library's choice).
    #[arg(long)]
    pub datagrams: Option<bool>,
    /// Send disable_active_migration.
    #[arg(long)]
    pub disable_active_migration: bool,
    #[arg(long)]
    pub active_connection_id_limit: Option<u64>,
    /// Send a preferred_address (ip:port) for the client to move to.
    #[arg(long)]
    pub preferred_address: Option<SocketAddr>,
    /// Answer every new connection with a Retry.
    #[arg(long)]
    pub retry: bool,
}

impl Application {
    pub fn alpn(&self) -> Vec<Vec<u8>> {
        self.alpn.iter().map(|protocol| protocol.as_bytes().to_vec()).collect()
    }

    /// Refuses the choices set here that the library (named) cannot make.
    pub fn refuse_unsupported(&self, library: &str, unsupported: &[&str]) {
        for name in unsupported {
            let asked = match *name {
                "cid-length" => self.cid_length.is_some(),
                "datagrams" => self.datagrams.is_some(),
                "disable-active-migration" => self.disable_active_migration,
                "active-connection-id-limit" => self.active_connection_id_limit.is_some(),
                "preferred-address" => self.preferred_address.is_some(),
                "retry" => self.retry,
                other => panic!("no application choice {other}"),
            };
            if asked {
                refuse(&format!("{library} lets no application choose --{name}"));
            }
        }
    }
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
