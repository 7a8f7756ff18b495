//! The server: answers `GET /<size>` on every stream of every connection, which msquic runs concurrently
//! on its own threads, and prints the sender's statistics as each connection closes.

use std::ffi::c_void;
use std::sync::Arc;

use lab_server_common::refuse;
use lab_server_common::replay::{self, ServerArgs};
use msquic::{
    Addr, BufferRef, CertificateFile, Connection, ConnectionEvent, ConnectionRef, Credential, CredentialConfig,
    Listener, ListenerEvent, SendFlags, Status, Stream, StreamEvent, StreamRef, StreamShutdownFlags,
};

use crate::{Endpoint, Keylog, Side};

/// body_chunk()s per send: 1 MiB sends keep the queue of sends short.
const CHUNKS_PER_SEND: usize = 16;

pub fn run(args: ServerArgs) {
    let endpoint = Arc::new(Endpoint::new(&args.options, Side::Server));
    let registration = crate::registration();
    let key_and_cert =
        CertificateFile::new(args.listener.key.display().to_string(), args.listener.cert.display().to_string());
    let credential = CredentialConfig::new().set_credential(Credential::CertificateFile(key_and_cert));
    let configuration = Arc::new(endpoint.configuration(&registration, credential));
    let keylog = args.options.keylog.as_deref().map(|path| Arc::new(Keylog::open(path)));
    let body: &'static [u8] = replay::body_chunk().repeat(CHUNKS_PER_SEND).leak();

    let listener = Listener::open(&registration, move |_, event| {
        if let ListenerEvent::NewConnection { connection, .. } = event {
            let secrets = keylog.as_ref().map(|_| Keylog::capture(&connection));
            let (endpoint, keylog) = (endpoint.clone(), keylog.clone());
            connection.set_callback_handler(move |connection: ConnectionRef, event: ConnectionEvent| {
                match event {
                    ConnectionEvent::Connected { .. } => {
                        if let (Some(keylog), Some(secrets)) = (&keylog, &secrets) {
                            keylog.record(secrets);
                        }
                        endpoint.bound_window_growth(&connection)?;
                    }
                    ConnectionEvent::PeerStreamStarted { stream, .. } => stream.set_callback_handler(answer(body)),
                    // The sender is done by then; ShutdownComplete may come too late, after the runner's SIGTERM.
                    ConnectionEvent::ShutdownInitiatedByPeer { .. }
                    | ConnectionEvent::ShutdownInitiatedByTransport { .. } => print_sender_stats(&connection),
                    // Ours since NewConnection: closing the handle frees it (and this handler, so nothing after).
                    ConnectionEvent::ShutdownComplete { .. } => {
                        drop(unsafe { Connection::from_raw(connection.as_raw()) })
                    }
                    _ => {}
                }
                Ok(())
            });
            connection.set_configuration(&configuration)?;
        }
        Ok(())
    })
    .unwrap_or_else(|e| crate::msquic_refused("a listener", e));
    let alpn = [BufferRef::from(replay::ALPN)];
    listener
        .start(&alpn, Some(&Addr::from(args.listener.listen)))
        .unwrap_or_else(|e| refuse(&format!("listening on {}: {e:?}", args.listener.listen)));
    loop {
        std::thread::park(); // msquic's own threads do the work; SIGTERM ends the process
    }
}

fn answer(body: &'static [u8]) -> impl FnMut(StreamRef, StreamEvent) -> Result<(), Status> {
    let mut request = Vec::new();
    let mut answered = false;
    move |stream, event| {
        let finished = match event {
            StreamEvent::Receive { buffers, .. } => {
                buffers.iter().for_each(|buffer| request.extend_from_slice(buffer.as_bytes()));
                false
            }
            StreamEvent::PeerSendShutdown => true,
            StreamEvent::SendComplete { client_context, .. } => {
                if !client_context.is_null() {
                    drop(unsafe { Box::from_raw(client_context as *mut [BufferRef; 1]) });
                }
                return Ok(());
            }
            StreamEvent::ShutdownComplete { .. } => {
                drop(unsafe { Stream::from_raw(stream.as_raw()) });
                return Ok(());
            }
            _ => return Ok(()),
        };
        if answered {
            return Ok(());
        }
        match replay::requested_size(&request, finished, "msquic") {
            Ok(None) => {}
            Ok(Some(size)) => {
                answered = true;
                send_body(&stream, body, size)?;
            }
            Err(_) => {
                answered = true;
                stream.shutdown(StreamShutdownFlags::ABORT, 1)?;
            }
        }
        Ok(())
    }
}

/// Queues the whole body at once. Every send points into the same chunk, so msquic holds only their
/// descriptors and copies from the chunk into its send buffer as the flow and congestion windows open.
fn send_body(stream: &StreamRef, body: &'static [u8], size: u64) -> Result<(), Status> {
    if size == 0 {
        return unsafe { stream.send(&[], SendFlags::FIN, std::ptr::null()) };
    }
    let mut remaining = size;
    while remaining > 0 {
        let length = remaining.min(body.len() as u64);
        remaining -= length;
        let flags = if remaining == 0 { SendFlags::FIN } else { SendFlags::NONE };
        // msquic reads the descriptor until SendComplete, which frees it.
        let buffers = Box::into_raw(Box::new([BufferRef::from(&body[..length as usize])]));
        unsafe { stream.send(&*buffers, flags, buffers as *const c_void) }
            .inspect_err(|_| drop(unsafe { Box::from_raw(buffers) }))?;
    }
    Ok(())
}

fn print_sender_stats(connection: &Connection) {
    let Ok(stats) = connection.get_stats_v2() else { return };
    replay::print_sender_stats(&[
        ("packets_sent", stats.SendTotalPackets as f64),
        ("bytes_sent", stats.SendTotalBytes as f64),
        // msquic counts every suspected loss, and separately those it later found spurious.
        ("packets_lost", stats.SendSuspectedLostPackets.saturating_sub(stats.SendSpuriousLostPackets) as f64),
        ("congestion_events", f64::from(stats.SendCongestionCount)),
        ("min_rtt_ms", f64::from(stats.MinRtt) / 1e3),
        ("smoothed_rtt_ms", f64::from(stats.Rtt) / 1e3),
        ("congestion_window", f64::from(stats.SendCongestionWindow)),
    ]);
}
