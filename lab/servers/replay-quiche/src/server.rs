//! The server: any number of connections at once, each answering `GET /<size>` on any bidi stream, and
//! `GET /<size>?bitrate=<bits/s>` paced (replay::Pace), over hq-interop and h3 (h3.rs) alike.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant;

use crate::h3;

use lab_server_common::page::H3_ALPN;
use lab_server_common::refuse;
use lab_server_common::replay::{self, Direction, Pace, Request, ServerArgs, MAX_REQUEST};

struct Client {
    connection: quiche::Connection,
    /// Per stream: the request read so far, then the body bytes still to send.
    streams: HashMap<u64, Transfer>,
    /// The HTTP/3 side, once a client that negotiated h3 (a browser) has completed its handshake.
    h3: Option<h3::Session>,
    /// When quiche's pacer lets the next packet go.
    release: Option<Instant>,
    stats_printed: bool,
}

enum Transfer {
    Request(Vec<u8>),
    /// The body bytes still to send, and a stream's pace.
    Body(u64, Option<Pace>),
    /// Kept, so that a FIN arriving after the request line is not taken for a new, empty request.
    Sent,
}

/// The listening socket and the connections made on it.
struct Server {
    socket: UdpSocket,
    local: SocketAddr,
    config: quiche::Config,
    options: replay::Options,
    /// A connection's ID is derived from the client's first DCID with these keys, so that a
    /// repeated Initial finds the connection it already made.
    keys: RandomState,
    clients: HashMap<Vec<u8>, Client>,
}

pub fn run(args: ServerArgs) {
    let mut config =
        super::config(&args.options, args.options.parameters.flow_control.initial_max_stream_data_bidi_remote);
    // h3 beside hq-interop, for a browser (our own clients offer hq-interop only).
    config.set_application_protos(&[replay::ALPN, H3_ALPN]).expect("ALPN");
    config
        .load_cert_chain_from_pem_file(&args.listener.cert.to_string_lossy())
        .unwrap_or_else(|e| refuse(&format!("{}: {e}", args.listener.cert.display())));
    config
        .load_priv_key_from_pem_file(&args.listener.key.to_string_lossy())
        .unwrap_or_else(|e| refuse(&format!("{}: {e}", args.listener.key.display())));
    let socket = super::bind(args.listener.listen);
    let local = socket.local_addr().expect("local address");
    let mut server =
        Server { socket, local, config, options: args.options, keys: RandomState::new(), clients: HashMap::new() };

    let body = replay::body_chunk();
    let (mut buf, mut out) = (vec![0u8; 65535], vec![0u8; 65535]);
    loop {
        let clients = server.clients.values();
        let next_timer =
            clients.flat_map(|c| [c.connection.timeout_instant(), c.release, c.next_tick()]).flatten().min();
        super::wait(&server.socket, libc::POLLIN, next_timer);
        loop {
            let (len, from) = match server.socket.recv_from(&mut buf) {
                Ok(v) => v,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => break,
                Err(e) => refuse(&format!("receive: {e}")),
            };
            server.receive(&mut buf[..len], from, &mut out);
        }
        let now = Instant::now();
        for client in server.clients.values_mut() {
            if client.connection.timeout_instant().is_some_and(|t| t <= now) {
                client.connection.on_timeout();
            }
            client.serve(&body);
            client.release = super::flush(&server.socket, &mut client.connection, &mut out);
            client.report();
        }
        server.clients.retain(|_, c| !c.connection.is_closed());
    }
}

impl Server {
    /// Hands one datagram to its connection, making one for a new client's Initial.
    fn receive(&mut self, datagram: &mut [u8], from: SocketAddr, out: &mut [u8]) {
        let Ok(header) = quiche::Header::from_slice(datagram, quiche::MAX_CONN_ID_LEN) else { return };
        let mut id = header.dcid.to_vec();
        if !self.clients.contains_key(&id) {
            if header.ty != quiche::Type::Initial {
                return;
            }
            if !quiche::version_is_supported(header.version) {
                if let Ok(len) = quiche::negotiate_version(&header.scid, &header.dcid, out) {
                    let _ = self.socket.send_to(&out[..len], from);
                }
                return;
            }
            id = super::derive_id(&self.keys, &header.dcid, quiche::MAX_CONN_ID_LEN);
            if !self.clients.contains_key(&id) {
                let scid = quiche::ConnectionId::from_ref(&id);
                let Ok(mut connection) = quiche::accept(&scid, None, self.local, from, &mut self.config) else {
                    return;
                };
                super::trace(&mut connection, &self.options, "server");
                let client =
                    Client { connection, streams: HashMap::new(), h3: None, release: None, stats_printed: false };
                self.clients.insert(id.clone(), client);
            }
        }
        let client = self.clients.get_mut(&id).expect("connection");
        let _ = client.connection.recv(datagram, quiche::RecvInfo { from, to: self.local });
    }
}

