"""ClientHellos (and, with a key log, the server's EncryptedExtensions) from a capture.

Connections are told apart by the client's first Destination Connection ID
(the Initial keys derive from it) and the UDP flow; a client's later
Initials carry the server's chosen DCID but keep the original keys, so the
flow finds them. Every complete ClientHello becomes one record, so a client
that retries on a new port, after a Retry or in another version after Version
Negotiation counts again: that is what it sent.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from zlib import crc32
from pathlib import Path

from aioquic.quic.crypto import CryptoContext
from aioquic.quic.packet import QuicPacketType, QuicProtocolVersion
from aioquic.tls import CipherSuite

from common.pcap import Damage
from qscan_native import open_client_initial  # built by scripts/setup.sh (packets, imported above, says so if not)
from scanner.capture.frontend import CaptureDatagrams, Datagram
from scanner.handshake.hello import TRANSPORT_PARAMETERS_EXTENSIONS, parse_client_hello
from scanner.handshake.messages import read_encrypted_extensions, read_server_hello
from scanner.handshake.packets import (
    GREASED_INITIAL_KEYS,
    INITIAL_FORMATS,
    CryptoStream,
    InitialFormat,
    LongPacket,
    as_version_1_initial,
    initial_keys,
    long_packets,
    packet_keys,
    unprotect,
)
from tparams.codec import DecodedParameters, decode_transport_parameters
from tparams.errors import ToolError
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet
from tparams.registry import id_for

_USER_AGENT_ID = id_for("user_agent")
_RFC_NAMES = {QuicProtocolVersion.VERSION_1: "v1", QuicProtocolVersion.VERSION_2: "v2"}

Flow = tuple[str, int, str, int]


@dataclass
class ClientHelloRecord:
    """One ClientHello as the client sent it, with where and when it was seen."""

    hello_id: int
    first_frame: int  # the first packet that carried part of it
    frame: int  # the packet that completed it
    time: float
    src_ip: str
    src_port: int
    dst_ip: str
    dst_port: int
    quic_version: int
    original_dcid: bytes
    sni: str | None
    alpn: tuple[str, ...]
    transport_parameters: DecodedParameters
    client: str | None  # a label given by the caller, else Google's user_agent parameter
    server_transport_parameters: DecodedParameters | None = None
    sixteen_bit: bool = False  # the extensions' framing before draft-27 (16-bit ids and lengths)

    @property
    def parameter_set(self) -> ParamSet:
        """The twelve as sent: the summary and a set file ask for them."""
        return _param_set(self.transport_parameters, self.sixteen_bit)[0]

    @property
    def set_fingerprint(self) -> str:
        return _param_set(self.transport_parameters, self.sixteen_bit)[1]


def _param_set(decoded: DecodedParameters, sixteen_bit: bool) -> tuple[ParamSet, str]:
    """The ParamSet of ``decoded`` (the client extension that ``_client_parameters`` decoded in the given
    framing) and its fingerprint, built once per distinct twelve: a big capture holds few sets among many
    ClientHellos (a client sends the same values to every server), and building and hashing one cost a tenth
    of qscan pcap's time. Looked up first by the extension's bytes, which repeat whenever ``_client_parameters``'
    cache held them: then the twelve are not picked out of the parameters again for each ClientHello's tally."""
    extension = (sixteen_bit, decoded.raw)
    found = _SETS_BY_EXTENSION.get(extension)
    if found is not None:
        return found
    key = tuple([(p.id, p.value) for p in decoded.parameters if p.id in _PERFORMANCE_IDS])
    found = _SETS.get(key)
    if found is None:
        if len(_SETS) >= 65536:
            _SETS.clear()
        param_set = ParamSet.from_decoded(decoded)
        found = _SETS[key] = (param_set, param_set.fingerprint())
    if len(_SETS_BY_EXTENSION) >= 4096:  # as many as _client_parameters keeps
        _SETS_BY_EXTENSION.clear()
    _SETS_BY_EXTENSION[extension] = found
    return found


_SETS: dict[tuple, tuple[ParamSet, str]] = {}
_SETS_BY_EXTENSION: dict[tuple[bool, bytes], tuple[ParamSet, str]] = {}


