//! The command line's options as quinn configuration: what quinn lets an application set, refusals
//! for what it does not, TLS (rustls with ring, limited to --cipher's suite), the key log and qlog files.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::{Arc, Mutex};

use lab_server_common::refuse;
use lab_server_common::replay::{keylog_file, CipherSuite, CongestionControl, Options, ReplayParameters};
use quinn::congestion::{BbrConfig, CubicConfig};
use quinn::{AckFrequencyConfig, EndpointConfig, IdleTimeout, QlogConfig, QlogStream, TransportConfig, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, KeyLog, SignatureScheme};

/// What quinn-proto 0.11 sends whatever it is told (transport_parameters.rs: the RFC defaults
/// ack_delay_exponent 3 and max_ack_delay 25; cid_queue.rs: CidQueue::LEN 5 connection IDs).
const FIXED: [(&str, u64); 3] = [("ack_delay_exponent", 3), ("max_ack_delay", 25), ("active_connection_id_limit", 5)];
/// The largest stream count a transport parameter may carry (RFC 9000, 4.6).
const MAX_STREAM_COUNT: u64 = 1 << 60;
/// Socket buffers that hold a few milliseconds at the link rates qreplay emulates, so that a burst is
/// not dropped before quinn reads it (the kernel caps them at net.core.[rw]mem_max).
const SOCKET_BUFFER: usize = 8 << 20;

pub enum Side {
    Client,
    Server,
}

fn varint(name: &str, value: u64) -> VarInt {
    VarInt::from_u64(value).unwrap_or_else(|_| refuse(&format!("{name}={value} does not fit a QUIC varint")))
}

fn stream_count(name: &str, value: u64) -> VarInt {
    if value > MAX_STREAM_COUNT {
        refuse(&format!("{name} may be at most 2^60"));
    }
    varint(name, value)
}

/// Refusals for the options quinn has no setting for; `side` decides disable_active_migration, which
/// only a server config carries (ServerConfig::migration).
pub fn check(options: &Options, side: &Side) {
    options.refuse_knobs("quinn", &[("gro", "quinn-udp turns GRO on wherever the kernel has it, with no switch")]);
    if options.autotune {
        refuse("quinn 0.11 has no window auto-tuning: its windows always stay at the advertised values");
    }
    let p = &options.parameters;
    let requested = [p.ack_delay_exponent, p.max_ack_delay, p.active_connection_id_limit];
    for ((name, fixed), value) in FIXED.iter().zip(requested) {
        if value.is_some_and(|value| value != *fixed) {
            refuse(&format!("quinn always sends {name}={fixed}"));
        }
    }
    if p.disable_active_migration && matches!(side, Side::Client) {
        refuse("quinn's client cannot send disable_active_migration");
    }
}

/// Transport parameters, flow control and congestion control of one connection.
pub fn transport(options: &Options, qlog: Option<QlogStream>) -> TransportConfig {
    let p = &options.parameters.flow_control;
    let mut transport = TransportConfig::default();
    if let Some(ms) = p.max_idle_timeout {
        // 0 is "no idle timeout", which quinn spells None (and then sends no max_idle_timeout).
        transport.max_idle_timeout((ms > 0).then(|| IdleTimeout::from(varint("max_idle_timeout", ms))));
    }
    if let Some(value) = p.initial_max_data {
        transport.receive_window(varint("initial_max_data", value));
    }
    // quinn has one receive window for every stream, sent as all three stream parameters.
    let windows =
        [p.initial_max_stream_data_bidi_local, p.initial_max_stream_data_bidi_remote, p.initial_max_stream_data_uni];
    if let Some(value) = windows.iter().flatten().next() {
        if windows.iter().flatten().any(|window| window != value) {
            refuse("quinn sends one stream window: give the initial_max_stream_data_* the same value");
        }
        transport.stream_receive_window(varint("initial_max_stream_data", *value));
    }
    if let Some(value) = p.initial_max_streams_bidi {
        transport.max_concurrent_bidi_streams(stream_count("initial_max_streams_bidi", value));
    }
    if let Some(value) = p.initial_max_streams_uni {
        transport.max_concurrent_uni_streams(stream_count("initial_max_streams_uni", value));
    }
    // The peer's flow control is what qreplay measures: quinn's own cap on unacknowledged data
    // (send_window, 10 MB by default) must not stop the sender first.
    transport.send_window(u64::MAX);
    match options.cc {
        CongestionControl::Cubic => transport.congestion_controller_factory(Arc::new(CubicConfig::default())),
        CongestionControl::Bbr => transport.congestion_controller_factory(Arc::new(BbrConfig::default())),
    };
    // quinn always advertises min_ack_delay, so every quinn peer takes ACK_FREQUENCY frames; set on both
    // ends, the threshold applies to whichever end sends the data. reordering_threshold and max_ack_delay
    // keep quinn's defaults (packet_threshold - 1, the peer's own max_ack_delay).
    if let Some(n) = options.ack_frequency {
        let mut ack_frequency = AckFrequencyConfig::default();
        ack_frequency.ack_eliciting_threshold(varint("ack_frequency - 1", n - 1));
        transport.ack_frequency_config(Some(ack_frequency));
    }
    // Off: quinn hands the socket one datagram a transmit (quinn-proto's poll_transmit), never a GSO batch.
    if let Some(gso) = options.gso {
        transport.enable_segmentation_offload(gso);
    }
    transport.qlog_stream(qlog);
    transport
}

