//! Reading capture files record by record, and the UDP datagrams in their frames: common/pcap.py's
//! CaptureReader and ip_start, and scanner/capture/frontend.py's long-header datagrams (the only
//! implementation; the trace's burst splitting and qscan pcap both read captures through here). In Python,
//! reading the records and framing their datagrams cost an eighth of qscan pcap's time on bench_pcap's capture.
//!
//! dpkt's readers (the maintained library for this) take the first interface's link type and clock for a whole
//! pcapng, skip Simple Packet Blocks and later sections, and raise mid-parse on a cut file without saying where;
//! a capture reader must say where a damaged file stops being readable and keep everything before. So the two
//! formats are read here, a record at a time.

use std::fs::File;
use std::io::{self, BufReader, Cursor, ErrorKind, Read};
use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple, PyType};

create_exception!(qscan_native, CaptureFileError, PyValueError, "The file is no pcap or pcapng capture at all (nothing in it can be read).");

const PCAPNG_SECTION: u32 = 0x0A0D0D0A;
const PCAPNG_BYTE_ORDER: u32 = 0x1A2B3C4D;
// Larger than any snap length a capture tool writes (Wireshark's maximum is 256 KiB; dumpcap of a loopback with
// GSO keeps up to 64 KiB): a longer record is a damaged length field, not a packet.
const MAX_RECORD: u32 = 16 * 1024 * 1024;
const READ_BUFFER: usize = 1024 * 1024;

/// An interface's clock: ticks a second, 10^n or 2^n (pcapng's if_tsresol).
#[derive(Clone, Copy)]
enum Clock {
    Decimal(u32),
    Binary(u32),
}

impl Clock {
    /// ``ticks`` in seconds, rounded once (as Python's int / int is): a nanosecond clock's ticks pass 2^53.
    fn seconds(self, ticks: u64) -> f64 {
        match self {
            Clock::Binary(exponent) => (ticks as f64) * 2f64.powi(-(exponent as i32)),
            // 10^n = 5^n 2^n, and 5^n fits 64 bits up to n = 27
            Clock::Decimal(exponent) if exponent <= 27 => divide(ticks, 5u64.pow(exponent)) * 2f64.powi(-(exponent as i32)),
            // A clock finer than 10^-27 s (a damaged option): rounded twice, off by an ulp at most from Python's
            // int / int, where any time shown or stored (in microseconds) is zero anyway.
            Clock::Decimal(exponent) => (ticks as f64) / 10f64.powi(exponent as i32),
        }
    }
}

/// ``numerator / denominator`` rounded to the nearest double (ties to even), as Python's int / int.
fn divide(numerator: u64, denominator: u64) -> f64 {
    if numerator == 0 {
        return 0.0;
    }
    if numerator < 1 << 53 && denominator < 1 << 53 {
        return numerator as f64 / denominator as f64; // both exact: one rounding
    }
    // A quotient of 55 to 56 bits and whether anything was left over, rounded to 53 bits by hand.
    let bits = |n: u128| 128 - n.leading_zeros() as i32;
    let shift = 55 + bits(denominator as u128) - bits(numerator as u128);
    let (n, d) = if shift >= 0 {
        ((numerator as u128) << shift, denominator as u128)
    } else {
        (numerator as u128, (denominator as u128) << -shift)
    };
    let (quotient, inexact) = (n / d, n % d != 0);
    let extra = bits(quotient) - 53;
    let mut mantissa = quotient >> extra;
    let rest = quotient & ((1 << extra) - 1);
    let half = 1u128 << (extra - 1);
    if rest > half || (rest == half && (inexact || mantissa & 1 == 1)) {
        mantissa += 1;
    }
    (mantissa as f64) * 2f64.powi(extra - shift)
}

struct Interface {
    link: u32,
    snap_length: u32,
    clock: Clock,
    offset: i64, // if_tsoffset, seconds
}

