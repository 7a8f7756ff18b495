//! quinn 0.11 (rustls with ring): accepts h3 handshakes and holds each
//! connection until the client leaves.

use std::sync::Arc;

use lab_server_common::{refuse, ALPN};
use quinn::crypto::rustls::QuicServerConfig;
use quinn::{IdleTimeout, TransportConfig, VarInt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn varint(value: u64) -> VarInt {
    VarInt::from_u64(value).unwrap_or_else(|_| refuse(&format!("{value} does not fit a QUIC varint")))
}

fn main() {
    let args = lab_server_common::start();
    let p = &args.parameters;
    let certs = CertificateDer::pem_file_iter(&args.listener.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .unwrap_or_else(|e| refuse(&format!("{}: {e}", args.listener.cert.display())));
    let key = PrivateKeyDer::from_pem_file(&args.listener.key)
        .unwrap_or_else(|e| refuse(&format!("{}: {e}", args.listener.key.display())));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(certs, key))
        .unwrap_or_else(|e| refuse(&e.to_string()));
    tls.alpn_protocols = vec![ALPN.to_vec()];

    let mut transport = TransportConfig::default();
    if let Some(ms) = p.max_idle_timeout {
        transport.max_idle_timeout((ms > 0).then(|| IdleTimeout::from(varint(ms))));
    }
    if let Some(value) = p.initial_max_data {
        transport.receive_window(varint(value));
    }
    // quinn has one receive window for every stream, sent as all three stream parameters.
    let windows =
        [p.initial_max_stream_data_bidi_local, p.initial_max_stream_data_bidi_remote, p.initial_max_stream_data_uni];
    if let Some(value) = windows.iter().flatten().next() {
        if windows.iter().any(|w| *w != Some(*value)) {
            refuse("quinn sends one stream window: give all three initial_max_stream_data_* the same value");
        }
        transport.stream_receive_window(varint(*value));
    }
    if let Some(value) = p.initial_max_streams_bidi {
        transport.max_concurrent_bidi_streams(varint(value));
    }
    if let Some(value) = p.initial_max_streams_uni {
        transport.max_concurrent_uni_streams(varint(value));
    }
    let crypto = QuicServerConfig::try_from(tls).unwrap_or_else(|e| refuse(&e.to_string()));
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(transport));

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let endpoint = quinn::Endpoint::server(config, args.listener.listen)
            .unwrap_or_else(|e| refuse(&format!("listen on {}: {e}", args.listener.listen)));
        while let Some(incoming) = endpoint.accept().await {
            tokio::spawn(async move {
                if let Ok(connection) = incoming.await {
                    connection.closed().await;
                }
            });
        }
    });
}
