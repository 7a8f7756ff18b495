"""Extracted ClientHellos into the scan store and into replayable set files."""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from scanner.browser import BrowserCapture
from scanner.capture.extract import CaptureResult, ClientHelloRecord
from common.tshark import tshark_version
from scanner.columns import LONG_FORM_FIELDS, TIMESTAMP, TRANSPORT_PARAMETER_FIELDS, value_text
from scanner.store import SCHEMA_DIR, ScanStore
from tparams.codec import DecodedParameters
from tparams.errors import ToolError
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet, order_fingerprint, order_signature
from tparams.registry import ParamType, spec_for
from tparams.setfile import document_for

CAPTURE_SCHEMA = ("capture", 2, SCHEMA_DIR / "capture_v2.sql")
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


def store_capture(
    out: Path | str, result: CaptureResult, capture_file: Path | str, kind: str, settings: Mapping[str, Any], command_line: str | None = None
) -> tuple[int, list[int]]:
    """Append every ClientHello of ``result`` as one batch; (scan_id, hello_ids)."""
    with open_store(out) as store:
        scan_id = store.begin_scan(kind, settings, command_line)
        first_id = store.con.execute("SELECT coalesce(max(hello_id), 0) + 1 FROM client_hellos").fetchone()[0]
        hellos, parameters = hellos_to_arrow(scan_id, first_id, str(capture_file), result.hellos)
        names = store.parameter_names(parameters.column("param_id"))
        store.append({"client_hellos": hellos, "client_hello_parameters": parameters, "parameter_names": names})
        store.finish_scan(scan_id)
    return scan_id, list(range(first_id, first_id + len(result.hellos)))


def hellos_to_arrow(scan_id: int, first_id: int, capture_file: str, hellos: list[ClientHelloRecord]) -> tuple[pa.Table, pa.Table]:
    hello_ids = list(range(first_id, first_id + len(hellos)))
    param_sets = [ParamSet.from_decoded(h.transport_parameters) for h in hellos]
    columns: dict[str, list] = {
        "scan_id": [scan_id] * len(hellos),
        "hello_id": hello_ids,
        "capture_file": [capture_file] * len(hellos),
        "seen_at": [dt.datetime.fromtimestamp(h.time, dt.timezone.utc) for h in hellos],
        "alpn": [list(h.alpn) for h in hellos],
        "transport_parameters_raw": [h.transport_parameters.raw for h in hellos],
        "findings": [[f._asdict() for f in h.transport_parameters.findings] for h in hellos],
        "set_fingerprint": [s.fingerprint() for s in param_sets],
        "order_fingerprint": [order_fingerprint(h.transport_parameters.ids) for h in hellos],
        "order_signature": [order_signature(h.transport_parameters.ids) for h in hellos],
        "server_transport_parameters_raw": [
            None if h.server_transport_parameters is None else h.server_transport_parameters.raw for h in hellos
        ],
    }
    for name in ("first_frame", "frame", "src_ip", "src_port", "dst_ip", "dst_port", "original_dcid", "quic_version", "sni", "client"):
        columns[name] = [getattr(h, name) for h in hellos]
    for name in PERFORMANCE_PARAMETERS:
        columns[name] = [getattr(s, name) for s in param_sets]
    rows = [
        (hello_id, sender, p.position, p.id, p.value if type(p.value) is int else None, value_text(p.value), p.raw)
        for hello_id, hello in zip(hello_ids, hellos)
        for sender, decoded in (("client", hello.transport_parameters), ("server", hello.server_transport_parameters))
        if decoded is not None
        for p in decoded.parameters
    ]
    parameter_columns = list(zip(*rows)) if rows else [[] for _ in PARAMETER_SCHEMA]
    parameters = pa.Table.from_arrays(
        [pa.array(column, type=f.type) for column, f in zip(parameter_columns, PARAMETER_SCHEMA)], schema=PARAMETER_SCHEMA
    )
    return pa.Table.from_pydict(columns, schema=HELLO_SCHEMA), parameters


def distinct_sets(hellos: list[ClientHelloRecord]) -> dict[str, list[ClientHelloRecord]]:
    """ClientHellos grouped by the fingerprint of their twelve parameters, in capture order."""
    groups: dict[str, list[ClientHelloRecord]] = {}
    for hello in hellos:
        groups.setdefault(ParamSet.from_decoded(hello.transport_parameters).fingerprint(), []).append(hello)
    return groups


def set_document(name: str, hello: ClientHelloRecord, provenance: Mapping[str, Any], description: str) -> dict[str, Any]:
    """A replayable client set from one ClientHello; every non-connection-specific other
    parameter (GREASE, Google, version_information, ...) is kept raw in wire order."""
    decoded: DecodedParameters = hello.transport_parameters
    extra = [
        (p.id, p.raw)
        for p in decoded.parameters
        if p.name not in PERFORMANCE_PARAMETERS and spec_for(p.id).type not in _CONNECTION_SPECIFIC
    ]
    return document_for(name, "client", ParamSet.from_decoded(decoded), provenance, description, extra)


def choose_hello(hellos: list[ClientHelloRecord], hello_id: int | None) -> ClientHelloRecord:
    """The ClientHello a set file is made from: the one asked for, or the only parameter set present."""
    if hello_id is not None:
        for hello in hellos:
            if hello.hello_id == hello_id:
                return hello
        raise ToolError(f"no ClientHello {hello_id} in the capture (it has 1..{len(hellos)})")
    groups = distinct_sets(hellos)
    if len(groups) > 1:
        listing = "; ".join(f"{', '.join(str(h.hello_id) for h in group)}" for group in groups.values())
        raise ToolError(f"the capture holds {len(groups)} different client sets (ClientHellos {listing}); pick one with --hello")
    return hellos[0]


def browser_set_document(captured: BrowserCapture) -> dict[str, Any]:
    """The set file of one browser run; refused when the browser sent different sets."""
    groups = distinct_sets(captured.result.hellos)
    if len(groups) > 1:
        raise ToolError(f"{captured.label} sent {len(groups)} different parameter sets in one run; not saving a set")
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
