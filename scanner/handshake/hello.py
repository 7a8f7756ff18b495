"""The ClientHello: built from a per-scan template, and parsed (captures read browsers' with it).

A scan sends the same ClientHello to every target but for the random, the
key shares and our connection ID inside the transport parameters. So the
hello is encoded once per (server name, ALPN, groups, QUIC version) with
aioquic's TLS codec, and each connection copies it and writes its own bytes
over the placeholders: no per-connection encoding at all. The content is
what aioquic's client sends with the same settings (cipher suites, signature
algorithms, transport parameters, extension order), so servers answer the
scanner as they answered the aioquic-based engine it replaced.
"""

from __future__ import annotations

import ipaddress
import os
import struct
from collections.abc import Sequence
from typing import NamedTuple

from aioquic.buffer import Buffer
from aioquic.quic.packet import (
    QuicProtocolVersion,
    QuicTransportParameters,
    QuicVersionInformation,
    push_quic_transport_parameters,
)
from aioquic.tls import (
    CipherSuite,
    ClientHello,
    CompressionMethod,
    ExtensionType,
    GROUP_TO_CURVE,
    Group,
    SignatureAlgorithm,
    push_client_hello,
)
from cryptography.hazmat.primitives.asymmetric import ec, mlkem, x448, x25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from qscan_native import client_hello_fields

# quic_transport_parameters: the RFC 9001 code point, then the draft one old clients used.
TRANSPORT_PARAMETERS_EXTENSIONS = (0x39, 0xFFA5)
EXTENSION_SERVER_NAME = 0x00
EXTENSION_ALPN = 0x10

# What aioquic's client offers, in its order.
CIPHER_SUITES = (CipherSuite.AES_256_GCM_SHA384, CipherSuite.AES_128_GCM_SHA256, CipherSuite.CHACHA20_POLY1305_SHA256)
SIGNATURE_ALGORITHMS = (
    SignatureAlgorithm.ECDSA_SECP256R1_SHA256,
    SignatureAlgorithm.RSA_PSS_RSAE_SHA256,
    SignatureAlgorithm.RSA_PKCS1_SHA256,
    SignatureAlgorithm.ECDSA_SECP384R1_SHA384,
    SignatureAlgorithm.RSA_PSS_RSAE_SHA384,
    SignatureAlgorithm.RSA_PKCS1_SHA384,
    SignatureAlgorithm.RSA_PKCS1_SHA1,
    SignatureAlgorithm.ED25519,
    SignatureAlgorithm.ED448,
)
QUIC_VERSIONS = (int(QuicProtocolVersion.VERSION_1), int(QuicProtocolVersion.VERSION_2))
TLS_VERSION_1_3 = 0x0304
CID_LENGTH = 8  # our connection IDs; short-header packets carry no length
EXTENSION_KEY_SHARE = 0x33

# draft-ietf-tls-ecdhe-mlkem: the hybrid Chromium and Firefox offer. Its shares are
# ML-KEM-768's then X25519's (client: encapsulation key; server: ciphertext), and so is
# the shared secret.
X25519MLKEM768 = 0x11EC
_MLKEM768_CIPHERTEXT = 1088
# Every group the client completes a key exchange in, in the order supported_groups lists
# those it sends no share for: a server that wants one of them asks in a HelloRetryRequest
# (browsers and Go's TLS list more groups than they send shares for). The hybrid is listed
# only with its share, since servers that prefer it would ask for its 1,216 bytes otherwise.
COMPLETABLE_GROUPS = (Group.X25519, Group.SECP256R1, Group.SECP384R1, Group.SECP521R1, Group.X448)

_PUBLIC_KEY_SIZES = {
    Group.X25519: 32, Group.X448: 56, Group.SECP256R1: 65, Group.SECP384R1: 97, Group.SECP521R1: 133,
    X25519MLKEM768: 1184 + 32,
}  # fmt: skip


def generate_key_share(group: int) -> tuple[object, bytes]:
    """(private key, public key bytes as sent) for one key-exchange group."""
    if group == X25519MLKEM768:
        kem, ecdh = mlkem.MLKEM768PrivateKey.generate(), x25519.X25519PrivateKey.generate()
        return (kem, ecdh), kem.public_key().public_bytes_raw() + ecdh.public_key().public_bytes_raw()
    if group == Group.X25519:
        key = x25519.X25519PrivateKey.generate()
        return key, key.public_key().public_bytes_raw()
    if group == Group.X448:
        key = x448.X448PrivateKey.generate()
        return key, key.public_key().public_bytes_raw()
    key = ec.generate_private_key(GROUP_TO_CURVE[group]())  # type: ignore[index]
    return key, key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)


