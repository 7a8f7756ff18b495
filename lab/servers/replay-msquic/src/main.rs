//! qreplay's msquic client and server (lab_server_common::replay): msquic 2.5.1, the crate's own
//! build of libmsquic with quictls, which sits beside the binary.

mod client;
mod server;

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::fs::File;
use std::io::Write;
use std::mem::size_of;
use std::path::Path;

use lab_server_common::refuse;
use lab_server_common::replay::{self, CipherSuite, CongestionControl, Options, Role};
use msquic::ffi::{
    QUIC_CONGESTION_CONTROL_ALGORITHM_QUIC_CONGESTION_CONTROL_ALGORITHM_BBR as BBR,
    QUIC_CONGESTION_CONTROL_ALGORITHM_QUIC_CONGESTION_CONTROL_ALGORITHM_CUBIC as CUBIC, QUIC_PARAM_CONN_SETTINGS,
    QUIC_PARAM_CONN_TLS_SECRETS, QUIC_SETTINGS,
};
use msquic::{
    AllowedCipherSuiteFlags, Api, BufferRef, Configuration, Connection, CredentialConfig, QuicTlsSecrets, Registration,
    RegistrationConfig, Settings, Status, PARAM_CONFIGURATION_SETTINGS,
};

/// msquic's defaults for the windows a command line leaves out (quicdef.h).
const DEFAULT_STREAM_WINDOW: u32 = 64 << 10;
const DEFAULT_CONNECTION_WINDOW: u32 = 16 << 20;
/// --autotune's ceiling for a stream window, as replay/quicgo/bulk's.
const AUTOTUNE_STREAM_WINDOW: u32 = 16 << 20;
/// What msquic adds to its delayed-ACK timer in the max_ack_delay it advertises (QuicConnGetAckDelay):
/// its timer resolution, clock_getres(CLOCK_MONOTONIC) rounded down to ms plus 1 (library.c).
const TIMER_RESOLUTION_MS: u64 = 1;

fn main() {
    match replay::start().role {
        Role::Server(args) => server::run(args),
        Role::Client(args) => client::run(args),
        Role::StreamClient(args) => client::run_stream(args),
    }
}

#[derive(PartialEq)]
enum Side {
    Client,
    Server,
}

/// What both roles configure msquic with.
struct Endpoint {
    settings: QUIC_SETTINGS,
    /// msquic doubles a stream's receive window whenever the application drains it within an RTT, for as
    /// long as the window is below the connection's ConnFlowControlWindow setting (stream_recv.c,
    /// QuicStreamOnBytesDelivered). That setting becomes the advertised initial_max_data when the handshake
    /// starts and is only a ceiling afterwards, so setting it once the handshake is done bounds the growth
    /// without touching the advertised windows.
    stream_window_ceiling: u32,
    /// --cipher: the one TLS 1.3 suite this end allows (the client offers, the server accepts).
    cipher: Option<CipherSuite>,
}

