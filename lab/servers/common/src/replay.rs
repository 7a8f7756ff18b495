//! What every qreplay program shares: its command line (one subcommand per
//! role, the twelve transport parameters by their RFC 9000 names with dashes,
//! the knobs of tparams/knobs.py), the replay protocol it speaks, and the one
//! JSON line its client prints.
//!
//! The replay protocol (tparams/workloads.py) is hq-interop (HTTP/0.9 over
//! QUIC, as the Interop Runner's goodput test) with an upload beside it: each
//! request is a client-initiated bidirectional stream of its own; `GET /<size>\r\n`
//! and a FIN asks the server for `<size>` bytes and a FIN (a download);
//! `PUT /<size>\r\n`, `<size>` bytes and a FIN is answered, once the whole body
//! is read, with the count of body bytes received in decimal and a FIN (an
//! upload). A client makes `--requests` of them on one connection, at most
//! `--concurrency` open at once. `GET /<size>?bitrate=<bits/s>\r\n` asks for a
//! stream: `<size>` bytes paced at that bitrate (PACING_TICK), which the stream
//! client reads and reports the arrival times of (print_stream_result).

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use clap::error::ErrorKind;
use clap::{Parser, Subcommand, ValueEnum};

/// The ALPN of the bulk download (the Interop Runner's name for HTTP/0.9).
pub const ALPN: &[u8] = b"hq-interop";
/// Longest request line a server reads before giving up on the stream.
pub const MAX_REQUEST: usize = 64;

/// A qreplay program: a bulk-download server or client of one QUIC library.
#[derive(Parser, Debug)]
pub struct Cli {
    #[command(subcommand)]
    pub role: Role,
}

#[derive(Subcommand, Debug)]
pub enum Role {
    /// Serve `GET /<size>` and `PUT /<size>` on any number of streams and connections.
    Server(ServerArgs),
    /// Make --requests requests of --size bytes on one connection, then print {"bytes", "duration_s", ...}
    /// as one JSON line.
    Client(ClientArgs),
    /// Ask for one stream of --size bytes paced at --bitrate, then print the client's JSON line with each
    /// read's arrival (qreplay plays them back).
    StreamClient(StreamClientArgs),
}

#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    #[command(flatten)]
    pub listener: crate::Listener,
    #[command(flatten)]
    pub options: Options,
}

/// What every client takes: the server, the bytes a request moves and when it gives up.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// The server's UDP address, ip:port.
    pub connect: SocketAddr,
    /// Bytes each request moves (a GET's response body, a PUT's body).
    #[arg(long)]
    pub size: u64,
    /// Give up (exit 1) after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
}

#[derive(clap::Args, Debug)]
pub struct ClientArgs {
    #[command(flatten)]
    pub target: Target,
    /// down: GET, the server sends; up: PUT, the client sends.
    #[arg(long, value_enum, default_value_t = Direction::Down)]
    pub direction: Direction,
    /// Requests on the one connection, each of --size bytes.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: u64,
    /// Requests open at once, each on its own stream.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub concurrency: u64,
    #[command(flatten)]
    pub options: Options,
}

#[derive(clap::Args, Debug)]
pub struct StreamClientArgs {
    #[command(flatten)]
    pub target: Target,
    /// Bits per second a stream is paced at by the server and played at (required).
    #[arg(long, value_parser = positive_bitrate)]
    pub bitrate: u64,
    #[command(flatten)]
    pub options: Options,
}

/// --bitrate's parser: a whole number of bits/s above 0.
fn positive_bitrate(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(bitrate) if bitrate > 0 => Ok(bitrate),
        _ => Err("a stream's bitrate is a whole number of bits/s above 0".into()),
    }
}

impl StreamClientArgs {
    /// The stream's request.
    pub fn request(&self) -> Request {
        Request { direction: Direction::Down, size: self.target.size, bitrate: Some(self.bitrate) }
    }
}

