"""Handshake records as Arrow columns: what the scan workers hand the store.

No I/O here. A scan worker turns each batch of finished records into a
``HandshakeColumns`` before sending it to the process that writes the
DuckDB file, so that process only inserts: no record objects cross the
process boundary, and no Python loop over records competes with DuckDB for
the interpreter lock there (DuckDB's Python client takes it between its
tasks; a busy Python thread beside an insert slowed it 2.4x, measured).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gc
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tparams.codec import DecodedParameters, PreferredAddress, TransportParameter, VersionInformation
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet, order_fingerprint, order_signature
from tparams.registry import REGISTERED_GREASE_FORM, REGISTRY, ParamType, id_for, is_grease, spec_for

if TYPE_CHECKING:  # the scan engine (aioquic, cryptography) only where a scan runs, not to read a store
    from scanner.engine import HandshakeRecord


TIMESTAMP = pa.timestamp("us", tz="UTC")
_CERTIFICATE = pa.struct(
    [
        ("sha256", pa.string()),
        ("subject", pa.string()),
        ("issuer", pa.string()),
        ("sans", pa.list_(pa.string())),
        ("not_before", TIMESTAMP),
        ("not_after", TIMESTAMP),
    ]
)
FINDING = pa.struct([("kind", pa.string()), ("detail", pa.string()), ("position", pa.int32()), ("param_id", pa.int64())])
# What a server's or a client's extension becomes in a wide row (the captures'
# client_hellos share it), and the columns of its long form, one row a parameter.
TRANSPORT_PARAMETER_FIELDS = [
    ("transport_parameters_raw", pa.binary()),
    ("findings", pa.list_(FINDING)),
    *[(name, pa.bool_() if name == "disable_active_migration" else pa.int64()) for name in PERFORMANCE_PARAMETERS],
    ("set_fingerprint", pa.string()),
    ("order_fingerprint", pa.string()),
    ("order_signature", pa.string()),
]
LONG_FORM_FIELDS = [
    ("position", pa.int32()),
    ("param_id", pa.int64()),
    ("value", pa.int64()),
    ("value_text", pa.string()),
    ("raw", pa.binary()),
]
HANDSHAKE_SCHEMA = pa.schema(
    [
        ("scan_id", pa.int32()),
        ("handshake_id", pa.int64()),
        ("ip", pa.string()),
        ("port", pa.int32()),
        ("sni", pa.string()),
        ("started_at", TIMESTAMP),
        ("finished_at", TIMESTAMP),
        ("handshake_ms", pa.float64()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("error_code", pa.int64()),
        ("closed_by", pa.string()),
        ("close_frame_type", pa.int64()),
        ("close_reason_phrase", pa.string()),
        ("offered_versions", pa.list_(pa.int64())),
        ("retry", pa.bool_()),
        ("retry_token_length", pa.int32()),
        ("datagrams_received", pa.int32()),
        ("quic_version", pa.int64()),
        ("alpn", pa.string()),
        ("tls_version", pa.string()),
        ("cipher_suite", pa.string()),
        ("key_exchange_group", pa.string()),
        ("certificates", pa.list_(_CERTIFICATE)),
        ("certificate_verified", pa.bool_()),
        ("certificate_error", pa.string()),
        *TRANSPORT_PARAMETER_FIELDS,
        ("hello_retry_request", pa.bool_()),
    ]
)
PARAMETER_SCHEMA = pa.schema([("handshake_id", pa.int64()), *LONG_FORM_FIELDS])
_BATCH_SCHEMA = HANDSHAKE_SCHEMA.remove(HANDSHAKE_SCHEMA.get_field_index("scan_id"))
_RECORD_FIELDS = [
    "ip", "port", "sni", "started_at", "finished_at", "handshake_ms", "status", "error", "error_code",
    "closed_by", "close_frame_type", "close_reason_phrase", "offered_versions", "retry", "retry_token_length",
    "datagrams_received", "quic_version", "alpn", "tls_version",
    "cipher_suite", "key_exchange_group", "certificate_verified", "certificate_error", "transport_parameters_raw",
    "hello_retry_request",
]  # fmt: skip


@contextlib.contextmanager
def pause_gc() -> Iterator[None]:
    # A batch allocates millions of small tuples and lists, none of them cyclic;
    # the cyclic collector's passes over them cost a third of the conversion.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclasses.dataclass(frozen=True)
class HandshakeColumns:
    """A batch of records as the rows of ``handshakes`` and ``handshake_parameters``,
    numbered from 0 within the batch until the store gives them their ids
    (``numbered``); ``handshakes`` has no scan_id yet."""

    handshakes: pa.Table
    parameters: pa.Table

    def __len__(self) -> int:
        return self.handshakes.num_rows

    def count_status(self, status: str) -> int:
        return int(pc.sum(pc.equal(self.handshakes.column("status"), status)).as_py() or 0)

    def numbered(self, scan_id: int, first_id: int) -> tuple[pa.Table, pa.Table]:
        """The rows as stored: handshake ids from ``first_id``, all in scan ``scan_id``."""
        handshakes = self.handshakes.set_column(0, "handshake_id", pc.add(self.handshakes.column(0), first_id))
        scan_ids = pa.repeat(pa.scalar(scan_id, pa.int32()), len(self))  # type: ignore[attr-defined]
        parameters = self.parameters.set_column(0, "handshake_id", pc.add(self.parameters.column(0), first_id))
        return pa.Table.from_arrays([scan_ids, *handshakes.columns], schema=HANDSHAKE_SCHEMA), parameters


def handshake_columns(records: Iterable[HandshakeRecord]) -> HandshakeColumns:
    """The columns of a batch of records.

    Every column is built as one list or array over the batch, and no Python
    object is touched per parameter: the long form is framed again from the
    extension bytes with array operations (``_ParameterRows``). What repeats
    across records is computed once per distinct value and gathered with
    Arrow ``take``: the certificate structs, structured parameter values, and
    the derived set/order columns, whose records are grouped with array
    operations on the long form.
    """
    with pause_gc():
        return _columns(list(records))


def _columns(records: list[HandshakeRecord]) -> HandshakeColumns:
    count = len(records)
    if not count:
        return HandshakeColumns(_BATCH_SCHEMA.empty_table(), PARAMETER_SCHEMA.empty_table())
    columns: dict[str, Any] = dict(zip(_RECORD_FIELDS, zip(*map(_SCALARS, records))))
    columns["started_at"] = _timestamps(columns["started_at"])
    columns["finished_at"] = _timestamps(columns["finished_at"])
    columns["handshake_id"] = np.arange(count, dtype=np.int64)
    columns["certificates"] = _certificate_column(records)
    long_form, derived = extension_columns([r.decoded for r in records])
    columns.update(derived)
    parameters = pa.Table.from_arrays(long_form, schema=PARAMETER_SCHEMA)
    return HandshakeColumns(pa.Table.from_pydict(columns, schema=_BATCH_SCHEMA), parameters)


def extension_columns(decoded: list[DecodedParameters | None]) -> tuple[list[pa.Array], dict[str, Any]]:
    """The long form of a batch of transport-parameter extensions (None: none received) and their
    per-record columns: the long form's columns are each row's record (its index in ``decoded``), then
    LONG_FORM_FIELDS; the per-record ones are ``findings`` and the twelve, set and order fingerprints.
    Scans and captures both store what this gives."""
    columns: dict[str, Any] = {
        "findings": [None if d is None else [f._asdict() for f in d.findings] if d.findings else [] for d in decoded]
    }
    rows = _ParameterRows(decoded)
    values, texts = rows.values()
    long_form = [pa.array(rows.records), pa.array(rows.positions.astype(np.int32)), pa.array(rows.ids), values, texts, rows.raw]
    # Derived columns: one row per distinct (twelve, order), gathered by each record's group.
    group = _group_records(decoded, rows, values.fill_null(-1).to_numpy())
    representatives = np.unique(group[group >= 0])
    derived = [_derived(*_derivation_key(decoded[r].parameters)) for r in representatives]  # type: ignore[union-attr]
    take = pa.array(np.searchsorted(representatives, group).astype(np.int32), mask=group < 0)
    distinct = pa.Table.from_pylist([dict(zip(_DERIVED_COLUMNS, row)) for row in derived], _DERIVED_SCHEMA)
    columns.update(zip(_DERIVED_COLUMNS, distinct.take(take).columns))
    return long_form, columns


def _timestamps(moments: tuple[dt.datetime, ...]) -> pa.Array:
    """A timestamp column from aware datetimes as whole microseconds since the epoch:
    pyarrow's own conversion calls ``utcoffset()`` on every one, which costs more."""
    try:
        micros = [(moment - _EPOCH) // _MICROSECOND for moment in moments]
    except TypeError:  # naive or missing: pyarrow's rules, as before
        return pa.array(moments, TIMESTAMP)
    return pa.array(micros, pa.int64()).view(TIMESTAMP)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MICROSECOND = dt.timedelta(microseconds=1)


class _ParameterRows:
    """Every parameter of a batch as long-form rows, without a Python object per row.

    The codec has framed each extension already and kept its parameters up to
    where framing broke off, so the id and length varints can be read again
    from ``DecodedParameters.raw``: position by position, across all records
    of the batch at once. A value is then decoded from its bytes by its
    registered type: in an extension without findings every varint is one
    whole varint and every flag is empty. Structured values
    (version_information, preferred_address) are shown by ``value_text`` once
    per distinct bytes; records with findings take their values from the
    decoded parameters themselves, as the codec left them.
    """

    def __init__(self, decoded: list[DecodedParameters | None]):
        self.decoded = decoded
        extensions = [b"" if d is None else d.raw for d in decoded]
        self.lengths = np.array([0 if d is None else len(d.parameters) for d in decoded], np.int64)
        self.clean = np.array([d is not None and not d.findings for d in decoded], bool)
        self.starts = np.cumsum(self.lengths) - self.lengths  # first row of each record
        total = int(self.lengths.sum())
        self.records = np.repeat(np.arange(len(decoded)), self.lengths)  # the record of each row
        self.positions = np.arange(total, dtype=np.int64) - self.starts[self.records]  # wire position
        data = b"".join(extensions)
        # Every offset's next eight bytes (zero-padded) as one big-endian word, the words
        # overlapping (a stride of one byte): a varint is read from the word at its offset.
        padded = data + bytes(8)
        self._bytes = np.frombuffer(padded, np.uint8)
        self._words = np.ndarray((len(data) + 1,), ">u8", padded, 0, (1,))
        sizes = np.fromiter(map(len, extensions), np.int64, len(extensions))
        self.ids = np.empty(total, np.int64)
        self._value_at = np.empty(total, np.int64)
        value_ends = np.empty(total, np.int64)
        cursor = np.cumsum(sizes) - sizes
        pending = np.flatnonzero(self.lengths)
        for position in range(int(self.lengths.max(initial=0))):
            pending = pending[self.lengths[pending] > position]
            at = cursor[pending]
            param_id, id_size = _read_varints(self._bytes, self._words, at)
            value_size, length_size = _read_varints(self._bytes, self._words, at + id_size)
            rows = self.starts[pending] + position
            self.ids[rows] = param_id
            self._value_at[rows] = value_at = at + id_size + length_size
            cursor[pending] = value_ends[rows] = value_at + value_size
        # The bytes cut at every value's start and end: values alternate with what lies
        # between them (headers, unframed tails), and Arrow's take keeps the values.
        cuts = np.empty(2 * total, np.int32)
        cuts[0::2], cuts[1::2] = self._value_at, value_ends
        segments = pa.Array.from_buffers(pa.binary(), max(2 * total - 1, 0), [None, pa.py_buffer(cuts), pa.py_buffer(data)])
        self.raw = segments.take(pa.array(np.arange(0, 2 * total, 2, dtype=np.int32)))

    def values(self) -> tuple[pa.Array, pa.Array]:
        """The ``value`` and ``value_text`` columns."""
        total = len(self.ids)
        clean_row = np.repeat(self.clean, self.lengths)
        kinds = _VALUE_KINDS.lookup(self.ids)
        values = np.zeros(total, np.int64)
        has_value = clean_row & (kinds == _VARINT)
        values[has_value] = _read_varints(self._bytes, self._words, self._value_at[has_value])[0]
        texts = ["true"]
        text_of = np.full(total, -1, np.int32)
        text_of[clean_row & (kinds == _FLAG)] = 0
        structured = np.flatnonzero(clean_row & (kinds == _STRUCTURED))
        for param_id in np.unique(self.ids[structured]).tolist():
            rows = structured[self.ids[structured] == param_id]
            distinct = self.raw.take(pa.array(rows)).dictionary_encode()
            codes = distinct.indices.to_numpy()
            _, first = np.unique(codes, return_index=True)
            text_of[rows] = codes + len(texts)
            texts += [value_text(self._parameter(rows[f]).value) for f in first.tolist()]
        for record in np.flatnonzero(~self.clean & (self.lengths > 0)).tolist():
            for parameter in self.decoded[record].parameters:  # type: ignore[union-attr]
                row = self.starts[record] + parameter.position
                value = parameter.value
                if type(value) is int:
                    values[row], has_value[row] = value, True
                elif type(value) not in _TEXTLESS:
                    text_of[row] = len(texts)
                    texts.append(value_text(value))
        return (
            pa.array(values, mask=~has_value),
            pa.array(texts, pa.string()).take(pa.array(text_of, mask=text_of < 0)),
        )

    def _parameter(self, row: int) -> TransportParameter:
        record = self.records[row]
        return self.decoded[record].parameters[row - self.starts[record]]  # type: ignore[union-attr]


def _read_varints(data: np.ndarray, words: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The QUIC varints (RFC 9000 16) at offsets ``at`` of ``data``: values and sizes in bytes.

    ``words`` holds the eight bytes from every offset as one big-endian word.
    """
    first = data[at]
    if not (first >> 6).any():  # all of one byte, as most ids and lengths are
        return first.astype(np.int64), np.ones(len(at), np.int64)
    prefix = first >> 6  # the size class: 1, 2, 4 or 8 bytes
    values = words[at].astype(np.uint64)
    np.right_shift(values, _VARINT_SHIFTS[prefix], out=values)
    np.bitwise_and(values, _VARINT_MASKS[prefix], out=values)
    return values.view(np.int64), _VARINT_SIZES[prefix]


_VARINT_SIZES = np.array([1, 2, 4, 8], np.int64)
_VARINT_SHIFTS = np.array([56, 48, 32, 0], np.uint64)  # the varint's bytes out of an 8-byte window
_VARINT_MASKS = np.array([(1 << 6) - 1, (1 << 14) - 1, (1 << 30) - 1, (1 << 62) - 1], np.uint64)


class _IdTable:
    """A small-integer property of parameter ids, looked up for whole arrays of ids:
    directly for the low ids most parameters have, by search for the rest."""

    def __init__(self, properties: Mapping[int, int], default: int):
        self._dense = np.full(64, default, np.int8)
        low = {i: p for i, p in properties.items() if i < 64}
        self._dense[list(low)] = list(low.values())
        high = sorted((i, p) for i, p in properties.items() if i >= 64)
        self._high_ids = np.array([i for i, _ in high] + [-1], np.int64)  # -1: a sentinel no id matches
        self._high = np.array([p for _, p in high] + [default], np.int8)
        self._default = default

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        found = self._dense[np.minimum(ids, 63)]
        high = np.flatnonzero(ids >= 64)
        index = np.minimum(np.searchsorted(self._high_ids[:-1], ids[high]), len(self._high_ids) - 1)
        found[high] = np.where(self._high_ids[index] == ids[high], self._high[index], self._default)
        return found


def _derivation_key(parameters: tuple[TransportParameter, ...]) -> tuple[tuple, tuple]:
    """What the derived columns depend on: the twelve as sent, and the id order
    with GREASE ids normalised (they are random per connection)."""
    return (
        tuple([(p.id, p.value) for p in parameters if p.id in _PERFORMANCE_IDS]),
        tuple([_GREASE if is_grease(p.id) else p.id for p in parameters]),
    )


def _group_records(decoded: list, long_form: _ParameterRows, integers: np.ndarray) -> np.ndarray:
    """Per record, the index of the first record with the same derivation key; -1 without an extension.

    The key of a record without findings is the sequence of (id with GREASE
    normalised, value if one of the twelve) over its long-form rows: written
    as 16 bytes a row, one binary value a record, it is grouped exactly by
    Arrow's dictionary encoding. Records with findings take the Python key
    (a value that did not decode is None, which ``integers`` cannot tell
    from a flag).
    """
    ids = long_form.ids
    keys = np.empty((len(ids), 2), np.int64)
    keys[:, 0] = np.where(grease_mask(ids), _GREASE, ids)
    # The twelve's values matter; without findings they are integers or the flag's True (-1 here).
    keys[:, 1] = np.where(_IS_PERFORMANCE.lookup(ids).astype(bool), integers, -2)
    offsets = np.append(long_form.starts, len(ids)) * keys.itemsize * 2
    # Null for the records left out: dictionary encoding gives them no code.
    valid = pa.py_buffer(np.packbits(long_form.clean, bitorder="little"))
    per_record = pa.Array.from_buffers(
        pa.binary(), len(decoded), [valid, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(keys)]
    )
    codes = per_record.dictionary_encode().indices.fill_null(-1).to_numpy()
    found, first = np.unique(codes, return_index=True)
    group = np.where(codes >= 0, first[np.searchsorted(found, codes)], -1)
    leftover = [r for r in np.flatnonzero(~long_form.clean).tolist() if decoded[r] is not None]
    return _group_exactly(decoded, leftover, group)


def _group_exactly(decoded: list, records: list[int], group: np.ndarray) -> np.ndarray:
    """The exact Python key for the few records with findings."""
    first: dict[tuple, int] = {}
    for record in records:
        group[record] = first.setdefault(_derivation_key(decoded[record].parameters), record)
    return group


_SCALARS = operator.attrgetter(*_RECORD_FIELDS)
_DERIVED_COLUMNS = (*PERFORMANCE_PARAMETERS, "set_fingerprint", "order_signature", "order_fingerprint")
_DERIVED_SCHEMA = pa.schema([HANDSHAKE_SCHEMA.field(name) for name in _DERIVED_COLUMNS])
_PERFORMANCE_IDS = frozenset(id_for(name) for name in PERFORMANCE_PARAMETERS)
_IS_PERFORMANCE = _IdTable({i: 1 for i in _PERFORMANCE_IDS}, 0)
# How _ParameterRows stores a value of each type; ids outside the registry are opaque bytes (spec_for).
_VARINT, _FLAG, _STRUCTURED, _OTHER = range(4)
_TYPE_KINDS = {
    ParamType.VARINT: _VARINT,
    ParamType.FLAG: _FLAG,
    ParamType.PREFERRED_ADDRESS: _STRUCTURED,
    ParamType.VERSION_INFORMATION: _STRUCTURED,
}
_VALUE_KINDS = _IdTable({i: _TYPE_KINDS.get(spec.type, _OTHER) for i, spec in REGISTRY.items()}, _OTHER)


_GREASE = 27  # GREASE ids are 31 * N + 27 (RFC 9000 18.1); the first stands for all
_REGISTERED_GREASE_FORM = np.array(sorted(REGISTERED_GREASE_FORM), np.int64)


def grease_mask(ids: np.ndarray) -> np.ndarray:
    """``tparams.registry.is_grease`` over an array of ids."""
    return (ids % 31 == _GREASE) & ~np.isin(ids, _REGISTERED_GREASE_FORM)


def _certificate_column(records: list[HandshakeRecord]) -> pa.Array:
    """list<certificate> per record: each distinct certificate converted once, then gathered."""
    distinct: dict[str, int] = {}
    unique: list[dict] = []
    offsets = [0]
    gather: list[int] = []
    for record in records:
        for certificate in record.certificates:
            position = distinct.get(certificate.sha256)
            if position is None:
                position = distinct[certificate.sha256] = len(unique)
                unique.append(certificate.__dict__)
            gather.append(position)
        offsets.append(len(gather))
    values = pa.array(unique, _CERTIFICATE).take(pa.array(gather, pa.int32()))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=pa.list_(_CERTIFICATE))


def _derived(twelve: tuple[tuple[int, object], ...], ids: tuple[int, ...]) -> tuple:
    """The twelve as sent, set fingerprint, order signature and fingerprint of one distinct key.

    Building a ParamSet costs ~0.25 ms; a scan has few distinct sets and orders
    among millions of records, so both are memoised across batches too.
    """
    found = _DERIVED_CACHE.get((twelve, ids))
    if found is None:
        if len(_DERIVED_CACHE) >= 65536:
            _DERIVED_CACHE.clear()
        performance = tuple(p for p in _parameters(twelve) if p.name in _PERFORMANCE)
        param_set = ParamSet.from_decoded(DecodedParameters(b"", performance))
        found = _DERIVED_CACHE[(twelve, ids)] = (
            *param_set.as_sent().values(), param_set.fingerprint(), order_signature(ids), order_fingerprint(ids)
        )  # fmt: skip
    return found


_DERIVED_CACHE: dict[tuple, tuple] = {}


def _parameters(pairs: tuple[tuple[int, object], ...]) -> list[TransportParameter]:
    return [TransportParameter(position, param_id, spec_for(param_id).name, b"", value)
            for position, (param_id, value) in enumerate(pairs)]  # fmt: skip


_PERFORMANCE = frozenset(PERFORMANCE_PARAMETERS)


# Integers go to ``value``; bytes (ids, tokens, opaque) and undecodable values are
# shown from ``raw`` by the views' parameter_value_text.
_TEXTLESS = frozenset({int, bytes, type(None)})


def value_text(value: object) -> str | None:
    """The stored text of a flag or a structured value; None for what ``value`` or ``raw`` shows."""
    if value is True:
        return "true"
    if value is None or isinstance(value, (int, bytes)):
        return None
    if isinstance(value, VersionInformation):
        available = ",".join(f"0x{v:08x}" for v in value.available_versions)
        return f"chosen=0x{value.chosen_version:08x} available={available}"
    if isinstance(value, PreferredAddress):
        return (
            f"{value.ipv4_address}:{value.ipv4_port} [{value.ipv6_address}]:{value.ipv6_port} "
            f"cid={value.connection_id.hex()} token={value.stateless_reset_token.hex()}"
        )
    return str(value)