def shared_secret(group: int, private: object, peer: bytes) -> bytes:
    """The key exchange's shared secret with the server's share; ValueError when the share is invalid."""
    if group == X25519MLKEM768:
        kem, ecdh = private  # type: ignore[misc]
        if len(peer) != _MLKEM768_CIPHERTEXT + 32:
            raise ValueError("X25519MLKEM768 share of the wrong length")
        x25519_peer = x25519.X25519PublicKey.from_public_bytes(peer[_MLKEM768_CIPHERTEXT:])
        return kem.decapsulate(peer[:_MLKEM768_CIPHERTEXT]) + ecdh.exchange(x25519_peer)
    if group == Group.X25519:
        return private.exchange(x25519.X25519PublicKey.from_public_bytes(peer))  # type: ignore[attr-defined]
    if group == Group.X448:
        return private.exchange(x448.X448PublicKey.from_public_bytes(peer))  # type: ignore[attr-defined]
    public = ec.EllipticCurvePublicKey.from_encoded_point(GROUP_TO_CURVE[group](), peer)  # type: ignore[index]
    return private.exchange(ec.ECDH(), public)  # type: ignore[attr-defined]


def client_transport_parameters(source_cid: bytes, version: int) -> bytes:
    """The transport parameters aioquic's client sends with its default configuration."""
    buf = Buffer(capacity=1024)
    push_quic_transport_parameters(
        buf,
        QuicTransportParameters(
            max_idle_timeout=60_000,
            initial_max_data=1_048_576,
            initial_max_stream_data_bidi_local=1_048_576,
            initial_max_stream_data_bidi_remote=1_048_576,
            initial_max_stream_data_uni=1_048_576,
            initial_max_streams_bidi=128,
            initial_max_streams_uni=128,
            ack_delay_exponent=3,
            max_ack_delay=25,
            active_connection_id_limit=8,
            initial_source_connection_id=source_cid,
            version_information=QuicVersionInformation(chosen_version=version, available_versions=list(QUIC_VERSIONS)),
        ),
    )
    return buf.data


