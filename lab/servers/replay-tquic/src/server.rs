//! The server: any number of connections at once, each request answered with its body from one
//! shared buffer (tquic takes `Bytes`, so a slice of it is a reference count, not a copy); a stream
//! (`GET /<size>?bitrate=<bits/s>`) paced by replay::Pace: a stream its pace lets nothing more go stops
//! asking to write, and `net::run` asks again for it at its next tick (net::Ticks).

use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

use bytes::Bytes;
use lab_server_common::page::H3_ALPN;
use lab_server_common::replay::{body_chunk, print_sender_stats, Direction, Options, Pace, Request, ServerArgs};
use tquic::{Connection, Endpoint, TlsConfig, TransportHandler};

use crate::{h3, net};

/// Where a request stream stands; the stream's context in tquic.
enum Exchange {
    Request(Vec<u8>),
    Body { remaining: u64, pace: Option<Pace> },
    Done,
}

struct Server {
    options: Options,
    body: Bytes,
    /// The HTTP/3 side of each connection that negotiated h3 (a browser's), by the connection's index.
    sessions: HashMap<u64, h3::Session>,
    /// When paced streams let more go, for the loop (net::run) to make them writable again.
    ticks: net::Ticks,
}

impl Server {
    /// The HTTP/3 session of `conn`, served now; false if it speaks hq-interop.
    fn serve_h3(&mut self, conn: &mut Connection) -> bool {
        let Some(index) = conn.index() else { return false };
        let Some(session) = self.sessions.get_mut(&index) else { return false };
        session.serve(conn, &self.body);
        for (stream_id, tick) in session.ticks() {
            self.ticks.borrow_mut().push((tick, index, stream_id));
        }
        true
    }

    fn send_body(&self, conn: &mut Connection, stream_id: u64) {
        let Some(Exchange::Body { remaining, pace }) = exchange(conn, stream_id) else { return };
        let (mut remaining, mut pace) = (*remaining, pace.take());
        let now = Instant::now();
        let mut state = loop {
            // a stream sends what its pace has let go; a download, all of it
            let can = pace.as_mut().map_or(remaining, |pace| pace.allowed(now).min(remaining));
            if can == 0 {
                break Exchange::Body { remaining, pace }; // until its next tick
            }
            let len = can.min(self.body.len() as u64) as usize;
            let fin = len as u64 == remaining;
            match conn.stream_write(stream_id, self.body.slice(..len), fin) {
                Ok(written) if written == len && fin => break Exchange::Done,
                Ok(written) => {
                    remaining -= written as u64;
                    if let Some(pace) = &mut pace {
                        pace.took(written as u64);
                    }
                    if written < len {
                        break Exchange::Body { remaining, pace };
                    }
                }
                // No room now: the stream becomes writable again.
                Err(tquic::Error::Done) => break Exchange::Body { remaining, pace },
                // Stopped or reset by the client: nothing more to send.
                Err(_) => break Exchange::Done,
            }
        };
        let tick = match &mut state {
            Exchange::Body { pace: Some(pace), .. } => (pace.allowed(now) == 0).then(|| pace.next_tick()).flatten(),
            _ => None,
        };
        if matches!(state, Exchange::Done) || tick.is_some() {
            let _ = conn.stream_want_write(stream_id, false);
        }
        if let (Some(tick), Some(index)) = (tick, conn.index()) {
            self.ticks.borrow_mut().push((tick, index, stream_id));
        }
        if let Some(current) = exchange(conn, stream_id) {
            *current = state;
        }
    }
}

fn exchange(conn: &mut Connection, stream_id: u64) -> Option<&mut Exchange> {
    conn.stream_context(stream_id)?.downcast_mut::<Exchange>()
}

impl TransportHandler for Server {
    fn on_conn_created(&mut self, conn: &mut Connection) {
        crate::attach_logs(conn, &self.options);
    }

    fn on_conn_established(&mut self, conn: &mut Connection) {
        if conn.application_proto() == H3_ALPN {
            if let (Some(index), Some(session)) = (conn.index(), h3::Session::start(conn)) {
                self.sessions.insert(index, session);
                self.serve_h3(conn);
            }
        }
    }

