//! The download: one bidirectional stream, `GET /<size>` and a FIN, then the body counted, not kept.

use std::cell::RefCell;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lab_server_common::refuse;
use lab_server_common::replay::{fail, print_client_result, ClientArgs, Exchange, Options, Request};
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
            download.first_byte.get_or_insert_with(Instant::now);
            download.received += len as u64;
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
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.timeout_s);
    let any: SocketAddr = match args.connect {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let (socket, local) = net::bind(any);
    let mut tls = TlsConfig::new_client_config(vec![lab_server_common::replay::ALPN.to_vec()], false)
        .unwrap_or_else(|e| refuse(&e.to_string()));
    tls.set_verify(false);
    let config = crate::config(&args.options, tls, false);
    let download =
        Rc::new(RefCell::new(Download { request: Some(args.request()), size: args.size, ..Default::default() }));
    let client = Client { options: args.options, download: download.clone(), buffer: vec![0; 1 << 20] };
    let mut endpoint = Endpoint::new(Box::new(config), false, Box::new(client), Rc::new(net::Sender(socket.clone())));
    endpoint
        .connect(local, args.connect, Some(SERVER_NAME), None, None, None)
        .unwrap_or_else(|e| fail(&format!("connect to {}: {e:?}", args.connect)));
    net::run(&mut endpoint, &socket, local, || {
        let download = download.borrow();
        download.finished.is_some() || download.error.is_some() || Instant::now() >= deadline
    });
    // Dropping the endpoint drops its connections, which flushes their qlog.
    drop(endpoint);

    let download = download.borrow();
    if let Some(error) = &download.error {
        fail(error);
    }
    match (download.established, download.requested, download.finished) {
        (Some(established), Some(sent), Some(finished)) => print_client_result(
            established - started,
            &[Exchange {
                sent,
                first_byte: download.first_byte.unwrap_or(finished),
                finished,
                bytes: download.received,
            }],
            &[],
        ),
        _ => {
            fail(&format!("timed out after {} s with {} of {} bytes", args.timeout_s, download.received, download.size))
        }
    }
}
