"""Server-library identification on the lab's real servers, and the classifier's rules."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from tparams.library import (
    UNKNOWN,
    CloseObservation,
    LibrarySignatures,
    ServerObservations,
    classify,
    learn_signatures,
)

from scanner.engine import ScanSettings
from scanner.identify import (
    SIGNATURES_PATH,
    identify_targets,
    learn_from_lab,
    load_signatures,
    read_identifications,
    store_identifications,
)
from scanner.store import ScanStore
from scanner.targets import Target

# A lab server's expected verdict is its library where the signatures have
# learned it, else unknown: the deliberately broken servers ("broken": no
# library serialises like them) and libraries the lab has but the signatures not yet.


@pytest.fixture(scope="module")
def identified(lab):
    """The committed signatures applied to fresh real handshakes with every lab server."""
    targets = [Target(s.ip, s.port, s.sni) for s in lab.servers]
    with lab.in_client():
        frame = identify_targets(targets, ScanSettings(timeout=3, rate=0), load_signatures())
    return frame


@pytest.mark.lab
def test_every_lab_server_is_identified_and_broken_ones_stay_unknown(lab, identified):
    verdicts = {(row["ip"], row["port"]): row for row in identified.to_dicts()}
    assert len(verdicts) == len(lab.servers)
    learned = load_signatures().libraries
    for server in lab.servers:
        row = verdicts[(server.ip, server.port)]
        expected = server.library if server.library in learned else UNKNOWN  # broken, or not learned yet
        assert row["library"] == expected, (server.name, row["library_evidence"])
        assert row["library_evidence"]
    assert {"ngtcp2", "quic-go", "aioquic"} <= set(identified["library"])
    garbage = verdicts[(lab.server("broken-garbage").ip, 443)]
    assert garbage["order_signature"] is None and garbage["close_error_code"] is None


@pytest.mark.lab
def test_identifications_go_into_the_scan_file(tmp_path, identified):
    path = tmp_path / "scan.duckdb"
    ScanStore.open(path).close()
    store_identifications(path, identified, signatures_date="test")
    store_identifications(path, identified, signatures_date="test")  # a re-run: latest verdict wins, no error
    back = read_identifications(path)
    assert back.height == identified.height
    assert sorted(back["library"]) == sorted(identified["library"])
    with ScanStore.open(path, read_only=True) as store:
        libraries = dict(store.con.execute("SELECT library, targets FROM libraries").fetchall())
        versions = store.con.execute("SELECT version FROM schema_version WHERE name = 'library'").fetchall()
    assert libraries["ngtcp2"] == 2 and versions == [(1,)]


@pytest.mark.lab
def test_signatures_file_is_what_the_lab_shows_today(lab):
    """Learning again from fresh handshakes gives the committed orders and closes: the file is not stale."""
    committed = json.loads(SIGNATURES_PATH.read_text())["libraries"]
    relearned = learn_signatures(learn_from_lab(lab, repetitions=2), {"by": "test"})["libraries"]
    assert set(relearned) == set(committed)
    for library, entry in relearned.items():
        assert [o["signature"] for o in entry["orders"]] == [o["signature"] for o in committed[library]["orders"]]
        assert entry["invalid_alpn_close"] == committed[library]["invalid_alpn_close"]
        assert entry["order_randomised"] is committed[library]["order_randomised"] is False


# -- the rules, on the committed (learned) signatures and on small made-up observations -------

def _ids(signature: str) -> list[int]:
    return [0x1A if token == "G" else int(token, 16) for token in signature.split("-")]


def _order_of(library: str) -> str:
    return json.loads(SIGNATURES_PATH.read_text())["libraries"][library]["orders"][0]["signature"]


def test_an_order_missing_some_ids_still_fits_its_library():
    signatures = load_signatures()
    full = _ids(_order_of("ngtcp2"))
    fewer = [pid for pid in full if pid not in (0x0F, 0x2AB2)]
    verdict = classify(signatures, fewer)
    assert verdict.library == "ngtcp2" and "consistent" in verdict.library_evidence


def test_one_swapped_pair_rules_a_library_out():
    signatures = load_signatures()
    ids = _ids(_order_of("aioquic"))
    ids[3], ids[4] = ids[4], ids[3]
    assert classify(signatures, ids).library == UNKNOWN


def test_a_close_shared_by_two_libraries_alone_is_not_enough():
    signatures = load_signatures()
    shared = CloseObservation(0x178, "")
    verdict = classify(signatures, None, close=shared)
    assert verdict.library == UNKNOWN and set(verdict.candidates) == {"ngtcp2", "quic-go"}
    assert classify(signatures, None, close=CloseObservation(0x178, "No common ALPN protocols")).library == "aioquic"


def test_order_and_close_that_disagree_give_unknown():
    signatures = load_signatures()
    verdict = classify(signatures, _ids(_order_of("ngtcp2")), close=CloseObservation(0x178, "No common ALPN protocols"))
    assert verdict.library == UNKNOWN and "disagree" in verdict.library_evidence


def test_values_break_a_tie_between_libraries_with_the_same_order():
    order = (0x04, 0x05, 0x06, 0x01)
    document = learn_signatures([
        ServerObservations("a", "lib-a", "A 1", [order], [{"initial_max_data": 100}]),
        ServerObservations("b", "lib-b", "B 1", [order], [{"initial_max_data": 200}]),
    ], {})
    signatures = LibrarySignatures.from_document(document)
    assert classify(signatures, order).library == UNKNOWN
    verdict = classify(signatures, order, values={"initial_max_data": 200})
    assert verdict.library == "lib-b" and "tie" in verdict.library_evidence


def test_an_order_that_varies_between_connections_is_learned_as_randomised():
    shuffled = [(0x04, 0x05, 0x06, 0x01), (0x01, 0x06, 0x04, 0x05)]
    document = learn_signatures([ServerObservations("r", "lib-r", "R 1", shuffled, [{}, {}])], {})
    assert document["libraries"]["lib-r"]["order_randomised"] is True
    verdict = classify(LibrarySignatures.from_document(document), (0x05, 0x01, 0x04, 0x06))
    assert verdict.library == "lib-r" and "randomised" in verdict.library_evidence
    assert classify(LibrarySignatures.from_document(document), (0x05, 0x01, 0x04, 0x07, 0x08, 0x09)).library == UNKNOWN


@pytest.mark.lab
def test_qscan_targets_identify_stores_a_verdict_per_target(lab, tmp_path):
    targets = tmp_path / "targets.txt"
    targets.write_text("".join(f"{s.ip},{s.port},{s.sni}\n" for s in lab.servers))
    out = tmp_path / "scan.duckdb"
    qscan = Path(sys.executable).parent / "qscan"
    done = lab.run_in_client([str(qscan), "targets", str(targets), "--out", str(out), "--identify",
                              "--timeout", "3", "--quiet", "--json"], timeout=120)
    assert done.returncode == 0, done.stderr
    libraries = json.loads(done.stdout)["libraries"]
    learned = load_signatures().libraries
    expected = Counter(server.library if server.library in learned else UNKNOWN for server in lab.servers)
    assert libraries == dict(expected)
    stored = read_identifications(out)
    assert stored.height == len(lab.servers) and stored["signatures_date"].is_not_null().all()
