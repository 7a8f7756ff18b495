"""The server's TLS messages, read in one pass; aioquic's codec decides whenever one is irregular.

aioquic.tls reads a message through nested context managers and closures
(pull_block, pull_list), about 20 us a message here, a tenth of a
handshake's client CPU for four messages. Well-formed messages, nearly all,
are read here with slicing into aioquic's own message classes; anything this
reader does not find exactly as expected (a length that does not add up,
bytes left over, an extension of the wrong size) is handed to aioquic's
pull_* function, so malformed input gets aioquic's verdict and alert.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from aioquic.buffer import Buffer
from aioquic.tls import (
    Certificate,
    CertificateVerify,
    EncryptedExtensions,
    ExtensionType,
    ServerHello,
    pull_certificate,
    pull_certificate_verify,
    pull_encrypted_extensions,
    pull_server_hello,
)

T = TypeVar("T")
_U16 = struct.Struct("!H")


class _Irregular(Exception):
    """Not the common, well-formed case: let aioquic read it."""


def _u16(data: bytes, pos: int) -> int:
    if pos + 2 > len(data):
        raise _Irregular
    return _U16.unpack_from(data, pos)[0]


def _extensions(data: bytes, pos: int, end: int) -> list[tuple[int, bytes]]:
    """The extension list at ``pos`` (2-byte length), which must end exactly at ``end``."""
    if _u16(data, pos) != end - pos - 2:
        raise _Irregular
    pos += 2
    found = []
    while pos < end:
        kind, length = _u16(data, pos), _u16(data, pos + 2)
        pos += 4
        if pos + length > end:
            raise _Irregular
        found.append((kind, data[pos : pos + length]))
        pos += length
    return found


def _body(message: bytes) -> int:
    """The end of the message body, which must be the end of ``message``."""
    if len(message) < 4 or 4 + int.from_bytes(message[1:4], "big") != len(message):
        raise _Irregular
    return len(message)


def _fast(read: Callable[[bytes], T], pull: Callable[[Buffer], T]) -> Callable[[bytes], T]:
    def reader(message: bytes) -> T:
        try:
            return read(message)
        except (_Irregular, IndexError, ValueError):
            return pull(Buffer(data=message))

    reader.__doc__ = f"{pull.__name__}'s result for ``message``."
    return reader


def _server_hello(message: bytes) -> ServerHello:
    end = _body(message)
    if message[4:6] != b"\x03\x03":
        raise _Irregular
    pos = 39 + message[38]
    hello = ServerHello(
        random=message[6:38],
        legacy_session_id=message[39:pos],
        cipher_suite=_u16(message, pos),
        compression_method=message[pos + 2],
    )
    for kind, body in _extensions(message, pos + 3, end):
        if kind == ExtensionType.SUPPORTED_VERSIONS:
            if len(body) != 2:
                raise _Irregular
            hello.supported_version = _u16(body, 0)
        elif kind == ExtensionType.KEY_SHARE:
            if len(body) < 4 or _u16(body, 2) != len(body) - 4:
                raise _Irregular
            hello.key_share = (_u16(body, 0), body[4:])
        elif kind == ExtensionType.PRE_SHARED_KEY:
            if len(body) != 2:
                raise _Irregular
            hello.pre_shared_key = _u16(body, 0)
        else:
            hello.other_extensions.append((kind, body))
    return hello


def _encrypted_extensions(message: bytes) -> EncryptedExtensions:
    extensions = EncryptedExtensions()
    for kind, body in _extensions(message, 4, _body(message)):
        if kind == ExtensionType.ALPN:
            # Exactly one protocol (RFC 7301 3.1): list length, name length, name.
            if len(body) < 3 or _u16(body, 0) != len(body) - 2 or body[2] != len(body) - 3:
                raise _Irregular
            extensions.alpn_protocol = body[3:].decode("ascii")
        elif kind == ExtensionType.EARLY_DATA:
            if body:
                raise _Irregular
            extensions.early_data = True
        else:
            extensions.other_extensions.append((kind, body))
    return extensions


def _certificate(message: bytes) -> Certificate:
    end = _body(message)
    pos = 5 + message[4]
    certificate = Certificate(request_context=message[5:pos])
    if int.from_bytes(message[pos : pos + 3], "big") != end - pos - 3:
        raise _Irregular
    pos += 3
    while pos < end:
        length = int.from_bytes(message[pos : pos + 3], "big")
        data_end = pos + 3 + length
        extensions_end = data_end + 2 + _u16(message, data_end)
        if extensions_end > end:
            raise _Irregular
        certificate.certificates.append((message[pos + 3 : data_end], message[data_end + 2 : extensions_end]))
        pos = extensions_end
    return certificate


def _certificate_verify(message: bytes) -> CertificateVerify:
    end = _body(message)
    if _u16(message, 6) != end - 8:
        raise _Irregular
    return CertificateVerify(algorithm=_u16(message, 4), signature=message[8:end])


read_server_hello = _fast(_server_hello, pull_server_hello)
read_encrypted_extensions = _fast(_encrypted_extensions, pull_encrypted_extensions)
read_certificate = _fast(_certificate, pull_certificate)
read_certificate_verify = _fast(_certificate_verify, pull_certificate_verify)
