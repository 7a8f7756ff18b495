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
from scanner.engine import ScanSettings, scan_targets
from scanner.identify import (
    HELD_OUT,
    NOT_A_LIBRARY,
    SIGNATURES_PATH,
    flow_control_sent,
    h3_settings,
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
    """The lab once more, every library's server in its held-out configuration (what its
    application chooses, all unlike the learned one), beside the broken servers."""
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    topology = lab_topology("held-out")
    missing = set(HELD_OUT) - {spec.kind for spec in topology.servers}
    if missing:
        pytest.skip(f"lab kinds not set up here (scripts/setup.sh builds them): {', '.join(sorted(missing))}")
    with Lab.up(topology, instance=lab_instance("idho")) as running:
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
def test_held_out_configurations_reach_the_wire_and_every_library_is_still_named(lab, other_lab):
    """Every library in a configuration it was never learned from: other flow control, and
    another CID length, idle timeout, datagrams, migration or Retry wherever it lets an
    application choose them. One library left out of the signatures is unknown there."""
    identified = _identify(other_lab)
    _assert_every_library_named(other_lab, identified)
    assert {"x/net/quic", "picoquic", "quic-go", "quiche", "netty"} <= set(identified["library"])
    default = {name: h3[0] for name, (h3, _) in lab_handshakes(lab, 1, timeout=3).items()}
    held_out = {name: h3[0] for name, (h3, _) in lab_handshakes(other_lab, 1, timeout=3).items()}
    for server in other_lab.servers:
        if server.kind == NOT_A_LIBRARY:
            continue
        before, after = default[server.name], held_out[server.name]
        assert flow_control_sent(before) != flow_control_sent(after), server.name
        cid = HELD_OUT[server.kind]["application"].get("cid_length")
        if cid is not None:  # the CID length the application chose is on the wire
            sent = next(p.value for p in after.decoded.parameters if p.name == "initial_source_connection_id")
            assert len(sent) == cid, server.name
        assert after.retry is bool(HELD_OUT[server.kind]["application"].get("retry") or server.kind == "netty")
    targets = [Target(s.ip, s.port, s.sni) for s in other_lab.servers]
    with other_lab.in_client():
        without = identify_targets(targets, ScanSettings(timeout=3, rate=0), load_signatures().without("picoquic"))
    named = dict(zip(without["ip"], without["library"]))
    assert named[other_lab.server("picoquic").ip] == UNKNOWN
    assert named[other_lab.server("x-net-quic").ip] == "x/net/quic"


@pytest.mark.lab
def test_a_library_left_out_of_the_signatures_is_unknown_not_another(lab):
    signatures = load_signatures()
    records = lab_handshakes(lab, 1, timeout=3)
    # netty runs quiche (JNI): without netty, quiche is the right name (a quiche
    # server sends no Retry, which netty's does on every connection).
    same_library = {"netty": "quiche"}
    for server in lab.servers:
        if server.kind == NOT_A_LIBRARY:
            continue
        (h3,), (invalid,) = records[server.name]
        named = verdict(signatures.without(server.library), h3, invalid)
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
        assert set(entry["new_token"]) <= set(committed[library]["new_token"]), library


@pytest.mark.lab
def test_new_token_frames_are_recorded_only_when_identification_waits_for_handshake_done(lab):
    """quic-go sends one NEW_TOKEN with its HANDSHAKE_DONE, quiche none; a plain scan does not wait."""
    servers = {server.kind: server for server in lab.servers if server.kind in ("quic-go", "quiche")}
    if len(servers) < 2:
        pytest.skip("the quic-go and quiche lab servers are not set up here (scripts/setup.sh builds them)")
    targets = [Target(s.ip, s.port, s.sni) for s in servers.values()]
    kind = {(s.ip, s.port): name for name, s in servers.items()}
    waited, plain = [], []
    with lab.in_client():
        scan_targets(targets, h3_settings(ScanSettings(timeout=3, rate=0)), waited.extend)
        scan_targets(targets, ScanSettings(timeout=3, rate=0), plain.extend)
    seen = {kind[(r.ip, r.port)]: (r.status, r.handshake_done, r.new_token_lengths) for r in waited}
    assert seen["quiche"] == ("ok", True, [])
    status, done, lengths = seen["quic-go"]
    assert (status, done, len(lengths)) == ("ok", True, 1) and lengths[0] > 16, seen  # a sealed token
    assert all(r.status == "ok" and r.handshake_done is None and r.new_token_lengths is None for r in plain)


@pytest.mark.lab
@pytest.mark.parametrize("configuration", ["lab", "other_lab"])
def test_qscan_targets_identify_stores_a_verdict_per_target(configuration, request, tmp_path):
    lab = request.getfixturevalue(configuration)  # as configured, and held out
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
    by_count = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))
    assert done.stderr.splitlines()[-1] == ("libraries: " + ", ".join(f"{name} {n}" for name, n in by_count)
                                            + " (targets each; verdicts in table server_library)")
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


def test_each_key_trait_alone_rules_a_library_out_but_an_application_choice_does_not():
    signatures = _two_libraries()
    verdict = classify(signatures, _handshake(ORDER_A, cid=b"\x01" * 5)[1])  # the application picks CID lengths
    assert verdict.library == "lib-a" and "soft" in verdict.library_evidence and "cid_length 5" in verdict.library_evidence
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


