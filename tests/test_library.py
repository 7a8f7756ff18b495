"""Server-library identification on the lab's real servers, and the classifier's rules."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tparams.codec import decode_transport_parameters, encode_transport_parameters
from tparams.library import (
    FLOW_CONTROL,
    UNKNOWN,
    AlpnRefusal,
    LibrarySignatures,
    ServerObservations,
    classify,
    handshake_traits,
    learn_signatures,
    long_encodings,
)
from tparams.paramset import ParamSet

from lab import Lab
from scanner.engine import ScanSettings
from scanner.identify import (
    NOT_A_LIBRARY,
    SIGNATURES_PATH,
    flow_control_sent,
    identify_targets,
    lab_handshakes,
    lab_topology,
    learn_from_lab,
    load_signatures,
    read_identifications,
    store_identifications,
    verdict,
)
from scanner.store import ScanStore
from scanner.targets import Target

from conftest import lab_instance, lab_unavailable


def _expected(server) -> str:  # type: ignore[no-untyped-def]
    return UNKNOWN if server.kind == NOT_A_LIBRARY else server.library


def _identify(lab: Lab):  # type: ignore[no-untyped-def]
    targets = [Target(s.ip, s.port, s.sni) for s in lab.servers]
    with lab.in_client():
        return identify_targets(targets, ScanSettings(timeout=3, rate=0), load_signatures())


@pytest.fixture(scope="module")
def identified(lab):
    """The committed signatures applied to fresh real handshakes with every lab server."""
    return _identify(lab)


@pytest.fixture(scope="module")
def other_lab():
    """The lab once more, every library's server given other flow-control values."""
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    with Lab.up(lab_topology("other flow control"), instance=lab_instance("idfc")) as running:
        yield running


def _assert_every_library_named(lab: Lab, frame) -> None:  # type: ignore[no-untyped-def]
    verdicts = {(row["ip"], row["port"]): row for row in frame.to_dicts()}
    assert len(verdicts) == len(lab.servers)
    for server in lab.servers:
        row = verdicts[(server.ip, server.port)]
        assert row["library"] == _expected(server), (server.name, row["library_evidence"])
        assert row["library_evidence"]


@pytest.mark.lab
def test_every_lab_server_is_identified_and_broken_ones_stay_unknown(lab, identified):
    _assert_every_library_named(lab, identified)
    assert {"ngtcp2", "quic-go", "aioquic"} <= set(identified["library"])
    garbage = identified.filter(identified["ip"] == lab.server("broken-garbage").ip).to_dicts()[0]
    assert garbage["order_signature"] is None and garbage["close_error_code"] is None


@pytest.mark.lab
def test_other_flow_control_values_reach_the_wire_and_every_library_is_still_named(lab, other_lab):
    _assert_every_library_named(other_lab, _identify(other_lab))
    # The values really differ on the wire wherever a kind can set them (caddy cannot).
    default = {name: h3[0] for name, (h3, _) in lab_handshakes(lab, 1, timeout=3).items()}
    other = {name: h3[0] for name, (h3, _) in lab_handshakes(other_lab, 1, timeout=3).items()}
    changed = {name for name in default if name in other and default[name].decoded is not None
               and not default[name].decoded.findings
               and flow_control_sent(default[name]) != flow_control_sent(other[name])}
    libraries = {s.name for s in lab.servers if s.kind != NOT_A_LIBRARY}
    assert libraries - changed <= {"caddy"}, sorted(libraries - changed)


@pytest.mark.lab
def test_a_library_left_out_of_the_signatures_is_unknown_not_another(lab):
    signatures = load_signatures()
    records = lab_handshakes(lab, 1, timeout=3)
    # netty runs quiche (JNI): without one the other is the right name.
    same_library = {"netty": "quiche", "quiche": "netty"}
    for server in lab.servers:
        if server.kind == NOT_A_LIBRARY:
            continue
        held_out = LibrarySignatures(tuple(s for s in signatures.signatures if s.library != server.library))
        (h3,), (invalid,) = records[server.name]
        named = verdict(held_out, h3, invalid)
        assert named.library == same_library.get(server.library, UNKNOWN), (server.name, named.library_evidence)


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
    assert libraries["ngtcp2"] == 2 and versions == [(2,)]