enum Format {
    Pcap { big: bool, ticks: u32, link: u32 },
    Pcapng { big: bool, interfaces: Vec<Interface> },
}

fn u16_at(data: &[u8], at: usize, big: bool) -> u16 {
    let bytes = [data[at], data[at + 1]];
    if big { u16::from_be_bytes(bytes) } else { u16::from_le_bytes(bytes) }
}

fn u32_at(data: &[u8], at: usize, big: bool) -> u32 {
    let bytes = [data[at], data[at + 1], data[at + 2], data[at + 3]];
    if big { u32::from_be_bytes(bytes) } else { u32::from_le_bytes(bytes) }
}

/// 1234567 as "1,234,567" (Python's format ``{:,}``), for the damage messages.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// One packet read: its frame is ``Records::frame()``.
struct Packet {
    number: u64,
    time: f64,
    link: u32,
    original: u32,
}

/// The records of a classic pcap (either byte order, micro- or nanosecond clock) or a pcapng file (every section
/// and interface with its own link type, clock and byte order), in file order; ``stopped`` once the file ends in
/// a damaged or cut-short record.
struct Records {
    source: Box<dyn Read + Send + Sync>,
    format: Format,
    at: u64,       // where the next record starts
    offset: u64,   // how far the file has been read, for progress
    packets: u64,  // packets read so far
    done: bool,
    stopped: Option<(u64, u64, String)>, // (byte offset, packets before it, what was wrong)
    header: Vec<u8>, // a pcap record's header
    block: Vec<u8>,  // the last record read (pcap: its frame; pcapng: the whole block)
    frame: (usize, usize),
}

