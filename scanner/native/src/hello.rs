//! The few ClientHello fields a capture needs (scanner/handshake/hello.py's parse_client_hello wraps this):
//! walking the extensions in Python cost a tenth of qscan pcap's time.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

// IANA's TLS extension code points for server_name (RFC 6066) and ALPN (RFC 7301); the transport parameters'
// (RFC 9001's and the drafts') come from the caller, scanner/handshake/hello.py's TRANSPORT_PARAMETERS_EXTENSIONS.
const SERVER_NAME: u16 = 0x00;
const ALPN: u16 = 0x10;

/// Bytes as Python's ``decode("ascii", "replace")`` reads them: every byte past ASCII one U+FFFD.
fn ascii(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| if b < 0x80 { b as char } else { '\u{FFFD}' }).collect()
}

fn u16_at(data: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_be_bytes([*data.get(at)?, *data.get(at + 1)?]) as usize)
}

struct Fields<'a> {
    random: &'a [u8],
    sni: Option<String>,
    alpn: Vec<String>,
    transport_parameters: &'a [u8],
}

fn parse<'a>(message: &'a [u8], transport_parameters: &[u16]) -> Result<Fields<'a>, String> {
    let truncated = || "truncated ClientHello".to_string();
    let kind = *message.first().ok_or_else(truncated)?;
    if kind != 1 {
        return Err(format!("handshake message type {kind}, not ClientHello"));
    }
    let mut end = 4;
    for byte in message.iter().skip(1).take(3) {
        end = (end - 4) * 256 + *byte as usize + 4;
    }
    let random = &message[message.len().min(6)..message.len().min(38)];
    let mut pos = 38;
    pos += 1 + *message.get(pos).ok_or_else(truncated)? as usize; // legacy_session_id
    pos += 2 + u16_at(message, pos).ok_or_else(truncated)?; // cipher_suites
    pos += 1 + *message.get(pos).ok_or_else(truncated)? as usize; // legacy_compression_methods
    let extensions_end = pos + 2 + u16_at(message, pos).ok_or_else(truncated)?;
    pos += 2;
    if extensions_end > end || end > message.len() {
        return Err("extensions run past the message".into());
    }
    let (mut sni, mut alpn) = (None, Vec::new());
    let mut found: [Option<&[u8]>; 2] = [None, None];
    while pos < extensions_end {
        let (kind, length) = (u16_at(message, pos).ok_or_else(truncated)?, u16_at(message, pos + 2).ok_or_else(truncated)?);
        let body = &message[(pos + 4).min(message.len())..(pos + 4 + length).min(message.len())];
        pos += 4 + length;
        if body.len() != length || pos > extensions_end {
            return Err(format!("extension {kind:#x} runs past the extensions"));
        }
        if kind as u16 == SERVER_NAME && body.len() > 5 && body[2] == 0 {
            // first entry, host_name
            let name_end = (5 + u16_at(body, 3).unwrap_or(0)).min(body.len());
            sni = Some(ascii(&body[5..name_end]));
        } else if kind as u16 == ALPN {
            alpn.clear();
            let list = &body[body.len().min(2)..];
            let mut at = 0;
            while at < list.len() {
                let length = list[at] as usize;
                alpn.push(ascii(&list[at + 1..(at + 1 + length).min(list.len())]));
                at += 1 + length;
            }
        } else if let Some(i) = transport_parameters.iter().position(|&e| e as usize == kind) {
            if i < found.len() && found[i].is_none() {
                found[i] = Some(body);
            }
        }
    }
    let transport_parameters = found.iter().flatten().next().copied().unwrap_or(b"");
    Ok(Fields { random, sni, alpn, transport_parameters })
}

/// (random, server name, ALPN protocols, transport parameters extension or b"") of a ClientHello ``message``
/// (handshake header included); ValueError when it is not one. ``transport_parameters``: the extension code
/// points that carry them, the preferred first.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn client_hello_fields<'py>(
    py: Python<'py>,
    message: &[u8],
    transport_parameters: (u16, u16),
) -> PyResult<(Bound<'py, PyBytes>, Option<String>, Vec<String>, Bound<'py, PyBytes>)> {
    let fields = parse(message, &[transport_parameters.0, transport_parameters.1]).map_err(PyValueError::new_err)?;
    Ok((PyBytes::new(py, fields.random), fields.sni, fields.alpn, PyBytes::new(py, fields.transport_parameters)))
}