@lru_cache(maxsize=4096)  # a few MB: a capture of fresh IDs must not grow it
def _client_parameters(raw: bytes, sixteen_bit: bool) -> tuple[DecodedParameters, str | None]:
    """A ClientHello's transport parameters decoded, with Google's user_agent among them, once per distinct
    extension: decoding is a pure function of the bytes and its result immutable, and a client that keeps its
    source connection ID empty or fixed and sends no random GREASE parameter sends the same bytes to every
    server. Decoding was a quarter of qscan pcap's time on such a capture; with a fresh ID in every
    ClientHello nothing repeats and each is decoded as before."""
    decoded = decode_transport_parameters(raw, "client", sixteen_bit)
    user_agent = next((p.raw for p in decoded.parameters if p.id == _USER_AGENT_ID), None)
    return decoded, user_agent.decode(errors="replace") if user_agent else None


def _open_client_initial(packet: LongPacket, dcid: bytes, key_version: int, expected_packet_number: int = 0) -> tuple[int, bytes] | None:
    """(packet number, payload) of a client Initial opened with the Initial keys ``dcid`` derives in
    ``key_version``, None when they do not open it. Compiled (scanner/native/src/initial.rs): deriving the keys and
    opening with aioquic's CryptoContext (packets.initial_keys and unprotect, which the scanner's handshake and
    the key log's server side keep using, as they also seal or take other cipher suites) cost a sixth of
    qscan pcap's time, since every ClientHello of a capture of many clients needs keys of its own."""
    return open_client_initial(packet.data, packet.pn_offset, dcid, INITIAL_FORMATS[key_version].salt,
                               key_version == QuicProtocolVersion.VERSION_2, expected_packet_number)


_PERFORMANCE_IDS = frozenset(id_for(name) for name in PERFORMANCE_PARAMETERS)


@dataclass
class CaptureSummary:
    datagrams: int = 0
    initial_packets: int = 0  # client Initials opened with Initial keys
    # Initials of versions with known keys that no key derived from the capture opens, by version
    unopened_initials: Counter[int] = field(default_factory=Counter)
    # long-header packets of versions without known Initial keys (Google's Q046/Q050, greased or
    # unknown versions that v1's keys do not open either), by version
    other_versions: Counter[int] = field(default_factory=Counter)
    version_negotiation: int = 0  # Version Negotiation packets (servers' answers; no ClientHello in them)
    bad_client_hellos: int = 0  # complete CRYPTO messages that are no parseable ClientHello

    def add(self, other: "CaptureSummary") -> None:
        """Count in what another worker saw of the same capture."""
        self.datagrams += other.datagrams
        self.initial_packets += other.initial_packets
        self.unopened_initials.update(other.unopened_initials)
        self.other_versions.update(other.other_versions)
        self.version_negotiation += other.version_negotiation
        self.bad_client_hellos += other.bad_client_hellos

    def left_out(self) -> str:
        """What the capture holds that yields no ClientHello, for the line that says none was found."""
        return (
            f"{self.initial_packets} client Initials opened, {self.unopened_initials.total()} not"
            + _by_version(self.unopened_initials)
            + f", {self.other_versions.total()} packets of other versions"
            + _by_version(self.other_versions)
            + f", {self.version_negotiation} Version Negotiation"
        )


def _by_version(counts: Counter[int]) -> str:
    """' (Q050 2, T051 1)': the five most frequent versions, for the summary line."""
    if not counts:
        return ""
    versions = ", ".join(f"{version_name(v)} {n}" for v, n in counts.most_common(5))
    return f" ({versions}{', ...' if len(counts) > 5 else ''})"


def version_name(version: int) -> str:
    """A QUIC version as people write it: v1, v2, draft-29 (0xff00001d), Q050 (Google's are four ASCII characters), else hex."""
    if version in _RFC_NAMES:
        return _RFC_NAMES[version]
    if version >> 8 == 0xFF0000:
        return f"draft-{version & 0xFF}"
    text = version.to_bytes(4, "big")
    if text[:1] in (b"Q", b"T") and text[1:].isdigit():
        return text.decode()
    return f"0x{version:08x}"


