//! The server's HTTP/3 side, through the `h3` crate over quinn (`h3-quinn`), for a client that offers h3 (a
//! browser): the answers of lab_server_common::page on the same quinn connection, so a browser meets quinn
//! carrying the command line's transport parameters. A stream (`GET /<size>?bitrate=`) is paced as hq-interop's.

use bytes::{Buf, Bytes};
use h3::server::RequestStream;
use lab_server_common::page::{self, Answer};
use lab_server_common::replay::{pieces, Paced};

/// Serves every request of `connection` until it ends.
pub async fn serve(connection: quinn::Connection, body: Bytes) {
    let Ok(mut h3) = h3::server::Connection::new(h3_quinn::Connection::new(connection)).await else { return };
    while let Ok(Some(resolver)) = h3.accept().await {
        let body = body.clone();
        tokio::spawn(async move {
            if let Ok((request, stream)) = resolver.resolve_request().await {
                answer(request, stream, body).await;
            }
        });
    }
}

async fn answer(
    request: http::Request<()>,
    mut stream: RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>,
    body: Bytes,
) {
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let answer = page::answer(request.method().as_str().as_bytes(), path.as_bytes());
    let content = match &answer {
        Answer::Count => {
            let mut read = 0u64;
            loop {
                match stream.recv_data().await {
                    Ok(Some(data)) => read += data.remaining() as u64,
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
            Some(Bytes::from(read.to_string()))
        }
        Answer::File(bytes) => Some(Bytes::from(bytes.clone())),
        Answer::NotFound => Some(Bytes::new()),
        Answer::Size(_) | Answer::Stream { .. } => None,
    };
    let length = match (&answer, &content) {
        (Answer::Size(size) | Answer::Stream { size, .. }, _) => *size,
        (_, content) => content.as_ref().map_or(0, |c| c.len() as u64),
    };
    let mut response = http::Response::builder();
    for (name, value) in page::response_headers(&answer, length) {
        if name == b":status" {
            response = response.status(&value[..]);
        } else {
            response = response.header(name, value);
        }
    }
    if stream.send_response(response.body(()).expect("response")).await.is_err() {
        return;
    }
    match content {
        Some(content) if !content.is_empty() => {
            if stream.send_data(content).await.is_err() {
                return;
            }
        }
        Some(_) => {}
        None => {
            // a download's bytes at once; a stream's as its pace lets them go (replay::Paced, as hq-interop's)
            let bitrate = match answer {
                Answer::Stream { bitrate, .. } => bitrate,
                _ => u64::MAX,
            };
            let mut paced = Paced::new(length, bitrate);
            while let Some(due) = paced.next() {
                for piece in pieces(due, body.len()) {
                    if stream.send_data(body.slice(..piece)).await.is_err() {
                        return;
                    }
                }
                tokio::time::sleep(paced.pause()).await;
            }
        }
    }
    let _ = stream.finish().await;
}