@pytest.mark.lab
def test_signatures_file_is_what_the_lab_shows_today(lab):
    """Learning again from fresh handshakes gives nothing the committed file lacks: it is not stale.
    Only what this lab can show is compared: a library whose server does not run here (LSQUIC without
    the user's build) keeps its committed signature, which stays valid data."""
    committed = json.loads(SIGNATURES_PATH.read_text())["libraries"]
    relearned = learn_signatures(learn_from_lab(lab, repetitions=2, timeout=3), {"by": "test"})["libraries"]
    in_this_lab = {server.library for server in lab.servers if server.kind != NOT_A_LIBRARY}
    assert set(relearned) == in_this_lab and in_this_lab <= set(committed), (set(relearned), set(committed))
    for library, entry in relearned.items():
        assert entry["order_randomised"] is committed[library]["order_randomised"], library
        if not entry["order_randomised"]:
            assert [o["signature"] for o in entry["orders"]] == [o["signature"] for o in committed[library]["orders"]]
        for name, values in entry["keys"].items():
            assert all(v in committed[library]["keys"][name] for v in values), (library, name, values)
        assert set(entry["invalid_alpn"]) <= set(committed[library]["invalid_alpn"]), library


@pytest.mark.lab
@pytest.mark.parametrize("configuration", ["lab", "other_lab"])
def test_qscan_targets_identify_stores_a_verdict_per_target(configuration, request, tmp_path):
    lab = request.getfixturevalue(configuration)  # as configured, and with other flow-control values
    targets = tmp_path / "targets.txt"
    targets.write_text("".join(f"{s.ip},{s.port},{s.sni}\n" for s in lab.servers))
    out = tmp_path / "scan.duckdb"
    qscan = Path(sys.executable).parent / "qscan"
    done = lab.run_in_client([str(qscan), "targets", str(targets), "--out", str(out), "--identify",
                              "--timeout", "3", "--quiet", "--json"], timeout=120)
    assert done.returncode == 0, done.stderr
    expected: dict[str, int] = {}
    for server in lab.servers:
        expected[_expected(server)] = expected.get(_expected(server), 0) + 1
    assert json.loads(done.stdout)["libraries"] == dict(sorted(expected.items()))
    stored = read_identifications(out)
    assert stored.height == len(lab.servers) and stored["signatures_date"].is_not_null().all()


