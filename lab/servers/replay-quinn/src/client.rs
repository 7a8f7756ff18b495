//! The client: --requests requests on one connection, each on a bidirectional stream of its own, at most
//! --concurrency open at once; a download's body and an upload's answer read in the chunks quinn hands over.
//! The stream client: one paced GET, each chunk's arrival noted for qreplay to play back.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use std::future::Future;

use lab_server_common::replay::{
    body_chunk, fail, pieces, print_client_result, print_stream_result, ClientArgs, Direction, Exchange, Options,
    Request, Response, StreamClientArgs, ALPN,
};
use quinn::crypto::rustls::QuicClientConfig;
use quinn::{Connection, ConnectionId, Endpoint};

use crate::config::{self, AnyCertificate, KeyLogFile, QlogFile, Side};

/// The name the client asks for; the lab's certificates are not verified anyway.
const SERVER_NAME: &str = "qreplay.lab";

pub async fn run(args: ClientArgs) {
    config::check(&args.options, &Side::Client);
    within(args.target.timeout_s, &format!("{} requests", args.requests), connect_and_request(&args)).await;
}

pub async fn run_stream(args: StreamClientArgs) {
    config::check(&args.options, &Side::Client);
    within(args.target.timeout_s, "the stream", connect_and_stream(&args)).await;
}

/// The client's work, ended in one line if it fails or is not done within `timeout_s`.
async fn within(timeout_s: f64, what: &str, work: impl Future<Output = Result<(), String>>) {
    let timeout = Duration::try_from_secs_f64(timeout_s).unwrap_or_else(|e| fail(&format!("--timeout-s: {e}")));
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(())) => {}
        Ok(Err(message)) => fail(&message),
        Err(_) => fail(&format!("{what} not complete within {timeout_s} s")),
    }
}

async fn connect_and_request(args: &ClientArgs) -> Result<(), String> {
    let client = Client::connect(&args.options, args.target.connect).await?;
    let body = Bytes::from(body_chunk());
    let exchanges = args.exchanges(|| exchange(client.connection.clone(), args.request(), body.clone())).await?;
    // The ACK frames this end sent: what --ack-frequency changes on a download.
    let acks_sent = client.connection.stats().frame_tx.acks;
    let handshake = client.close().await;
    print_client_result(handshake, &exchanges, &[("acks_sent", acks_sent)]);
    Ok(())
}

/// One GET paced by the server, read to its end, each chunk's arrival noted (time since the request, bytes).
async fn connect_and_stream(args: &StreamClientArgs) -> Result<(), String> {
    let client = Client::connect(&args.options, args.target.connect).await?;
    let sent = Instant::now();
    let (mut send, mut recv) = client.connection.open_bi().await.map_err(|e| format!("open stream: {e}"))?;
    send.write_all(&args.request().line()).await.map_err(|e| format!("send request: {e}"))?;
    send.finish().map_err(|e| format!("send request: {e}"))?;
    let (mut response, mut arrivals) = (Response::new(args.request(), sent), Vec::new());
    while let Some(chunk) = recv
        .read_chunk(usize::MAX, true)
        .await
        .map_err(|e| format!("after {} bytes received: {e}", response.received()))?
    {
        arrivals.push((sent.elapsed(), chunk.bytes.len()));
        response.take(&chunk.bytes)?;
    }
    let exchange = response.finished()?;
    let handshake = client.close().await;
    print_stream_result(handshake, &exchange, args.bitrate, &arrivals);
    Ok(())
}

/// A client's connection to the server, with what closing it needs.
struct Client {
    endpoint: Endpoint,
    connection: Connection,
    handshake: Duration,
    qlog: Option<QlogFile>,
}

impl Client {
    async fn connect(options: &Options, server: SocketAddr) -> Result<Client, String> {
        let provider = config::crypto_provider(options.cipher);
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
        let crypto =
            QuicClientConfig::with_initial(Arc::new(tls), config::initial_suite()).map_err(|e| e.to_string())?;
        // Chosen here rather than by quinn, to name the qlog file as the server names its: by the
        // connection's original destination connection ID.
        let mut original_cid = [0u8; 20];
        provider.secure_random.fill(&mut original_cid).map_err(|_| "no random connection ID".to_string())?;
        let original_cid = ConnectionId::new(&original_cid);
        let (qlog, qlog_stream) = options
            .qlog_dir
            .as_deref()
            .map(|dir| QlogFile::create(dir, &format!("{original_cid}_client.sqlog")))
            .unzip();
        let mut client_config = quinn::ClientConfig::new(Arc::new(crypto));
        client_config.initial_dst_cid_provider(Arc::new(move || original_cid));
        client_config.transport_config(Arc::new(config::transport(options, qlog_stream)));
        let unspecified: SocketAddr = if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("address");
        let endpoint = config::endpoint(&options.parameters, None, unspecified);

        let start = Instant::now();
        let connection = endpoint
            .connect_with(client_config, server, SERVER_NAME)
            .map_err(|e| format!("connect to {server}: {e}"))?
            .await
            .map_err(|e| format!("handshake with {server}: {e}"))?;
        Ok(Client { endpoint, connection, handshake: start.elapsed(), qlog })
    }

    /// Closes the connection at once and waits for the close to go out, which ends the server's connection
    /// now, so that it prints its sender statistics before qreplay stops it; the handshake's time.
    async fn close(self) -> Duration {
        self.connection.close(0u32.into(), b"done");
        self.endpoint.wait_idle().await;
        if let Some(mut qlog) = self.qlog {
            let _ = qlog.flush();
        }
        self.handshake
    }
}

/// One request on a stream of its own, timed from before the stream opens, so that a wait for the
/// server's stream credit (initial_max_streams_bidi) counts in its latency.
async fn exchange(connection: Connection, request: Request, body: Bytes) -> Result<Exchange, String> {
    let sent = Instant::now();
    let (mut send, mut recv) = connection.open_bi().await.map_err(|e| format!("open stream: {e}"))?;
    send.write_all(&request.line()).await.map_err(|e| format!("send request: {e}"))?;
    if request.direction == Direction::Up {
        for length in pieces(request.size, body.len()) {
            send.write_chunk(body.slice(..length)).await.map_err(|e| format!("send body: {e}"))?;
        }
    }
    send.finish().map_err(|e| format!("send request: {e}"))?;
    let mut response = Response::new(request, sent);
    while let Some(chunk) = recv
        .read_chunk(usize::MAX, true)
        .await
        .map_err(|e| format!("after {} bytes received: {e}", response.received()))?
    {
        response.take(&chunk.bytes)?;
    }
    response.finished()
}
