//! CRYPTO frames of an opened Initial or Handshake packet, and one direction's CRYPTO stream reassembled by
//! offset: scanner/handshake/packets.py's crypto_frames and CryptoStream (the capture reader and the scanner's
//! handshake both use these). In Python, walking a browser's many small frames and joining them cost a tenth
//! of qscan pcap's time.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

// RFC 9000's frame types (tparams/frames.py names them for Python), and Google QUIC's two that a T050/T051
// Initial carries besides PADDING (scanner/handshake/packets.py).
const PADDING: u8 = 0x00;
const PING: u8 = 0x01;
const ACK: u8 = 0x02;
const ACK_ECN: u8 = 0x03;
const CRYPTO: u8 = 0x06;
const CONNECTION_CLOSE: u8 = 0x1c;
const CONNECTION_CLOSE_APP: u8 = 0x1d;
const GOOGLE_PING: u8 = 0x07;
const GOOGLE_CRYPTO: u8 = 0x08;

/// A QUIC varint at ``pos``: (value, position after it), None when the data ends inside it.
fn varint(data: &[u8], pos: usize) -> Option<(u64, usize)> {
    let first = *data.get(pos)?;
    let length = 1usize << (first >> 6);
    let bytes = data.get(pos..pos.checked_add(length)?)?;
    let mut value = (first & 0x3f) as u64;
    for byte in &bytes[1..] {
        value = (value << 8) | *byte as u64;
    }
    Some((value, pos + length))
}

/// Every CRYPTO frame's (offset, start, end) in ``payload``, skipping the other frames an Initial or Handshake
/// packet may carry (PADDING, PING, ACK, CONNECTION_CLOSE). Stops quietly at a frame type those packets cannot
/// carry or a frame that runs past the payload: what came before is still good, and nothing after it can be
/// framed. ``google_frames`` reads Google QUIC's frame types (T050/T051), of which only PADDING, PING and
/// CRYPTO are read; the others' layouts differ from IETF QUIC's.
fn frames(payload: &[u8], google_frames: bool, mut found: impl FnMut(u64, &[u8])) {
    let size = payload.len();
    let mut pos = 0usize;
    while pos < size {
        let mut frame_type = payload[pos];
        pos += 1;
        if google_frames && frame_type != PADDING {
            if frame_type == GOOGLE_PING {
                continue;
            }
            if frame_type != GOOGLE_CRYPTO {
                return;
            }
            frame_type = CRYPTO; // the same fields as IETF QUIC's
        }
        match frame_type {
            PADDING => pos += payload[pos..].iter().take_while(|b| **b == 0).count(),
            PING => {}
            ACK | ACK_ECN => {
                // largest acknowledged, ack delay, range count, first range, then the ranges (and ECN counts)
                let Some((_, at)) = varint(payload, pos) else { return };
                let Some((_, at)) = varint(payload, at) else { return };
                let Some((ranges, at)) = varint(payload, at) else { return };
                let Some((_, mut at)) = varint(payload, at) else { return };
                // each varint takes a byte at least: more than the payload holds means the data ends first
                let more = ranges.saturating_mul(2).saturating_add(if frame_type == ACK_ECN { 3 } else { 0 });
                for _ in 0..more.min(size as u64 + 1) {
                    let Some((_, next)) = varint(payload, at) else { return };
                    at = next;
                }
                pos = at;
            }
            CRYPTO => {
                let Some((offset, at)) = varint(payload, pos) else { return };
                let Some((length, at)) = varint(payload, at) else { return };
                if length > (size - at) as u64 {
                    return;
                }
                let end = at + length as usize;
                found(offset, &payload[at..end]);
                pos = end;
            }
            CONNECTION_CLOSE | CONNECTION_CLOSE_APP => {
                let Some((_, mut at)) = varint(payload, pos) else { return }; // error code
                if frame_type == CONNECTION_CLOSE {
                    let Some((_, next)) = varint(payload, at) else { return }; // offending frame type
                    at = next;
                }
                let Some((reason, at)) = varint(payload, at) else { return };
                pos = at.saturating_add(reason.min(usize::MAX as u64) as usize);
            }
            _ => return,
        }
    }
}

/// (offset, data) of every CRYPTO frame of an opened packet (see ``frames``).
#[pyfunction]
#[pyo3(signature = (payload, google_frames=false))]
pub fn crypto_frames<'py>(py: Python<'py>, payload: &[u8], google_frames: bool) -> Vec<(u64, Bound<'py, PyBytes>)> {
    let mut found = Vec::new();
    frames(payload, google_frames, |offset, data| found.push((offset, PyBytes::new(py, data))));
    found
}

/// One direction's CRYPTO stream at one encryption level, reassembled by offset.
///
/// Browsers send CRYPTO frames out of order and repeat them; the stream only grows at its contiguous end, and
/// overlapping retransmissions are ignored (of two chunks at one offset the longer is kept).
#[pyclass(module = "qscan_native")]
#[derive(Default)]
pub struct CryptoStream {
    data: Vec<u8>,
    waiting: BTreeMap<u64, Vec<u8>>, // chunks that start past the contiguous end, by offset
    read: usize,                     // where next_message continues
}

impl CryptoStream {
    fn add_chunk(&mut self, offset: u64, chunk: &[u8]) {
        let have = self.data.len() as u64;
        let end = offset.saturating_add(chunk.len() as u64);
        if end <= have {
            return;
        }
        if offset <= have && self.waiting.is_empty() {
            // In order, nothing waiting: most frames (Chromium's many small ones too) end up here.
            self.data.extend_from_slice(&chunk[(have - offset) as usize..]);
            return;
        }
        let longer = self.waiting.get(&offset).is_none_or(|held| held.len() < chunk.len());
        if longer {
            self.waiting.insert(offset, chunk.to_vec());
        }
        while let Some(entry) = self.waiting.first_entry() {
            let offset = *entry.key();
            let have = self.data.len() as u64;
            if offset > have {
                break;
            }
            let chunk = entry.remove();
            let skip = (have - offset) as usize;
            if skip < chunk.len() {
                self.data.extend_from_slice(&chunk[skip..]);
            }
        }
    }

    /// The length of the TLS handshake message starting at ``start``, once all of it has arrived.
    fn message_end(&self, start: usize) -> Option<usize> {
        let header = self.data.get(start..start + 4)?;
        let end = start + 4 + (u32::from_be_bytes([0, header[1], header[2], header[3]]) as usize);
        (self.data.len() >= end).then_some(end)
    }
}

#[pymethods]
impl CryptoStream {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    fn add(&mut self, offset: u64, data: &[u8]) {
        self.add_chunk(offset, data);
    }

    /// Add every CRYPTO frame of an opened packet; the first message once it is complete.
    #[pyo3(signature = (payload, google_frames=false))]
    fn add_frames<'py>(&mut self, py: Python<'py>, payload: &[u8], google_frames: bool) -> Option<Bound<'py, PyBytes>> {
        frames(payload, google_frames, |offset, data| self.add_chunk(offset, data));
        self.message(py)
    }

    /// How many bytes from offset 0 have arrived.
    #[getter]
    fn contiguous(&self) -> usize {
        self.data.len()
    }

    /// The contiguous prefix received so far.
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.data)
    }

    /// The next complete TLS handshake message after those already taken, header included.
    fn next_message<'py>(&mut self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let start = self.read;
        let end = self.message_end(start)?;
        self.read = end;
        Some(PyBytes::new(py, &self.data[start..end]))
    }

    /// The first TLS handshake message once it is complete, header included.
    fn message<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.message_end(0).map(|end| PyBytes::new(py, &self.data[..end]))
    }
}