@dataclass
class CaptureResult:
    hellos: list[ClientHelloRecord]
    summary: CaptureSummary
    damage: Damage | None = None  # where a damaged or cut-short capture stopped being read


@dataclass
class _Connection:
    flow: Flow
    version: int
    format: InitialFormat  # the version's, or for a greased version that of the keys that opened its Initial
    original_dcid: bytes
    # The version whose Initial keys, derived from original_dcid, open its client Initials; None once the
    # ClientHello was handed over (no key log)
    key_version: int | None
    first_frame: int
    client_initial: CryptoStream | None = field(default_factory=CryptoStream)  # None once parsed
    largest_client_pn: int = 0
    record: ClientHelloRecord | None = None
    # server side, only followed with a key log (allocated then: a capture of many clients holds many connections)
    server_keys: CryptoContext | None = None
    server_initial: CryptoStream | None = None
    handshake_secret: bytes | None = None  # SERVER_HANDSHAKE_TRAFFIC_SECRET from the key log
    cipher_suite: CipherSuite | None = None
    handshake_keys: CryptoContext | None = None
    server_handshake: CryptoStream | None = None
    pending_handshake: list[LongPacket] | None = None
    done_server: bool = False
    keys_held: int = 0  # entries of HelloExtractor._by_dcid that lead here


def read_keylog(path: Path | str) -> dict[bytes, bytes]:
    """SERVER_HANDSHAKE_TRAFFIC_SECRET by client random, from an NSS key log (SSLKEYLOGFILE)."""
    secrets: dict[bytes, bytes] = {}
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError as exc:
        raise ToolError(f"cannot read key log {path}: {exc.strerror}") from exc
    # Lines damaged (a log cut mid-line, edited by hand) are skipped but counted: a connection whose secret
    # was on one is left unopened, and the warning says why before anyone wonders.
    malformed: list[int] = []
    for number, line in enumerate(lines, 1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):  # blank lines and comments, as NSS allows
            continue
        try:
            random, secret = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
            if len(parts) != 3 or len(random) != 32 or not secret:
                raise ValueError
        except (IndexError, ValueError):
            malformed.append(number)
            continue
        if parts[0] == "SERVER_HANDSHAKE_TRAFFIC_SECRET":
            secrets[random] = secret
    if malformed:
        print(f"qscan: warning: key log {path}: {len(malformed):,} malformed line(s) skipped (the first: line "
              f"{malformed[0]:,})", file=sys.stderr)
    if not secrets:
        raise ToolError(f"key log {path} has no SERVER_HANDSHAKE_TRAFFIC_SECRET line")
    return secrets


# Connections followed at once. Past this the one whose client was heard from longest ago is forgotten, so
# a capture of any length takes bounded memory (about 2 KB a connection): a client Initial of a forgotten
# connection would count as a new one, which takes this many newer connections in between.
MAX_CONNECTIONS = 100_000