impl ClientArgs {
    /// The request of this client's workload.
    pub fn request(&self) -> Request {
        Request { direction: self.direction, size: self.target.size, bitrate: None }
    }

    /// The workload's exchanges, in the order they complete: `start` makes one request's future, which is
    /// started --requests times, at most --concurrency of them running at once; the first error ends it.
    /// For an async client of any runtime: the futures run in the caller's task.
    pub async fn exchanges<F: Future<Output = Result<Exchange, String>>>(
        &self,
        mut start: impl FnMut() -> F,
    ) -> Result<Vec<Exchange>, String> {
        let mut running: Vec<Pin<Box<F>>> = Vec::new();
        let (mut issued, mut completed) = (0, Vec::new());
        while (completed.len() as u64) < self.requests {
            while issued < self.requests && (running.len() as u64) < self.concurrency {
                running.push(Box::pin(start()));
                issued += 1;
            }
            let exchange = std::future::poll_fn(|cx| {
                let ready = running.iter_mut().enumerate().find_map(|(at, request)| match request.as_mut().poll(cx) {
                    Poll::Ready(outcome) => Some((at, outcome)),
                    Poll::Pending => None,
                });
                match ready {
                    Some((at, outcome)) => {
                        drop(running.swap_remove(at));
                        Poll::Ready(outcome)
                    }
                    None => Poll::Pending,
                }
            })
            .await?;
            completed.push(exchange);
        }
        Ok(completed)
    }

    /// Refuses every workload but one download a connection, for a client (of `library`) that speaks
    /// only that.
    pub fn refuse_workloads(&self, library: &str) {
        if self.direction != Direction::Down || self.requests != 1 || self.concurrency != 1 {
            crate::refuse(&format!(
                "the {library} client makes one download a connection: no --direction=up, --requests or --concurrency"
            ));
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// GET: the server sends.
    Down,
    /// PUT: the client sends.
    Up,
}

/// The TLS 1.3 cipher suites, by their IANA names (tparams/knobs.py's CIPHER_SUITES).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)]
pub enum CipherSuite {
    #[value(name = "TLS_AES_128_GCM_SHA256")]
    Aes128GcmSha256,
    #[value(name = "TLS_AES_256_GCM_SHA384")]
    Aes256GcmSha384,
    #[value(name = "TLS_CHACHA20_POLY1305_SHA256")]
    Chacha20Poly1305Sha256,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CongestionControl {
    Cubic,
    Bbr,
}

/// What both roles take besides their addresses.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Congestion control of this endpoint's sender.
    #[arg(long, value_enum, default_value_t = CongestionControl::Cubic)]
    pub cc: CongestionControl,
    /// Let the library grow its flow-control windows; without it they stay at the advertised values.
    #[arg(long)]
    pub autotune: bool,
    /// The one TLS 1.3 cipher suite offered (client) and accepted (server); absent: the library's own list.
    #[arg(long, value_enum)]
    pub cipher: Option<CipherSuite>,
    /// true or false: UDP generic segmentation offload of this endpoint's sends; absent: the library's own.
    #[arg(long)]
    pub gso: Option<bool>,
    /// true or false: UDP generic receive offload (UDP_GRO) of this endpoint's socket, which lets the kernel
    /// hand over several datagrams of one flow in one read; absent: the library's own.
    #[arg(long)]
    pub gro: Option<bool>,
    /// Append the TLS secrets in NSS key log format (what tshark reads) to this file.
    #[arg(long)]
    pub keylog: Option<PathBuf>,
    /// Write qlog files into this directory, where the library can.
    #[arg(long)]
    pub qlog_dir: Option<PathBuf>,
    /// The ack-eliciting packets the peer may receive from this endpoint before it must send an ACK (RFC
    /// 9000's behaviour is 2), asked of the peer by ACK_FREQUENCY frames (draft-ietf-quic-ack-frequency,
    /// whose Ack-Eliciting Threshold is this minus 1); absent: the library's own.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub ack_frequency: Option<u64>,
    #[command(flatten)]
    pub parameters: ReplayParameters,
}

/// The twelve transport parameters qreplay sets; absent ones keep the library's own value.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ReplayParameters {
    #[command(flatten)]
    pub flow_control: crate::TransportParameters,
    #[arg(long)]
    pub max_udp_payload_size: Option<u64>,
    #[arg(long)]
    pub ack_delay_exponent: Option<u64>,
    /// milliseconds
    #[arg(long)]
    pub max_ack_delay: Option<u64>,
    #[arg(long)]
    pub disable_active_migration: bool,
    #[arg(long)]
    pub active_connection_id_limit: Option<u64>,
}

impl Options {
    /// Refuses the knobs given here (`cipher`, `gso`, `gro`, `ack_frequency`) that the library cannot set, each with
    /// its reason.
    pub fn refuse_knobs(&self, library: &str, cannot: &[(&str, &str)]) {
        for (name, reason) in cannot {
            let asked = match *name {
                "cipher" => self.cipher.is_some(),
                "gso" => self.gso.is_some(),
                "gro" => self.gro.is_some(),
                "ack_frequency" => self.ack_frequency.is_some(),
                other => panic!("no knob {other}"),
            };
            if asked {
                crate::refuse(&format!("{library} cannot set --{}: {reason}", name.replace('_', "-")));
            }
        }
    }
}

/// The parsed command line, with SIGTERM and SIGINT ending the process at once (status 0). A command line
/// clap refuses ends in one line, status 2, as every other bad input of ours (refuse): clap's first line
/// (what is wrong), without its usage and hints; --help prints as clap does.
pub fn start() -> Cli {
    let cli = Cli::try_parse().unwrap_or_else(|e| match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            e.exit()
        }
        _ => crate::refuse(one_line(&e.render().to_string())),
    });
    crate::exit_on_signals();
    cli
}

