//! The server: answers `GET /<size>` on every stream of every connection, which msquic runs concurrently
//! on its own threads, and prints the sender's statistics as each connection closes. A stream
//! (`GET /<size>?bitrate=<bits/s>`) is paced by replay::Paced from a thread of ours: msquic's API takes a send
//! from any thread, queued behind the stream's earlier sends (what the link cannot carry waits in msquic).

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};

use lab_server_common::refuse;
use lab_server_common::replay::{self, Direction, Paced, Request, ServerArgs};
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
    // A paced stream's sender sends while this holds true; false before msquic frees the stream.
    let open = Arc::new(Mutex::new(true));
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
                *open.lock().expect("pacer") = false;
                drop(unsafe { Stream::from_raw(stream.as_raw()) });
                return Ok(());
            }
            _ => return Ok(()),
        };
        if answered {
            return Ok(());
        }
        match Request::parse(&request, finished) {
            Ok(None) => {}
            Ok(Some((Request { direction: Direction::Down, size, bitrate: None }, _))) => {
                answered = true;
                send_body(&stream, body, size, true)?;
            }
            Ok(Some((Request { direction: Direction::Down, size, bitrate: Some(bitrate) }, _))) => {
                answered = true;
                send_paced(&stream, body, size, bitrate, open.clone())?;
            }
            Ok(Some(_)) | Err(_) => {
                answered = true;
                stream.shutdown(StreamShutdownFlags::ABORT, 1)?;
            }
        }
        Ok(())
    }
}

/// Queues `size` bytes of body at once, the FIN after them if `fin`. Every send points into the same chunk, so
/// msquic holds only their descriptors and copies from the chunk into its send buffer as the flow and congestion
/// windows open.
fn send_body(stream: &Stream, body: &'static [u8], size: u64, fin: bool) -> Result<(), Status> {
    if size == 0 && fin {
        return unsafe { stream.send(&[], SendFlags::FIN, std::ptr::null()) };
    }
    let mut remaining = size;
    while remaining > 0 {
        let length = remaining.min(body.len() as u64);
        remaining -= length;
        let flags = if remaining == 0 && fin { SendFlags::FIN } else { SendFlags::NONE };
        // msquic reads the descriptor until SendComplete, which frees it.
        let buffers = Box::into_raw(Box::new([BufferRef::from(&body[..length as usize])]));
        unsafe { stream.send(&*buffers, flags, buffers as *const c_void) }
            .inspect_err(|_| drop(unsafe { Box::from_raw(buffers) }))?;
    }
    Ok(())
}

/// Queues a stream's bytes as its schedule lets them go (replay::Paced), from a thread of its own that ends when
/// the stream is gone (`open` false: its callback's ShutdownComplete, before msquic frees it).
fn send_paced(
    stream: &StreamRef,
    body: &'static [u8],
    size: u64,
    bitrate: u64,
    open: Arc<Mutex<bool>>,
) -> Result<(), Status> {
    if size == 0 {
        return send_body(stream, body, 0, true);
    }
    let handle = unsafe { stream.as_raw() } as usize;
    std::thread::spawn(move || {
        // Not ours to close: the callback closes it.
        let stream = ManuallyDrop::new(unsafe { Stream::from_raw(handle as _) });
        let (mut paced, mut left) = (Paced::new(size, bitrate), size);
        while let Some(due) = paced.next() {
            let open = open.lock().expect("pacer");
            left -= due;
            if !*open || send_body(&stream, body, due, left == 0).is_err() {
                return;
            }
            drop(open);
            std::thread::sleep(paced.pause());
        }
    });
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