/// Read up to ``length`` bytes into ``buffer``; fewer only where the file ends.
fn read_up_to(source: &mut dyn Read, buffer: &mut Vec<u8>, length: usize) -> io::Result<usize> {
    buffer.resize(length, 0);
    let mut got = 0;
    while got < length {
        match source.read(&mut buffer[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    buffer.truncate(got);
    Ok(got)
}

impl Records {
    fn open(mut source: Box<dyn Read + Send + Sync>) -> PyResult<Self> {
        let mut head = Vec::new();
        read_up_to(&mut source, &mut head, 24).map_err(os_error)?;
        let magic = (head.len() >= 4).then(|| u32_at(&head, 0, false));
        let format = match magic {
            Some(PCAPNG_SECTION) => Format::Pcapng { big: false, interfaces: Vec::new() },
            Some(m @ (0xA1B2C3D4 | 0xA1B23C4D | 0xD4C3B2A1 | 0x4D3CB2A1)) => {
                if head.len() < 24 {
                    return Err(CaptureFileError::new_err(format!("a pcap file header of {} bytes, not 24", head.len())));
                }
                let big = m == 0xD4C3B2A1 || m == 0x4D3CB2A1;
                let ticks = if m == 0xA1B2C3D4 || m == 0xD4C3B2A1 { 1_000_000 } else { 1_000_000_000 };
                Format::Pcap { big, ticks, link: u32_at(&head, 20, big) & 0x0FFFFFFF } // the top bits carry FCS flags
            }
            _ => return Err(CaptureFileError::new_err("not a pcap or pcapng capture (unknown magic number)")),
        };
        // A pcapng's first block starts at byte 0: read it again from the head.
        let source: Box<dyn Read + Send + Sync> = match format {
            Format::Pcapng { .. } => Box::new(Cursor::new(head).chain(source)),
            Format::Pcap { .. } => source,
        };
        let at = if matches!(format, Format::Pcap { .. }) { 24 } else { 0 };
        Ok(Records { source, format, at, offset: 0, packets: 0, done: false, stopped: None, header: Vec::new(), block: Vec::new(), frame: (0, 0) })
    }

    fn frame(&self) -> &[u8] {
        &self.block[self.frame.0..self.frame.1]
    }

    fn stop(&mut self, offset: u64, problem: String) {
        self.stopped = Some((offset, self.packets, problem));
    }

    /// The next packet, None at the end of the file or at its first damaged record.
    fn next(&mut self) -> io::Result<Option<Packet>> {
        if self.done {
            return Ok(None);
        }
        let packet = match self.format {
            Format::Pcap { .. } => self.next_pcap(),
            Format::Pcapng { .. } => self.next_pcapng(),
        };
        if !matches!(packet, Ok(Some(_))) {
            self.done = true;
        }
        packet
    }

    fn next_pcap(&mut self) -> io::Result<Option<Packet>> {
        let Format::Pcap { big, ticks, link } = self.format else { unreachable!() };
        let mut header = std::mem::take(&mut self.header);
        let got = read_up_to(&mut *self.source, &mut header, 16);
        self.header = header;
        let (got, header) = (got?, &self.header);
        if got < 16 {
            if got > 0 {
                self.stop(self.at, format!("the capture ends inside a record header ({got} of 16 bytes)"));
            }
            return Ok(None);
        }
        let (seconds, fraction) = (u32_at(header, 0, big), u32_at(header, 4, big));
        let (captured, original) = (u32_at(header, 8, big), u32_at(header, 12, big));
        if captured > MAX_RECORD {
            self.stop(self.at, format!("a damaged record header (captured length {})", thousands(captured as u64)));
            return Ok(None);
        }
        let got = read_up_to(&mut *self.source, &mut self.block, captured as usize)?;
        if got < captured as usize {
            let problem = format!("the capture ends inside packet {} ({} of {} bytes)", thousands(self.packets + 1),
                                  thousands(got as u64), thousands(captured as u64));
            self.stop(self.at, problem);
            return Ok(None);
        }
        self.at += 16 + captured as u64;
        self.packets += 1;
        self.offset = self.at;
        self.frame = (0, got);
        let time = seconds as f64 + fraction as f64 / ticks as f64;
        Ok(Some(Packet { number: self.packets, time, link, original }))
    }

    fn next_pcapng(&mut self) -> io::Result<Option<Packet>> {
        loop {
            let Format::Pcapng { big, .. } = self.format else { unreachable!() };
            let got = read_up_to(&mut *self.source, &mut self.block, 8)?;
            if got < 8 {
                if got > 0 {
                    self.stop(self.at, format!("the capture ends inside a block header ({got} of 8 bytes)"));
                }
                return Ok(None);
            }
            let kind = u32_at(&self.block, 0, big);
            let mut big = big;
            let mut have = 8;
            if kind == PCAPNG_SECTION {
                let mut magic = Vec::with_capacity(4);
                if read_up_to(&mut *self.source, &mut magic, 4)? < 4 {
                    self.stop(self.at, "the capture ends inside a section header".into());
                    return Ok(None);
                }
                self.block.extend_from_slice(&magic);
                have = 12;
                big = match u32_at(&magic, 0, false) {
                    PCAPNG_BYTE_ORDER => false,
                    m if m == PCAPNG_BYTE_ORDER.swap_bytes() => true,
                    _ => {
                        self.stop(self.at, "a damaged section header (unknown byte-order magic)".into());
                        return Ok(None);
                    }
                };
                self.format = Format::Pcapng { big, interfaces: Vec::new() };
            }
            let length = u32_at(&self.block, 4, big);
            if length < 12 || length % 4 != 0 || length > MAX_RECORD {
                self.stop(self.at, format!("a damaged block header (block length {})", thousands(length as u64)));
                return Ok(None);
            }
            let length = length as usize;
            let mut rest = Vec::new();
            let more = read_up_to(&mut *self.source, &mut rest, length - have)?; // a block is 12 bytes or more
            self.block.extend_from_slice(&rest);
            if have + more < length {
                let problem = format!("the capture ends inside a block ({} of {} bytes)", thousands((have + more) as u64),
                                      thousands(length as u64));
                self.stop(self.at, problem);
                return Ok(None);
            }
            let block = &self.block;
            if u32_at(block, length - 4, big) as usize != length {
                self.stop(self.at, "a damaged block (its two length fields differ)".into());
                return Ok(None);
            }
            self.at += length as u64;
            self.offset = self.at;
            let Format::Pcapng { ref mut interfaces, .. } = self.format else { unreachable!() };
            // (interface, ticks or None, frame start, frame end, original length)
            let packet = if kind == 6 && length >= 32 {
                // Enhanced Packet Block
                let ticks = ((u32_at(block, 12, big) as u64) << 32) | u32_at(block, 16, big) as u64;
                let (captured, original) = (u32_at(block, 20, big) as usize, u32_at(block, 24, big));
                Some((u32_at(block, 8, big), Some(ticks), 28, (28 + captured).min(length), original))
            } else if kind == 3 && length >= 16 && !interfaces.is_empty() {
                // Simple Packet Block: interface 0, no time stamp
                let original = u32_at(block, 8, big);
                let snap = if interfaces[0].snap_length != 0 { interfaces[0].snap_length } else { original };
                let captured = (original.min(snap) as usize).min(length - 16);
                Some((0, None, 12, 12 + captured, original))
            } else if kind == 2 && length >= 32 {
                // Packet Block (obsolete)
                let ticks = ((u32_at(block, 12, big) as u64) << 32) | u32_at(block, 16, big) as u64;
                let (captured, original) = (u32_at(block, 20, big) as usize, u32_at(block, 24, big));
                Some((u16_at(block, 8, big) as u32, Some(ticks), 28, (28 + captured).min(length), original))
            } else {
                if kind == 1 && length >= 20 {
                    interfaces.push(interface(block, big));
                }
                None
            };
            let Some((index, ticks, start, end, original)) = packet else { continue };
            let Some(interface) = interfaces.get(index as usize) else {
                let problem = format!("a packet of interface {index}, which the file never describes");
                self.stop(self.at - length as u64, problem);
                return Ok(None);
            };
            let time = match ticks {
                None => 0.0,
                Some(ticks) => interface.offset as f64 + interface.clock.seconds(ticks),
            };
            let link = interface.link;
            self.packets += 1;
            self.frame = (start, end);
            return Ok(Some(Packet { number: self.packets, time, link, original }));
        }
    }
}

/// An Interface Description Block's link type, snap length, clock (if_tsresol) and if_tsoffset.
fn interface(block: &[u8], big: bool) -> Interface {
    let (link, snap_length) = (u16_at(block, 8, big) as u32, u32_at(block, 12, big));
    let (mut clock, mut offset) = (Clock::Decimal(6), 0i64);
    let (mut at, end) = (16, block.len() - 4);
    while at + 4 <= end {
        let (code, length) = (u16_at(block, at, big), u16_at(block, at + 2, big) as usize);
        let value = &block[at + 4..(at + 4 + length).min(block.len())];
        if code == 0 {
            break;
        }
        if code == 9 && length == 1 {
            clock = if value[0] & 0x80 != 0 { Clock::Binary((value[0] & 0x7F) as u32) } else { Clock::Decimal(value[0] as u32) };
        } else if code == 14 && length == 8 && value.len() == 8 {
            let bytes: [u8; 8] = value.try_into().expect("8 bytes");
            offset = if big { i64::from_be_bytes(bytes) } else { i64::from_le_bytes(bytes) };
        }
        at += 4 + length.div_ceil(4) * 4;
    }
    Interface { link, snap_length, clock, offset }
}

// -- the IP header and the UDP datagram in a frame ------------------------------------------------------------------

const LINKTYPE_ETHERNET: u32 = 1;
// Link types whose frames start with an IP header (raw IP, as tun devices and our own files have it).
const RAW_IP: [u32; 5] = [101, 228, 229, 12, 14];
const LINKTYPE_NULL: u32 = 0;
const LINKTYPE_PPP: u32 = 9;
const LINKTYPE_LOOP: u32 = 108;
const LINKTYPE_LINUX_SLL: u32 = 113;
const LINKTYPE_LINUX_SLL2: u32 = 276;
const VLAN_TAGS: [u64; 3] = [0x8100, 0x88A8, 0x9100];
const ETHERTYPE_IPV4: u64 = 0x0800;
const ETHERTYPE_IPV6: u64 = 0x86DD;
const BSD_AF_INET6: [u64; 4] = [10, 24, 28, 30]; // AF_INET6 on Linux, NetBSD/OpenBSD, FreeBSD, macOS
const IPV6_EXTENSIONS: [u8; 3] = [0, 43, 60]; // hop-by-hop, routing, destination options: skipped; 44 (fragment) ends the walk
const UDP: u8 = 17;

/// The bytes ``frame[start:end]`` (as far as the frame goes) as one big-endian number.
fn big_endian(frame: &[u8], start: usize, end: usize) -> u64 {
    let end = end.min(frame.len());
    frame.get(start..end).unwrap_or(&[]).iter().fold(0, |value, byte| (value << 8) | *byte as u64)
}

fn little_endian(frame: &[u8], start: usize, end: usize) -> u64 {
    let end = end.min(frame.len());
    frame.get(start..end).unwrap_or(&[]).iter().rev().fold(0, |value, byte| (value << 8) | *byte as u64)
}

/// (where the IP header starts, its version) in a frame of link type ``link``; None for other traffic.
fn ip_header(link: u32, frame: &[u8]) -> Option<(usize, u8)> {
    let (at, ethertype) = match link {
        LINKTYPE_ETHERNET => {
            let (mut at, mut ethertype) = (14, big_endian(frame, 12, 14));
            while VLAN_TAGS.contains(&ethertype) {
                (ethertype, at) = (big_endian(frame, at + 2, at + 4), at + 4);
            }
            (at, ethertype)
        }
        _ if RAW_IP.contains(&link) => return frame.first().map(|first| (0, first >> 4)),
        LINKTYPE_LINUX_SLL => (16, big_endian(frame, 14, 16)),
        LINKTYPE_LINUX_SLL2 => (20, big_endian(frame, 0, 2)),
        LINKTYPE_PPP => {
            let at = if frame.starts_with(b"\xff\x03") { 2 } else { 0 }; // address and control, when not compressed away
            let ethertype = match big_endian(frame, at, at + 2) {
                0x0021 => ETHERTYPE_IPV4,
                0x0057 => ETHERTYPE_IPV6,
                _ => 0,
            };
            (at + 2, ethertype)
        }
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            let mut family = if link == LINKTYPE_LOOP { big_endian(frame, 0, 4) } else { little_endian(frame, 0, 4) };
            if family > 0xFFFF {
                family = big_endian(frame, 0, 4); // a null header written on a host of the other byte order
            }
            (4, if family == 2 { ETHERTYPE_IPV4 } else if BSD_AF_INET6.contains(&family) { ETHERTYPE_IPV6 } else { 0 })
        }
        _ => return None,
    };
    match ethertype {
        ETHERTYPE_IPV4 => Some((at, 4)),
        ETHERTYPE_IPV6 => Some((at, 6)),
        _ => None,
    }
}

/// (where the IP header starts, 4 or 6) in a frame of link type ``link``; None for other traffic.
#[pyfunction]
pub fn ip_start(link: u32, frame: &[u8]) -> Option<(usize, u8)> {
    ip_header(link, frame)
}

struct Udp<'a> {
    source: &'a [u8],
    source_port: u16,
    destination: &'a [u8],
    destination_port: u16,
    payload: &'a [u8],
}

/// The UDP datagram in an IPv4 or IPv6 frame; None for anything else, for a fragment of a datagram (not
/// reassembled), and for a frame the capture cut before the UDP header.
fn udp_datagram(link: u32, frame: &[u8]) -> Option<Udp<'_>> {
    let (at, version) = ip_header(link, frame)?;
    let size = frame.len();
    let (source, destination, udp, end) = match version {
        4 => {
            if size < at + 20 || frame[at + 9] != UDP || big_endian(frame, at + 6, at + 8) & 0x3FFF != 0 {
                return None; // not UDP, or a fragment (more fragments, or an offset)
            }
            let header = (frame[at] & 0x0F) as usize * 4;
            let total = big_endian(frame, at + 2, at + 4) as usize; // Ethernet pads short frames; 0 under TSO
            let end = if total != 0 { at + total } else { size };
            (&frame[at + 12..at + 16], &frame[at + 16..at + 20], at + header, end)
        }
        6 => {
            if size < at + 40 {
                return None;
            }
            let (mut next_header, mut udp) = (frame[at + 6], at + 40);
            while IPV6_EXTENSIONS.contains(&next_header) && udp + 2 <= size {
                (next_header, udp) = (frame[udp], udp + 8 + frame[udp + 1] as usize * 8);
            }
            if next_header != UDP {
                return None;
            }
            let total = big_endian(frame, at + 4, at + 6) as usize; // 0 for a jumbogram
            let end = if total != 0 { at + 40 + total } else { size };
            (&frame[at + 8..at + 24], &frame[at + 24..at + 40], udp, end)
        }
        _ => return None,
    };
    if size < udp + 8 {
        return None;
    }
    // To the end of the IP packet, not by the UDP length: tshark 4.0 reads a damaged UDP length so too
    // (shared/captures' fuzz reproducer zeek_383379789-decrypt-crash.pcap).
    let payload = &frame[udp + 8..end.clamp(udp + 8, size)];
    let source_port = u16::from_be_bytes([frame[udp], frame[udp + 1]]);
    let destination_port = u16::from_be_bytes([frame[udp + 2], frame[udp + 3]]);
    Some(Udp { source, source_port, destination, destination_port, payload })
}

