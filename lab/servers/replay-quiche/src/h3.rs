//! The server's HTTP/3 side, through quiche's own h3 module, for a client that offers h3 (a browser): the
//! answers of lab_server_common::page over the same connection, so a browser meets quiche carrying the command
//! line's transport parameters. A stream's body (`GET /<size>?bitrate=`) goes as its pace lets it (page::Body::Paced):
//! the server's loop wakes at next_tick.

use std::collections::HashMap;

use lab_server_common::page::{self, Answer, Body};
use quiche::h3::NameValue;

/// One connection's HTTP/3 state.
pub struct Session {
    h3: quiche::h3::Connection,
    /// Uploads being read: the body bytes so far.
    uploads: HashMap<u64, u64>,
    /// Responses whose body is still going out.
    sending: HashMap<u64, Body>,
    /// Answers whose headers quiche had no room for yet (its send capacity spent on earlier responses: a page's
    /// twenty requests at once), tried again at every serve, in the order asked.
    unanswered: Vec<(u64, Answer, u64)>,
}

impl Session {
    /// The HTTP/3 layer over an established connection, or None if quiche refuses it (the connection is closed).
    pub fn start(connection: &mut quiche::Connection) -> Option<Session> {
        let config = quiche::h3::Config::new().expect("h3 config");
        match quiche::h3::Connection::with_transport(connection, &config) {
            Ok(h3) => Some(Session { h3, uploads: HashMap::new(), sending: HashMap::new(), unanswered: Vec::new() }),
            Err(e) => {
                let _ = connection.close(true, 0x101, e.to_string().as_bytes());
                None
            }
        }
    }

    /// Reads what arrived and sends as much of each response as quiche takes.
    pub fn serve(&mut self, connection: &mut quiche::Connection, chunk: &[u8]) {
        let mut buf = vec![0u8; 65536];
        loop {
            match self.h3.poll(connection) {
                Ok((stream_id, quiche::h3::Event::Headers { list, more_frames })) => {
                    let field = |name: &[u8]| list.iter().find(|h| h.name() == name).map(|h| h.value().to_vec());
                    let answer =
                        page::answer(&field(b":method").unwrap_or_default(), &field(b":path").unwrap_or_default());
                    match answer {
                        Answer::Count if more_frames => {
                            self.uploads.insert(stream_id, 0);
                        }
                        answer => self.respond(connection, stream_id, answer, 0),
                    }
                }
                Ok((stream_id, quiche::h3::Event::Data)) => {
                    while let Ok(read) = self.h3.recv_body(connection, stream_id, &mut buf) {
                        if let Some(count) = self.uploads.get_mut(&stream_id) {
                            *count += read as u64;
                        }
                    }
                }
                Ok((stream_id, quiche::h3::Event::Finished)) => {
                    if let Some(count) = self.uploads.remove(&stream_id) {
                        self.respond(connection, stream_id, Answer::Count, count);
                    }
                }
                Ok((stream_id, quiche::h3::Event::Reset(_))) => {
                    self.uploads.remove(&stream_id);
                    self.sending.remove(&stream_id);
                    self.unanswered.retain(|(unanswered, ..)| *unanswered != stream_id);
                }
                Ok(_) => {}
                Err(quiche::h3::Error::Done) => break,
                Err(e) => {
                    let _ = connection.close(true, 0x101, e.to_string().as_bytes());
                    return;
                }
            }
        }
        for (stream_id, answer, count) in std::mem::take(&mut self.unanswered) {
            self.respond(connection, stream_id, answer, count);
        }
        self.sending.retain(|&stream_id, body| !send(&mut self.h3, connection, stream_id, body, chunk));
    }

    /// When a stream being sent lets more bytes go (its pace's next tick), while one has more to let go.
    pub fn next_tick(&self) -> Option<std::time::Instant> {
        self.sending.values().filter_map(Body::next_tick).min()
    }

    /// Starts the response to `stream_id`: its headers now (or once quiche has room for them), its body from the
    /// end of `serve` on.
    fn respond(&mut self, connection: &mut quiche::Connection, stream_id: u64, answer: Answer, count: u64) {
        let body = Body::of(&answer, count);
        let length = body.left();
        let headers = page::response_headers(&answer, length);
        match self.h3.send_response(connection, stream_id, &headers, length == 0) {
            Ok(()) if length > 0 => {
                self.sending.insert(stream_id, body);
            }
            Ok(()) => {}
            // dropped here, these left a page's requests unanswered for good (18 of 20, 2026-11-28)
            Err(quiche::h3::Error::StreamBlocked) | Err(quiche::h3::Error::Done) => {
                self.unanswered.push((stream_id, answer, count))
            }
            Err(_) => {} // a stream quiche cannot answer on (reset by the client): the client sees it
        }
    }
}

/// Sends what quiche takes of `body` (generated bytes from `chunk`); true once all of it went, FIN with the last.
fn send(
    h3: &mut quiche::h3::Connection,
    connection: &mut quiche::Connection,
    stream_id: u64,
    body: &mut Body,
    chunk: &[u8],
) -> bool {
    loop {
        let (piece, last) = body.piece(chunk);
        let offered = piece.len();
        if offered == 0 && !last {
            return false; // a stream's pace lets nothing go until its next tick
        }
        match h3.send_body(connection, stream_id, piece, last) {
            Ok(written) if body.advance(written) => return true,
            Ok(written) if written < offered => return false,
            Ok(_) => {}
            Err(quiche::h3::Error::Done) | Err(quiche::h3::Error::StreamBlocked) => return false,
            Err(_) => return true, // the stream is gone
        }
    }
}
