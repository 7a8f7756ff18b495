//! The download: one bidirectional stream, `GET /<size>` and a FIN, then the body counted, not kept; the
//! stream client's the same with `?bitrate=<bits/s>`, each read's arrival noted for qreplay to play back.

use std::cell::RefCell;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lab_server_common::refuse;
use lab_server_common::replay::{
    fail, print_client_result, print_stream_result, ClientArgs, Exchange, Options, Request, StreamClientArgs, Target,
};
use tquic::{Connection, Endpoint, TlsConfig, TransportHandler};

use crate::net;

const SERVER_NAME: &str = "qreplay.lab";

#[derive(Default)]
struct Download {
    request: Option<Request>,
    size: u64,
    received: u64,
    established: Option<Instant>,
    requested: Option<Instant>,
    first_byte: Option<Instant>,
    finished: Option<Instant>,
    error: Option<String>,
    /// A stream's reads: time since the request, bytes.
    arrivals: Vec<(Duration, usize)>,
}

struct Client {
    options: Options,
    download: Rc<RefCell<Download>>,
    buffer: Vec<u8>,
}

impl Client {
    fn give_up(&self, conn: &mut Connection, error: String) {
        self.download.borrow_mut().error = Some(error);
        let _ = conn.close(true, 0, b"");
    }
}

impl TransportHandler for Client {
    fn on_conn_created(&mut self, conn: &mut Connection) {
        crate::attach_logs(conn, &self.options);
    }

    fn on_conn_established(&mut self, conn: &mut Connection) {
        let mut download = self.download.borrow_mut();
        download.established = Some(Instant::now());
        let request = Bytes::from(download.request.expect("the client's request").line());
        let sent = conn.stream_bidi_new(0, false).and_then(|stream| {
            let len = conn.stream_write(stream, request.clone(), true)?;
            // Whole, with its FIN: nothing more to write, so no more writable events.
            conn.stream_want_write(stream, false)?;
            Ok(len)
        });
        match sent {
            Ok(len) if len == request.len() => download.requested = Some(Instant::now()),
            outcome => {
                drop(download);
                self.give_up(conn, format!("request not sent: {outcome:?}"));
            }
        }
    }

    fn on_stream_readable(&mut self, conn: &mut Connection, stream_id: u64) {
        loop {
            let (len, fin) = match conn.stream_read(stream_id, &mut self.buffer) {
                Ok(read) => read,
                Err(tquic::Error::Done) => return,
                Err(e) => return self.give_up(conn, format!("stream {stream_id}: {e:?}")),
            };
            let mut download = self.download.borrow_mut();
            let now = Instant::now();
            download.first_byte.get_or_insert(now);
            download.received += len as u64;
            if len > 0 && download.request.is_some_and(|request| request.bitrate.is_some()) {
                let since = now - download.requested.unwrap_or(now);
                download.arrivals.push((since, len));
            }
            if fin {
                let (received, size) = (download.received, download.size);
                if received != size {
                    drop(download);
                    return self.give_up(conn, format!("the body ended after {received} of {size} bytes"));
                }
                download.finished = Some(Instant::now());
                let _ = conn.close(true, 0, b"");
                return;
            }
        }
    }

    fn on_conn_closed(&mut self, conn: &mut Connection) {
        let mut download = self.download.borrow_mut();
        if download.finished.is_none() && download.error.is_none() {
            let why = match (conn.peer_error(), conn.local_error()) {
                (Some(peer), _) => format!("closed by the server: {peer:?}"),
                (None, Some(local)) => format!("closed: {local:?}"),
                (None, None) if conn.is_idle_timeout() => "idle timeout".into(),
                (None, None) if conn.is_handshake_timeout() => "handshake timeout".into(),
                (None, None) => "closed".into(),
            };
            download.error = Some(format!("{why} after {} of {} bytes", download.received, download.size));
        }
    }

    fn on_stream_created(&mut self, _: &mut Connection, _: u64) {}
    fn on_stream_writable(&mut self, _: &mut Connection, _: u64) {}
    fn on_stream_closed(&mut self, _: &mut Connection, _: u64) {}
    fn on_new_token(&mut self, _: &mut Connection, _: Vec<u8>) {}
}

pub fn run(args: ClientArgs) {
    args.refuse_workloads("tquic");
    let request = args.request();
    let (handshake, exchange, _) = fetch(&args.target, args.options, request);
    print_client_result(handshake, &[exchange], &[]);
}

pub fn run_stream(args: StreamClientArgs) {
    let request = args.request();
    let (handshake, exchange, arrivals) = fetch(&args.target, args.options, request);
    print_stream_result(handshake, &exchange, args.bitrate, &arrivals);
}

/// One request on one connection, read to its end: the handshake's time, the exchange, a stream's arrivals.
fn fetch(target: &Target, options: Options, request: Request) -> (Duration, Exchange, Vec<(Duration, usize)>) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(target.timeout_s);
    let any: SocketAddr = match target.connect {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let (socket, local) = net::bind(any);
    let mut tls = TlsConfig::new_client_config(vec![lab_server_common::replay::ALPN.to_vec()], false)
        .unwrap_or_else(|e| refuse(&e.to_string()));
    tls.set_verify(false);
    let config = crate::config(&options, tls, false);
    let download = Rc::new(RefCell::new(Download { request: Some(request), size: request.size, ..Default::default() }));
    let client = Client { options, download: download.clone(), buffer: vec![0; 1 << 20] };
    let mut endpoint = Endpoint::new(Box::new(config), false, Box::new(client), Rc::new(net::Sender(socket.clone())));
    endpoint
        .connect(local, target.connect, Some(SERVER_NAME), None, None, None)
        .unwrap_or_else(|e| fail(&format!("connect to {}: {e:?}", target.connect)));
    net::run(&mut endpoint, &socket, local, &net::Ticks::default(), || {
        let download = download.borrow();
        download.finished.is_some() || download.error.is_some() || Instant::now() >= deadline
    });
    // Dropping the endpoint drops its connections, which flushes their qlog.
    drop(endpoint);

    let mut download = download.borrow_mut();
    if let Some(error) = &download.error {
        fail(error);
    }
    match (download.established, download.requested, download.finished) {
        (Some(established), Some(sent), Some(finished)) => {
            let first_byte = download.first_byte.unwrap_or(finished);
            let exchange = Exchange { sent, first_byte, finished, bytes: download.received };
            (established - started, exchange, std::mem::take(&mut download.arrivals))
        }
        _ => fail(&format!(
            "timed out after {} s with {} of {} bytes",
            target.timeout_s, download.received, download.size
        )),
    }
}
