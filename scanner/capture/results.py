"""Extracted ClientHellos into the scan store and into replayable set files."""

from __future__ import annotations

import operator
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from scanner.browser import BrowserCapture
from scanner.capture.extract import CaptureResult, ClientHelloRecord
from common.tshark import tshark_version
from scanner.columns import LONG_FORM_FIELDS, TIMESTAMP, TRANSPORT_PARAMETER_FIELDS, extension_columns, pause_gc
from scanner.store import SCHEMA_DIR, ScanStore
from tparams.codec import DecodedParameters, encode_transport_parameters
from tparams.errors import ToolError
from tparams.paramset import PERFORMANCE_PARAMETERS
from tparams.registry import ParamType, spec_for
from tparams.setfile import document_for

CAPTURE_SCHEMA = ("capture", 2, SCHEMA_DIR / "capture_v2.sql")
# ClientHellos stored in one transaction by CaptureWriter.add, rather than every CaptureScan batch (a few thousand):
# fewer, larger DuckDB appends (a whole row group of client_hello_parameters or more each; DuckDB can write such an
# append to the file directly instead of to its WAL first), and hellos_to_arrow's per-call numpy steps paid once for
# all. On a 300 MB capture of 176,118 ClientHellos (2026-11-28 13:29, load 1.4-1.7): 6.0-6.3 s CPU against 7.1 s
# storing each batch as it came.
STORE_BATCH = 16_384
HELLO_SCHEMA = pa.schema(
    [
        ("scan_id", pa.int32()),
        ("hello_id", pa.int64()),
        ("capture_file", pa.string()),
        ("first_frame", pa.int32()),
        ("frame", pa.int32()),
        ("seen_at", TIMESTAMP),
        ("src_ip", pa.string()),
        ("src_port", pa.int32()),
        ("dst_ip", pa.string()),
        ("dst_port", pa.int32()),
        ("original_dcid", pa.binary()),
        ("quic_version", pa.int64()),
        ("sni", pa.string()),
        ("alpn", pa.list_(pa.string())),
        ("client", pa.string()),
        *TRANSPORT_PARAMETER_FIELDS,
        ("server_transport_parameters_raw", pa.binary()),
    ]
)
PARAMETER_SCHEMA = pa.schema([("hello_id", pa.int64()), ("sender", pa.string()), *LONG_FORM_FIELDS])
# Parameters that name one connection (its ids, its reset token): copying them into a
# set would replay another connection's identity, so set files leave them out.
_CONNECTION_SPECIFIC = (ParamType.CONNECTION_ID, ParamType.STATELESS_RESET_TOKEN, ParamType.PREFERRED_ADDRESS)


def open_store(path: Path | str) -> ScanStore:
    store = ScanStore.open(path)
    store.apply_schema(CAPTURE_SCHEMA[0], CAPTURE_SCHEMA[1], CAPTURE_SCHEMA[2].read_text())
    return store