/// The first line of clap's error, without its "error: " (refuse adds it again).
fn one_line(error: &str) -> &str {
    let first = error.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first)
}

/// One request of the replay protocol: its direction, the bytes it moves, and a stream's bitrate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub direction: Direction,
    pub size: u64,
    /// bits/s a stream (a GET) is paced at; None: as fast as the connection goes
    pub bitrate: Option<u64>,
}

impl Request {
    /// The request line: `GET /<size>\r\n` or `PUT /<size>\r\n` (a PUT's body follows it), a stream's
    /// `GET /<size>?bitrate=<bits/s>\r\n`.
    pub fn line(&self) -> Vec<u8> {
        let method = match self.direction {
            Direction::Down => "GET",
            Direction::Up => "PUT",
        };
        let query = self.bitrate.map_or(String::new(), |bitrate| format!("?bitrate={bitrate}"));
        format!("{method} /{}{query}\r\n", self.size).into_bytes()
    }

    /// The request at the start of a stream and the length of its line, after which a PUT's body begins:
    /// `Ok(None)` while the line is incomplete, `Err` for anything that is not `GET /<digits>` or
    /// `PUT /<digits>` (HTTP/0.9 clients may end the line with `\n` alone, or end the stream instead).
    pub fn parse(received: &[u8], finished: bool) -> Result<Option<(Request, usize)>, String> {
        let newline = received.iter().position(|b| *b == b'\n');
        let Some(end) = newline.or(finished.then_some(received.len())) else {
            return if received.len() > MAX_REQUEST { Err("request line too long".into()) } else { Ok(None) };
        };
        let line = String::from_utf8_lossy(&received[..end]);
        let line = line.trim_end();
        let (direction, size) = if let Some(size) = line.strip_prefix("GET /") {
            (Direction::Down, size)
        } else if let Some(size) = line.strip_prefix("PUT /") {
            (Direction::Up, size)
        } else {
            return Err(format!("not GET or PUT /<size>: {line:?}"));
        };
        let (size, query) = size.split_once('?').map_or((size, None), |(size, query)| (size, Some(query)));
        let size = size.parse::<u64>().map_err(|_| format!("not a request for /<size>: {line:?}"))?;
        let bitrate = match query.map(|query| query.strip_prefix("bitrate=").and_then(|n| n.parse::<u64>().ok())) {
            None => None,
            Some(Some(bitrate)) if bitrate > 0 && direction == Direction::Down => Some(bitrate),
            Some(_) => return Err(format!("a bitrate is a GET's, above 0: {line:?}")),
        };
        Ok(Some((Request { direction, size, bitrate }, newline.map_or(end, |at| at + 1))))
    }
}

