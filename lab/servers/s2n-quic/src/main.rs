//! s2n-quic 1.91 with its default TLS (s2n-tls): accepts h3 handshakes and
//! holds each connection until the client leaves.

use std::error::Error;
use std::time::Duration;

use lab_server_common::{refuse, Args};
use s2n_quic::provider::connection_id::default::Format;
use s2n_quic::provider::limits::Limits;
use s2n_quic::provider::tls::default::Server as Tls;

fn set<E: Error + 'static>(
    limits: Limits,
    value: Option<u64>,
    setter: fn(Limits, u64) -> Result<Limits, E>,
) -> Result<Limits, Box<dyn Error>> {
    Ok(match value {
        Some(value) => setter(limits, value)?,
        None => limits,
    })
}

fn limits(args: &Args) -> Result<Limits, Box<dyn Error>> {
    let p = &args.parameters;
    let mut limits = Limits::new();
    if let Some(ms) = p.max_idle_timeout {
        limits = limits.with_max_idle_timeout(Duration::from_millis(ms))?;
    }
    limits = set(limits, p.initial_max_data, Limits::with_data_window)?;
    limits = set(limits, p.initial_max_stream_data_bidi_local, Limits::with_bidirectional_local_data_window)?;
    limits = set(limits, p.initial_max_stream_data_bidi_remote, Limits::with_bidirectional_remote_data_window)?;
    limits = set(limits, p.initial_max_stream_data_uni, Limits::with_unidirectional_data_window)?;
    limits = set(limits, p.initial_max_streams_bidi, Limits::with_max_open_remote_bidirectional_streams)?;
    limits = set(limits, p.initial_max_streams_uni, Limits::with_max_open_remote_unidirectional_streams)?;
    Ok(limits.with_active_connection_migration(!args.application.disable_active_migration)?)
}

async fn serve(args: &Args) -> Result<(), Box<dyn Error>> {
    let app = &args.application;
    app.refuse_unsupported("s2n-quic", &["datagrams", "active-connection-id-limit", "preferred-address", "retry"]);
    let mut ids = Format::builder();
    if let Some(length) = app.cid_length {
        ids = ids.with_len(length).map_err(|e| format!("connection ID length {length}: {e:?}"))?;
    }
    let tls = Tls::builder()
        .with_certificate(args.listener.cert.as_path(), args.listener.key.as_path())?
        .with_application_protocols(app.alpn.iter())?
        .build()?;
    let mut server = s2n_quic::Server::builder()
        .with_tls(tls)?
        .with_limits(limits(args)?)?
        .with_connection_id(ids.build()?)?
        .with_io(args.listener.listen)?
        .start()?;
    while let Some(mut connection) = server.accept().await {
        tokio::spawn(async move { while let Ok(Some(_)) = connection.accept().await {} });
    }
    Ok(())
}

fn main() {
    let args = lab_server_common::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    if let Err(e) = runtime.block_on(serve(&args)) {
        refuse(&e.to_string());
    }
}