class CaptureWriter:
    """ClientHellos appended to a scan store batch by batch, as one scan: the store is opened and the scan
    begun with the first batch (a capture without a ClientHello leaves no file), each batch is one
    transaction committed on the store's writer thread while the next is read, and the scan is finished on
    ``close``. ``add`` holds records back until STORE_BATCH of them make one batch (``close`` stores the rest)."""

    def __init__(self, out: Path | str, capture_file: Path | str, kind: str, settings: Mapping[str, Any], command_line: str | None = None):
        self._out = out
        self._store: ScanStore | None = None
        if Path(out).exists():
            open_store(out).close()  # a foreign or newer file is refused before a big capture is read, not after
        self._capture_file = str(capture_file)
        self._begin = (kind, settings, command_line)
        self.scan_id: int | None = None
        self._next_id = 0
        self.hello_ids: list[int] = []  # (first, last + 1) once anything was stored
        self._held: list[ClientHelloRecord] = []

    def add(self, hellos: list[ClientHelloRecord]) -> None:
        self._held.extend(hellos)
        if len(self._held) >= STORE_BATCH:
            self._store_held()

    def _store_held(self) -> None:
        if not self._held:
            return
        held, self._held = self._held, []
        self.add_tables(*hellos_to_arrow(self._capture_file, held))

    def add_tables(self, hellos: pa.Table, parameters: pa.Table) -> None:
        """Store ``hellos_to_arrow``'s tables (of one process or several): numbered in frame order, after
        every ClientHello the file holds."""
        if not hellos.num_rows:
            return
        if self._store is None:
            self._store = open_store(self._out)
            self.scan_id = self._store.begin_scan(*self._begin)
            self._next_id = self._store.con.execute("SELECT coalesce(max(hello_id), 0) + 1 FROM client_hellos").fetchone()[0]
            self.hello_ids = [self._next_id, self._next_id]
        hellos = hellos.sort_by("frame")
        frames = hellos.column("frame")
        ids = pa.array(range(self._next_id, self._next_id + hellos.num_rows), pa.int64())
        hellos = hellos.set_column(hellos.schema.get_field_index("hello_id"), "hello_id", ids)
        hellos = hellos.set_column(hellos.schema.get_field_index("scan_id"), "scan_id", pa.array([self.scan_id] * hellos.num_rows, pa.int32()))
        # a parameter row's hello_id is its ClientHello's frame until here
        at = pc.index_in(parameters.column("hello_id").cast(pa.int32()), value_set=frames)
        parameters = parameters.set_column(0, "hello_id", pc.add(at.cast(pa.int64()), self._next_id))
        self._store.append_queued({"client_hellos": hellos, "client_hello_parameters": parameters}, "client_hello_parameters")
        self._next_id += hellos.num_rows
        self.hello_ids[1] = self._next_id

    def close(self) -> None:
        try:
            self._store_held()  # also after an error or Ctrl-C: complete ClientHellos read are kept
        finally:
            self._finish()

    def _finish(self) -> None:
        if self._store is None:
            return
        try:
            assert self.scan_id is not None
            self._store.finish_scan(self.scan_id)
        finally:
            self._store.close()

    def __enter__(self) -> "CaptureWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def store_capture(
    out: Path | str, result: CaptureResult, capture_file: Path | str, kind: str, settings: Mapping[str, Any], command_line: str | None = None
) -> tuple[int, list[int]]:
    """Append every ClientHello of ``result`` as one batch; (scan_id, hello_ids)."""
    with CaptureWriter(out, capture_file, kind, settings, command_line) as writer:
        writer.add(result.hellos)
    assert writer.scan_id is not None
    return writer.scan_id, list(range(*writer.hello_ids))