class HelloExtractor:
    """Feed datagrams in capture order; ``take`` hands over the records of complete ClientHellos.

    Without a key log a record is ready as soon as its ClientHello is complete; with one it waits for
    ``finish`` (the end of the capture), since the server's EncryptedExtensions may come in any later packet.
    """

    def __init__(self, keylog: dict[bytes, bytes] | None = None, client: str | None = None):
        self._keylog = keylog
        self._client = client
        # by (flow, DCID), least recently used first
        # An OrderedDict, not a dict: forgetting the oldest of a dict (next(iter(...))) walks the holes its
        # earlier deletions left at the front: with this table's pattern (two packets a connection, 300,000
        # connections past the 100,000 limit) 11 us a connection against 0.6 us here (docs/benchmarks.md).
        self._by_dcid: OrderedDict[tuple[Flow, bytes], _Connection] = OrderedDict()
        self._by_flow: dict[Flow, _Connection] = {}  # the latest connection whose client sends on the flow
        self._ready: list[ClientHelloRecord] = []
        self._count = 0
        self.summary = CaptureSummary()

    def take(self) -> list[ClientHelloRecord]:
        """The records ready since the last call, in the order their ClientHellos completed."""
        if self._keylog is not None:
            return []
        ready, self._ready = self._ready, []
        return ready

    def finish(self) -> list[ClientHelloRecord]:
        """Every record not yet taken: call once the capture has been fed."""
        ready, self._ready = self._ready, []
        return ready

    def _remember(self, key: tuple[Flow, bytes], connection: _Connection) -> None:
        """Map ``key`` to ``connection`` as the most recently used; forget the least recent past MAX_CONNECTIONS."""
        by_dcid = self._by_dcid
        previous = by_dcid.pop(key, None)
        if previous is not connection:
            if previous is not None:
                previous.keys_held -= 1
            connection.keys_held += 1
        by_dcid[key] = connection
        while len(by_dcid) > MAX_CONNECTIONS:
            _, gone = by_dcid.popitem(last=False)
            gone.keys_held -= 1
            if not gone.keys_held and self._by_flow.get(gone.flow) is gone:
                del self._by_flow[gone.flow]

    def feed(self, datagram: Datagram) -> None:
        self.summary.datagrams += 1
        flow = (datagram.src_ip, datagram.src_port, datagram.dst_ip, datagram.dst_port)
        reverse = (datagram.dst_ip, datagram.dst_port, datagram.src_ip, datagram.src_port)
        for packet in long_packets(datagram.payload):
            if packet.packet_type == QuicPacketType.VERSION_NEGOTIATION:
                self.summary.version_negotiation += 1
                continue
            if packet.version not in INITIAL_FORMATS:
                guess = as_version_1_initial(packet)
                if guess is None or not any(self._client_initial(flow, guess, datagram, v) for v in GREASED_INITIAL_KEYS):
                    self.summary.other_versions[packet.version] += 1
                continue
            server_side = self._by_flow.get(reverse) if flow not in self._by_flow else None
            if server_side is not None:
                if self._keylog is not None:
                    self._server_packet(server_side, packet)
            elif packet.packet_type == QuicPacketType.INITIAL:
                if not self._client_initial(flow, packet, datagram, packet.version):
                    self.summary.unopened_initials[packet.version] += 1

    def _client_initial(self, flow: Flow, packet: LongPacket, datagram: Datagram, key_version: int) -> bool:
        """Open a client Initial with the keys of ``key_version``; False when they do not open it."""
        key = (flow, packet.dcid)
        connection = self._by_dcid.get(key) or self._by_flow.get(flow)
        if connection is not None and connection.version != packet.version:
            connection = None  # after Version Negotiation: a new attempt, with a ClientHello of its own
        if connection is not None and connection.key_version is None:
            # Its ClientHello was handed over: on its flow, an Initial that is not a new connection's is one of
            # its own.
            if key not in self._by_dcid:
                opened = _open_client_initial(packet, packet.dcid, key_version)
                if opened is not None:
                    return self._opened(flow, packet, datagram, key_version, opened)
            self._remember(key, connection)
            self.summary.initial_packets += 1
            return True
        opened = (_open_client_initial(packet, connection.original_dcid, connection.key_version, connection.largest_client_pn)
                  if connection else None)
        if opened is None:
            opened = _open_client_initial(packet, packet.dcid, key_version)
            if opened is None:
                return False
            return self._opened(flow, packet, datagram, key_version, opened)
        assert connection is not None
        return self._add(connection, key, opened, datagram)

    def _opened(self, flow: Flow, packet: LongPacket, datagram: Datagram, key_version: int, opened: tuple[int, bytes]) -> bool:
        """A client Initial that the keys of its own DCID opened: a new connection."""
        connection = _Connection(flow, packet.version, INITIAL_FORMATS[key_version], packet.dcid, key_version, datagram.frame)
        self._by_flow[flow] = connection
        return self._add(connection, (flow, packet.dcid), opened, datagram)

    def _add(self, connection: _Connection, key: tuple[Flow, bytes], opened: tuple[int, bytes], datagram: Datagram) -> bool:
        """An opened client Initial of ``connection``: its CRYPTO frames, and the ClientHello once complete."""
        self._remember(key, connection)
        self.summary.initial_packets += 1
        packet_number, payload = opened
        connection.largest_client_pn = max(connection.largest_client_pn, packet_number)
        if connection.record is not None:
            return True
        assert connection.client_initial is not None
        message = connection.client_initial.add_frames(payload, connection.format.google_frames)
        if message is not None:
            self._client_hello(connection, message, datagram)
        return True

    def _client_hello(self, connection: _Connection, message: bytes, datagram: Datagram) -> None:
        connection.client_initial = None  # retransmissions are ignored from now on; free the bytes
        try:
            hello = parse_client_hello(message)
        except ValueError:
            self.summary.bad_client_hellos += 1
            connection.record = _UNPARSEABLE
            return
        decoded, user_agent = _client_parameters(bytes(hello.transport_parameters), connection.format.sixteen_bit_parameters)
        src_ip, src_port, dst_ip, dst_port = connection.flow
        self._count += 1
        connection.record = ClientHelloRecord(
            hello_id=self._count,
            first_frame=connection.first_frame,
            frame=datagram.frame,
            time=datagram.time,
            src_ip=src_ip,
            src_port=src_port,
            dst_ip=dst_ip,
            dst_port=dst_port,
            quic_version=connection.version,
            original_dcid=connection.original_dcid,
            sni=hello.sni,
            alpn=hello.alpn,
            transport_parameters=decoded,
            client=self._client or user_agent,
            sixteen_bit=connection.format.sixteen_bit_parameters,
        )
        self._ready.append(connection.record)
        if self._keylog is None:
            # The caller holds the record now; the connection only has to recognise its retransmissions.
            connection.record, connection.key_version = _TAKEN, None
        else:
            connection.handshake_secret = self._keylog.get(hello.random)
            connection.server_initial, connection.server_handshake, connection.pending_handshake = CryptoStream(), CryptoStream(), []

    def _server_packet(self, connection: _Connection, packet: LongPacket) -> None:
        """Follow the server far enough to read its EncryptedExtensions (key log only)."""
        if connection.done_server or connection.record is None or connection.record is _UNPARSEABLE:
            return
        assert connection.server_initial is not None and connection.server_handshake is not None and connection.pending_handshake is not None
        if packet.packet_type == QuicPacketType.INITIAL and connection.cipher_suite is None:
            if connection.server_keys is None:
                # The packet's version, not the ClientHello's: a server may switch to another
                # version by compatible version negotiation (RFC 9368), as LSQUIC does from v1 to v2.
                connection.server_keys = initial_keys(connection.original_dcid, packet.version, of_client=False)
            opened = unprotect(packet, connection.server_keys)
            message = connection.server_initial.add_frames(opened[1], connection.format.google_frames) if opened else None
            if message is None:
                return
            try:
                connection.cipher_suite = read_server_hello(message).cipher_suite
            except Exception:  # a malformed ServerHello ends the server side, not the capture
                connection.done_server = True
                return
            secret = connection.handshake_secret
            if secret is None:
                connection.done_server = True
                return
            connection.handshake_keys = packet_keys(connection.cipher_suite, secret, packet.version)
            pending, connection.pending_handshake = connection.pending_handshake, []
            for early in pending:
                self._server_handshake(connection, early)
        elif packet.packet_type == QuicPacketType.HANDSHAKE:
            if connection.handshake_keys is None:
                connection.pending_handshake.append(packet)
            else:
                self._server_handshake(connection, packet)

    def _server_handshake(self, connection: _Connection, packet: LongPacket) -> None:
        assert connection.handshake_keys is not None and connection.record is not None and connection.server_handshake is not None
        opened = unprotect(packet, connection.handshake_keys)
        message = connection.server_handshake.add_frames(opened[1], connection.format.google_frames) if opened else None
        if message is None:
            return
        connection.done_server = True
        try:
            extensions = dict(read_encrypted_extensions(message).other_extensions)
        except Exception:  # not an EncryptedExtensions: nothing to report for this server
            return
        raw = next((extensions[e] for e in TRANSPORT_PARAMETERS_EXTENSIONS if e in extensions), None)
        if raw is not None:
            connection.record.server_transport_parameters = decode_transport_parameters(
                raw, "server", connection.format.sixteen_bit_parameters
            )