    fn on_conn_closed(&mut self, conn: &mut Connection) {
        if let Some(index) = conn.index() {
            self.sessions.remove(&index);
        }
        let (packets_sent, packets_lost) = (conn.stats().sent_count, conn.stats().lost_count);
        let (bytes_sent, bytes_lost) = (conn.stats().sent_bytes, conn.stats().lost_bytes);
        let mut stats = vec![
            ("packets_sent", packets_sent as f64),
            ("packets_lost", packets_lost as f64),
            ("bytes_sent", bytes_sent as f64),
            ("bytes_lost", bytes_lost as f64),
        ];
        let addresses = conn.get_active_path().map(|path| (path.local_addr(), path.remote_addr()));
        if let Ok(path) = addresses.and_then(|(local, remote)| conn.get_path_stats(local, remote)) {
            stats.extend([
                ("min_rtt_ms", path.min_rtt as f64 / 1000.0),
                ("smoothed_rtt_ms", path.srtt as f64 / 1000.0),
                ("congestion_window", path.final_cwnd as f64),
                ("max_congestion_window", path.max_cwnd as f64),
            ]);
        }
        print_sender_stats(&stats);
        let _ = std::io::stdout().flush();
    }

    fn on_stream_created(&mut self, conn: &mut Connection, stream_id: u64) {
        let _ = conn.stream_set_context(stream_id, Exchange::Request(Vec::new()));
    }

    fn on_stream_readable(&mut self, conn: &mut Connection, stream_id: u64) {
        if self.serve_h3(conn) {
            return;
        }
        let mut buffer = [0u8; 4096];
        while let Ok((len, fin)) = conn.stream_read(stream_id, &mut buffer) {
            let request = match exchange(conn, stream_id) {
                Some(Exchange::Request(received)) => {
                    received.extend_from_slice(&buffer[..len]);
                    Request::parse(received, fin)
                }
                _ => Ok(None),
            };
            match request {
                Ok(Some((Request { direction: Direction::Down, size, bitrate }, _))) => {
                    if let Some(state) = exchange(conn, stream_id) {
                        let pace = bitrate.map(|bitrate| Pace::new(size, bitrate));
                        *state = Exchange::Body { remaining: size, pace };
                    }
                }
                Ok(Some(_)) => {
                    let _ = conn.close(true, 1, b"the tquic server takes no PUT");
                    return;
                }
                Ok(None) => {}
                Err(e) => {
                    let _ = conn.close(true, 1, e.as_bytes());
                    return;
                }
            }
            if fin || len == 0 {
                break;
            }
        }
        self.send_body(conn, stream_id);
    }

    fn on_stream_writable(&mut self, conn: &mut Connection, stream_id: u64) {
        if self.serve_h3(conn) {
            return;
        }
        self.send_body(conn, stream_id);
    }

    fn on_stream_closed(&mut self, _: &mut Connection, _: u64) {}
    fn on_new_token(&mut self, _: &mut Connection, _: Vec<u8>) {}
}

pub fn run(args: ServerArgs) {
    let (socket, local) = net::bind(args.listener.listen);
    let tls = TlsConfig::new_server_config(
        &args.listener.cert.to_string_lossy(),
        &args.listener.key.to_string_lossy(),
        // h3 beside hq-interop, for a browser (our own clients offer hq-interop only).
        vec![lab_server_common::replay::ALPN.to_vec(), H3_ALPN.to_vec()],
        false,
    )
    .unwrap_or_else(|e| {
        lab_server_common::refuse(&format!("{} / {}: {e}", args.listener.cert.display(), args.listener.key.display()))
    });
    let config = crate::config(&args.options, tls, true);
    let ticks = net::Ticks::default();
    let server = Server {
        options: args.options,
        body: Bytes::from(body_chunk()),
        sessions: HashMap::new(),
        ticks: ticks.clone(),
    };
    let mut endpoint =
        Endpoint::new(Box::new(config), true, Box::new(server), std::rc::Rc::new(net::Sender(socket.clone())));
    // Until SIGTERM, which lab_server_common's handler turns into exit status 0.
    net::run(&mut endpoint, &socket, local, &ticks, || false);
}
