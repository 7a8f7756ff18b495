//! qreplay's s2n-quic client and server (lab_server_common::replay): the replay protocol (downloads, uploads,
//! many requests on one connection, a paced stream) on s2n-quic 1.91 with its default TLS (s2n-tls). Transport parameters go through `Limits`; s2n-quic sends neither
//! max_udp_payload_size nor a chosen ack_delay_exponent or active_connection_id_limit, has no window
//! auto-tuning and no qlog, so those options are refused.

mod sender_stats;

use std::error::Error;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lab_server_common::refuse;
use lab_server_common::replay::{
    self, ClientArgs, CongestionControl, Direction, Exchange, Options, Paced, Request, Response, Role, ServerArgs,
    StreamClientArgs, ALPN,
};
use s2n_quic::client::Connect;
use s2n_quic::connection::Handle;
use s2n_quic::provider::congestion_controller::{self, Bbr, Cubic};
use s2n_quic::provider::limits::Limits;
use s2n_quic::provider::tls::default as tls;
use s2n_quic::stream::BidirectionalStream;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// The name the client asks for; the server's certificate is not checked.
const SERVER_NAME: &str = "qreplay.lab";
/// Bytes handed to the stream at once: few wake-ups, and well under s2n-quic's 4 MiB send buffer.
const SEND_CHUNK: usize = 1024 * 1024;
/// How long the client lingers after the download so that its CONNECTION_CLOSE reaches the server
/// (which prints its sender statistics on it) before the runner stops the server.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

fn main() {
    let cli = replay::start();
    let options = match &cli.role {
        Role::Server(args) => &args.options,
        Role::Client(args) => &args.options,
        Role::StreamClient(args) => &args.options,
    };
    refuse_what_s2n_quic_cannot_do(options);
    if let Some(path) = &options.keylog {
        drop(replay::keylog_file(path));
        // s2n-quic's TLS providers open their key log from this variable, and only from it.
        std::env::set_var("SSLKEYLOGFILE", path);
    }
    let limits = limits(options).unwrap_or_else(|e| refuse(&e.to_string()));
    let cc = options.cc;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    match (cli.role, cc) {
        (Role::Server(args), CongestionControl::Cubic) => runtime.block_on(server(args, limits, Cubic::default())),
        (Role::Server(args), CongestionControl::Bbr) => runtime.block_on(server(args, limits, Bbr::default())),
        (Role::Client(args), CongestionControl::Cubic) => runtime.block_on(client(args, limits, Cubic::default())),
        (Role::Client(args), CongestionControl::Bbr) => runtime.block_on(client(args, limits, Bbr::default())),
        (Role::StreamClient(args), CongestionControl::Cubic) => {
            runtime.block_on(stream_client(args, limits, Cubic::default()))
        }
        (Role::StreamClient(args), CongestionControl::Bbr) => {
            runtime.block_on(stream_client(args, limits, Bbr::default()))
        }
    }
}

fn refuse_what_s2n_quic_cannot_do(options: &Options) {
    let p = &options.parameters;
    // Endpoint setup writes max_udp_payload_size nowhere, and overwrites active_connection_id_limit
    // with its own 3 (s2n-quic-transport src/endpoint/{initial,mod}.rs); Limits has no setter for
    // ack_delay_exponent (s2n-quic-core src/connection/limits.rs).
    let unsendable = [
        ("max_udp_payload_size", p.max_udp_payload_size.is_some()),
        ("ack_delay_exponent", p.ack_delay_exponent.is_some()),
        ("active_connection_id_limit", p.active_connection_id_limit.is_some()),
    ];
    if let Some((name, _)) = unsendable.iter().find(|(_, given)| *given) {
        refuse(&format!("s2n-quic 1.91 cannot send a chosen {name}"));
    }
    if options.autotune {
        refuse("s2n-quic 1.91 has no flow-control window auto-tuning: its windows always slide at the advertised size");
    }
    if options.qlog_dir.is_some() {
        refuse("s2n-quic 1.91 writes no qlog");
    }
    options.refuse_knobs(
        "s2n-quic",
        &[
            ("cipher", "s2n-quic 1.91's TLS builders take no cipher suite list (s2n-tls's security policy is theirs)"),
            // s2n-quic-transport src/ack/ack_manager.rs: packet_tolerance = 10, a constant.
            ("ack_frequency", "s2n-quic 1.91 does not speak the ACK frequency extension (no ACK_FREQUENCY frame)"),
        ],
    );
}

/// The endpoint's socket at `address`, with UDP GSO as --gso asks and UDP GRO as --gro asks (absent:
/// s2n-quic's own, each on where the kernel has it).
fn io(address: std::net::SocketAddr, options: &Options) -> Result<s2n_quic::provider::io::Default> {
    let mut builder = s2n_quic::provider::io::Default::builder().with_receive_address(address)?;
    if let Some(gso) = options.gso {
        builder = builder.with_gso(gso)?;
    }
    if let Some(gro) = options.gro {
        builder = builder.with_gro(gro)?;
    }
    Ok(builder.build()?)
}

