"""Server-library identification: the I/O around tparams.library.

Two handshakes per target go through the scan engine: the ordinary one (ALPN
h3; the traits of its transport parameters and Retry) and one offering ALPN
``invalid`` (how the library refuses it). The verdict goes into the scan's
DuckDB (table ``server_library``, schemas/duckdb/library_v2.sql).

The signatures are learned from the lab as configured, never written by
hand, and the classifier is measured on fresh handshakes with every lab
server, as configured and in its held-out configuration (``HELD_OUT``, each library's in
tparams.libraries: every choice the application has made otherwise, never learned from):

    python -m scanner.identify learn      # datasets/library_signatures.json
    python -m scanner.identify evaluate   # datasets/library_evaluation.json (confusion matrix)
    python -m scanner.identify report     # the tables of docs/identification.md from both files
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib.metadata
import json
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl

from common import versions
from common.markdown import markdown_table
from tparams.errors import ToolError
from tparams.libraries import HELD_OUT, described
from tparams.library import (
    CANDIDATE_SEPARATOR,
    FLOW_CONTROL,
    UNKNOWN,
    AlpnRefusal,
    LibrarySignatures,
    ServerObservations,
    classify_decoded,
    feature_table,
    handshake_traits,
    learn_signatures,
    separations,
)
from tparams.paramset import ParamSet

from scanner.engine import OK, TIMEOUT, HandshakeRecord, ScanSettings, scan_targets
from scanner.store import SCHEMA_DIR, ScanStore
from scanner.targets import Target

ROOT = Path(__file__).resolve().parents[1]
SIGNATURES_PATH = ROOT / "datasets" / "library_signatures.json"
EVALUATION_PATH = ROOT / "datasets" / "library_evaluation.json"
LIBRARY_SCHEMA = ("library", 2, SCHEMA_DIR / "library_v2.sql")
INVALID_ALPN = "invalid"


def load_signatures(path: Path | str = SIGNATURES_PATH) -> LibrarySignatures:
    try:
        return LibrarySignatures.from_document(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise ToolError(f"no library signatures at {path}; learn them with `python -m scanner.identify learn`")
    except (ValueError, KeyError) as exc:
        raise ToolError(f"{path}: not a library signatures file ({exc})") from None


def alpn_refusal(record: HandshakeRecord) -> AlpnRefusal:
    """How the server answered the attempt that offered ALPN ``invalid``."""
    if record.closed_by == "server" and record.error_code is not None:
        return AlpnRefusal("close", record.error_code, record.close_frame_type, record.close_reason_phrase or "")
    if record.status == OK:
        return AlpnRefusal("completed")
    if record.status == TIMEOUT:
        return AlpnRefusal("silence")
    return AlpnRefusal("other")


def verdict(signatures: LibrarySignatures, h3: HandshakeRecord | None, invalid: HandshakeRecord | None):  # type: ignore[no-untyped-def]
    """``tparams.library.Identification`` of one target from its two attempts (either may be None)."""
    decoded = h3.decoded if h3 is not None and h3.status == OK else None
    if h3 is not None and h3.decoded is not None and h3.decoded.findings:
        decoded = h3.decoded  # malformed parameters: the classifier says why it stays unknown
    return classify_decoded(signatures, decoded, alpn_refusal(invalid) if invalid is not None else None,
                            retry=h3.retry if h3 is not None else False,
                            retry_token_length=h3.retry_token_length if h3 is not None else None,
                            retry_token=h3.retry_token if h3 is not None else None,
                            new_token_lengths=h3.new_token_lengths if h3 is not None else None)


def identify_records(
    signatures: LibrarySignatures,
    h3_records: Iterable[HandshakeRecord],
    invalid_records: Iterable[HandshakeRecord],
) -> pl.DataFrame:
    """One row per target (columns of ``server_library``) from the two handshakes."""
    invalid = {(r.ip, r.port): r for r in invalid_records}
    h3 = {(r.ip, r.port): r for r in h3_records}
    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    for key in sorted(h3.keys() | invalid.keys()):
        record, refused = h3.get(key), invalid.get(key)
        identification = verdict(signatures, record, refused)
        refusal = alpn_refusal(refused) if refused is not None else None
        rows.append({
            "ip": key[0], "port": key[1], "sni": (record or refused).sni, "identified_at": now,
            "library": identification.library, "library_evidence": identification.library_evidence,
            "candidates": list(identification.candidates),
            "order_signature": record.order_signature if record is not None else None,
            "order_fingerprint": record.order_fingerprint if record is not None else None,
            "alpn_refusal": refusal.describe() if refusal else None,
            "close_error_code": refusal.error_code if refusal else None,
            "close_frame_type": refusal.frame_type if refusal else None,
            "close_reason_phrase": refusal.reason_phrase if refusal else None,
            "retry": record.retry if record is not None else None,
        })
    return pl.DataFrame(rows, schema=_SCHEMA)


_SCHEMA = {
    "ip": pl.String, "port": pl.Int32, "sni": pl.String,
    "identified_at": pl.Datetime("us", "UTC"), "library": pl.String, "library_evidence": pl.String,
    "candidates": pl.List(pl.String), "order_signature": pl.String, "order_fingerprint": pl.String,
    "alpn_refusal": pl.String, "close_error_code": pl.Int64, "close_frame_type": pl.Int64,
    "close_reason_phrase": pl.String, "retry": pl.Boolean,
}


def _collect(targets: Sequence[Target], settings: ScanSettings) -> list[HandshakeRecord]:
    records: list[HandshakeRecord] = []
    scan_targets(list(targets), settings, records.extend)
    return records


def h3_settings(settings: ScanSettings) -> ScanSettings:
    """The scan's settings for identification's h3 handshakes: each waits for the server's
    HANDSHAKE_DONE (a few hundred ms at most) to note its NEW_TOKEN habit."""
    return dataclasses.replace(settings, await_handshake_done=True)


def invalid_alpn_settings(settings: ScanSettings) -> ScanSettings:
    """The scan's settings with ALPN ``invalid``: what ``--identify`` runs after the h3 pass."""
    return dataclasses.replace(settings, alpn=INVALID_ALPN, await_handshake_done=False)


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
        h3_records = _collect(targets, h3_settings(settings))
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
    verdicts stored in ``out``; returns targets per library. Targets a resumed scan
    had recorded before (no h3 handshake in ``h3_records``) get their h3 pass here."""
    if not targets:
        return {}
    handshaken = {record.target for record in h3_records}
    earlier = [t for t in targets if t not in handshaken]
    # One invalid-ALPN pass over all targets, so one pool of workers sized for all of them.
    records = [*h3_records, *_collect(earlier, h3_settings(settings))] if earlier else h3_records
    frame = identify_targets(targets, settings, signatures, h3_records=records)
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


# -- learning the signatures from the lab, and measuring the classifier on it ------------

# Lab servers that are no library: never learned from, expected to stay unknown.
NOT_A_LIBRARY = "broken"
CONFIGURATIONS = ("default", "held-out")


def software(kind: str) -> str:
    """What runs behind a lab server kind, with its versions read from the machine, the lock files or the
    build, so that the signatures file says exactly what it was learned from."""
    library = described(kind)
    return versions.software(library) if library is not None else kind


def lab_topology(configuration: str = "default", left_out: Iterable[str] = ()):  # type: ignore[no-untyped-def]
    """The default lab, or (``held-out``) every library's server in its ``HELD_OUT``
    configuration beside the broken servers; servers of a kind without one are left
    out, as are those named in ``left_out``."""
    from lab.kinds import runnable
    from lab.topology import default_topology

    topology = runnable(default_topology())
    if configuration not in CONFIGURATIONS:
        raise ToolError(f"unknown configuration {configuration!r} (known: {', '.join(CONFIGURATIONS)})")
    servers = tuple(
        spec if configuration == "default" or spec.kind == NOT_A_LIBRARY else _held_out(spec)
        for spec in topology.servers
        if spec.name not in left_out and (configuration == "default" or spec.kind in (*HELD_OUT, NOT_A_LIBRARY))
    )
    return dataclasses.replace(topology, servers=servers)


def _held_out(spec):  # type: ignore[no-untyped-def]
    options = HELD_OUT[spec.kind]
    application = dict(options["application"])
    if "preferred_address" in application:
        application["preferred_address"] = f"{spec.ip}:{application['preferred_address']}"
    return dataclasses.replace(spec, options={**options, "application": application})


def observe_server(records_h3: Iterable[HandshakeRecord], records_invalid: Iterable[HandshakeRecord],
                   name: str, library: str, software: str, configuration: str = "default") -> ServerObservations:
    observation = ServerObservations(server=name, library=library, software=software, configuration=configuration)
    for record in records_h3:
        if record.status == OK and record.decoded is not None and not record.decoded.findings:
            traits = handshake_traits(record.decoded, record.retry, record.retry_token_length, record.retry_token,
                                      record.new_token_lengths)
            observation.handshakes.append((record.decoded.ids, traits))
    observation.refusals.extend(alpn_refusal(record) for record in records_invalid)
    return observation


def lab_handshakes(lab, repetitions: int, timeout: float = 5.0):  # type: ignore[no-untyped-def]
    """``repetitions`` rounds of one h3 and one ``invalid`` handshake with every lab
    server, from the lab's client namespace; each a fresh connection. Returns
    per server (h3 records, invalid records), in round order."""
    targets = [Target(s.ip, s.port, s.sni) for s in lab.servers]
    settings = h3_settings(ScanSettings(timeout=timeout, rate=0, concurrency=len(targets)))
    h3: list[HandshakeRecord] = []
    invalid: list[HandshakeRecord] = []
    with lab.in_client():
        for _ in range(repetitions):
            h3 += _collect(targets, settings)
            invalid += _collect(targets, invalid_alpn_settings(settings))
    mine = lambda records, server: [r for r in records if (r.ip, r.port) == (server.ip, server.port)]  # noqa: E731
    return {server.name: (mine(h3, server), mine(invalid, server)) for server in lab.servers}


def learn_from_lab(lab, repetitions: int = 5, timeout: float = 5.0,  # type: ignore[no-untyped-def]
                   configuration: str = "default") -> list[ServerObservations]:
    """Observations of every lab server that runs a library (not the broken ones)."""
    records = lab_handshakes(lab, repetitions, timeout)
    return [observe_server(*records[server.name], server.name, server.library, software(server.kind), configuration)
            for server in lab.servers if server.kind != NOT_A_LIBRARY]


def flow_control_sent(record: HandshakeRecord | None) -> dict[str, int] | None:
    if record is None or record.decoded is None:
        return None
    sent = ParamSet.from_decoded(record.decoded).as_sent()
    return {name: sent[name] for name in FLOW_CONTROL}


def evaluate_lab(lab, signatures: LibrarySignatures, configuration: str,  # type: ignore[no-untyped-def]
                 repetitions: int = 2, timeout: float = 5.0) -> list[dict[str, object]]:
    """Rows of the confusion matrix: per lab server and round, the verdict from the
    h3 handshake alone (one handshake) and from both (two), and from both with the
    server's own library left out of the signatures (a library not learned: it
    should come out unknown, not as another)."""
    records = lab_handshakes(lab, repetitions, timeout)
    rows = []
    for server in lab.servers:
        h3_records, invalid_records = records[server.name]
        for round_number, (h3, invalid) in enumerate(zip(h3_records, invalid_records), 1):
            both = verdict(signatures, h3, invalid)
            rows.append({
                "configuration": configuration, "server": server.name, "kind": server.kind,
                "expected": UNKNOWN if server.kind == NOT_A_LIBRARY else server.library, "round": round_number,
                "h3_status": h3.status, "named_from_1": verdict(signatures, h3, None).library,
                "named_from_2": both.library,
                "named_when_not_learned": verdict(signatures.without(server.library), h3, invalid).library,
                "flow_control_sent": flow_control_sent(h3), "evidence": both.library_evidence,
            })
    return rows


def handshakes_needed(row: Mapping[str, object]) -> int | None:
    """1 or 2 handshakes for a right verdict (the library alone), None when even two do not give one."""
    if row["named_from_1"] == row["expected"] and row["named_from_2"] == row["expected"]:
        return 1
    return 2 if row["named_from_2"] == row["expected"] else None


def confusion_matrix(rows: Iterable[Mapping[str, object]], column: str = "named_from_2") -> pl.DataFrame:
    """Expected library (rows) x named library (columns, a set of candidates its own), counting verdicts."""
    frame = pl.DataFrame([{"expected": r["expected"], "named": r[column]} for r in rows])
    names = sorted(set(frame["expected"]) | set(frame["named"]),
                   key=lambda n: (n == UNKNOWN, CANDIDATE_SEPARATOR in n, n))
    counts = frame.group_by("expected", "named").len()
    matrix = counts.pivot(on="named", index="expected", values="len").fill_null(0)
    for name in names:
        if name not in matrix.columns:
            matrix = matrix.with_columns(pl.lit(0, dtype=pl.UInt32).alias(name))
    order = {name: i for i, name in enumerate(names)}
    return matrix.select("expected", *names).sort(pl.col("expected").replace_strict(order, return_dtype=pl.Int32))


def not_learned(rows: Iterable[Mapping[str, object]]) -> pl.DataFrame:
    """Per library: what its servers are named when the signatures leave it out
    (from both handshakes, every round and configuration): ideally unknown."""
    frame = pl.DataFrame([{"library": r["expected"], "named": r["named_when_not_learned"]}
                          for r in rows if r["expected"] != UNKNOWN])
    return (frame.group_by("library", "named").len().sort("library", "named")
            .group_by("library", maintain_order=True)
            .agg(pl.format("{} ({})", "named", "len").str.join(", ").alias("named when not learned")))


def read_evaluation(path: Path | str = EVALUATION_PATH) -> dict[str, object]:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ToolError(f"no evaluation at {path}; measure it with `python -m scanner.identify evaluate`") from None


def features(path: Path | str = SIGNATURES_PATH) -> pl.DataFrame:
    """The learned traits of every library, one row each (the manual, the notebook)."""
    return pl.DataFrame(feature_table(json.loads(Path(path).read_text())))


def handshakes_per_server(rows: Iterable[Mapping[str, object]]) -> pl.DataFrame:
    """Per lab server and configuration: the verdicts and how many handshakes a right one
    needs (the most over its rounds; 1 = the h3 handshake alone, 2 = with the invalid-ALPN
    one; empty: never right)."""
    frame = pl.DataFrame([{"configuration": r["configuration"], "server": r["server"], "expected": r["expected"],
                           "named": r["named_from_2"], "needed": handshakes_needed(r)} for r in rows])
    return (frame.group_by("server", "configuration", maintain_order=True)
            .agg(pl.col("expected").first(), pl.col("named").unique().sort().str.join(" / "),
                 pl.len().alias("rounds"),
                 pl.when(pl.col("needed").is_null().any()).then(None).otherwise(pl.col("needed").max())
                 .alias("handshakes")))


def _markdown(frame: pl.DataFrame) -> str:
    return markdown_table(frame.columns, frame.iter_rows())


def report_command(argv: Sequence[str]) -> None:
    """The tables of docs/identification.md, from the committed signatures and evaluation."""
    evaluation = read_evaluation()
    rows = evaluation["rows"]
    print(_markdown(features()))
    print()
    print(_markdown(confusion_matrix(rows)))
    print()
    print(_markdown(confusion_matrix(rows, "named_from_1")))
    print()
    print(_markdown(handshakes_per_server(rows)))
    print()
    print(_markdown(not_learned(rows)))
    print()
    print(_markdown(pl.DataFrame(separations(load_signatures())).filter(pl.col("traits") <= 2)))


def _provenance(argv: Sequence[str], command: str, repetitions: int, method: str) -> dict[str, object]:
    return {
        "learned_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": f"python -m scanner.identify {command} " + shlex.join(argv),
        "method": method,
        "client": f"scanner.engine (scanner.handshake on aioquic {importlib.metadata.version('aioquic')}'s lower layers)",
        "repetitions": repetitions,
    }


def _lab_arguments(command: str, description: str, out: Path, repetitions: int, argv: Sequence[str]):  # type: ignore[no-untyped-def]
    parser = argparse.ArgumentParser(prog=f"python -m scanner.identify {command}", description=description)
    parser.add_argument("--out", type=Path, default=out, help="file to write")
    parser.add_argument("--repetitions", type=int, default=repetitions,
                        help="rounds of one h3 and one invalid-ALPN handshake per server")
    parser.add_argument("--instance", default=f"qlab{command}",
                        help="lab instance name (its own namespaces, so a running lab is left alone)")
    return parser.parse_args(argv)


def learn_command(argv: Sequence[str]) -> None:
    args = _lab_arguments(
        "learn", "Bring the lab up, handshake repeatedly with each of its library servers "
                 "(ALPN h3 and ALPN invalid) and write the library signatures learned.", SIGNATURES_PATH, 5, argv)
    from lab import Lab  # the lab needs root; importing it is only for learning

    with Lab.up(lab_topology("default"), instance=args.instance) as lab:
        observations = learn_from_lab(lab, args.repetitions)
    missing = [o.server for o in observations if not o.handshakes]
    if missing:
        raise ToolError(f"no completed handshake from: {', '.join(missing)}")
    document = learn_signatures(observations, _provenance(
        argv, "learn", args.repetitions,
        "repeated real handshakes from the lab's client namespace with each lab server as the lab configures "
        "it: ALPN h3 for the traits of the transport parameters and Retry, ALPN invalid for the refusal"))
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    for library, entry in document["libraries"].items():
        print(f"{library}: {len(entry['orders'])} order(s), randomised={entry['order_randomised']}, "
              f"invalid ALPN={entry['invalid_alpn']}")


def evaluate_command(argv: Sequence[str]) -> None:
    args = _lab_arguments(
        "evaluate", "Bring the lab up twice (as configured, then every library in its held-out configuration), "
                    "identify every server from fresh handshakes with the committed signatures, write the verdicts.",
        EVALUATION_PATH, 2, argv)
    from lab import Lab

    signatures = load_signatures()
    rows: list[dict[str, object]] = []
    for configuration in CONFIGURATIONS:
        with Lab.up(lab_topology(configuration), instance=args.instance) as lab:
            rows += evaluate_lab(lab, signatures, configuration, args.repetitions)
    document = {"provenance": {**_provenance(argv, "evaluate", args.repetitions,
                                             "fresh real handshakes with every lab server as configured and in its "
                                             "held-out configuration, classified with the committed signatures"),
                               "signatures_learned_at": signatures.learned_at, "held_out": HELD_OUT},
                "rows": rows}
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(confusion_matrix(rows))
    wrong = [r for r in rows if handshakes_needed(r) is None]
    for row in wrong:
        print(f"WRONG {row['configuration']} {row['server']}: {row['named_from_2']} ({row['evidence']})")


COMMANDS = {"learn": learn_command, "evaluate": evaluate_command, "report": report_command}


def main() -> None:
    command = COMMANDS.get(sys.argv[1] if len(sys.argv) > 1 else "")
    if command is None:
        print(__doc__)
        sys.exit(2)
    try:
        command(sys.argv[2:])
    except ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
