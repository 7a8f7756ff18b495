"""Server-library identification: the I/O around tparams.library.

Two handshakes per target go through the scan engine: the ordinary one (ALPN
h3; the order of the parameter ids) and one offering ALPN ``invalid`` (the
CONNECTION_CLOSE a library answers with). The verdict goes into the scan's
DuckDB (table ``server_library``, schemas/duckdb/library_v1.sql).

The signatures are learned, never written by hand:

    python -m scanner.identify learn        # brings the lab up, writes datasets/library_signatures.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import polars as pl

from tparams.errors import ToolError
from tparams.library import (
    CloseObservation,
    LibrarySignatures,
    ServerObservations,
    classify_decoded,
    learn_signatures,
)
from tparams.paramset import ParamSet

from scanner.engine import CONNECTION_CLOSE, OK, TLS_ALERT, HandshakeRecord, ScanSettings, scan_targets
from scanner.store import SCHEMA_DIR, ScanStore
from scanner.targets import Target

ROOT = Path(__file__).resolve().parents[1]
SIGNATURES_PATH = ROOT / "datasets" / "library_signatures.json"
LIBRARY_SCHEMA = ("library", 1, SCHEMA_DIR / "library_v1.sql")
INVALID_ALPN = "invalid"


def load_signatures(path: Path | str = SIGNATURES_PATH) -> LibrarySignatures:
    try:
        return LibrarySignatures.from_document(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise ToolError(f"no library signatures at {path}; learn them with `python -m scanner.identify learn`")
    except (ValueError, KeyError) as exc:
        raise ToolError(f"{path}: not a library signatures file ({exc})") from None


def close_observation(record: HandshakeRecord) -> CloseObservation | None:
    """The server's CONNECTION_CLOSE of an attempt, if the server closed it."""
    if record.closed_by != "server" or record.error_code is None or record.status not in (TLS_ALERT, CONNECTION_CLOSE):
        return None
    return CloseObservation(record.error_code, record.close_reason_phrase or "")


def identify_records(
    signatures: LibrarySignatures,
    h3_records: Iterable[HandshakeRecord],
    invalid_records: Iterable[HandshakeRecord],
) -> pl.DataFrame:
    """One row per target (columns of ``server_library``) from the two handshakes."""
    closes = {(r.ip, r.port): r for r in invalid_records}
    h3 = {(r.ip, r.port): r for r in h3_records}
    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    for key in sorted(h3.keys() | closes.keys()):
        record = h3.get(key)
        decoded = record.decoded if record is not None else None
        close_record = closes.get(key)
        close = close_observation(close_record) if close_record is not None else None
        verdict = classify_decoded(signatures, decoded, close)
        sni = (record or close_record).sni
        rows.append({
            "ip": key[0], "port": key[1], "sni": sni, "identified_at": now,
            "library": verdict.library, "library_evidence": verdict.library_evidence,
            "order_signature": record.order_signature if record is not None else None,
            "order_fingerprint": record.order_fingerprint if record is not None else None,
            "close_error_code": close.error_code if close else None,
            "close_reason_phrase": close.reason_phrase if close else None,
        })
    return pl.DataFrame(rows, schema=_SCHEMA)


_SCHEMA = {
    "ip": pl.String, "port": pl.Int32, "sni": pl.String,
    "identified_at": pl.Datetime("us", "UTC"), "library": pl.String, "library_evidence": pl.String,
    "order_signature": pl.String, "order_fingerprint": pl.String,
    "close_error_code": pl.Int64, "close_reason_phrase": pl.String,
}


def _collect(targets: Sequence[Target], settings: ScanSettings) -> list[HandshakeRecord]:
    records: list[HandshakeRecord] = []
    scan_targets(list(targets), settings, records.extend)
    return records


def invalid_alpn_settings(settings: ScanSettings) -> ScanSettings:
    """The scan's settings with ALPN ``invalid``: what ``--identify`` runs after the h3 pass."""
    return ScanSettings(**{**settings.__dict__, "alpn": INVALID_ALPN})


def identify_targets(
    targets: Sequence[Target],
    settings: ScanSettings,
    signatures: LibrarySignatures,
    h3_records: Sequence[HandshakeRecord] | None = None,
) -> pl.DataFrame:
    """Identify each target's library. ``h3_records``: the scan's own ordinary
    handshakes, when the caller already made them (``qscan targets --identify``);
    otherwise an h3 pass runs here first."""
    if h3_records is None:
        h3_records = _collect(targets, settings)
    invalid_records = _collect(targets, invalid_alpn_settings(settings))
    return identify_records(signatures, h3_records, invalid_records)


def store_identifications(db_path: Path | str, frame: pl.DataFrame, signatures_date: str | None = None) -> None:
    """Append the rows to the scan file's ``server_library`` table, one transaction."""
    frame = frame.with_columns(pl.lit(signatures_date, dtype=pl.String).alias("signatures_date"))
    with ScanStore.open(db_path) as store:
        store.apply_schema(*LIBRARY_SCHEMA[:2], LIBRARY_SCHEMA[2].read_text())
        store.append({"server_library": frame.to_arrow()})


