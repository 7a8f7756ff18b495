//! The download: one connection, one bidirectional stream, the body counted as msquic delivers it; the stream
//! client's the same with `?bitrate=<bits/s>`, each delivery's arrival noted for qreplay to play back.

use std::ffi::c_void;
use std::mem::size_of;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use lab_server_common::replay::{self, fail, ClientArgs, Exchange, Options, Request, StreamClientArgs, Target};
use msquic::ffi::QUIC_PARAM_CONN_REMOTE_ADDRESS;
use msquic::{
    Addr, Api, BufferRef, Connection, ConnectionEvent, ConnectionRef, ConnectionShutdownFlags, CredentialConfig,
    CredentialFlags, SendFlags, Status, Stream, StreamEvent, StreamOpenFlags, StreamRef, StreamStartFlags,
};

use crate::{Endpoint, Keylog, Side};

/// What msquic's threads tell the main thread.
enum Progress {
    /// The handshake is done and the request went out at this instant.
    Requested(Instant),
    /// The body's FIN arrived after this many bytes, the first of them at `first_byte`.
    Finished {
        bytes: u64,
        first_byte: Option<Instant>,
        at: Instant,
        /// Each delivery's arrival and bytes.
        arrivals: Vec<(Instant, usize)>,
    },
    Failed(String),
    Closed,
}

pub fn run(args: ClientArgs) {
    args.refuse_workloads("msquic");
    match download(&args.target, &args.options, args.request()) {
        Ok((handshake, exchange, _)) => replay::print_client_result(handshake, &[exchange], &[]),
        Err(message) => fail(&message),
    }
}

pub fn run_stream(args: StreamClientArgs) {
    match download(&args.target, &args.options, args.request()) {
        Ok((handshake, exchange, arrivals)) => {
            let arrivals: Vec<_> = arrivals.into_iter().map(|(at, bytes)| (at - exchange.sent, bytes)).collect();
            replay::print_stream_result(handshake, &exchange, args.bitrate, &arrivals)
        }
        Err(message) => fail(&message),
    }
}

/// The handshake's time, the download and its deliveries. msquic's handles are closed on return: libmsquic's
/// exit handler waits for every connection to be gone.
#[allow(clippy::type_complexity)]
fn download(
    target: &Target,
    options: &Options,
    request: Request,
) -> Result<(Duration, Exchange, Vec<(Instant, usize)>), String> {
    let endpoint = Endpoint::new(options, Side::Client);
    let registration = crate::registration();
    // The lab's certificates are self-signed.
    let credential = CredentialConfig::new_client().set_credential_flags(CredentialFlags::NO_CERTIFICATE_VALIDATION);
    let configuration = endpoint.configuration(&registration, credential);
    let keylog = options.keylog.as_deref().map(Keylog::open);

    let (report, events) = mpsc::channel();
    // The handler comes once the connection exists: it owns the secrets buffer, which needs the connection.
    let connection =
        Connection::open(&registration, |_, _| Ok(())).map_err(|e| format!("opening a connection: {e:?}"))?;
    let secrets = keylog.as_ref().map(|_| Keylog::capture(&connection));
    let size = target.size;
    connection.set_callback_handler(move |connection: ConnectionRef, event: ConnectionEvent| {
        let _ = report.send(match event {
            ConnectionEvent::Connected { .. } => {
                if let (Some(keylog), Some(secrets)) = (&keylog, &secrets) {
                    keylog.record(secrets);
                }
                let requested = Instant::now();
                match endpoint
                    .bound_window_growth(&connection)
                    .and_then(|()| send_request(&connection, request, &report))
                {
                    Ok(()) => Progress::Requested(requested),
                    Err(status) => Progress::Failed(format!("sending the request: {status:?}")),
                }
            }
            ConnectionEvent::ShutdownInitiatedByTransport { status, error_code } => {
                Progress::Failed(format!("msquic closed the connection: {status:?} (error code {error_code})"))
            }
            ConnectionEvent::ShutdownInitiatedByPeer { error_code } => {
                Progress::Failed(format!("the server closed the connection (error code {error_code})"))
            }
            ConnectionEvent::ShutdownComplete { .. } => Progress::Closed,
            _ => return Ok(()),
        });
        Ok(())
    });
    let server = Addr::from(target.connect);
    // With the address set, the name is the SNI only (no resolution).
    unsafe {
        Api::set_param(
            connection.as_raw(),
            QUIC_PARAM_CONN_REMOTE_ADDRESS,
            size_of::<Addr>() as u32,
            &server as *const Addr as *const c_void,
        )
    }
    .map_err(|e| format!("server address {}: {e:?}", target.connect))?;
    let started = Instant::now();
    connection
        .start(&configuration, "qreplay.lab", target.connect.port())
        .map_err(|e| format!("connecting to {}: {e:?}", target.connect))?;

    let deadline = started + Duration::from_secs_f64(target.timeout_s);
    let mut requested = None;
    let result = loop {
        match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Progress::Requested(at)) => requested = Some(at),
            Ok(Progress::Finished { bytes, first_byte, at, arrivals }) if bytes == size => {
                let sent = requested.expect("a body without a request");
                let exchange = Exchange { sent, first_byte: first_byte.unwrap_or(at), finished: at, bytes };
                break (sent - started, exchange, arrivals);
            }
            Ok(Progress::Finished { bytes, .. }) => {
                return Err(format!("the stream ended after {bytes} of {size} bytes"))
            }
            Ok(Progress::Failed(message)) => return Err(message),
            Ok(Progress::Closed) => return Err("the connection closed before the download ended".into()),
            Err(RecvTimeoutError::Timeout) => return Err(format!("no completion within {} s", target.timeout_s)),
            Err(RecvTimeoutError::Disconnected) => unreachable!("the connection's callback holds a sender"),
        }
    };
    // The server prints its sender statistics when the connection closes, so close it now rather than let it time out.
    connection.shutdown(ConnectionShutdownFlags::NONE, 0);
    let closing = Instant::now() + Duration::from_secs(1);
    while let Ok(event) = events.recv_timeout(closing.saturating_duration_since(Instant::now())) {
        if let Progress::Closed = event {
            break;
        }
    }
    Ok(result)
}

