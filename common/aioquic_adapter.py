"""Every use of aioquic's private names, in one place, for the aioquic pinned in requirements.lock.

aioquic's public API configures a connection as a whole (QuicConfiguration); the project needs a
few things below it: packet protection built from keys it derives itself (the scanner's handshake),
each transport parameter set on its own and flow-control windows that slide instead of doubling
(the replay endpoints), transport parameters rewritten on the way out and a TLS layer replaced (the
lab's broken server), and how much a stream still holds unacknowledged (the replay server's pacing).
These names may change in any aioquic release, so every function here first checks that the
installed aioquic is the pinned one and refuses in one line otherwise; tests/test_aioquic_adapter.py
exercises each against real aioquic. Where aioquic has a public route it is taken instead (the
transport parameters a connection sent or received are TLS extensions of its public ``tls``
context).
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aioquic import tls
from aioquic.quic.connection import QuicConnection
from aioquic.quic.crypto import CryptoContext

from tparams.errors import ToolError

LOCK_FILE = Path(__file__).resolve().parents[1] / "requirements.lock"


@functools.cache
def pinned_version() -> str:
    """The aioquic version requirements.lock pins."""
    try:
        found = re.search(r"^aioquic==(\S+)", LOCK_FILE.read_text(), re.MULTILINE)
    except OSError as exc:
        raise ToolError(f"cannot read the aioquic pin in {LOCK_FILE}: {exc.strerror or exc}") from None
    if not found:
        raise ToolError(f"{LOCK_FILE} pins no aioquic version")
    return found.group(1)


@functools.cache
def require_pinned_aioquic() -> None:
    """Refuse, in one line, an aioquic other than the pinned one: its private names may differ."""
    installed = importlib.metadata.version("aioquic")
    if installed != pinned_version():
        raise ToolError(f"aioquic {installed} is installed but {pinned_version()} is pinned (requirements.lock): "
                        "the project uses aioquic internals checked for that version only; run scripts/setup.sh")


@functools.cache
def _protection_classes() -> tuple[type, type]:
    require_pinned_aioquic()
    from aioquic._crypto import AEAD, HeaderProtection  # aioquic's packet protection lives in a private module

    return AEAD, HeaderProtection


def packet_protection(cipher_suite: int, secret: bytes, version: int, key: bytes, iv: bytes, hp_key: bytes,
                      aead_cipher: bytes, hp_cipher: bytes) -> CryptoContext:
    """aioquic's packet protection (CryptoContext) for keys derived by the caller: what
    CryptoContext.setup builds, without its derivation."""
    aead, header_protection = _protection_classes()
    keys = CryptoContext()
    keys.aead = aead(aead_cipher, key, iv)
    keys.hp = header_protection(hp_cipher, hp_key)
    keys.cipher_suite = cipher_suite  # type: ignore[assignment]
    keys.secret = secret
    keys.version = version
    return keys


def _extension(extensions: list[tls.Extension] | None) -> bytes | None:
    return next((bytes(data) for kind, data in extensions or ()
                 if kind == tls.ExtensionType.QUIC_TRANSPORT_PARAMETERS), None)


def transport_parameters_sent(quic: QuicConnection) -> bytes | None:
    """The raw transport parameters ``quic`` sends (None before it has begun a handshake)."""
    return _extension(quic.tls.handshake_extensions) if hasattr(quic, "tls") else None


def transport_parameters_received(quic: QuicConnection) -> bytes | None:
    """The raw transport parameters the peer sent (None until they came)."""
    return _extension(quic.tls.received_extensions) if hasattr(quic, "tls") else None


def rewrite_transport_parameters(quic: QuicConnection, rewrite: Callable[[bytes], bytes]) -> None:
    """Pass the transport parameters ``quic`` will send through ``rewrite`` (before its handshake)."""
    require_pinned_aioquic()
    serialize = quic._serialize_transport_parameters

    def _serialize(self: QuicConnection) -> bytes:
        return rewrite(serialize())

    quic._serialize_transport_parameters = types.MethodType(_serialize, quic)  # type: ignore[method-assign]


# Transport parameters aioquic takes from its own attributes, each settable alone: whole for the
# limits aioquic keeps as numbers, .value of those it keeps as a Limit (with what has been used).
_LOCAL_NUMBERS = {"initial_max_stream_data_bidi_local": "_local_max_stream_data_bidi_local",
                  "initial_max_stream_data_bidi_remote": "_local_max_stream_data_bidi_remote",
                  "initial_max_stream_data_uni": "_local_max_stream_data_uni",
                  "ack_delay_exponent": "_local_ack_delay_exponent",
                  "active_connection_id_limit": "_local_active_connection_id_limit"}
_LOCAL_LIMITS = {"initial_max_data": "_local_max_data", "initial_max_streams_bidi": "_local_max_streams_bidi",
                 "initial_max_streams_uni": "_local_max_streams_uni"}
LOCAL_PARAMETERS = (*_LOCAL_LIMITS, *_LOCAL_NUMBERS)


def set_local_parameters(quic: QuicConnection, values: Mapping[str, int]) -> None:
    """Advertise ``values`` (names of LOCAL_PARAMETERS) and enforce them as local limits (before the handshake)."""
    require_pinned_aioquic()
    for name, value in values.items():
        if name in _LOCAL_LIMITS:
            # sent too: aioquic grants more streams (MAX_STREAMS) by what it last sent, which would otherwise
            # stay its default, 128, and never be reached by a lower limit: the peer would wait forever
            limit = getattr(quic, _LOCAL_LIMITS[name])
            limit.value = limit.sent = value
        else:
            setattr(quic, _LOCAL_NUMBERS[name], value)


def local_parameters(quic: QuicConnection) -> dict[str, int]:
    """The LOCAL_PARAMETERS as ``quic`` holds them now (its limits move as data arrives)."""
    require_pinned_aioquic()
    return {**{name: getattr(quic, attribute).value for name, attribute in _LOCAL_LIMITS.items()},
            **{name: getattr(quic, attribute) for name, attribute in _LOCAL_NUMBERS.items()}}


def pin_flow_control_windows(quic: QuicConnection) -> None:
    """Slide windows instead of doubling them: aioquic raises a limit only by doubling it once half
    is used, so the window is kept at its advertised size by moving the limit to used + window and
    hiding the 'used' figure from aioquic's doubling test while it writes its frames."""
    require_pinned_aioquic()
    connection_window = quic._local_max_data.value
    write_connection_limits, write_stream_limits = quic._write_connection_limits, quic._write_stream_limits

    def _connection(self: QuicConnection, builder: Any, space: Any) -> None:
        limit = self._local_max_data
        limit.value = max(limit.value, limit.used + connection_window)
        used, limit.used = limit.used, 0
        try:
            write_connection_limits(builder, space)
        finally:
            limit.used = used

    def _stream(self: QuicConnection, builder: Any, space: Any, stream: Any) -> None:
        window = getattr(stream, "qreplay_window", None)
        if window is None:
            window = stream.qreplay_window = stream.max_stream_data_local
        if window:
            received = stream.receiver.highest_offset
            stream.max_stream_data_local = max(stream.max_stream_data_local, received + window)
            stream.receiver.highest_offset = 0
            try:
                write_stream_limits(builder, space, stream)
            finally:
                stream.receiver.highest_offset = received
        else:
            write_stream_limits(builder, space, stream)

    quic._write_connection_limits = types.MethodType(_connection, quic)  # type: ignore[method-assign]
    quic._write_stream_limits = types.MethodType(_stream, quic)  # type: ignore[method-assign]


def unacknowledged_bytes(quic: QuicConnection, stream_id: int) -> int:
    """Bytes of the stream's data its peer has not acknowledged yet (sent or not)."""
    require_pinned_aioquic()
    return len(quic._streams[stream_id].sender._buffer)


def replace_tls(quic: QuicConnection, handle_message: Callable[[bytes, dict[tls.Epoch, tls.Buffer]], None]) -> None:
    """Keep aioquic's QUIC (packets, ACKs, retransmissions) but answer TLS messages with
    ``handle_message`` (what tls.Context.handle_message takes) once the connection has begun."""
    require_pinned_aioquic()
    initialize = quic._initialize

    def _initialize(self: QuicConnection, peer_cid: bytes) -> None:
        initialize(peer_cid)
        self.tls.handle_message = handle_message  # type: ignore[method-assign]

    quic._initialize = types.MethodType(_initialize, quic)  # type: ignore[method-assign]
