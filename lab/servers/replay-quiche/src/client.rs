//! The client: one connection, one download, the body counted and dropped; the stream client: one paced GET,
//! each read's arrival noted for qreplay to play back.

use std::collections::hash_map::RandomState;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lab_server_common::replay::{self, fail, ClientArgs, Exchange, Options, Request, StreamClientArgs, Target};

/// The name the server's certificate is issued for; the client does not verify it.
const SERVER_NAME: &str = "qreplay.lab";
/// The stream a client's first bidirectional request goes on.
const STREAM: u64 = 0;

pub fn run(args: ClientArgs) {
    args.refuse_workloads("quiche");
    download(&args.target, &args.options, args.request());
}

pub fn run_stream(args: StreamClientArgs) {
    download(&args.target, &args.options, args.request());
}

/// One GET on one connection, read to its end; a stream's (a bitrate's) reads' arrivals printed beside it.
fn download(target: &Target, options: &Options, request: Request) {
    let (server, timeout_s) = (target.connect, target.timeout_s);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(timeout_s);
    let mut config = super::config(options, options.parameters.flow_control.initial_max_stream_data_bidi_local);
    config.verify_peer(false);

    let any: SocketAddr = if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("address");
    let socket = super::bind(any);
    let local = socket.local_addr().expect("local address");
    let scid = super::derive_id(&RandomState::new(), &[], quiche::MAX_CONN_ID_LEN);
    let mut connection =
        quiche::connect(Some(SERVER_NAME), &quiche::ConnectionId::from_ref(&scid), local, server, &mut config)
            .unwrap_or_else(|e| fail(&format!("connect: {e}")));
    super::trace(&mut connection, options, "client");

    let (mut buf, mut out) = (vec![0u8; 65535], vec![0u8; 65535]);
    let mut requested: Option<(Instant, Duration)> = None;
    let mut received = 0u64;
    let (mut first_byte, mut arrivals) = (None, Vec::new());
    loop {
        let release = super::flush(&socket, &mut connection, &mut out);
        if connection.is_closed() {
            let why = connection
                .peer_error()
                .map(|e| format!("closed by the server: {e:?}"))
                .or_else(|| connection.local_error().map(|e| format!("closed: {e:?}")))
                .unwrap_or_else(|| "connection timed out".into());
            fail(&format!("{why} after {received} of {} bytes", request.size));
        }
        let until = [connection.timeout_instant(), release].into_iter().flatten().fold(deadline, Instant::min);
        super::wait(&socket, libc::POLLIN, Some(until));
        loop {
            match socket.recv_from(&mut buf) {
                Ok((len, from)) => {
                    let _ = connection.recv(&mut buf[..len], quiche::RecvInfo { from, to: local });
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => break,
                Err(e) => fail(&format!("receive: {e}")),
            }
        }
        let now = Instant::now();
        if now >= deadline {
            fail(&format!("timed out after {} s with {received} of {} bytes", timeout_s, request.size));
        }
        if connection.timeout_instant().is_some_and(|t| t <= now) {
            connection.on_timeout();
        }
        if requested.is_none() && connection.is_established() {
            if let Err(e) = connection.stream_send(STREAM, &request.line(), true) {
                fail(&format!("request: {e}"));
            }
            requested = Some((Instant::now(), now - started));
        }
        let Some((request_sent, handshake)) = requested else { continue };
        loop {
            let (len, fin) = match connection.stream_recv(STREAM, &mut buf) {
                Ok(v) => v,
                Err(quiche::Error::Done) => break,
                Err(e) => fail(&format!("response stream: {e} after {received} of {} bytes", request.size)),
            };
            first_byte.get_or_insert_with(Instant::now);
            received += len as u64;
            if request.bitrate.is_some() && len > 0 {
                arrivals.push((request_sent.elapsed(), len));
            }
            if fin {
                let finished = Instant::now();
                if received != request.size {
                    fail(&format!("the server sent {received} of {} bytes", request.size));
                }
                let _ = connection.close(true, 0x0, b"");
                super::flush(&socket, &mut connection, &mut out);
                let first_byte = first_byte.unwrap_or(finished);
                let exchange = Exchange { sent: request_sent, first_byte, finished, bytes: received };
                match request.bitrate {
                    Some(bitrate) => replay::print_stream_result(handshake, &exchange, bitrate, &arrivals),
                    None => replay::print_client_result(handshake, &[exchange], &[]),
                }
                return;
            }
        }
    }
}