impl Endpoint {
    fn new(options: &Options, side: Side) -> Endpoint {
        options.refuse_knobs(
            "msquic",
            &[
                (
                    "gso",
                    "msquic 2.5 has no setting for it (its Linux datapath uses UDP GSO wherever the kernel has it)",
                ),
                ("gro", "msquic 2.5 has no setting for it"),
                // core/send.c asks the peer for an ACK every send batch's datagrams + 1, by itself.
                ("ack_frequency", "msquic 2.5 chooses its ACK_FREQUENCY frames itself, with no setting for them"),
            ],
        );
        let p = &options.parameters;
        let unsupported = [
            (
                "set max_udp_payload_size (it advertises what the interface MTU allows)",
                p.max_udp_payload_size.is_some(),
            ),
            ("set ack_delay_exponent (always 8)", p.ack_delay_exponent.is_some()),
            ("set active_connection_id_limit (always 4)", p.active_connection_id_limit.is_some()),
            ("send disable_active_migration from a client", side == Side::Client && p.disable_active_migration),
            ("write qlog (it traces through LTTng only)", options.qlog_dir.is_some()),
        ];
        if let Some((what, _)) = unsupported.iter().find(|(_, given)| *given) {
            refuse(&format!("msquic cannot {what}"));
        }
        let fc = &p.flow_control;
        let algorithm = match options.cc {
            CongestionControl::Cubic => CUBIC,
            CongestionControl::Bbr => BBR,
        };
        let connection_window =
            fc.initial_max_data.map_or(DEFAULT_CONNECTION_WINDOW, |v| narrow(v, "initial_max_data"));
        let mut settings = Settings::new()
            .set_CongestionControlAlgorithm(algorithm as u16)
            .set_ConnFlowControlWindow(connection_window);
        // msquic allows the peer no bidirectional stream by default: a server must, for the request.
        if let Some(count) = fc.initial_max_streams_bidi.or((side == Side::Server).then_some(100)) {
            settings = settings.set_PeerBidiStreamCount(narrow(count, "initial_max_streams_bidi"));
        }
        if let Some(ms) = fc.max_idle_timeout {
            settings = settings.set_IdleTimeoutMs(ms);
        }
        if let Some(window) = fc.initial_max_stream_data_bidi_local {
            settings = settings.set_StreamRecvWindowBidiLocalDefault(stream_window(window, "bidi_local"));
        }
        if let Some(window) = fc.initial_max_stream_data_bidi_remote {
            settings = settings.set_StreamRecvWindowBidiRemoteDefault(stream_window(window, "bidi_remote"));
        }
        if let Some(window) = fc.initial_max_stream_data_uni {
            settings = settings.set_StreamRecvWindowUnidiDefault(stream_window(window, "uni"));
        }
        if let Some(count) = fc.initial_max_streams_uni {
            settings = settings.set_PeerUnidiStreamCount(narrow(count, "initial_max_streams_uni"));
        }
        if let Some(ms) = p.max_ack_delay {
            let timer = match ms {
                0 => 0, // no delayed ACKs, advertised as 0
                1 => refuse("msquic cannot advertise max_ack_delay 1: it adds its 1 ms timer resolution to any timer"),
                _ => ms - TIMER_RESOLUTION_MS,
            };
            settings = settings.set_MaxAckDelayMs(narrow(timer, "max_ack_delay"));
        }
        let mut settings = *settings.as_ffi_ref();
        if p.disable_active_migration {
            // The crate's setter can only switch it on.
            unsafe { settings.__bindgen_anon_1.IsSet.set_MigrationEnabled(1) };
            settings.set_MigrationEnabled(0);
        }

        // The one stream the download opens: the client's own, the server's peer's.
        let download_window = match side {
            Side::Client => fc.initial_max_stream_data_bidi_local,
            Side::Server => fc.initial_max_stream_data_bidi_remote,
        };
        let download_window = download_window.map_or(DEFAULT_STREAM_WINDOW, |w| w as u32);
        let stream_window_ceiling = if options.autotune {
            connection_window.min(AUTOTUNE_STREAM_WINDOW)
        } else {
            download_window.min(connection_window)
        };
        Endpoint { settings, stream_window_ceiling, cipher: options.cipher }
    }

    fn configuration(&self, registration: &Registration, credential: CredentialConfig) -> Configuration {
        // QUIC_CREDENTIAL_FLAG_SET_ALLOWED_CIPHER_SUITES: quictls then offers or accepts only these.
        let credential = match self.cipher {
            None => credential,
            Some(cipher) => credential.set_allowed_cipher_suites(match cipher {
                CipherSuite::Aes128GcmSha256 => AllowedCipherSuiteFlags::AES_128_GCM_SHA256,
                CipherSuite::Aes256GcmSha384 => AllowedCipherSuiteFlags::AES_256_GCM_SHA384,
                CipherSuite::Chacha20Poly1305Sha256 => AllowedCipherSuiteFlags::CHACHA20_POLY1305_SHA256,
            }),
        };
        let alpn = [BufferRef::from(replay::ALPN)];
        let configuration =
            Configuration::open(registration, &alpn, None).unwrap_or_else(|e| msquic_refused("configuration", e));
        unsafe {
            Api::set_param(
                configuration.as_raw(),
                PARAM_CONFIGURATION_SETTINGS,
                size_of::<QUIC_SETTINGS>() as u32,
                &self.settings as *const QUIC_SETTINGS as *const c_void,
            )
        }
        .unwrap_or_else(|e| msquic_refused("these settings", e));
        configuration.load_credential(&credential).unwrap_or_else(|e| msquic_refused("the credential", e));
        configuration
    }