/// How often a stream's server hands over what the bitrate allows since the first byte, whatever the link
/// would take: aioquic's server's rule (send_at_bitrate in replay/aioquic_endpoints/common.py,
/// PACING_TICK_S), the one every pacing server of ours follows (paced_due).
pub const PACING_TICK: Duration = Duration::from_millis(20);

/// The bytes of a stream of `size` at `bitrate` bits/s its server has handed over `elapsed` after its first
/// byte: what the bitrate allows to the end of the tick.
pub fn paced_due(elapsed: Duration, size: u64, bitrate: u64) -> u64 {
    size.min(((elapsed + PACING_TICK).as_secs_f64() * bitrate as f64 / 8.0) as u64)
}

/// A paced stream's schedule (paced_due), for a server of any runtime: each item is the bytes to hand over
/// now, and the server sleeps `pause()` before it asks for the next. A write the connection cannot take yet
/// may wait: the next item catches up on the clock, so what the link cannot carry waits in the sender.
pub struct Paced {
    started: Instant,
    sent: u64,
    size: u64,
    bitrate: u64,
}

impl Paced {
    /// The schedule of `size` bytes at `bitrate` bits/s, from now.
    pub fn new(size: u64, bitrate: u64) -> Self {
        Paced { started: Instant::now(), sent: 0, size, bitrate }
    }

    /// PACING_TICK until everything was handed over, then none: the FIN goes with the last bytes.
    pub fn pause(&self) -> Duration {
        if self.sent < self.size {
            PACING_TICK
        } else {
            Duration::ZERO
        }
    }
}

impl Iterator for Paced {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.sent >= self.size {
            return None;
        }
        let due = paced_due(self.started.elapsed(), self.size, self.bitrate);
        let now = due - self.sent;
        self.sent = due;
        Some(now)
    }
}

/// A paced stream's bytes for a server on an event loop rather than in a task that sleeps: what its schedule
/// (Paced) has let go that the connection has not taken yet, and when it lets more go (the loop wakes then).
pub struct Pace {
    schedule: Paced,
    allowed: u64,
    next: Instant,
}

impl Pace {
    /// The pace of `size` bytes at `bitrate` bits/s, from now.
    pub fn new(size: u64, bitrate: u64) -> Self {
        Pace { schedule: Paced::new(size, bitrate), allowed: 0, next: Instant::now() }
    }

    /// The bytes it may send now: what was let go and not taken yet, the schedule's next tick added once due.
    pub fn allowed(&mut self, now: Instant) -> u64 {
        if self.next <= now {
            self.allowed += self.schedule.next().unwrap_or(0);
            self.next = now + self.schedule.pause();
        }
        self.allowed
    }

    /// The connection took `written` of the bytes allowed.
    pub fn took(&mut self, written: u64) {
        self.allowed -= written;
    }

    /// When it lets more go, while it has more to let go.
    pub fn next_tick(&self) -> Option<Instant> {
        (self.schedule.pause() > Duration::ZERO).then_some(self.next)
    }
}

/// A server's answer to an upload: the count of body bytes it received, in decimal.
pub fn upload_answer(received: u64) -> Vec<u8> {
    received.to_string().into_bytes()
}

/// The count in an upload's answer, or an error naming what came instead.
pub fn uploaded(answer: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(answer)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .ok_or_else(|| format!("not a byte count in the upload's answer: {:?}", String::from_utf8_lossy(answer)))
}

