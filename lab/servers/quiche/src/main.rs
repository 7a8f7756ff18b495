//! quiche 0.30 (bundled BoringSSL): quiche has no I/O of its own, so this is
//! the smallest loop around it: version negotiation, accept, timers.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::Duration;

use lab_server_common::refuse;

fn main() {
    let args = lab_server_common::start();
    let (p, app) = (&args.parameters, &args.application);
    app.refuse_unsupported("quiche", &["preferred-address", "retry"]);
    let mut config = quiche::Config::new(quiche::PROTOCOL_VERSION).expect("quiche config");
    config
        .load_cert_chain_from_pem_file(&args.listener.cert.to_string_lossy())
        .unwrap_or_else(|e| refuse(&format!("{}: {e}", args.listener.cert.display())));
    config
        .load_priv_key_from_pem_file(&args.listener.key.to_string_lossy())
        .unwrap_or_else(|e| refuse(&format!("{}: {e}", args.listener.key.display())));
    let alpn = app.alpn();
    config
        .set_application_protos(&alpn.iter().map(Vec::as_slice).collect::<Vec<_>>())
        .unwrap_or_else(|e| refuse(&format!("ALPN: {e}")));
    config.set_disable_active_migration(app.disable_active_migration);
    if let Some(limit) = app.active_connection_id_limit {
        config.set_active_connection_id_limit(limit);
    }
    if app.datagrams == Some(true) {
        config.enable_dgram(true, 16, 16);
    }
    // Our example's choice (as quiche's apps/): the longest ID QUIC allows.
    let cid_length = app.cid_length.unwrap_or(quiche::MAX_CONN_ID_LEN);
    if cid_length > quiche::MAX_CONN_ID_LEN {
        refuse(&format!("connection IDs are at most {} bytes", quiche::MAX_CONN_ID_LEN));
    }
    // quiche's own defaults are 0 (no data, no streams): these are its example server's.
    config.set_max_idle_timeout(p.max_idle_timeout.unwrap_or(30_000));
    config.set_initial_max_data(p.initial_max_data.unwrap_or(10_000_000));
    config.set_initial_max_stream_data_bidi_local(p.initial_max_stream_data_bidi_local.unwrap_or(1_000_000));
    config.set_initial_max_stream_data_bidi_remote(p.initial_max_stream_data_bidi_remote.unwrap_or(1_000_000));
    config.set_initial_max_stream_data_uni(p.initial_max_stream_data_uni.unwrap_or(1_000_000));
    config.set_initial_max_streams_bidi(p.initial_max_streams_bidi.unwrap_or(100));
    config.set_initial_max_streams_uni(p.initial_max_streams_uni.unwrap_or(100));

    let socket = UdpSocket::bind(args.listener.listen)
        .unwrap_or_else(|e| refuse(&format!("listen on {}: {e}", args.listener.listen)));
    let local = socket.local_addr().expect("local address");
    // A connection's ID is derived from the client's first DCID, so that a
    // repeated Initial finds the connection it already made.
    let keys = RandomState::new();
    let derive = |dcid: &[u8]| -> Vec<u8> {
        (0..3u8).flat_map(|i| keys.hash_one((dcid, i)).to_le_bytes()).take(cid_length).collect()
    };
    let mut connections: HashMap<Vec<u8>, quiche::Connection> = HashMap::new();
    let (mut buf, mut out) = ([0u8; 65535], [0u8; 1350]);
    loop {
        let timeout = connections.values().filter_map(|c| c.timeout()).min();
        socket
            .set_read_timeout(Some(timeout.unwrap_or(Duration::from_secs(60)).max(Duration::from_millis(1))))
            .expect("timeout");
        match socket.recv_from(&mut buf) {
            Ok((len, from)) => {
                let Ok(header) = quiche::Header::from_slice(&mut buf[..len], cid_length) else { continue };
                let mut id = header.dcid.to_vec();
                if !connections.contains_key(&id) {
                    if header.ty != quiche::Type::Initial {
                        continue;
                    }
                    if !quiche::version_is_supported(header.version) {
                        if let Ok(n) = quiche::negotiate_version(&header.scid, &header.dcid, &mut out) {
                            let _ = socket.send_to(&out[..n], from);
                        }
                        continue;
                    }
                    id = derive(&header.dcid);
                    if !connections.contains_key(&id) {
                        let scid = quiche::ConnectionId::from_ref(&id);
                        let Ok(connection) = quiche::accept(&scid, None, local, from, &mut config) else { continue };
                        connections.insert(id.clone(), connection);
                    }
                }
                let connection = connections.get_mut(&id).expect("connection");
                let _ = connection.recv(&mut buf[..len], quiche::RecvInfo { from, to: local });
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                connections.values_mut().for_each(|c| c.on_timeout());
            }
            Err(e) => refuse(&format!("receive: {e}")),
        }
        for connection in connections.values_mut() {
            while let Ok((n, info)) = connection.send(&mut out) {
                let _ = socket.send_to(&out[..n], info.to);
            }
        }
        connections.retain(|_, c| !c.is_closed());
    }
}