def identify_into(out: Path | str, targets: Sequence[Target], settings: ScanSettings,
                  signatures: LibrarySignatures, h3_records: Sequence[HandshakeRecord]) -> dict[str, int]:
    """What ``qscan targets --identify`` runs after its scan: the invalid-ALPN pass,
    verdicts stored in ``out``; returns targets per library."""
    frame = identify_targets(targets, settings, signatures, h3_records=h3_records)
    store_identifications(out, frame, signatures.learned_at)
    return dict(frame.group_by("library").len().sort("library").iter_rows())


def read_identifications(db_path: Path | str) -> pl.DataFrame:
    """The latest verdict per target (empty when the scan ran without --identify)."""
    with ScanStore.open(db_path, read_only=True) as store:
        if not store.con.execute("SELECT table_name FROM information_schema.tables "
                                 "WHERE table_name = 'server_library'").fetchall():
            return pl.DataFrame(schema=_SCHEMA)
        return store.con.sql("SELECT DISTINCT ON (ip, port) * FROM server_library "
                             "ORDER BY ip, port, identified_at DESC").pl()


# -- learning the signatures from the lab -------------------------------------------------

def _dpkg_version(package: str) -> str:
    result = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


# What runs behind each lab server kind, with its version read from the
# machine, so that the signatures file says exactly what it was learned from.
SOFTWARE: dict[str, Callable[[], str]] = {
    "ngtcp2": lambda: f"ngtcp2 gtlsserver, Debian ngtcp2-server {_dpkg_version('ngtcp2-server')}",
    "caddy": lambda: f"caddy (quic-go), Debian caddy {_dpkg_version('caddy')}",
    "aioquic": lambda: f"aioquic {importlib.metadata.version('aioquic')} (lab/aioquic_server.py)",
}


def observe_server(records_h3: Iterable[HandshakeRecord], records_invalid: Iterable[HandshakeRecord],
                   name: str, library: str, software: str) -> ServerObservations:
    observation = ServerObservations(server=name, library=library, software=software)
    for record in records_h3:
        if record.status == OK and record.decoded is not None:
            observation.orders.append(record.decoded.ids)
            observation.values.append(ParamSet.from_decoded(record.decoded).as_sent())
    for record in records_invalid:
        if (close := close_observation(record)) is not None:
            observation.closes.append(close)
    return observation


def learn_from_lab(lab, repetitions: int = 5, timeout: float = 5.0) -> list[ServerObservations]:  # type: ignore[no-untyped-def]
    """Handshake ``repetitions`` times (h3 and ``invalid``) with every lab server
    whose kind runs a known library; one connection at a time per server so
    that each handshake is a fresh connection of its own."""
    servers = [s for s in lab.servers if s.kind in SOFTWARE]
    targets = [Target(s.ip, s.port, s.sni) for s in servers]
    settings = ScanSettings(timeout=timeout, rate=0, concurrency=len(targets))
    h3: list[HandshakeRecord] = []
    invalid: list[HandshakeRecord] = []
    with lab.in_client():
        for _ in range(repetitions):
            h3 += _collect(targets, settings)
            invalid += _collect(targets, invalid_alpn_settings(settings))
    observations = []
    for server in servers:
        mine = lambda records: [r for r in records if (r.ip, r.port) == (server.ip, server.port)]  # noqa: E731
        observations.append(observe_server(mine(h3), mine(invalid), server.name, server.library,
                                           SOFTWARE[server.kind]()))
    return observations


def learn_command(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m scanner.identify learn",
        description="Bring the lab up, handshake repeatedly with each of its real servers "
                    "(ALPN h3 and ALPN invalid) and write the library signatures learned.")
    parser.add_argument("--out", type=Path, default=SIGNATURES_PATH, help="signatures file to write")
    parser.add_argument("--repetitions", type=int, default=5, help="handshakes of each kind per server")
    parser.add_argument("--instance", default="qlablearn",
                        help="lab instance name (its own namespaces, so a running lab is left alone)")
    args = parser.parse_args(argv)
    from lab import Lab  # the lab needs root; importing it is only for learning

    with Lab.up(instance=args.instance) as lab:
        observations = learn_from_lab(lab, args.repetitions)
    missing = [o.server for o in observations if not o.orders or not o.closes]
    if missing:
        raise ToolError(f"no completed handshake or no invalid-ALPN close from: {', '.join(missing)}")
    document = learn_signatures(observations, {
        "learned_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m scanner.identify learn " + shlex.join(argv),
        "method": "repeated real handshakes from the lab's client namespace with each lab server: "
                  "ALPN h3 for the order of transport parameter ids, ALPN invalid for the CONNECTION_CLOSE",
        "client": f"scanner.engine (scanner.handshake on aioquic {importlib.metadata.version('aioquic')}'s lower layers)",
        "repetitions": args.repetitions,
    })
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    for library, entry in document["libraries"].items():
        print(f"{library}: {len(entry['orders'])} order(s), randomised={entry['order_randomised']}, "
              f"closes={entry['invalid_alpn_close']}")


def main() -> None:
    if sys.argv[1:2] != ["learn"]:
        print(__doc__)
        sys.exit(2)
    try:
        learn_command(sys.argv[2:])
    except ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
