//! Opening a client Initial packet under the Initial keys its Destination Connection ID derives (RFC 9001
//! 5.2; RFC 9369 3.3 for QUIC v2's labels). In Python (aioquic's CryptoContext over `cryptography`) deriving
//! and setting up the keys and opening took 15 us a packet; here 1.5 us (docs/benchmarks.md).
//!
//! The salts stay in Python (scanner/handshake/packets.py, INITIAL_FORMATS): the caller passes the version's.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ring::aead::quic::{HeaderProtectionKey, AES_128 as HP_AES_128};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use ring::hkdf::{KeyType, Prk, Salt, HKDF_SHA256};

const SAMPLE: usize = 16;
const TAG: usize = 16;

struct Length(usize);

impl KeyType for Length {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 7.1) with an empty context.
fn expand_label(secret: &Prk, label: &[u8], length: usize, out: &mut [u8]) {
    let length_field = (length as u16).to_be_bytes();
    let label_length = [(6 + label.len()) as u8];
    let info: [&[u8]; 5] = [&length_field, &label_length, b"tls13 ", label, &[0]];
    secret
        .expand(&info, Length(length))
        .and_then(|okm| okm.fill(&mut out[..length]))
        .expect("HKDF output of at most one hash");
}

/// RFC 9000 A.3: the full packet number nearest ``expected``.
fn decode_packet_number(truncated: u64, bits: u32, expected: u64) -> u64 {
    let window = 1u64 << bits;
    let half = window / 2;
    let candidate = (expected & !(window - 1)) | truncated;
    if candidate + half <= expected && candidate < (1u64 << 62) - window {
        candidate + window
    } else if candidate > expected + half && candidate >= window {
        candidate - window
    } else {
        candidate
    }
}

/// (packet number, plaintext payload) of a client Initial ``packet`` (header included, the protected packet
/// number at ``pn_offset``), opened with the client Initial keys of ``dcid`` under ``salt`` (``v2``: QUIC
/// v2's labels); None when these keys do not open it or it is too short to be protected at all: what
/// aioquic's CryptoContext.decrypt_packet refuses.
#[pyfunction]
#[pyo3(signature = (packet, pn_offset, dcid, salt, v2, expected_packet_number=0))]
pub fn open_client_initial<'py>(
    py: Python<'py>,
    packet: &[u8],
    pn_offset: usize,
    dcid: &[u8],
    salt: &[u8],
    v2: bool,
    expected_packet_number: u64,
) -> Option<(u64, Bound<'py, PyBytes>)> {
    if pn_offset + 4 + SAMPLE > packet.len() {
        return None;
    }
    let initial = Salt::new(HKDF_SHA256, salt).extract(dcid);
    let mut client = [0u8; 32];
    expand_label(&initial, b"client in", 32, &mut client);
    let client = Prk::new_less_safe(HKDF_SHA256, &client);
    let (key_label, iv_label, hp_label): (&[u8], &[u8], &[u8]) =
        if v2 { (b"quicv2 key", b"quicv2 iv", b"quicv2 hp") } else { (b"quic key", b"quic iv", b"quic hp") };
    let (mut key, mut iv, mut hp) = ([0u8; 16], [0u8; 12], [0u8; 16]);
    expand_label(&client, key_label, 16, &mut key);
    expand_label(&client, iv_label, 12, &mut iv);
    expand_label(&client, hp_label, 16, &mut hp);

    let sample = &packet[pn_offset + 4..pn_offset + 4 + SAMPLE];
    let mask = HeaderProtectionKey::new(&HP_AES_128, &hp).ok()?.new_mask(sample).ok()?;
    let first = packet[0] ^ (mask[0] & if packet[0] & 0x80 != 0 { 0x0F } else { 0x1F });
    let pn_length = (first & 0x03) as usize + 1;
    let mut header = packet[..pn_offset + pn_length].to_vec();
    header[0] = first;
    let mut truncated = 0u64;
    for i in 0..pn_length {
        header[pn_offset + i] ^= mask[1 + i];
        truncated = (truncated << 8) | header[pn_offset + i] as u64;
    }
    let number = decode_packet_number(truncated, 8 * pn_length as u32, expected_packet_number);

    let mut payload = packet[header.len()..].to_vec();
    if payload.len() < TAG {
        return None;
    }
    let mut nonce = iv;
    for (byte, pn) in nonce[4..].iter_mut().zip(number.to_be_bytes()) {
        *byte ^= pn;
    }
    let aead = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &key).ok()?);
    let plain = aead.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(&header), &mut payload).ok()?;
    Some((number, PyBytes::new(py, plain)))
}