def hellos_to_arrow(capture_file: str, hellos: list[ClientHelloRecord]) -> tuple[pa.Table, pa.Table]:
    """The store's rows of ``hellos`` (a worker builds them; ``CaptureWriter.add_tables`` stores them): until
    they are stored, hello_id is the ClientHello's frame, unique in a capture (a datagram belongs to one
    connection and completes at most its one ClientHello), and scan_id is 0. Built a column at a time by
    the scan's own ``extension_columns``: a Python object per parameter row cost a third of qscan pcap."""
    if not hellos:
        return HELLO_SCHEMA.empty_table(), PARAMETER_SCHEMA.empty_table()
    with pause_gc():
        columns: dict[str, Any] = dict(zip(_HELLO_FIELDS, zip(*map(_HELLO_SCALARS, hellos))))
        frames = pa.array(columns["frame"], pa.int32())
        columns["frame"] = frames
        columns["hello_id"] = frames.cast(pa.int64())
        columns["scan_id"] = pa.repeat(pa.scalar(0, pa.int32()), len(hellos))  # type: ignore[attr-defined]
        columns["capture_file"] = pa.repeat(pa.scalar(capture_file), len(hellos))  # type: ignore[attr-defined]
        micros = np.round(np.array(columns.pop("time"), np.float64) * 1_000_000).astype(np.int64)
        columns["seen_at"] = pa.array(micros).view(TIMESTAMP)
        columns["alpn"] = [list(alpn) for alpn in columns["alpn"]]
        client, derived = extension_columns([_varint_framed(h.transport_parameters, h.sixteen_bit) for h in hellos])
        columns.update((name, derived[name]) for name in _EXTENSION_COLUMNS)
        columns["transport_parameters_raw"] = [h.transport_parameters.raw for h in hellos]
        server = [h.server_transport_parameters for h in hellos]
        columns["server_transport_parameters_raw"] = [None if s is None else s.raw for s in server]
        parameters = [_parameter_rows(frames, "client", client)]
        if any(s is not None for s in server):  # a key log's servers: their rows beside their clients'
            framed = [None if s is None else _varint_framed(s, h.sixteen_bit) for s, h in zip(server, hellos)]
            parameters.append(_parameter_rows(frames, "server", extension_columns(framed)[0]))
        return pa.Table.from_pydict(columns, schema=HELLO_SCHEMA), _in_store_order(parameters)


def _in_store_order(parameters: list[pa.Table]) -> pa.Table:
    """Parameter rows by ClientHello, sender and position. The clients' rows alone (no key log) come in
    that order already when the batch's ClientHellos do (``extension_columns`` gives them record by record),
    else are sorted by their two integer keys in numpy: pyarrow's sort on three keys, a string among them,
    was 3% of qscan pcap's time (2026-11-28 15:30)."""
    if len(parameters) > 1:
        return pa.concat_tables(parameters).sort_by([("hello_id", "ascending"), ("sender", "ascending"), ("position", "ascending")])
    (table,) = parameters
    hello_ids, positions = table.column("hello_id").to_numpy(), table.column("position").to_numpy()
    later = hello_ids[1:] > hello_ids[:-1]
    if (later | ((hello_ids[1:] == hello_ids[:-1]) & (positions[1:] > positions[:-1]))).all():
        return table
    return table.take(np.lexsort((positions, hello_ids)))


def _varint_framed(decoded: DecodedParameters, sixteen_bit: bool) -> DecodedParameters:
    """``decoded`` with its parameters framed as since draft-27, which ``extension_columns`` reads its rows
    from (the stored transport_parameters_raw stays as sent)."""
    if not sixteen_bit:
        return decoded
    return DecodedParameters(encode_transport_parameters(decoded.pairs()), decoded.parameters, decoded.findings)


def _parameter_rows(frames: pa.Array, sender: str, long_form: list[pa.Array]) -> pa.Table:
    """``extension_columns``' long form as client_hello_parameters rows, each numbered by its hello's frame."""
    record, *fields = long_form
    hello_ids = frames.take(record).cast(pa.int64())
    senders = pa.repeat(pa.scalar(sender), len(record))  # type: ignore[attr-defined]
    return pa.Table.from_arrays([hello_ids, senders, *fields], schema=PARAMETER_SCHEMA)


_HELLO_FIELDS = ("first_frame", "frame", "time", "src_ip", "src_port", "dst_ip", "dst_port", "original_dcid", "quic_version",
                 "sni", "alpn", "client")
_HELLO_SCALARS = operator.attrgetter(*_HELLO_FIELDS)
_EXTENSION_COLUMNS = [name for name, _ in TRANSPORT_PARAMETER_FIELDS if name != "transport_parameters_raw"]