# Mark a connection whose ClientHello did not parse, so that retransmissions are not parsed again, and one
# whose record was handed over (without a key log nothing is added to it later).
_UNPARSEABLE = ClientHelloRecord(0, 0, 0, 0.0, "", 0, "", 0, 0, b"", None, (), decode_transport_parameters(b""), None)
_TAKEN = ClientHelloRecord(0, 0, 0, 0.0, "", 0, "", 0, 0, b"", None, (), decode_transport_parameters(b""), None)


def shard_of(datagram: Datagram, shards: int) -> int:
    """Which of ``shards`` workers reads this datagram's connection: the same for both directions of a UDP
    flow, and the same in every process (Python's own str hash is salted per process)."""
    ends = crc32(datagram.src_ip.encode()) ^ crc32(datagram.dst_ip.encode()) ^ datagram.src_port ^ datagram.dst_port
    return ends % shards


@contextlib.contextmanager
def collecting_for_capture() -> Iterator[None]:
    """Python's cycle collector as reading a capture wants it (qscan pcap's process and each of its workers),
    restored after. Its first generation every 50,000 allocations rather than 700: a ClientHello leaves a few
    dozen small objects (its connection, record, packets), and collecting them that often cost a tenth of the
    extraction (2026-11-28 15:35, 300 MB capture); cycles are still collected, later. The reading loop also
    calls gc.freeze() after each batch (the connections followed live on for many batches, and the collector
    walked all of them again and again: a quarter of the time on bench_pcap's capture); unfrozen here at the
    end, as frozen objects outlive the interpreter and DuckDB's bindings complain of leaks."""
    threshold = gc.get_threshold()
    gc.set_threshold(50_000, *threshold[1:])
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


