//! The download: one bidirectional stream, the request, then the body in the chunks quinn hands over.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lab_server_common::replay::{fail, print_client_result, request, ClientArgs, ALPN};
use quinn::crypto::rustls::QuicClientConfig;
use quinn::ConnectionId;

use crate::config::{self, AnyCertificate, KeyLogFile, QlogFile, Side};

/// The name the client asks for; the lab's certificates are not verified anyway.
const SERVER_NAME: &str = "qreplay.lab";

pub async fn run(args: ClientArgs) {
    config::check(&args.options, &Side::Client);
    let timeout = Duration::try_from_secs_f64(args.timeout_s).unwrap_or_else(|e| fail(&format!("--timeout-s: {e}")));
    match tokio::time::timeout(timeout, download(&args)).await {
        Ok(Ok(())) => {}
        Ok(Err(message)) => fail(&message),
        Err(_) => fail(&format!("no complete download within {} s", args.timeout_s)),
    }
}

async fn download(args: &ClientArgs) -> Result<(), String> {
    let options = &args.options;
    let provider = config::crypto_provider();
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider.clone())))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    if let Some(path) = &options.keylog {
        tls.key_log = KeyLogFile::open(path);
    }
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
    // Chosen here rather than by quinn, to name the qlog file as the server names its: by the
    // connection's original destination connection ID.
    let mut original_cid = [0u8; 20];
    provider.secure_random.fill(&mut original_cid).map_err(|_| "no random connection ID".to_string())?;
    let original_cid = ConnectionId::new(&original_cid);
    let (qlog, qlog_stream) =
        options.qlog_dir.as_deref().map(|dir| QlogFile::create(dir, &format!("{original_cid}_client.sqlog"))).unzip();
    let mut client_config = quinn::ClientConfig::new(Arc::new(crypto));
    client_config.initial_dst_cid_provider(Arc::new(move || original_cid));
    client_config.transport_config(Arc::new(config::transport(options, qlog_stream)));
    let unspecified: SocketAddr = if args.connect.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("address");
    let endpoint = config::endpoint(&options.parameters, None, unspecified);

    let start = Instant::now();
    let connection = endpoint
        .connect_with(client_config, args.connect, SERVER_NAME)
        .map_err(|e| format!("connect to {}: {e}", args.connect))?
        .await
        .map_err(|e| format!("handshake with {}: {e}", args.connect))?;
    let handshake = start.elapsed();

    let (mut send, mut recv) = connection.open_bi().await.map_err(|e| format!("open stream: {e}"))?;
    let requested = Instant::now();
    send.write_all(&request(args.size)).await.map_err(|e| format!("send request: {e}"))?;
    send.finish().map_err(|e| format!("send request: {e}"))?;
    let mut bytes = 0u64;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await.map_err(|e| format!("after {bytes} bytes: {e}"))? {
        bytes += chunk.bytes.len() as u64;
    }
    let duration = requested.elapsed();

    // Closing at once, and waiting for the close to go out, ends the server's connection now, so
    // that it prints its sender statistics before qreplay stops it.
    connection.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    if let Some(mut qlog) = qlog {
        let _ = qlog.flush();
    }
    if bytes != args.size {
        return Err(format!("received {bytes} of {} bytes", args.size));
    }
    print_client_result(bytes, duration, handshake);
    Ok(())
}