class HelloTemplate:
    """One scan's ClientHello (its ALPN and key-exchange groups), with holes for each connection.

    ``groups`` get key shares; ``supported_groups`` (default: those, then every other group
    of COMPLETABLE_GROUPS) are the groups a HelloRetryRequest may ask for.
    """

    def __init__(self, alpn: str, groups: Sequence[int], supported_groups: Sequence[int] | None = None):
        self.groups = tuple(groups)
        if supported_groups is None:
            supported_groups = self.groups + tuple(g for g in COMPLETABLE_GROUPS if g not in self.groups)
        self.supported_groups = tuple(supported_groups)
        self.alpn = alpn
        # Placeholders are random, so finding them in the encoding cannot hit anything else.
        random, scid = os.urandom(32), os.urandom(CID_LENGTH)
        shares = [os.urandom(_PUBLIC_KEY_SIZES[g]) for g in self.groups]
        chosen_version = os.urandom(4)
        buf = Buffer(capacity=4096)
        push_client_hello(
            buf,
            ClientHello(
                random=random,
                legacy_session_id=b"",
                cipher_suites=[int(c) for c in CIPHER_SUITES],
                legacy_compression_methods=[CompressionMethod.NULL],
                alpn_protocols=[alpn],
                key_share=list(zip(self.groups, shares)),
                signature_algorithms=[int(a) for a in SIGNATURE_ALGORITHMS],
                supported_groups=list(self.supported_groups),
                supported_versions=[TLS_VERSION_1_3],
                other_extensions=[
                    (
                        ExtensionType.QUIC_TRANSPORT_PARAMETERS,
                        client_transport_parameters(scid, int.from_bytes(chosen_version, "big")),
                    )
                ],
            ),
        )
        self.message = buf.data
        self._random_at = self.message.index(random)
        self._share_at = [self.message.index(share) for share in shares]
        self._scid_at = self.message.index(scid)
        self._version_at = self.message.index(chosen_version)
        # aioquic puts server_name right before ALPN; the name is spliced in there per connection.
        name = alpn.encode()
        alpn_extension = struct.pack("!HHHB", EXTENSION_ALPN, len(name) + 3, len(name) + 1, len(name)) + name
        self._name_at = self.message.index(alpn_extension, self._share_at[-1] + _PUBLIC_KEY_SIZES[self.groups[-1]])
        self._extensions_length_at = 4 + 2 + 32 + 1 + 2 + 2 * len(CIPHER_SUITES) + 2

    def fill(self, random: bytes, public_keys: Sequence[bytes], source_cid: bytes, server_name: str | None, version: int) -> bytes:
        """This connection's ClientHello. A literal address is not sent as a name (RFC 6066 3)."""
        hello = bytearray(self.message)
        hello[self._random_at : self._random_at + 32] = random
        for at, public in zip(self._share_at, public_keys):
            hello[at : at + len(public)] = public
        hello[self._scid_at : self._scid_at + CID_LENGTH] = source_cid
        hello[self._version_at : self._version_at + 4] = version.to_bytes(4, "big")
        if server_name and not _is_address(server_name):
            name = _encode_name(server_name)
            server_name_list = struct.pack("!HBH", len(name) + 3, 0, len(name)) + name
            return self.with_extension(hello, EXTENSION_SERVER_NAME, server_name_list, at=self._name_at)
        return bytes(hello)

    def with_key_share(self, hello: bytes, group: int, public: bytes) -> bytes:
        """``hello``, a ClientHello from this template, with one key share in place of its
        shares: the second ClientHello after a HelloRetryRequest (RFC 8446 4.1.2)."""
        pos = self._extensions_length_at + 2
        while True:  # our own hello: the extension is there
            kind, length = struct.unpack_from("!HH", hello, pos)
            if kind == EXTENSION_KEY_SHARE:
                break
            pos += 4 + length
        share = struct.pack("!HH", group, len(public)) + public
        return self._spliced(hello, pos, pos + 4 + length, EXTENSION_KEY_SHARE, struct.pack("!H", len(share)) + share)

    def with_extension(self, hello: bytes | bytearray, kind: int, body: bytes, at: int | None = None) -> bytes:
        """``hello``, a ClientHello from this template, with one more extension inserted at
        ``at`` (default: last)."""
        at = len(hello) if at is None else at
        return self._spliced(hello, at, at, kind, body)

    def _spliced(self, hello: bytes | bytearray, start: int, end: int, kind: int, body: bytes) -> bytes:
        """``hello`` with the bytes from ``start`` to ``end`` replaced by an extension, the
        message and extensions lengths fixed up."""
        extension = struct.pack("!HH", kind, len(body)) + body
        hello = bytearray(hello)
        hello[start:end] = extension
        hello[1:4] = (len(hello) - 4).to_bytes(3, "big")
        length_at = self._extensions_length_at
        length = int.from_bytes(hello[length_at : length_at + 2], "big") + len(extension) - (end - start)
        hello[length_at : length_at + 2] = length.to_bytes(2, "big")
        return bytes(hello)


def _encode_name(name: str) -> bytes:
    if name.isascii():
        return name.encode()
    try:
        return name.encode("idna")  # an internationalised name as DNS knows it
    except UnicodeError:
        return name.encode()  # not a valid IDN either: the bytes as given, for the server to judge


def _is_address(name: str) -> bool:
    if not (name[0].isdigit() or ":" in name):
        return False  # no address starts otherwise: spare the exception
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class ClientHelloFields(NamedTuple):  # a tuple: built once a connection of a capture
    random: bytes
    sni: str | None
    alpn: tuple[str, ...]
    transport_parameters: bytes  # empty when the extension is absent


def parse_client_hello(message: bytes) -> ClientHelloFields:
    """The few ClientHello fields a capture needs; ValueError when it is not one.

    aioquic's pull_client_hello parses every extension into Python objects
    (key shares, signature lists, ...), three times the cost of the whole
    rest of the per-connection work; this walks the extensions and reads
    three, in compiled code (scanner/native/src/hello.rs): a capture of many
    clients parses one a connection.
    """
    random, sni, alpn, raw = client_hello_fields(message, TRANSPORT_PARAMETERS_EXTENSIONS)
    return ClientHelloFields(random, sni, tuple(alpn), raw)
