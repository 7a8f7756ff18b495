//! quinn 0.11 (rustls with ring): accepts h3 handshakes and holds each
//! connection until the client leaves.

use std::sync::Arc;

use lab_server_common::refuse;
use quinn::crypto::rustls::QuicServerConfig;
use quinn::{ConnectionId, ConnectionIdGenerator, EndpointConfig, IdleTimeout, TransportConfig, VarInt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn varint(value: u64) -> VarInt {
    VarInt::from_u64(value).unwrap_or_else(|_| refuse(&format!("{value} does not fit a QUIC varint")))
}

/// Random connection IDs of the length the application picks (quinn's own generator is not public).
struct RandomIds(usize, std::collections::hash_map::RandomState, u64);

impl ConnectionIdGenerator for RandomIds {
    fn generate_cid(&mut self) -> ConnectionId {
        use std::hash::BuildHasher;
        self.2 += 1;
        let bytes: Vec<u8> = (0..3u8).flat_map(|i| self.1.hash_one((self.2, i)).to_le_bytes()).take(self.0).collect();
        ConnectionId::new(&bytes)
    }

    fn cid_len(&self) -> usize {
        self.0
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

fn main() {
    let args = lab_server_common::start();
    let (p, app) = (&args.parameters, &args.application);
    app.refuse_unsupported("quinn", &["active-connection-id-limit"]);
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
    tls.alpn_protocols = app.alpn();

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
    if app.datagrams == Some(false) {
        transport.datagram_receive_buffer_size(None);
    }
    let crypto = QuicServerConfig::try_from(tls).unwrap_or_else(|e| refuse(&e.to_string()));
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(transport));
    config.migration(!app.disable_active_migration);
    if let Some(std::net::SocketAddr::V4(address)) = app.preferred_address {
        config.preferred_address_v4(Some(address));
    }
    let mut endpoint_config = EndpointConfig::default();
    if let Some(length) = app.cid_length {
        if length > 20 {
            refuse("connection IDs are at most 20 bytes");
        }
        endpoint_config.cid_generator(move || Box::new(RandomIds(length, Default::default(), 0)));
    }

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let socket = std::net::UdpSocket::bind(args.listener.listen)
            .unwrap_or_else(|e| refuse(&format!("listen on {}: {e}", args.listener.listen)));
        let endpoint = quinn::Endpoint::new(endpoint_config, Some(config), socket, Arc::new(quinn::TokioRuntime))
            .unwrap_or_else(|e| refuse(&format!("listen on {}: {e}", args.listener.listen)));
        let retry = app.retry;
        while let Some(incoming) = endpoint.accept().await {
            if retry && !incoming.remote_address_validated() {
                let _ = incoming.retry();
                continue;
            }
            tokio::spawn(async move {
                if let Ok(connection) = incoming.await {
                    connection.closed().await;
                }
            });
        }
    });
}