    /// Once the handshake is done (see `stream_window_ceiling`).
    fn bound_window_growth(&self, connection: &Connection) -> Result<(), Status> {
        let ceiling = Settings::new().set_ConnFlowControlWindow(self.stream_window_ceiling);
        unsafe {
            Api::set_param(
                connection.as_raw(),
                QUIC_PARAM_CONN_SETTINGS,
                size_of::<QUIC_SETTINGS>() as u32,
                ceiling.as_ffi_ref() as *const QUIC_SETTINGS as *const c_void,
            )
        }
    }
}

fn registration() -> Registration {
    Registration::new(&RegistrationConfig::default()).unwrap_or_else(|e| msquic_refused("a registration", e))
}

fn msquic_refused(what: &str, status: Status) -> ! {
    refuse(&format!("msquic refused {what}: {status:?}"))
}

fn narrow<T: TryFrom<u64>>(value: u64, name: &str) -> T {
    T::try_from(value).unwrap_or_else(|_| refuse(&format!("msquic cannot hold {name} {value}: too large")))
}

/// msquic's receive buffers are circular buffers of a power-of-two size (settings.c refuses others).
fn stream_window(value: u64, kind: &str) -> u32 {
    let window: u32 = narrow(value, &format!("initial_max_stream_data_{kind}"));
    if !window.is_power_of_two() {
        refuse(&format!(
            "msquic takes only powers of two as stream windows, not initial_max_stream_data_{kind} {value}"
        ));
    }
    window
}

/// Where a connection's TLS secrets go: msquic fills the buffer during the handshake, the key log gets
/// them once it is done.
struct Keylog {
    file: File,
}

/// A connection's TLS secrets as msquic writes them; it must outlive the connection.
type Secrets = Box<UnsafeCell<QuicTlsSecrets>>;

impl Keylog {
    fn open(path: &Path) -> Keylog {
        Keylog { file: replay::keylog_file(path) }
    }

    /// Before the connection starts (a server's: in its NewConnection event).
    fn capture(connection: &Connection) -> Secrets {
        let secrets: Secrets = Box::new(UnsafeCell::new(unsafe { std::mem::zeroed() }));
        unsafe {
            Api::set_param(
                connection.as_raw(),
                QUIC_PARAM_CONN_TLS_SECRETS,
                size_of::<QuicTlsSecrets>() as u32,
                secrets.get() as *const c_void,
            )
        }
        .unwrap_or_else(|e| msquic_refused("a TLS secrets buffer", e));
        secrets
    }

    /// After the handshake, in NSS key log format.
    fn record(&self, secrets: &Secrets) {
        let secrets = unsafe { *secrets.get() };
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let client_random = hex(&secrets.client_random);
        // QUIC_TLS_SECRETS.IsSet's bits (msquic.h): ClientRandom, ClientEarlyTrafficSecret, then these.
        let lines: String = [
            (2, "CLIENT_HANDSHAKE_TRAFFIC_SECRET", &secrets.client_handshake_traffic_secret),
            (3, "SERVER_HANDSHAKE_TRAFFIC_SECRET", &secrets.server_handshake_traffic_secret),
            (4, "CLIENT_TRAFFIC_SECRET_0", &secrets.client_traffic_secret0),
            (5, "SERVER_TRAFFIC_SECRET_0", &secrets.server_traffic_secret0),
        ]
        .iter()
        .filter(|(bit, _, _)| secrets.flags & 1 != 0 && secrets.flags & (1 << bit) != 0)
        .map(|(_, label, secret)| {
            format!("{label} {client_random} {}\n", hex(&secret[..secrets.secret_length as usize]))
        })
        .collect();
        // One write per connection, so that concurrent connections do not interleave lines.
        let _ = (&self.file).write_all(lines.as_bytes());
    }
}