def test_libraries_no_habit_tells_apart_are_named_as_a_set_whatever_the_values():
    same = [0x00, 0x01, 0x04, 0x0F]
    signatures = _signatures(
        ServerObservations("a", "lib-a", "A 1", [_handshake(same, idle=30000, flow=10)]),
        ServerObservations("b", "lib-b", "B 1", [_handshake(same, idle=60000, flow=20)]),
    )
    for idle in (90000, 60000, 30000):  # a value one of them showed is no reason to pick it
        verdict = classify(signatures, _handshake(same, idle=idle, flow=10)[1])
        assert verdict.library == "lib-a|lib-b" and verdict.candidates == ("lib-a", "lib-b")
        assert "no habit tells lib-a / lib-b apart" in verdict.library_evidence


def test_a_value_sent_at_its_default_is_a_habit_both_ways():
    # lib-d sends ack_delay_exponent 3 (the RFC default, which nothing needs sent); lib-e never.
    exponent = ParamSet(ack_delay_exponent=3).transport_parameters()[0]
    plain = _handshake([0x00, 0x04, 0x05, 0x0F])
    with_default = _decoded([(0x00, b"\x02" * 8), exponent, (0x04, b"\x01"), (0x05, b"\x01"), (0x0F, b"\x01" * 8)])
    signatures = _signatures(
        ServerObservations("d", "lib-d", "D 1", [(with_default.ids, handshake_traits(with_default))]),
        ServerObservations("e", "lib-e", "E 1", [plain]))
    assert classify(signatures, handshake_traits(with_default)).library == "lib-d"
    assert classify(signatures, plain[1]).library == "lib-e"  # lib-d would have sent it


def test_a_retry_on_every_connection_and_its_token_are_habits():
    order = [0x00, 0x01, 0x04, 0x0F]
    decoded = _decoded([(0x00, b"\x02" * 8), (0x01, b"\x01"), (0x04, b"\x01"), (0x0F, b"\x01" * 8)])
    always = handshake_traits(decoded, retry=True, retry_token_length=9, retry_token=b"netty\x01\x02\x03\x04")
    signatures = _signatures(ServerObservations("n", "lib-n", "N 1", [(decoded.ids, always)]),
                             ServerObservations("q", "lib-q", "Q 1", [_handshake(order)]))
    assert classify(signatures, _handshake(order)[1]).library == "lib-q"  # no Retry: not lib-n
    assert classify(signatures, always).library == "lib-n"  # its token
    sealed = handshake_traits(decoded, retry=True, retry_token_length=9, retry_token=bytes(range(200, 209)))
    assert classify(signatures, sealed).library == "lib-n|lib-q"  # a Retry alone is an application's choice


def test_new_token_is_a_key_where_the_library_decides_and_soft_where_the_application_does():
    order = [0x00, 0x01, 0x04, 0x0F]
    decoded = _decoded([(0x00, b"\x02" * 8), (0x01, b"\x01"), (0x04, b"\x01"), (0x0F, b"\x01" * 8)])
    sends, silent = (handshake_traits(decoded, new_token_lengths=lengths) for lengths in ([90], []))
    # quic-go always sends one; ngtcp2 sends one when its application submits it.
    signatures = _signatures(ServerObservations("g", "quic-go", "G 1", [(decoded.ids, sends)]),
                             ServerObservations("q", "quiche", "Q 1", [(decoded.ids, silent)]),
                             ServerObservations("n", "ngtcp2", "N 1", [(decoded.ids, sends)]))
    assert classify(signatures, sends).library == "ngtcp2|quic-go"
    verdict = classify(signatures, silent)
    assert verdict.library == "ngtcp2|quiche" and "ngtcp2 never showed NEW_TOKEN frames 0" in verdict.library_evidence
    assert classify(signatures, _handshake(order)[1]).library == "ngtcp2|quic-go|quiche"  # not waited for


def test_an_order_that_varies_between_connections_is_learned_as_shuffled():
    shuffled = [_handshake([0x1B, 0x04, 0x05, 0x06, 0x01]), _handshake([0x01, 0x06, 0x1B, 0x04, 0x05])]
    document = learn_signatures([ServerObservations("r", "lib-r", "R 1", shuffled)], {})
    assert document["libraries"]["lib-r"]["order_randomised"] is True
    signatures = LibrarySignatures.from_document(document)
    verdict = classify(signatures, _handshake([0x05, 0x01, 0x04, 0x1B, 0x06])[1])
    assert verdict.library == "lib-r" and "shuffled" in verdict.library_evidence
    # Registered ids an application may turn on fit; a private id it never sent does not.
    assert classify(signatures, _handshake([0x05, 0x01, 0x1B, 0x04, 0x07, 0x08, 0x09])[1]).library == "lib-r"
    assert classify(signatures, _handshake([0x05, 0x01, 0x1B, 0x04, 0x1057])[1]).library == UNKNOWN


def test_malformed_parameters_stay_unknown():
    assert classify(_two_libraries(), malformed=True).library == UNKNOWN


def test_flow_control_names_are_the_six_and_none_is_soft_evidence_either():
    from tparams.library import SOFT_VALUES

    assert len(FLOW_CONTROL) == 6 and not set(FLOW_CONTROL) & set(SOFT_VALUES)