/// An address as inet_ntop (glibc's, which Python's socket.inet_ntop calls) writes it: IPv6 with its first
/// longest run of two or more zero groups as "::", and the last 32 bits dotted after 96 zero bits or ::ffff:.
fn address(packed: &[u8]) -> String {
    use std::fmt::Write;
    if packed.len() == 4 {
        return format!("{}.{}.{}.{}", packed[0], packed[1], packed[2], packed[3]);
    }
    let words: Vec<u16> = packed.chunks(2).map(|pair| u16::from_be_bytes([pair[0], pair[1]])).collect();
    let (mut best, mut run) = ((0usize, 0usize), (0usize, 0usize)); // (start, length)
    for (i, word) in words.iter().enumerate() {
        if *word == 0 {
            run = if run.1 == 0 { (i, 1) } else { (run.0, run.1 + 1) };
            if run.1 > best.1 {
                best = run;
            }
        } else {
            run = (0, 0);
        }
    }
    let zeros = (best.1 >= 2).then_some(best);
    let mut out = String::with_capacity(39);
    for (i, word) in words.iter().enumerate() {
        if let Some((start, length)) = zeros {
            if (start..start + length).contains(&i) {
                if i == start {
                    out.push(':');
                }
                continue;
            }
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6 && matches!(zeros, Some((0, 6))) || i == 6 && matches!(zeros, Some((0, 5))) && words[5] == 0xFFFF {
            let _ = write!(out, "{}.{}.{}.{}", packed[12], packed[13], packed[14], packed[15]);
            break;
        }
        let _ = write!(out, "{word:x}");
    }
    if matches!(zeros, Some((start, length)) if start + length == 8) {
        out.push(':');
    }
    out
}

// -- the Python classes ------------------------------------------------------------------------------------------------

fn open_file(path: PathBuf) -> PyResult<Records> {
    let file = File::open(&path).map_err(os_error)?;
    Records::open(Box::new(BufReader::with_capacity(READ_BUFFER, file)))
}

/// The OSError (FileNotFoundError, PermissionError, ...) Python's own open or read would raise.
fn os_error(error: io::Error) -> PyErr {
    let text = error.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string(); // strerror, as Python's
    PyOSError::new_err((error.raw_os_error().unwrap_or(0), text))
}

/// The packets of a capture file in file order, streamed: ``for number, time, link, frame, original_length in
/// reader`` (numbered from 1; the time in seconds; the length on the wire, longer than ``frame`` where the snap
/// length cut it). Iteration stops at the end of the file or at the first damaged or cut-short record, which
/// ``stopped`` then names as (byte offset, packets read before it, what was wrong); every packet before it has
/// been yielded. ``offset`` is how far the file has been read (for progress), ``packets`` how many were read.
///
/// ``long_header_datagrams`` reads the UDP payloads whose first byte has the long-header bit set instead, each
/// as ``make(frame number, time, source address, source port, destination address, destination port,
/// payload)`` (addresses as text), ``make`` a subclass of tuple (frontend.py's Datagram); ``ports`` keeps only
/// datagrams from or to one of them.
#[pyclass(module = "qscan_native")]
pub struct CaptureReader {
    records: Records,
    datagrams: Option<DatagramFilter>,
}

struct DatagramFilter {
    ports: Vec<i64>,
    make: Py<PyType>,
    new: Py<PyAny>, // tuple.__new__
}

impl CaptureReader {
    fn next_datagram<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let filter = self.datagrams.as_ref().expect("a reader of datagrams");
        while let Some(packet) = self.records.next().map_err(os_error)? {
            let Some(udp) = udp_datagram(packet.link, self.records.frame()) else { continue };
            if udp.payload.first().is_none_or(|first| first & 0x80 == 0) {
                continue;
            }
            let ports = &filter.ports;
            if !ports.is_empty() && !ports.contains(&(udp.source_port as i64)) && !ports.contains(&(udp.destination_port as i64)) {
                continue;
            }
            let fields = (
                packet.number,
                packet.time,
                PyString::new(py, &address(udp.source)),
                udp.source_port,
                PyString::new(py, &address(udp.destination)),
                udp.destination_port,
                PyBytes::new(py, udp.payload),
            );
            return Ok(Some(filter.new.bind(py).call1((filter.make.bind(py), fields))?));
        }
        Ok(None)
    }
}