fn limits(options: &Options) -> Result<Limits> {
    let p = &options.parameters;
    let flow = &p.flow_control;
    let mut limits = Limits::new();
    if let Some(ms) = flow.max_idle_timeout {
        limits =
            limits.with_max_idle_timeout(Duration::from_millis(ms)).map_err(|e| format!("max_idle_timeout: {e}"))?;
    }
    if let Some(ms) = p.max_ack_delay {
        limits = limits.with_max_ack_delay(Duration::from_millis(ms)).map_err(|e| format!("max_ack_delay: {e}"))?;
    }
    if p.disable_active_migration {
        limits = limits.with_active_connection_migration(false)?;
    }
    // s2n-quic's receive windows are fixed-size sliding windows: each is re-opened to its initial
    // size past what the application has read, never grown, so these pin them as qreplay wants.
    let settings = [
        ("initial_max_data", flow.initial_max_data, Limits::with_data_window as fn(Limits, u64) -> _),
        (
            "initial_max_stream_data_bidi_local",
            flow.initial_max_stream_data_bidi_local,
            Limits::with_bidirectional_local_data_window,
        ),
        (
            "initial_max_stream_data_bidi_remote",
            flow.initial_max_stream_data_bidi_remote,
            Limits::with_bidirectional_remote_data_window,
        ),
        ("initial_max_stream_data_uni", flow.initial_max_stream_data_uni, Limits::with_unidirectional_data_window),
        ("initial_max_streams_bidi", flow.initial_max_streams_bidi, Limits::with_max_open_remote_bidirectional_streams),
        ("initial_max_streams_uni", flow.initial_max_streams_uni, Limits::with_max_open_remote_unidirectional_streams),
    ];
    for (name, value, setter) in settings {
        if let Some(value) = value {
            limits = setter(limits, value).map_err(|e| format!("{name} {value}: {e}"))?;
        }
    }
    Ok(limits)
}

async fn server<C: congestion_controller::Provider>(args: ServerArgs, limits: Limits, cc: C) {
    let serve = async {
        let mut tls = tls::Server::builder()
            .with_certificate(args.listener.cert.as_path(), args.listener.key.as_path())?
            .with_application_protocols([ALPN])?;
        if args.options.keylog.is_some() {
            tls = tls.with_key_logging()?;
        }
        let mut server = s2n_quic::Server::builder()
            .with_tls(tls.build()?)?
            .with_limits(limits)?
            .with_congestion_controller(cc)?
            .with_event(sender_stats::PrintSenderStats)?
            .with_io(io(args.listener.listen, &args.options)?)?
            .start()?;
        let body = Bytes::from(replay::body_chunk().repeat(SEND_CHUNK / replay::body_chunk().len()));
        while let Some(mut connection) = server.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                while let Ok(Some(stream)) = connection.accept_bidirectional_stream().await {
                    let body = body.clone();
                    tokio::spawn(async move {
                        if let Err(e) = answer(stream, body).await {
                            eprintln!("stream: {e}");
                        }
                    });
                }
            });
        }
        Result::Ok(())
    };
    if let Err(e) = serve.await {
        refuse(&e.to_string());
    }
}

/// Reads a request and answers it: `GET /<size>` with <size> bytes (`?bitrate=<bits/s>`: paced, replay::Paced),
/// `PUT /<size>` with the count of the body bytes that came, each then a FIN.
async fn answer(mut stream: BidirectionalStream, body: Bytes) -> Result<()> {
    let mut received = Vec::new();
    let ((request, line), mut finished) = loop {
        let chunk = stream.receive().await?;
        if let Some(chunk) = &chunk {
            received.extend_from_slice(chunk);
        }
        if let Some(request) = Request::parse(&received, chunk.is_none())? {
            break (request, chunk.is_none());
        }
    };
    match request.direction {
        Direction::Down => {
            // a stream's bytes as its schedule hands them over; a download's all at once
            let mut paced = Paced::new(request.size, request.bitrate.unwrap_or(u64::MAX));
            while let Some(due) = paced.next() {
                for length in replay::pieces(due, body.len()) {
                    stream.send(body.slice(..length)).await?;
                }
                tokio::time::sleep(paced.pause()).await;
            }
        }
        Direction::Up => {
            // The body so far is what came after the request line; the rest is read to the FIN.
            let mut uploaded = (received.len() - line) as u64;
            while !finished {
                match stream.receive().await? {
                    Some(chunk) => uploaded += chunk.len() as u64,
                    None => finished = true,
                }
            }
            stream.send(Bytes::from(replay::upload_answer(uploaded))).await?;
        }
    }
    stream.finish()?;
    Ok(())
}

async fn client<C: congestion_controller::Provider>(args: ClientArgs, limits: Limits, cc: C) {
    let what = format!("{} requests", args.requests);
    within(args.target.timeout_s, &what, connect_and_request(&args, limits, cc)).await;
}