@dataclass
class HelloTally:
    """What a stream of ClientHellos held, in memory that does not grow with their number: how many of
    each parameter set (and the first ClientHello of each) and of each version, the first ``keep``
    ClientHellos, and the one numbered ``wanted``. (Not how many clients: that grows with the capture.)"""

    keep: int = 20
    wanted: int | None = None
    count: int = 0
    first: list[ClientHelloRecord] = field(default_factory=list)
    sets: Counter[str] = field(default_factory=Counter)
    first_of_set: dict[str, ClientHelloRecord] = field(default_factory=dict)
    versions: Counter[int] = field(default_factory=Counter)
    wanted_hello: ClientHelloRecord | None = None

    def merge(self, other: "HelloTally") -> None:
        """Count in another worker's tally of the same capture (its ClientHellos numbered by frame order
        again: each worker numbers only its own)."""
        self.count += other.count
        self.sets.update(other.sets)
        self.versions.update(other.versions)
        for fingerprint, hello in other.first_of_set.items():
            if fingerprint not in self.first_of_set or hello.frame < self.first_of_set[fingerprint].frame:
                self.first_of_set[fingerprint] = hello
        self.first = sorted(self.first + other.first, key=lambda hello: hello.frame)[: self.keep]
        for number, hello in enumerate(self.first, 1):
            hello.hello_id = number

    def add(self, hellos: list[ClientHelloRecord]) -> None:
        for hello in hellos:
            fingerprint = hello.set_fingerprint
            self.sets[fingerprint] += 1
            self.first_of_set.setdefault(fingerprint, hello)
            self.versions[hello.quic_version] += 1
            if hello.hello_id == self.wanted:
                self.wanted_hello = hello
        self.count += len(hellos)
        if len(self.first) < self.keep:
            self.first.extend(hellos[: self.keep - len(self.first)])


def set_document(name: str, hello: ClientHelloRecord, provenance: Mapping[str, Any], description: str) -> dict[str, Any]:
    """A replayable client set from one ClientHello; every non-connection-specific other
    parameter (GREASE, Google, version_information, ...) is kept raw in wire order."""
    decoded: DecodedParameters = hello.transport_parameters
    extra = [
        (p.id, p.raw)
        for p in decoded.parameters
        if p.name not in PERFORMANCE_PARAMETERS and spec_for(p.id).type not in _CONNECTION_SPECIFIC
    ]
    return document_for(name, "client", hello.parameter_set, provenance, description, extra)


def choose_hello(tally: HelloTally) -> ClientHelloRecord:
    """The ClientHello a set file is made from: the one asked for (``tally.wanted``), or the only parameter set present."""
    if tally.wanted is not None:
        if tally.wanted_hello is None:
            raise ToolError(f"no ClientHello {tally.wanted} in the capture (it has 1..{tally.count})")
        return tally.wanted_hello
    if len(tally.sets) > 1:
        listing = "; ".join(f"{n} like ClientHello {tally.first_of_set[s].hello_id}" for s, n in tally.sets.most_common(5))
        more = f"; {len(tally.sets) - 5} more sets" if len(tally.sets) > 5 else ""
        raise ToolError(f"the capture holds {len(tally.sets)} different client sets ({listing}{more}); pick one with --hello")
    return next(iter(tally.first_of_set.values()))


def browser_set_document(captured: BrowserCapture) -> dict[str, Any]:
    """The set file of one browser run; refused when the browser sent different sets."""
    tally = HelloTally()
    tally.add(captured.result.hellos)
    if len(tally.sets) > 1:
        raise ToolError(f"{captured.label} sent {len(tally.sets)} different parameter sets in one run; not saving a set")
    provenance = {
        "source": "qscan browser (scanner.browser): headless browser against gtlsserver on loopback, captured with tshark",
        "browser": captured.browser,
        "browser_version": captured.version,
        "version_line": captured.version_line,
        "captured_at": captured.captured_at,
        "command": shlex.join(captured.command),
        "client_hellos": len(captured.result.hellos),
        "tshark": tshark_version(),
    }
    description = f"{captured.version_line} (Debian) client transport parameters, captured on loopback"
    return set_document(captured.label, captured.result.hellos[0], provenance, description)
