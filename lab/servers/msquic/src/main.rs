//! msquic 2.5.1 (the crate's bundled msquic with quictls, as libmsquic.so.2):
//! accepts h3 handshakes and holds each connection until the client leaves.

use std::sync::Arc;

use lab_server_common::refuse;
use msquic::{
    Addr, BufferRef, CertificateFile, Configuration, Connection, ConnectionEvent, ConnectionRef, Credential,
    CredentialConfig, Listener, ListenerEvent, Registration, RegistrationConfig, Settings,
};

fn narrow<T: TryFrom<u64>>(value: u64, name: &str) -> T {
    T::try_from(value).unwrap_or_else(|_| refuse(&format!("msquic cannot send {name} {value}: too large")))
}

fn main() {
    let args = lab_server_common::start();
    let (p, app) = (&args.parameters, &args.application);
    app.refuse_unsupported("msquic", &["disable-active-migration", "active-connection-id-limit", "preferred-address", "retry"]);
    // msquic's own PeerBidiStreamCount and PeerUnidiStreamCount are 0 (no
    // streams for the client); an HTTP/3 server needs them, so these are ours.
    let mut settings = Settings::new()
        .set_PeerBidiStreamCount(narrow(p.initial_max_streams_bidi.unwrap_or(100), "initial_max_streams_bidi"))
        .set_PeerUnidiStreamCount(narrow(p.initial_max_streams_uni.unwrap_or(3), "initial_max_streams_uni"));
    if let Some(ms) = p.max_idle_timeout {
        settings = settings.set_IdleTimeoutMs(ms);
    }
    if let Some(value) = p.initial_max_data {
        settings = settings.set_ConnFlowControlWindow(narrow(value, "initial_max_data"));
    }
    // msquic refuses stream windows that are not powers of two (Configuration::open fails).
    if let Some(value) = p.initial_max_stream_data_bidi_local {
        settings = settings.set_StreamRecvWindowBidiLocalDefault(narrow(value, "initial_max_stream_data_bidi_local"));
    }
    if let Some(value) = p.initial_max_stream_data_bidi_remote {
        settings = settings.set_StreamRecvWindowBidiRemoteDefault(narrow(value, "initial_max_stream_data_bidi_remote"));
    }
    if let Some(value) = p.initial_max_stream_data_uni {
        settings = settings.set_StreamRecvWindowUnidiDefault(narrow(value, "initial_max_stream_data_uni"));
    }

    if app.datagrams == Some(true) {
        settings = settings.set_DatagramReceiveEnabled();
    }
    let fail = |what: &str, status: msquic::Status| -> ! { refuse(&format!("{what}: {status:?}")) };
    // msquic's connection IDs are 9 bytes, or 14 with the server's IP address in them
    // (load-balancing mode QUIC_LOAD_BALANCING_SERVER_ID_IP): the only lengths it offers.
    match app.cid_length {
        None | Some(9) => {}
        Some(14) => {
            let mode: u16 = 1;
            msquic::Api::get_ffi(); // loads the library, which set_param assumes
            unsafe {
                msquic::Api::set_param(
                    std::ptr::null_mut(),
                    msquic::PARAM_GLOBAL_LOAD_BALACING_MODE,
                    2,
                    &mode as *const u16 as *const std::ffi::c_void,
                )
            }
            .unwrap_or_else(|e| fail("load-balancing mode", e));
        }
        Some(other) => refuse(&format!("msquic's connection IDs are 9 or 14 bytes, not {other}")),
    }
    let registration = Registration::new(&RegistrationConfig::default()).unwrap_or_else(|e| fail("registration", e));
    let protocols = app.alpn();
    let alpn: Vec<BufferRef> = protocols.iter().map(|protocol| BufferRef::from(protocol.as_slice())).collect();
    let config = Configuration::open(&registration, &alpn, Some(&settings))
        .unwrap_or_else(|e| fail("settings (stream windows must be powers of two)", e));
    let key_and_cert =
        CertificateFile::new(args.listener.key.display().to_string(), args.listener.cert.display().to_string());
    config
        .load_credential(&CredentialConfig::new().set_credential(Credential::CertificateFile(key_and_cert)))
        .unwrap_or_else(|e| fail("certificate and key", e));
    let config = Arc::new(config);
    let listener = Listener::open(&registration, move |_, event| {
        if let ListenerEvent::NewConnection { connection, .. } = event {
            connection.set_callback_handler(|connection: ConnectionRef, event: ConnectionEvent| {
                if let ConnectionEvent::ShutdownComplete { .. } = event {
                    // Ours since NewConnection: closing the handle frees it.
                    drop(unsafe { Connection::from_raw(connection.as_raw()) });
                }
                Ok(())
            });
            connection.set_configuration(&config)?;
        }
        Ok(())
    })
    .unwrap_or_else(|e| fail("listener", e));
    listener
        .start(&alpn, Some(&Addr::from(args.listener.listen)))
        .unwrap_or_else(|e| fail(&format!("listen on {}", args.listener.listen), e));
    loop {
        std::thread::park(); // msquic's own threads do the work; SIGTERM ends the process
    }
}