/// Opens the stream and sends `GET /<size>` with its FIN; the stream reports the body's end to `report`.
fn send_request(connection: &Connection, request: Request, report: &Sender<Progress>) -> Result<(), Status> {
    let stream =
        Stream::open(connection, StreamOpenFlags::NONE, receive_body(report.clone(), request.bitrate.is_some()))?;
    stream.start(StreamStartFlags::NONE)?;
    // msquic reads these until SendComplete; the client sends once, so they may live as long as the process.
    let request: &'static [u8] = Box::leak(request.line().into_boxed_slice());
    let buffers: &'static [BufferRef; 1] = Box::leak(Box::new([BufferRef::from(request)]));
    unsafe { stream.send(buffers, SendFlags::FIN, std::ptr::null()) }?;
    // Its callback closes it.
    unsafe { stream.into_raw() };
    Ok(())
}

/// The body's reader: its bytes counted, and each delivery's arrival noted where `noted` (a stream's).
fn receive_body(report: Sender<Progress>, noted: bool) -> impl FnMut(StreamRef, StreamEvent) -> Result<(), Status> {
    let mut bytes = 0;
    let mut first_byte = None;
    let mut arrivals = Vec::new();
    move |stream, event| {
        match event {
            // Leaving total_buffer_length as it is consumes all of it.
            StreamEvent::Receive { total_buffer_length, .. } => {
                let now = Instant::now();
                first_byte.get_or_insert(now);
                bytes += *total_buffer_length;
                if noted && *total_buffer_length > 0 {
                    arrivals.push((now, *total_buffer_length as usize));
                }
            }
            // msquic tells this once the application has taken every byte up to the FIN.
            StreamEvent::PeerSendShutdown => {
                let arrivals = std::mem::take(&mut arrivals);
                let _ = report.send(Progress::Finished { bytes, first_byte, at: Instant::now(), arrivals });
            }
            StreamEvent::PeerSendAborted { error_code } => {
                let _ = report.send(Progress::Failed(format!("the server reset the stream (error code {error_code})")));
            }
            StreamEvent::ShutdownComplete { .. } => drop(unsafe { Stream::from_raw(stream.as_raw()) }),
            _ => {}
        }
        Ok(())
    }
}