/// A buffer of body bytes to send from; the content is not part of any measurement.
pub fn body_chunk() -> Vec<u8> {
    vec![b'q'; 64 * 1024]
}

/// The lengths of the pieces in which `size` bytes go out from a buffer of `chunk` bytes.
pub fn pieces(size: u64, chunk: usize) -> impl Iterator<Item = usize> {
    let chunk = chunk as u64;
    (0..size.div_ceil(chunk)).map(move |i| (size - i * chunk).min(chunk) as usize)
}

/// The key log file, opened for appending (created if needed), or a one-line refusal.
pub fn keylog_file(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| crate::refuse(&format!("key log {}: {e}", path.display())))
}

/// One completed request, as the client saw it.
#[derive(Clone, Copy, Debug)]
pub struct Exchange {
    /// When its request began to go out.
    pub sent: Instant,
    /// When the first byte of its response arrived (for an upload: of the server's count).
    pub first_byte: Instant,
    /// When its response was complete.
    pub finished: Instant,
    /// Payload it moved: a download's body bytes received, the byte count an upload's server answered.
    pub bytes: u64,
}

/// The longest upload answer a client reads: a byte count in decimal.
const MAX_ANSWER: usize = 32;

/// A response as the client reads it: a download's body counted, an upload's answer kept, the first byte's
/// time noted; `finished` makes it the request's `Exchange`.
#[derive(Debug)]
pub struct Response {
    request: Request,
    sent: Instant,
    first_byte: Option<Instant>,
    received: u64,
    answer: Vec<u8>,
}

impl Response {
    /// The response to `request`, issued at `sent`.
    pub fn new(request: Request, sent: Instant) -> Self {
        Response { request, sent, first_byte: None, received: 0, answer: Vec::new() }
    }

    /// Takes the next `bytes` of the response (none: nothing arrived).
    pub fn take(&mut self, bytes: &[u8]) -> Result<(), String> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.first_byte.get_or_insert_with(Instant::now);
        self.received += bytes.len() as u64;
        if self.request.direction == Direction::Up {
            self.answer.extend_from_slice(bytes);
            if self.answer.len() > MAX_ANSWER {
                return Err("the upload's answer is longer than a byte count".into());
            }
        }
        Ok(())
    }

    /// Bytes of the response so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The exchange, at the response's end (its FIN): an error unless it moved the request's size.
    pub fn finished(self) -> Result<Exchange, String> {
        let finished = Instant::now();
        let bytes = match self.request.direction {
            Direction::Down => self.received,
            Direction::Up => uploaded(&self.answer)?,
        };
        if bytes != self.request.size {
            return Err(format!("{bytes} of {} bytes moved", self.request.size));
        }
        Ok(Exchange { sent: self.sent, first_byte: self.first_byte.unwrap_or(finished), finished, bytes })
    }
}

/// The client's result, as qreplay reads it: the last JSON line on stdout (tparams/workloads.py), of the
/// exchanges in the order they completed, with the client's own `counters` of its connection after them
/// (such as the ACK frames it sent), where the library tells any.
pub fn print_client_result(handshake: Duration, exchanges: &[Exchange], counters: &[(&str, u64)]) {
    println!("{}", client_result(handshake, exchanges, counters));
}

fn client_result(handshake: Duration, exchanges: &[Exchange], counters: &[(&str, u64)]) -> String {
    let first = exchanges.iter().min_by_key(|exchange| exchange.sent);
    let start = first.map(|first| first.sent);
    let end = exchanges.iter().map(|exchange| exchange.finished).max();
    let duration = start.zip(end).map_or(Duration::ZERO, |(start, end)| end - start);
    let ttfb = first.map_or(Duration::ZERO, |first| first.first_byte - first.sent);
    let latencies: Vec<String> =
        exchanges.iter().map(|exchange| format!("{:.6}", (exchange.finished - exchange.sent).as_secs_f64())).collect();
    let counters: String = counters.iter().map(|(name, value)| format!(", \"{name}\": {value}")).collect();
    format!(
        "{{\"bytes\": {}, \"duration_s\": {:.6}, \"handshake_s\": {:.6}, \"requests\": {}, \"ttfb_s\": {:.6}, \"latencies_s\": [{}]{counters}}}",
        exchanges.iter().map(|exchange| exchange.bytes).sum::<u64>(),
        duration.as_secs_f64(),
        handshake.as_secs_f64(),
        exchanges.len(),
        ttfb.as_secs_f64(),
        latencies.join(", ")
    )
}