impl Client {
    /// Reads requests and queues as much body as quiche takes (it buffers up to its send capacity).
    fn serve(&mut self, body: &[u8]) {
        let connection = &mut self.connection;
        if connection.application_proto() == H3_ALPN {
            if self.h3.is_none() && connection.is_established() {
                self.h3 = h3::Session::start(connection);
            }
            if let Some(session) = &mut self.h3 {
                session.serve(connection, body);
            }
            return;
        }
        let mut request = [0u8; MAX_REQUEST + 1];
        for stream_id in connection.readable() {
            while let Ok((len, fin)) = connection.stream_recv(stream_id, &mut request) {
                let transfer = self.streams.entry(stream_id).or_insert_with(|| Transfer::Request(Vec::new()));
                let Transfer::Request(received) = transfer else { continue };
                received.extend_from_slice(&request[..len]);
                match Request::parse(received, fin) {
                    Ok(Some((Request { direction: Direction::Down, size, bitrate }, _))) => {
                        let pace = bitrate.map(|bitrate| Pace::new(size, bitrate));
                        *transfer = Transfer::Body(size, pace);
                    }
                    Ok(None) => {}
                    Ok(Some(_)) => {
                        let _ = connection.close(true, 0x1, b"the quiche server takes no PUT");
                        return;
                    }
                    Err(reason) => {
                        let _ = connection.close(true, 0x1, reason.as_bytes());
                        return;
                    }
                }
            }
        }
        let now = Instant::now();
        for (&stream_id, transfer) in self.streams.iter_mut() {
            let Transfer::Body(left, pace) = transfer else { continue };
            // a stream sends what its schedule has let go; a download, all of it
            let mut can = *left;
            if let Some(pace) = pace {
                can = pace.allowed(now);
            }
            while can > 0 {
                let chunk = body.len().min(usize::try_from(can).unwrap_or(usize::MAX));
                let Ok(written) = connection.stream_send(stream_id, &body[..chunk], chunk as u64 == *left) else {
                    break;
                };
                (*left, can) = (*left - written as u64, can - written as u64);
                if let Some(pace) = pace {
                    pace.took(written as u64);
                }
                if *left == 0 {
                    *transfer = Transfer::Sent;
                    break;
                }
                if written < chunk {
                    break;
                }
            }
        }
    }

    /// When a paced stream (hq-interop's or h3's) lets more bytes go, while one has more to let go.
    fn next_tick(&self) -> Option<Instant> {
        let paces = self.streams.values().filter_map(|transfer| match transfer {
            Transfer::Body(_, Some(pace)) => pace.next_tick(),
            _ => None,
        });
        paces.chain(self.h3.as_ref().and_then(h3::Session::next_tick)).min()
    }

    /// The sender's statistics, once the connection is closing: the lab stops the server right
    /// after the client's download, before a closed connection would have drained.
    fn report(&mut self) {
        let connection = &self.connection;
        if self.stats_printed || !(connection.is_draining() || connection.is_closed()) {
            return;
        }
        self.stats_printed = true;
        let stats = connection.stats();
        let mut fields = vec![
            ("packets_sent", stats.sent as f64),
            ("packets_lost", stats.lost as f64),
            ("packets_retransmitted", stats.retrans as f64),
            ("bytes_sent", stats.sent_bytes as f64),
            ("bytes_lost", stats.lost_bytes as f64),
        ];
        if let Some(path) = connection.path_stats().next() {
            fields.push(("smoothed_rtt_ms", super::millis(path.rtt)));
            fields.extend(path.min_rtt.map(|rtt| ("min_rtt_ms", super::millis(rtt))));
            fields.push(("congestion_window", path.cwnd as f64));
        }
        replay::print_sender_stats(&fields);
    }
}