/// The endpoint's socket, bound to `addr`, with quinn's endpoint-wide parameter (max_udp_payload_size).
pub fn endpoint(
    parameters: &ReplayParameters,
    server: Option<quinn::ServerConfig>,
    addr: SocketAddr,
) -> quinn::Endpoint {
    let mut config = EndpointConfig::default();
    if let Some(value) = parameters.max_udp_payload_size {
        let value = u16::try_from(value).unwrap_or(0);
        config
            .max_udp_payload_size(value)
            .unwrap_or_else(|_| refuse("quinn takes a max_udp_payload_size from 1200 to 65527"));
    }
    let socket = UdpSocket::bind(addr).unwrap_or_else(|e| refuse(&format!("bind {addr}: {e}")));
    let state = quinn::udp::UdpSocketState::new((&socket).into()).unwrap_or_else(|e| refuse(&e.to_string()));
    // Best effort: smaller buffers only cost goodput, which is what the run measures.
    let _ = state.set_recv_buffer_size((&socket).into(), SOCKET_BUFFER);
    let _ = state.set_send_buffer_size((&socket).into(), SOCKET_BUFFER);
    quinn::Endpoint::new(config, server, socket, Arc::new(quinn::TokioRuntime))
        .unwrap_or_else(|e| refuse(&format!("endpoint on {addr}: {e}")))
}

/// ring's provider, with --cipher's suite as its only cipher suite when one is given: the client then
/// offers only that suite and the server accepts only that one.
pub fn crypto_provider(cipher: Option<CipherSuite>) -> Arc<CryptoProvider> {
    use rustls::crypto::ring::cipher_suite::{
        TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384, TLS13_CHACHA20_POLY1305_SHA256,
    };
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(cipher) = cipher {
        provider.cipher_suites = vec![match cipher {
            CipherSuite::Aes128GcmSha256 => TLS13_AES_128_GCM_SHA256,
            CipherSuite::Aes256GcmSha384 => TLS13_AES_256_GCM_SHA384,
            CipherSuite::Chacha20Poly1305Sha256 => TLS13_CHACHA20_POLY1305_SHA256,
        }];
    }
    Arc::new(provider)
}

/// The suite of the Initial packets, AES-128-GCM whatever the handshake negotiates (RFC 9001, 5.2):
/// given to quinn apart, since it looks for it among the provider's suites, which --cipher may leave out.
pub fn initial_suite() -> rustls::quic::Suite {
    rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(|suite| suite.quic_suite())
        .expect("ring's AES-128-GCM suite serves QUIC")
}

/// A qlog file that the application can flush while quinn still holds it (quinn flushes only when a
/// connection's state is dropped, which a SIGTERM may never let happen).
#[derive(Clone)]
pub struct QlogFile(Arc<Mutex<BufWriter<File>>>);

impl QlogFile {
    pub fn create(dir: &Path, name: &str) -> (Self, QlogStream) {
        let path = dir.join(name);
        let file = File::create(&path).unwrap_or_else(|e| refuse(&format!("qlog {}: {e}", path.display())));
        let file = QlogFile(Arc::new(Mutex::new(BufWriter::new(file))));
        let mut config = QlogConfig::default();
        config.writer(Box::new(file.clone()));
        let stream = config.into_stream().unwrap_or_else(|| refuse(&format!("qlog {}: cannot start", path.display())));
        (file, stream)
    }
}

impl Write for QlogFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("qlog writer").write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.lock().expect("qlog writer").flush()
    }
}

/// rustls's secrets in NSS key log format, appended to the --keylog file.
#[derive(Debug)]
pub struct KeyLogFile(Mutex<File>);

impl KeyLogFile {
    pub fn open(path: &Path) -> Arc<Self> {
        Arc::new(KeyLogFile(Mutex::new(keylog_file(path))))
    }
}

impl KeyLog for KeyLogFile {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let line = format!("{label} {} {}\n", hex(client_random), hex(secret));
        // A lost key log line spoils only the capture's decryption, never the download.
        let _ = self.0.lock().expect("key log").write_all(line.as_bytes());
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The client's verifier: the lab's certificates are self-signed, so any certificate goes, but the
/// handshake signature is still checked (TLS needs it to bind the key exchange).
#[derive(Debug)]
pub struct AnyCertificate(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, signature, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, signature, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