async fn stream_client<C: congestion_controller::Provider>(args: StreamClientArgs, limits: Limits, cc: C) {
    within(args.target.timeout_s, "the stream", connect_and_stream(&args, limits, cc)).await;
}

/// The client's work, ended in one line if it fails or is not done within `timeout_s`.
async fn within(timeout_s: f64, what: &str, work: impl std::future::Future<Output = Result<()>>) {
    match tokio::time::timeout(Duration::from_secs_f64(timeout_s), work).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => replay::fail(&e.to_string()),
        Err(_) => replay::fail(&format!("{what} not complete within {timeout_s} s")),
    }
}

/// --requests requests on one connection, each on a bidirectional stream of its own, at most --concurrency open.
async fn connect_and_request<C: congestion_controller::Provider>(
    args: &ClientArgs,
    limits: Limits,
    cc: C,
) -> Result<()> {
    let (client, connection, handshake) = connect(args.target.connect, &args.options, limits, cc).await?;
    let body = Bytes::from(replay::body_chunk().repeat(SEND_CHUNK / replay::body_chunk().len()));
    let exchanges = args
        .exchanges(|| async { exchange(connection.handle(), args.request(), body.clone()).await.map(|(e, _)| e) })
        .await?;
    replay::print_client_result(handshake, &exchanges, &[]);
    close(client, connection).await;
    Ok(())
}

/// One GET paced by the server, read to its end, each read's arrival noted for qreplay to play back.
async fn connect_and_stream<C: congestion_controller::Provider>(
    args: &StreamClientArgs,
    limits: Limits,
    cc: C,
) -> Result<()> {
    let (client, connection, handshake) = connect(args.target.connect, &args.options, limits, cc).await?;
    let (exchange, arrivals) = exchange(connection.handle(), args.request(), Bytes::new()).await?;
    replay::print_stream_result(handshake, &exchange, args.bitrate, &arrivals);
    close(client, connection).await;
    Ok(())
}

/// The client's endpoint and its connection to `server`, with the handshake's time.
async fn connect<C: congestion_controller::Provider>(
    server: std::net::SocketAddr,
    options: &Options,
    limits: Limits,
    cc: C,
) -> Result<(s2n_quic::Client, s2n_quic::Connection, Duration)> {
    let mut tls = tls::Client::builder().with_application_protocols([ALPN])?;
    // SAFETY: the lab's servers have throw-away self-signed certificates; nothing here is secret.
    unsafe {
        tls.config_mut().disable_x509_verification()?;
    }
    if options.keylog.is_some() {
        tls = tls.with_key_logging()?;
    }
    let local: std::net::SocketAddr = if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse()?;
    let client = s2n_quic::Client::builder()
        .with_tls(tls.build()?)?
        .with_limits(limits)?
        .with_congestion_controller(cc)?
        .with_io(io(local, options)?)?
        .start()?;

    let started = Instant::now();
    let connection = client.connect(Connect::new(server).with_server_name(SERVER_NAME)).await?;
    Ok((client, connection, started.elapsed()))
}

/// Closes the connection and lingers so that its CONNECTION_CLOSE reaches the server.
async fn close(mut client: s2n_quic::Client, connection: s2n_quic::Connection) {
    connection.close(0u8.into());
    drop(connection);
    let _ = tokio::time::timeout(CLOSE_GRACE, client.wait_idle()).await;
}

/// One request on a stream of its own, timed from before the stream opens, so that a wait for the
/// server's stream credit (initial_max_streams_bidi) counts in its latency; a stream's (a bitrate's) reads'
/// arrivals beside it (time since the request, bytes), none for the rest.
async fn exchange(
    mut connection: Handle,
    request: Request,
    body: Bytes,
) -> std::result::Result<(Exchange, Vec<(Duration, usize)>), String> {
    let sent = Instant::now();
    let mut stream = connection.open_bidirectional_stream().await.map_err(|e| format!("open stream: {e}"))?;
    stream.send(Bytes::from(request.line())).await.map_err(|e| format!("send request: {e}"))?;
    if request.direction == Direction::Up {
        for length in replay::pieces(request.size, body.len()) {
            stream.send(body.slice(..length)).await.map_err(|e| format!("send body: {e}"))?;
        }
    }
    stream.finish().map_err(|e| format!("send request: {e}"))?;
    let mut response = Response::new(request, sent);
    let (mut chunks, mut arrivals) = (vec![Bytes::new(); 64], Vec::new());
    loop {
        let (count, open) = stream
            .receive_vectored(&mut chunks)
            .await
            .map_err(|e| format!("after {} bytes received: {e}", response.received()))?;
        let before = response.received();
        // Taken, not just looked at: s2n-quic receives only into empty placeholders.
        for chunk in &mut chunks[..count] {
            response.take(&std::mem::take(chunk))?;
        }
        if request.bitrate.is_some() && response.received() > before {
            arrivals.push((sent.elapsed(), (response.received() - before) as usize));
        }
        if !open {
            return Ok((response.finished()?, arrivals));
        }
    }
}