/// The stream client's result: the replay protocol's line of its one exchange with the stream's `bitrate`
/// and its reads' `arrivals` (time since the request, bytes) added, which qreplay plays back by its one
/// rule (tparams.workloads.played) rather than a player here.
pub fn print_stream_result(handshake: Duration, exchange: &Exchange, bitrate: u64, arrivals: &[(Duration, usize)]) {
    println!("{}", stream_result(handshake, exchange, bitrate, arrivals));
}

fn stream_result(handshake: Duration, exchange: &Exchange, bitrate: u64, arrivals: &[(Duration, usize)]) -> String {
    let line = client_result(handshake, std::slice::from_ref(exchange), &[]);
    let arrivals: Vec<String> =
        arrivals.iter().map(|(at, bytes)| format!("[{:.6}, {bytes}]", at.as_secs_f64())).collect();
    format!("{}, \"bitrate\": {bitrate}, \"arrivals\": [{}]}}", line.trim_end_matches('}'), arrivals.join(", "))
}

/// The sender's statistics of a finished connection, for qreplay's counters: one JSON line of
/// `sender_<name>` fields (packets sent and lost, RTT, congestion window: whatever the library tells).
pub fn print_sender_stats(stats: &[(&str, f64)]) {
    let fields: Vec<String> = stats.iter().map(|(name, value)| format!("\"sender_{name}\": {value}")).collect();
    println!("{{{}}}", fields.join(", "));
}

