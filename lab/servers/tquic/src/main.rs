//! tquic 1.6 (bundled BoringSSL): its Endpoint does the QUIC work, this loop
//! only moves datagrams and timers; connections are held until they close.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::rc::Rc;
use std::time::{Duration, Instant};

use lab_server_common::refuse;
use tquic::{Config, Connection, Endpoint, PacketInfo, PacketSendHandler, TlsConfig, TransportHandler};

struct Sender(UdpSocket);

impl PacketSendHandler for Sender {
    fn on_packets_send(&self, packets: &[(Vec<u8>, PacketInfo)]) -> tquic::Result<usize> {
        for (packet, info) in packets {
            let _ = self.0.send_to(packet, info.dst); // a lost datagram is QUIC's to repair
        }
        Ok(packets.len())
    }
}

/// The server needs no stream or connection events: it only completes handshakes.
struct Quiet;

impl TransportHandler for Quiet {
    fn on_conn_created(&mut self, _: &mut Connection) {}
    fn on_conn_established(&mut self, _: &mut Connection) {}
    fn on_conn_closed(&mut self, _: &mut Connection) {}
    fn on_stream_created(&mut self, _: &mut Connection, _: u64) {}
    fn on_stream_readable(&mut self, _: &mut Connection, _: u64) {}
    fn on_stream_writable(&mut self, _: &mut Connection, _: u64) {}
    fn on_stream_closed(&mut self, _: &mut Connection, _: u64) {}
    fn on_new_token(&mut self, _: &mut Connection, _: Vec<u8>) {}
}

fn main() {
    let args = lab_server_common::start();
    let (p, app) = (&args.parameters, &args.application);
    app.refuse_unsupported("tquic", &["datagrams", "disable-active-migration", "preferred-address"]);
    let mut config = Config::new().unwrap_or_else(|e| refuse(&e.to_string()));
    let tls = TlsConfig::new_server_config(
        &args.listener.cert.to_string_lossy(),
        &args.listener.key.to_string_lossy(),
        app.alpn(),
        false,
    )
    .unwrap_or_else(|e| refuse(&format!("{} / {}: {e}", args.listener.cert.display(), args.listener.key.display())));
    config.set_tls_config(tls);
    if let Some(length) = app.cid_length {
        config.set_cid_len(length);
    }
    if let Some(limit) = app.active_connection_id_limit {
        config.set_active_connection_id_limit(limit);
    }
    config.enable_retry(app.retry);
    let setters: [(Option<u64>, fn(&mut Config, u64)); 7] = [
        (p.max_idle_timeout, Config::set_max_idle_timeout),
        (p.initial_max_data, Config::set_initial_max_data),
        (p.initial_max_stream_data_bidi_local, Config::set_initial_max_stream_data_bidi_local),
        (p.initial_max_stream_data_bidi_remote, Config::set_initial_max_stream_data_bidi_remote),
        (p.initial_max_stream_data_uni, Config::set_initial_max_stream_data_uni),
        (p.initial_max_streams_bidi, Config::set_initial_max_streams_bidi),
        (p.initial_max_streams_uni, Config::set_initial_max_streams_uni),
    ];
    for (value, set) in setters {
        if let Some(value) = value {
            set(&mut config, value);
        }
    }

    let socket = UdpSocket::bind(args.listener.listen)
        .unwrap_or_else(|e| refuse(&format!("listen on {}: {e}", args.listener.listen)));
    let local = socket.local_addr().expect("local address");
    let sender = Rc::new(Sender(socket.try_clone().expect("socket")));
    let mut endpoint = Endpoint::new(Box::new(config), true, Box::new(Quiet), sender);
    let mut buf = [0u8; 65535];
    loop {
        let timeout = endpoint.timeout().unwrap_or(Duration::from_secs(60)).max(Duration::from_millis(1));
        socket.set_read_timeout(Some(timeout)).expect("timeout");
        match socket.recv_from(&mut buf) {
            Ok((len, from)) => {
                let _ = endpoint.recv(&mut buf[..len], &PacketInfo { src: from, dst: local, time: Instant::now() });
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                endpoint.on_timeout(Instant::now())
            }
            Err(e) => refuse(&format!("receive: {e}")),
        }
        let _ = endpoint.process_connections();
    }
}