#[pymethods]
impl CaptureReader {
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        Ok(CaptureReader { records: open_file(path)?, datagrams: None })
    }

    /// A capture file's bytes already in memory.
    #[staticmethod]
    fn in_memory(data: Vec<u8>) -> PyResult<Self> {
        Ok(CaptureReader { records: Records::open(Box::new(Cursor::new(data)))?, datagrams: None })
    }

    #[staticmethod]
    fn long_header_datagrams(py: Python<'_>, path: PathBuf, make: Bound<'_, PyType>, ports: Vec<i64>) -> PyResult<Self> {
        let new = py.get_type::<PyTuple>().getattr("__new__")?.unbind();
        Ok(CaptureReader { records: open_file(path)?, datagrams: Some(DatagramFilter { ports, make: make.unbind(), new }) })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if self.datagrams.is_some() {
            return self.next_datagram(py);
        }
        let Some(packet) = self.records.next().map_err(os_error)? else { return Ok(None) };
        let frame = PyBytes::new(py, self.records.frame());
        Ok(Some((packet.number, packet.time, packet.link, frame, packet.original).into_pyobject(py)?.into_any()))
    }

    #[getter]
    fn stopped(&self) -> Option<(u64, u64, String)> {
        self.records.stopped.clone()
    }

    #[getter]
    fn offset(&self) -> u64 {
        self.records.offset
    }

    #[getter]
    fn packets(&self) -> u64 {
        self.records.packets
    }
}