/// A client that failed: one line on stderr, exit status 1.
pub fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let get = Request { direction: Direction::Down, size: 3_000_000, bitrate: None };
        assert_eq!(Request::parse(&get.line(), false), Ok(Some((get, 14))));
        let put = Request { direction: Direction::Up, size: 12, bitrate: None };
        let mut stream = put.line();
        stream.extend_from_slice(b"body");
        assert_eq!(Request::parse(&stream, false), Ok(Some((put, 9))));
        assert_eq!(Request::parse(b"GET /12", false), Ok(None));
        let twelve = Request { direction: Direction::Down, size: 12, bitrate: None };
        assert_eq!(Request::parse(b"GET /12", true), Ok(Some((twelve, 7))));
        assert_eq!(Request::parse(b"GET /12\n", false), Ok(Some((twelve, 8))));
        assert!(Request::parse(b"GET /index.html\r\n", false).is_err());
        assert!(Request::parse(b"POST /12\r\n", false).is_err());
        assert!(Request::parse(&[b'x'; 100], false).is_err());
        let stream = Request { direction: Direction::Down, size: 500, bitrate: Some(2_000_000) };
        assert_eq!(stream.line(), b"GET /500?bitrate=2000000\r\n");
        assert_eq!(Request::parse(&stream.line(), false), Ok(Some((stream, 26))));
        for bad in [&b"GET /5?bitrate=0\n"[..], b"PUT /5?bitrate=8\n", b"GET /5?rate=8\n", b"GET /5?bitrate=x\n"] {
            assert!(Request::parse(bad, false).is_err(), "{bad:?}");
        }
        assert_eq!(paced_due(Duration::ZERO, 1_000_000, 8_000), 20); // a tick ahead of the clock
        assert_eq!(paced_due(Duration::from_secs(1), 1_000_000, 8_000), 1020);
        assert_eq!(paced_due(Duration::from_secs(1), 500, 8_000), 500);
        let mut paced = Paced::new(30, 8_000); // 20 bytes due at once, the rest a tick later
        assert_eq!((paced.next(), paced.pause()), (Some(20), PACING_TICK));
        std::thread::sleep(PACING_TICK);
        assert_eq!((paced.next(), paced.pause(), paced.next()), (Some(10), Duration::ZERO, None));
        let mut pace = Pace::new(30, 8_000);
        let now = Instant::now();
        assert_eq!((pace.allowed(now), pace.allowed(now)), (20, 20)); // the tick's bytes, once
        pace.took(15);
        assert_eq!((pace.allowed(now), pace.next_tick().map(|next| next - now)), (5, Some(PACING_TICK)));
        std::thread::sleep(PACING_TICK);
        assert_eq!(pace.allowed(Instant::now()), 15);
        assert_eq!(pace.next_tick(), None); // all let go
        assert_eq!(uploaded(&upload_answer(123)), Ok(123));
        assert!(uploaded(b"12x").is_err());
        assert_eq!(pieces(10, 4).collect::<Vec<_>>(), [4, 4, 2]);
        assert_eq!(pieces(0, 4).count(), 0);
    }

    #[test]
    fn a_refused_command_line_is_one_line() {
        let refused = |argv: &[&str]| Cli::try_parse_from(argv).map(|_| ()).map_err(|e| e.render().to_string());
        let zero = refused(&["p", "stream-client", "127.0.0.1:9", "--size=5", "--bitrate=0"]).unwrap_err();
        assert!(zero.lines().count() > 1, "{zero}"); // clap's own: usage and a hint below
        assert_eq!(
            one_line(&zero),
            "invalid value '0' for '--bitrate <BITRATE>': a stream's bitrate is a whole number of bits/s above 0"
        );
        assert!(refused(&["p", "stream-client", "127.0.0.1:9", "--size=5", "--bitrate=8"]).is_ok());
        assert!(refused(&["p", "client", "127.0.0.1:9", "--size=5", "--requests=2"]).is_ok());
    }

    #[test]
    fn responses() {
        let down = Request { direction: Direction::Down, size: 5, bitrate: None };
        let mut response = Response::new(down, Instant::now());
        response.take(b"abc").unwrap();
        response.take(b"de").unwrap();
        assert_eq!(response.finished().map(|exchange| exchange.bytes), Ok(5));
        let short = Response::new(down, Instant::now());
        assert!(short.finished().is_err());
        let mut up = Response::new(Request { direction: Direction::Up, size: 1000, bitrate: None }, Instant::now());
        up.take(b"10").unwrap();
        up.take(b"00").unwrap();
        assert_eq!(up.finished().map(|exchange| exchange.bytes), Ok(1000));
        let mut long = Response::new(Request { direction: Direction::Up, size: 1, bitrate: None }, Instant::now());
        assert!(long.take(&[b'1'; 40]).is_err());
    }

    #[test]
    fn result_of_concurrent_exchanges() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        // the second request sent completes first
        let exchanges = [
            Exchange { sent: ms(1), first_byte: ms(3), finished: ms(4), bytes: 10 },
            Exchange { sent: ms(0), first_byte: ms(2), finished: ms(6), bytes: 10 },
        ];
        assert_eq!(
            client_result(Duration::from_millis(5), &exchanges, &[]),
            "{\"bytes\": 20, \"duration_s\": 0.006000, \"handshake_s\": 0.005000, \"requests\": 2, \
             \"ttfb_s\": 0.002000, \"latencies_s\": [0.003000, 0.006000]}"
        );
        assert!(client_result(Duration::ZERO, &exchanges, &[("acks_sent", 7)]).ends_with("], \"acks_sent\": 7}"));
        let arrivals = [(Duration::from_millis(2), 4), (Duration::from_millis(6), 6)];
        assert!(stream_result(Duration::ZERO, &exchanges[1], 8000, &arrivals)
            .ends_with("[0.006000], \"bitrate\": 8000, \"arrivals\": [[0.002000, 4], [0.006000, 6]]}"));
    }
}
