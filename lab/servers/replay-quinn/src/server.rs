//! Serves `GET /<size>`, `GET /<size>?bitrate=<bits/s>` (paced: replay::Paced) and `PUT /<size>` on every
//! bidirectional stream of any number of concurrent connections.

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use lab_server_common::page::H3_ALPN;
use lab_server_common::refuse;
use lab_server_common::replay::{
    body_chunk, pieces, print_sender_stats, upload_answer, Direction, Paced, Request, ServerArgs, ALPN, MAX_REQUEST,
};
use quinn::crypto::rustls::{HandshakeData, QuicServerConfig};
use quinn::{Connecting, Connection, ConnectionError, QlogStream, RecvStream, SendStream, VarInt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{self, KeyLogFile, QlogFile, Side};

/// The application error code that resets a stream whose request is not `GET /<size>` or `PUT /<size>`.
const BAD_REQUEST: u32 = 1;

pub async fn run(args: ServerArgs) {
    let options = args.options;
    config::check(&options, &Side::Server);
    let certs = CertificateDer::pem_file_iter(&args.listener.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .unwrap_or_else(|e| refuse(&format!("{}: {e}", args.listener.cert.display())));
    let key = PrivateKeyDer::from_pem_file(&args.listener.key)
        .unwrap_or_else(|e| refuse(&format!("{}: {e}", args.listener.key.display())));
    let mut tls = rustls::ServerConfig::builder_with_provider(config::crypto_provider(options.cipher))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(certs, key))
        .unwrap_or_else(|e| refuse(&e.to_string()));
    // h3 beside hq-interop, for a browser (our own clients offer hq-interop only).
    tls.alpn_protocols = vec![ALPN.to_vec(), H3_ALPN.to_vec()];
    if let Some(path) = &options.keylog {
        tls.key_log = KeyLogFile::open(path);
    }
    let crypto: Arc<QuicServerConfig> = Arc::new(
        QuicServerConfig::with_initial(Arc::new(tls), config::initial_suite())
            .unwrap_or_else(|e| refuse(&e.to_string())),
    );
    let server_config = |qlog: Option<QlogStream>| {
        let mut server_config = quinn::ServerConfig::with_crypto(crypto.clone());
        server_config.transport_config(Arc::new(config::transport(&options, qlog)));
        server_config.migration(!options.parameters.disable_active_migration);
        server_config
    };

    let endpoint = config::endpoint(&options.parameters, Some(server_config(None)), args.listener.listen);
    let body = Bytes::from(body_chunk());
    while let Some(incoming) = endpoint.accept().await {
        // A qlog file per connection needs a transport config per connection.
        let (connecting, qlog) = match &options.qlog_dir {
            Some(dir) => {
                let (file, stream) = QlogFile::create(dir, &format!("{}_server.sqlog", incoming.orig_dst_cid()));
                (incoming.accept_with(Arc::new(server_config(Some(stream)))), Some(file))
            }
            None => (incoming.accept(), None),
        };
        tokio::spawn(serve(connecting, body.clone(), qlog));
    }
}

async fn serve(connecting: Result<Connecting, ConnectionError>, body: Bytes, qlog: Option<QlogFile>) {
    let Ok(connecting) = connecting else { return };
    let Ok(connection) = connecting.await else { return };
    let alpn =
        connection.handshake_data().and_then(|data| data.downcast::<HandshakeData>().ok()).and_then(|d| d.protocol);
    if alpn.as_deref() == Some(H3_ALPN) {
        crate::h3::serve(connection.clone(), body).await;
    } else {
        while let Ok((send, recv)) = connection.accept_bi().await {
            tokio::spawn(answer(send, recv, body.clone()));
        }
    }
    print_stats(&connection);
    if let Some(mut qlog) = qlog {
        let _ = qlog.flush();
    }
}

async fn answer(mut send: SendStream, mut recv: RecvStream, body: Bytes) {
    let mut received = Vec::new();
    let ((request, line), mut finished) = loop {
        let chunk = match recv.read_chunk(MAX_REQUEST, true).await {
            Ok(chunk) => chunk,
            Err(_) => return,
        };
        let finished = chunk.is_none();
        received.extend_from_slice(chunk.map(|chunk| chunk.bytes).as_deref().unwrap_or_default());
        match Request::parse(&received, finished) {
            Ok(Some(request)) => break (request, finished),
            Ok(None) => {}
            Err(_) => {
                let _ = send.reset(VarInt::from_u32(BAD_REQUEST));
                return;
            }
        }
    };
    match request.direction {
        Direction::Down if request.bitrate.is_some() => {
            if send_at_bitrate(&mut send, &body, request.size, request.bitrate.unwrap_or_default()).await.is_err() {
                return;
            }
        }
        Direction::Down => {
            for length in pieces(request.size, body.len()) {
                if send.write_chunk(body.slice(..length)).await.is_err() {
                    return;
                }
            }
        }
        Direction::Up => {
            // The body so far is what came after the request line; the rest is read to the FIN.
            let mut uploaded = (received.len() - line) as u64;
            while !finished {
                match recv.read_chunk(usize::MAX, false).await {
                    Ok(Some(chunk)) => uploaded += chunk.bytes.len() as u64,
                    Ok(None) => finished = true,
                    Err(_) => return,
                }
            }
            if send.write_all(&upload_answer(uploaded)).await.is_err() {
                return;
            }
        }
    }
    let _ = send.finish();
}

/// A stream's bytes paced at `bitrate` bits/s (replay::Paced).
async fn send_at_bitrate(
    send: &mut SendStream,
    body: &Bytes,
    size: u64,
    bitrate: u64,
) -> Result<(), quinn::WriteError> {
    let mut paced = Paced::new(size, bitrate);
    while let Some(due) = paced.next() {
        for length in pieces(due, body.len()) {
            send.write_chunk(body.slice(..length)).await?;
        }
        tokio::time::sleep(paced.pause()).await;
    }
    Ok(())
}

fn print_stats(connection: &Connection) {
    let stats = connection.stats();
    let path = &stats.path;
    print_sender_stats(&[
        ("packets_sent", path.sent_packets as f64),
        ("packets_lost", path.lost_packets as f64),
        ("bytes_lost", path.lost_bytes as f64),
        ("congestion_events", path.congestion_events as f64),
        ("min_rtt_ms", path.min_rtt.as_secs_f64() * 1000.0),
        ("smoothed_rtt_ms", path.rtt.as_secs_f64() * 1000.0),
        ("congestion_window", path.cwnd as f64),
    ]);
}