class CaptureScan:
    """The ClientHellos of a capture, read as a stream: ``batches`` yields their records in capture order,
    a few thousand at a time, so a capture of any size takes bounded memory; ``summary`` counts what was
    seen so far, ``datagrams.offset`` how far the file has been read, and after the last batch
    ``datagrams.damage`` says where a damaged or cut-short file stopped being read. With ``shard`` =
    (index, count) only the connections ``shard_of`` gives to ``index`` are followed (one worker's share)."""

    def __init__(
        self, path: Path | str, keylog: Path | str | None = None, client: str | None = None, ports: tuple[int, ...] = (),
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        secrets = read_keylog(keylog) if keylog is not None else None
        self.path = Path(path)
        self.datagrams = CaptureDatagrams(path, ports)
        self._extractor = HelloExtractor(secrets, client)
        self.summary = self._extractor.summary
        self._shard = shard

    def batches(self, size: int = 5_000) -> Iterator[list[ClientHelloRecord]]:
        """Lists of records, one every ``size`` long-header datagrams read (empty when none completed then,
        so that a worker's progress is heard of), and the rest at the end."""
        extractor = self._extractor
        feed, take = extractor.feed, extractor.take
        index, shards = self._shard
        for count, datagram in enumerate(self.datagrams, 1):
            if shards == 1 or shard_of(datagram, shards) == index:
                feed(datagram)
            if not count % size:
                yield take()
        yield extractor.finish()

    def nothing_found(self) -> ToolError:
        return nothing_found(self.path, self.summary, self.datagrams.damage)


def nothing_found(path: Path, summary: CaptureSummary, damage: Damage | None) -> ToolError:
    """The error for a capture that held no complete ClientHello, saying what it held instead."""
    cut = f" before the file's damage ({damage})" if damage is not None else ""
    if summary.datagrams == 0:
        return ToolError(f"{path}: no QUIC long-header packets in this capture{cut}")
    return ToolError(
        f"{path}: no complete QUIC ClientHello among {summary.datagrams} long-header datagrams{cut} ({summary.left_out()})"
    )


def read_capture(
    path: Path | str,
    keylog: Path | str | None = None,
    client: str | None = None,
    ports: tuple[int, ...] = (),
) -> CaptureResult:
    """Every ClientHello in a pcap/pcapng file, held in memory (for small captures: a browser's run, a test
    vector; CaptureScan streams big ones). A damaged or cut-short file gives what came before the damage,
    which ``damage`` names; ToolError when there is no ClientHello before it or the file is no capture."""
    scan = CaptureScan(path, keylog, client, ports)
    hellos = [hello for batch in scan.batches() for hello in batch]
    if not hellos:
        raise scan.nothing_found()
    return CaptureResult(hellos, scan.summary, scan.datagrams.damage)