@pytest.mark.lab
def test_identify_after_resume_names_targets_recorded_before(lab, tmp_path):
    # Half the servers scanned first; the resumed scan with --identify has no h3 handshake
    # of its own for them, and must still name every server once.
    qscan = str(Path(sys.executable).parent / "qscan")
    lines = [f"{s.ip},{s.port},{s.sni}\n" for s in lab.servers]
    first, every = tmp_path / "first.txt", tmp_path / "every.txt"
    first.write_text("".join(lines[: len(lines) // 2]))
    every.write_text("".join(lines))
    out = tmp_path / "scan.duckdb"
    done = lab.run_in_client([qscan, "targets", str(first), "--out", str(out), "--timeout", "3", "--quiet"], timeout=120)
    assert done.returncode == 0, done.stderr
    done = lab.run_in_client([qscan, "targets", str(every), "--out", str(out), "--resume", "--identify",
                              "--timeout", "3", "--quiet", "--json"], timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected: dict[str, int] = {}
    for server in lab.servers:
        expected[_expected(server)] = expected.get(_expected(server), 0) + 1
    assert json.loads(done.stdout)["libraries"] == dict(sorted(expected.items()))
    assert read_identifications(out).height == len(lab.servers)


# -- the rules, on small made-up observations ---------------------------------------------

def _decoded(pairs: list[tuple[int, bytes]]):  # type: ignore[no-untyped-def]
    return decode_transport_parameters(encode_transport_parameters(pairs), "server")


def _handshake(order: list[int], flow: int = 1000, idle: int = 30000, cid: bytes = b"\x01" * 8):  # type: ignore[no-untyped-def]
    """A well-formed server extension with ids in ``order`` (0x1b: GREASE)."""
    values = {0x00: b"\x02" * 8, 0x01: ParamSet(max_idle_timeout=idle).transport_parameters()[0][1], 0x0F: cid,
              0x1B: b"\xaa", 0x03: b"\x45\xac"}
    flow_value = ParamSet(initial_max_data=flow).transport_parameters()[0][1]
    pairs = [(pid, values.get(pid, flow_value)) for pid in order]
    decoded = _decoded(pairs)
    assert not decoded.findings
    return decoded.ids, handshake_traits(decoded)


ORDER_A = [0x00, 0x01, 0x04, 0x05, 0x06, 0x0F]
ORDER_B = [0x1B, 0x05, 0x06, 0x04, 0x01, 0x00, 0x0F]


def _signatures(*observations: ServerObservations) -> LibrarySignatures:
    return LibrarySignatures.from_document(learn_signatures(observations, {}))


def _two_libraries() -> LibrarySignatures:
    return _signatures(
        ServerObservations("a", "lib-a", "A 1", [_handshake(ORDER_A)] * 2,
                           [AlpnRefusal("close", 0x178, 0x6, "no ALPN")]),
        ServerObservations("b", "lib-b", "B 1", [_handshake(ORDER_B, cid=b"\x01" * 4)] * 2, [AlpnRefusal("silence")]),
    )


def test_flow_control_values_are_never_looked_at():
    signatures = _two_libraries()
    for flow in (1, 1000, 1 << 20, (1 << 40) + 3):
        assert classify(signatures, _handshake(ORDER_A, flow=flow)[1]).library == "lib-a"
        assert classify(signatures, _handshake(ORDER_B, flow=flow, cid=b"\x01" * 4)[1]).library == "lib-b"


def test_an_order_missing_some_ids_still_fits_and_one_swapped_pair_rules_out():
    signatures = _two_libraries()
    verdict = classify(signatures, _handshake([0x00, 0x01, 0x05, 0x06, 0x0F])[1])
    assert verdict.library == "lib-a" and "consistent" in verdict.library_evidence
    assert classify(signatures, _handshake([0x00, 0x01, 0x05, 0x04, 0x06, 0x0F])[1]).library == UNKNOWN


def test_each_key_trait_alone_rules_a_library_out():
    signatures = _two_libraries()
    assert classify(signatures, _handshake(ORDER_A, cid=b"\x01" * 5)[1]).library == UNKNOWN  # CID length
    assert classify(signatures, _handshake([0x1B, *ORDER_A])[1]).library == UNKNOWN  # a GREASE it never sends
    padded = _decoded([(0x00, b"\x02" * 8), (0x01, b"\x80\x00\x00\x64"), *[(p, b"\x01") for p in ORDER_A[2:5]],
                       (0x0F, b"\x01" * 8)])
    assert long_encodings(padded.raw) == ("value of 01 in 4 bytes",)
    assert classify(signatures, handshake_traits(padded)).library == UNKNOWN
    wrong_close = AlpnRefusal("close", 0x178, 0x0, "no ALPN")
    verdict = classify(signatures, _handshake(ORDER_A)[1], wrong_close)
    assert verdict.library == UNKNOWN and "no learned library" in verdict.library_evidence


def test_a_refusal_alone_names_only_with_a_close_of_one_library():
    signatures = _two_libraries()
    assert classify(signatures, None, AlpnRefusal("close", 0x178, 0x6, "no ALPN")).library == "lib-a"
    # Silence is what any dead server shows: lib-b refuses that way, but it is no evidence on its own.
    assert classify(signatures, None, AlpnRefusal("silence")).library == UNKNOWN
    assert classify(signatures, None, None).library == UNKNOWN


def test_values_and_retry_break_a_tie_but_flow_control_does_not():
    same = [0x00, 0x01, 0x04, 0x0F]
    signatures = _signatures(
        ServerObservations("a", "lib-a", "A 1", [_handshake(same, idle=30000, flow=10)]),
        ServerObservations("b", "lib-b", "B 1", [_handshake(same, idle=60000, flow=20)]),
    )
    assert classify(signatures, _handshake(same, idle=90000, flow=20)[1]).library == UNKNOWN
    verdict = classify(signatures, _handshake(same, idle=60000, flow=10)[1])
    assert verdict.library == "lib-b" and "tie" in verdict.library_evidence


def test_an_order_that_varies_between_connections_is_learned_as_shuffled():
    shuffled = [_handshake([0x1B, 0x04, 0x05, 0x06, 0x01]), _handshake([0x01, 0x06, 0x1B, 0x04, 0x05])]
    document = learn_signatures([ServerObservations("r", "lib-r", "R 1", shuffled)], {})
    assert document["libraries"]["lib-r"]["order_randomised"] is True
    signatures = LibrarySignatures.from_document(document)
    verdict = classify(signatures, _handshake([0x05, 0x01, 0x04, 0x1B, 0x06])[1])
    assert verdict.library == "lib-r" and "shuffled" in verdict.library_evidence
    assert classify(signatures, _handshake([0x05, 0x01, 0x1B, 0x04, 0x07, 0x08, 0x09])[1]).library == UNKNOWN


def test_malformed_parameters_stay_unknown():
    assert classify(_two_libraries(), malformed=True).library == UNKNOWN


def test_flow_control_names_are_the_six_and_none_is_a_tie_breaker():
    from tparams.library import TIE_BREAK_VALUES

    assert len(FLOW_CONTROL) == 6 and not set(FLOW_CONTROL) & set(TIE_BREAK_VALUES)
