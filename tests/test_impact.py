"""`qreplay impact` on small real scan files written through the store: a small stream window caps a
browser's upload and is named with the value that lifts it, a small stream limit slows a page, a library
without an h3 server here is predicted on an assumed rule and marked so, a campaign directory reads as the
file, and bad scans end in one line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from replay.flowcontrol import burst_share, delivery_rounds, stream_rounds
from replay.impact import OBJECT_BYTES, PAGE_OBJECTS, check_note, predict, spot_check_candidates
from replay.impact_report import ImpactOptions, browser_clients, h3_servers, rule_keys, run_impact
from replay.measured_rules import load_update_rules, load_upload_receiver_rules
from scanner.campaign_store import export_shard
from scanner.engine import ScanSettings
from scanner.identify import identify_into, load_signatures, store_identifications
from scanner.scan import scan_into
from scanner.store import ScanStore
from scanner.targets import Target
from test_store import NOW, record
from tparams.libraries import LIBRARIES
from tparams.paramset import ParamSet

QREPLAY = str(Path(sys.executable).with_name("qreplay"))
SMALL_WINDOW = ParamSet(initial_max_data=16_777_216, initial_max_stream_data_bidi_remote=65_536,
                        initial_max_streams_bidi=100)
FEW_STREAMS = ParamSet(initial_max_data=16_777_216, initial_max_stream_data_bidi_remote=16_777_216,
                       initial_max_streams_bidi=4)
LARGE = ParamSet(initial_max_data=100_000_000, initial_max_stream_data_bidi_remote=50_000_000,
                 initial_max_streams_bidi=1000)
# (address, set, library identified)
ENDPOINTS = [*((f"192.0.2.{i}", SMALL_WINDOW, "ngtcp2") for i in range(3)), ("192.0.2.10", FEW_STREAMS, "netty"),
             ("192.0.2.20", LARGE, "quic-go")]
OPTIONS = ImpactOptions(delays_ms=(10, 200))


def write_scan(path: Path, identified: bool = True) -> Path:
    with ScanStore.open(path) as store:
        store.append_records(store.begin_scan("targets", {}), [record(ip, params) for ip, params, _ in ENDPOINTS])
    if identified:
        store_identifications(path, pl.DataFrame({
            "ip": [ip for ip, _, _ in ENDPOINTS], "port": [443] * len(ENDPOINTS), "library": [lib for *_, lib in ENDPOINTS],
            "identified_at": [NOW] * len(ENDPOINTS), "library_evidence": ["test"] * len(ENDPOINTS)},
            schema_overrides={"port": pl.Int32}))
    return path


@pytest.fixture
def scan(tmp_path: Path) -> Path:
    return write_scan(tmp_path / "scan.duckdb")


def rows_of(predictions: pl.DataFrame, params: ParamSet) -> pl.DataFrame:
    return predictions.filter(pl.col("set_fingerprint") == params.fingerprint())


def test_a_small_stream_window_caps_the_upload_and_is_named_with_its_lifting_value(scan: Path, tmp_path: Path):
    result = run_impact(scan, tmp_path / "out", OPTIONS)
    rows = rows_of(result.predictions, SMALL_WINDOW)
    assert rows.height == 4 and rows["endpoints"].unique().to_list() == [3]  # 2 browsers x 2 delays
    share = burst_share(load_update_rules()["ngtcp2"].consumed_fraction)  # ngtcp2's measured rule
    for row in rows.iter_rows(named=True):
        link_bytes = 100e6 / 8 * row["rtt_ms"] / 1000
        assert row["upload_capped"] and row["upload_binding"] == "initial_max_stream_data_bidi_remote"
        assert row["upload_steady_mbps"] == pytest.approx(share * 65_536 * 8 / (row["rtt_ms"] / 1000) / 1e6)
        assert row["upload_lifting_value"] == math.ceil(link_bytes / share)
        assert row["upload_mbps"] < row["upload_steady_mbps"]  # a 10 MB upload also pays its start
        assert not row["rule_assumed"] and row["h3_server"] == "ngtcp2" and row["checked"] is False
    large = rows_of(result.predictions, LARGE)
    assert set(large["upload_binding"]) == {"link"} and large["upload_lifting_value"].null_count() == large.height
    report = (tmp_path / "out" / "report.md").read_text()
    assert "initial_max_stream_data_bidi_remote" in report and "(predicted)" in report
    shares = result.tables["upload_shares"].filter(pl.col("upload_binding") == "initial_max_stream_data_bidi_remote")
    assert set(shares["share_pct"]) == {60.0}  # 3 of 5 endpoints
    stored = duckdb.connect(str(tmp_path / "out" / "impact.duckdb"), read_only=True)
    assert stored.execute("SELECT count(*) FROM predictions").fetchone()[0] == result.predictions.height
    assert (tmp_path / "out" / "report.html").read_text().count("data:image/png;base64") == 2  # both figures inside


def test_an_upload_is_predicted_with_the_rule_its_h3_server_was_measured_with_receiving_that_browsers_upload():
    """quiche's h3 server granted Firefox's uploads more of its window an update than quiche grants under a
    download (upload_receivers.csv against rules.csv): the upload's prediction takes the rule measured with the
    same server and browser; a library whose h3 server was not measured so (ngtcp2) keeps its download rule."""
    measured = load_upload_receiver_rules()
    if ("quiche", "firefox") not in measured:
        pytest.skip("no upload receiver rule of quiche's h3 server with Firefox in datasets/flowcontrol")
    sets = pl.DataFrame({"set_fingerprint": ["q", "n"], "library": ["quiche", "ngtcp2"], "endpoints": [1, 1],
                         "initial_max_data": [16_777_216] * 2, "initial_max_stream_data_bidi_remote": [131_072] * 2,
                         "initial_max_streams_bidi": [100] * 2})
    download = load_update_rules()
    rows = predict(sets, browser_clients(), download, rule_keys(), h3_servers(), delays_ms=(100,),
                   upload_rules=measured)
    for row in rows.iter_rows(named=True):
        if row["library"] == "quiche":
            rule = measured[("quiche", row["browser"])]
            assert row["receiver_fraction"] == rule.consumed_fraction
            assert "quiche's h3 server measured" in row["rule_source"]
            assert f"receiving {row['browser']}'s upload" in row["rule_source"]
        else:
            assert row["receiver_fraction"] == download["ngtcp2"].consumed_fraction
            assert "'s upload:" not in row["rule_source"]
        steady = burst_share(row["receiver_fraction"]) * 131_072 * 8 / 0.1 / 1e6
        assert row["upload_steady_mbps"] == pytest.approx(steady)
    quiche = rows.filter(pl.col("library") == "quiche")
    assert quiche["receiver_fraction"].n_unique() == 2  # each browser its own, as measured


def test_quic_go_grows_a_binding_window_and_starts_its_responses_at_32_packets():
    """quic-go auto-tunes its receive windows (a window-bound upload makes them double, up to 6 and 15 MiB), so the
    stream window that caps an upload to ngtcp2 caps none to quic-go at 100 Mbit/s; its sender starts a page's
    responses at 32 packets (ngtcp2: RFC 9002's ten), so its page of 20 objects of 10 kB at 100 ms takes 3 round
    trips of data where ngtcp2's takes 5 (caddy's pages measured 0.71-0.73 of the 5-round prediction)."""
    sets = pl.DataFrame({"set_fingerprint": ["g", "n"], "library": ["quic-go", "ngtcp2"], "endpoints": [1, 1],
                         "initial_max_data": [786_432] * 2, "initial_max_stream_data_bidi_remote": [65_536] * 2,
                         "initial_max_streams_bidi": [100] * 2})
    rules = load_update_rules()
    rows = predict(sets, browser_clients(), rules, rule_keys(), h3_servers(), delays_ms=(100,), objects=20)
    go, ng = (rows.filter(pl.col("library") == name) for name in ("quic-go", "ngtcp2"))
    assert set(ng["upload_binding"]) == {"initial_max_stream_data_bidi_remote"} and ng["upload_capped"].all()
    assert set(go["upload_binding"]) == {"link"} and not go["upload_capped"].any()
    assert set(go["max_stream_window"]) == {6 * 2**20} and set(ng["max_stream_window"]) == {0}
    assert go["page_load_ms"].to_list() == pytest.approx([400.0] * 2)  # the handshake's round trip + 3 of data
    assert ng["page_load_ms"].to_list() == pytest.approx([600.0] * 2)


def test_a_small_stream_limit_slows_the_page_and_a_library_without_h3_server_is_not_checked(scan: Path):
    rows = rows_of(run_impact(scan, None, OPTIONS).predictions, FEW_STREAMS)
    for row in rows.iter_rows(named=True):
        assert row["page_binding"] == "initial_max_streams_bidi" and row["page_slowed"]
        assert row["page_stream_rounds"] == 2 * math.ceil(PAGE_OBJECTS / 4) - 1  # 4 at a time, credit a round later
        link_bytes = 100e6 / 8 * row["rtt_ms"] / 1000
        needed = max(1, delivery_rounds(PAGE_OBJECTS * OBJECT_BYTES, 12_000, link_bytes))  # the bytes' own rounds
        lift = row["page_lifting_value"]
        assert stream_rounds(PAGE_OBJECTS, PAGE_OBJECTS, lift) <= needed < stream_rounds(PAGE_OBJECTS, PAGE_OBJECTS, lift - 1)
        assert row["page_load_ms"] == pytest.approx((1 + row["page_stream_rounds"]) * row["rtt_ms"])
        # netty: no rule measured, no h3 server in the project
        assert row["rule_assumed"] and row["rule_source"].startswith("ASSUMED") and "netty" in row["rule_source"]
        assert row["h3_server"] is None and row["checked"] is False and "no h3 server of netty" in row["check_note"]


def test_every_lab_library_has_an_h3_server_here_or_one_line_why_not_which_the_not_checked_note_carries():
    servers = h3_servers()
    for library in LIBRARIES:
        if "lab-server" not in library.programs or library.identified_as in servers:
            continue
        why = library.no_h3_server
        assert why and why.strip() and "\n" not in why, library.name
        assert check_note(library.identified_as, None) == \
            f"not checked: the project has no h3 server of {library.identified_as} ({why})"


def test_the_checks_run_nothing_for_a_library_without_an_h3_server_nor_ngtcp2s_upload_and_mark_them(tmp_path):
    """Spot checks with every set a candidate, through a recording execute (no testbed): netty's and msquic's sets
    (no h3 server here; msquic has a replay stack, its server speaking hq-interop) and ngtcp2's upload (gtlsserver
    answers a PUT as a GET) are never run, on their library or any other, and are marked not checked with why."""
    from replay.impact_check import CheckOptions

    endpoints = [*((f"192.0.2.{i}", SMALL_WINDOW, "ngtcp2") for i in range(3)), ("192.0.2.10", FEW_STREAMS, "netty"),
                 ("192.0.2.20", LARGE, "msquic")]
    path = tmp_path / "scan.duckdb"
    with ScanStore.open(path) as store:
        store.append_records(store.begin_scan("targets", {}), [record(ip, params) for ip, params, _ in endpoints])
    store_identifications(path, pl.DataFrame({
        "ip": [ip for ip, *_ in endpoints], "port": [443] * len(endpoints), "library": [lib for *_, lib in endpoints],
        "identified_at": [NOW] * len(endpoints), "library_evidence": ["test"] * len(endpoints)},
        schema_overrides={"port": pl.Int32}))
    executed = []

    def record_execute(experiment, results):
        executed.append((experiment.server_stack.name, experiment.options.workload.name,
                         experiment.tags["impact_library"]))
        return []

    options = ImpactOptions(delays_ms=(30,), top=3, worst=3, check=CheckOptions(browsers=("chromium", "firefox")))
    result = run_impact(path, tmp_path / "out", options, execute=record_execute)
    assert {library for *_, library in executed} <= {"ngtcp2"}, executed
    assert all(server == "ngtcp2" and workload == "requests" for server, workload, _ in executed), executed
    checks = result.checks
    assert set(checks["library"]) == {"ngtcp2", "netty", "msquic"}  # every set was a candidate
    for library in ("netty", "msquic"):
        mine = checks.filter(pl.col("library") == library)
        assert mine.height == 4 and not any(mine["checked"]) and set(mine["run_ids"]) == {""}  # 2 workloads x 2
        assert set(mine["note"]) == {check_note(library, None)}
        assert library_reason(library) in check_note(library, None)
        predicted = result.predictions.filter(pl.col("library") == library)
        assert not any(predicted["checked"]) and set(predicted["check_note"]) == {check_note(library, None)}
    upload = checks.filter((pl.col("library") == "ngtcp2") & (pl.col("workload") == "upload"))
    assert upload.height == 2 and not any(upload["checked"]) and set(upload["run_ids"]) == {""}
    assert all(note.startswith("not checked: ") and "upload" in note for note in upload["note"]), upload["note"]


def library_reason(identified_as: str) -> str:
    return next(library.no_h3_server for library in LIBRARIES if library.identified_as == identified_as)


def test_the_lab_scanned_and_identified_is_predicted_by_its_libraries(lab, tmp_path: Path):
    """A real scan of two lab servers with identification: ngtcp2's alpha set (a 32,768-byte
    initial_max_stream_data_bidi_remote) caps the upload on ngtcp2's measured rule; kwik's (5,120-byte
    windows) holds the page's requests back, its upload on the rule kwik's h3 server was measured with, and can
    be checked through that server."""
    servers = {server.name: server for server in lab.servers}
    targets = [Target(servers[name].ip, servers[name].port, servers[name].sni) for name in ("ngtcp2-alpha", "kwik")]
    path, settings, records = tmp_path / "lab.duckdb", ScanSettings(timeout=2.0), []
    with lab.in_client():
        scan_into(path, targets, settings, on_batch=records.extend)
        identify_into(path, targets, settings, load_signatures(), records)
    rows = run_impact(path, None, OPTIONS).predictions
    alpha, kwik = (rows.filter(pl.col("library") == library) for library in ("ngtcp2", "kwik"))
    assert alpha.height == kwik.height == 4, rows.select("library", "endpoints").unique()
    assert set(alpha["initial_max_stream_data_bidi_remote"]) == {32_768}
    assert set(alpha["upload_binding"]) == {"initial_max_stream_data_bidi_remote"} and set(alpha["h3_server"]) == {"ngtcp2"}
    assert not any(alpha["rule_assumed"]) and not any(kwik["rule_assumed"])  # kwik's h3 server's, measured
    assert all(source.startswith("kwik's h3 server") for source in kwik["rule_source"]), kwik["rule_source"]
    assert set(kwik["page_binding"]) == {"initial_max_data"}  # 100 requests of 300 bytes against 5,120
    assert set(kwik["checked"]) == {False} and set(kwik["h3_server"]) == {"kwik"}


def test_spot_check_candidates_are_the_commonest_and_the_worst(scan: Path):
    candidates = spot_check_candidates(run_impact(scan, None, OPTIONS).predictions, top=1, worst=1)
    assert candidates.select("why", "set_fingerprint").rows() == [
        ("most endpoints", SMALL_WINDOW.fingerprint()), ("worst", FEW_STREAMS.fingerprint())]


def test_a_campaign_directory_reads_as_its_file_and_the_cli_prints_a_summary(scan: Path, tmp_path: Path):
    export_shard(scan, tmp_path / "campaign", campaign="c", vantage="v", shard="0")
    done = subprocess.run([QREPLAY, "impact", str(tmp_path / "campaign"), "--out-dir", str(tmp_path / "c"),
                           "--delays", "10,200"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "5 endpoints" in done.stdout and "chromium: upload capped below the link: 10 ms 60.0%" in done.stdout
    from_file = run_impact(scan, None, OPTIONS).predictions.sort("set_fingerprint", "browser", "rtt_ms")
    from_campaign = pl.read_parquet(tmp_path / "c" / "predictions.parquet").sort("set_fingerprint", "browser", "rtt_ms")
    assert from_campaign.equals(from_file)


def _not_duckdb(path: Path) -> None:
    path.write_text("not a database\n")


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _unidentified(path: Path) -> None:
    write_scan(path, identified=False)


def _no_handshake(path: Path) -> None:
    with ScanStore.open(path) as store:
        store.append_records(store.begin_scan("targets", {}), [record("192.0.2.1", None, status="timeout")])
    store_identifications(path, pl.DataFrame(schema={"ip": pl.String, "port": pl.Int32}))


def _newer(path: Path) -> None:
    write_scan(path)
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE schema_version SET version = 4 WHERE name = 'scan'")


@pytest.mark.parametrize("make, says", [
    (_not_duckdb, "as a DuckDB file"), (_empty, ""), (_unidentified, "no library identified"),
    (_no_handshake, "no completed handshake"), (_newer, "schema scan v4"), (None, "no such scan file"),
])
def test_a_bad_scan_ends_in_one_line(tmp_path: Path, make, says: str):
    path = tmp_path / "bad.duckdb"
    if make:
        make(path)
    done = subprocess.run([QREPLAY, "impact", str(path), "--out-dir", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr
    assert not (tmp_path / "out" / "impact.duckdb").exists()


def test_stream_rounds_is_the_round_by_round_count_of_stream_credit():
    """The closed form against the rounds played out: at round k the client opens what its concurrency and the
    credit allow (the limit, plus every stream whose response ended two rounds before)."""
    def played(requests: int, concurrency: int, limit: int) -> int:
        opened, sent, last = [], 0, 0
        while sent < requests:
            k = len(opened)
            credit = limit + sum(opened[:max(k - 1, 0)]) - sent
            n = min(concurrency, credit, requests - sent)
            opened.append(n)
            sent += n
            last = k if n else last
        return last + 1
    for requests in (1, 7, 100, 150):
        for concurrency in (1, 6, 60, 100):
            for limit in (1, 4, 16, 50, 99, 100, 128, 256):
                assert stream_rounds(requests, concurrency, limit) == played(requests, concurrency, limit), \
                    (requests, concurrency, limit)
    assert stream_rounds(100, 100, 0) == math.inf


def test_delivery_rounds_doubles_then_holds_the_flight():
    def played(size: int, initial: int, flight: int) -> int:
        rounds, window, sent = 0, initial, 0
        while sent < size:
            sent += min(window, flight)
            window *= 2
            rounds += 1
        return rounds
    for size in (1_000, 12_000, 100_000, 1_000_000):
        for initial, flight in ((12_000, 125_000), (46_720, 2_500_000), (12_000, 5_000), (46_720, 46_720)):
            assert delivery_rounds(size, initial, flight) == played(size, initial, flight), (size, initial, flight)


# --- the spot checks: real Chromium through the identified library's own h3 server ------------------------

SMALL_AIOQUIC = ParamSet(initial_max_data=16_777_216, initial_max_stream_data_bidi_remote=16_384,
                         initial_max_streams_bidi=100)


@pytest.mark.lab
@pytest.mark.timing  # a goodput against its prediction
def test_spot_checks_measure_through_the_identified_librarys_server_and_mark_the_rest_not_checked(tmp_path: Path):
    """aioquic's set with a 16 KiB initial_max_stream_data_bidi_remote (two endpoints, the commonest) is checked
    with Chromium through aioquic's own h3 server at 30 ms: the window binds the measured upload as predicted
    (the model cannot be exceeded), the report names the parameter, the runs are stored as qreplay runs; netty's
    set (the worst page) has no h3 server here and is marked not checked with no run at all."""
    from replay.impact_check import CheckOptions
    from replay.stacks import get_stack

    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    for name in ("chromium", "aioquic"):
        if reason := get_stack(name).unavailable_reason():
            pytest.skip(reason)
    endpoints = [("192.0.2.1", SMALL_AIOQUIC, "aioquic"), ("192.0.2.2", SMALL_AIOQUIC, "aioquic"),
                 ("192.0.2.10", FEW_STREAMS, "netty")]
    path = tmp_path / "scan.duckdb"
    with ScanStore.open(path) as store:
        store.append_records(store.begin_scan("targets", {}), [record(ip, params) for ip, params, _ in endpoints])
    store_identifications(path, pl.DataFrame({
        "ip": [ip for ip, *_ in endpoints], "port": [443] * 3, "library": [lib for *_, lib in endpoints],
        "identified_at": [NOW] * 3, "library_evidence": ["test"] * 3}, schema_overrides={"port": pl.Int32}))
    options = ImpactOptions(delays_ms=(30,), top=1, worst=1, check=CheckOptions(
        browsers=("chromium",), upload_bytes=1_000_000, objects=5, trace=True))
    result = run_impact(path, tmp_path / "out", options)
    checks = result.checks
    upload = checks.filter((pl.col("library") == "aioquic") & (pl.col("workload") == "upload")).row(0, named=True)
    assert upload["checked"], upload["note"]
    assert (upload["server_stack"], upload["binding"]) == ("aioquic", "initial_max_stream_data_bidi_remote")
    assert upload["window_bound"] and upload["measured"] < 1.25 * upload["predicted"], upload
    assert upload["ratio"] == pytest.approx(upload["measured"] / upload["predicted"])
    assert "window-bound 1 of 1 within 25% of predicted" in result.check_line(), (result.check_line(), upload)
    # the upload traced: what aioquic granted, beside the case (the window it started at is the set's)
    assert upload["traced_runs"] == 1 and upload["max_stream_data_updates"] > 0, upload
    assert upload["server_initial_stream_window"] == SMALL_AIOQUIC.initial_max_stream_data_bidi_remote
    page = checks.filter((pl.col("library") == "aioquic") & (pl.col("workload") == "requests")).row(0, named=True)
    assert page["checked"] and page["measured"] > 0, page["note"]
    netty = checks.filter(pl.col("library") == "netty")
    assert netty.height == 2 and not any(netty["checked"]) and netty["run_ids"].to_list() == ["", ""]
    assert set(netty["note"]) == {check_note("netty", None)}
    marked = result.predictions.filter(pl.col("checked"))
    assert marked.select("library", "browser", "rtt_ms").rows() == [("aioquic", "chromium", 30.0)]
    stored = duckdb.connect(str(tmp_path / "out" / "spot_checks.duckdb"), read_only=True).execute(
        "SELECT server_stack, workload, status, bytes FROM runs ORDER BY workload").fetchall()
    assert stored == [("aioquic", "requests", "ok", 5 * 10_000), ("aioquic", "upload", "ok", 1_000_000)]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Spot checks: measured beside predicted" in report and "no h3 server of netty" in report


def test_the_check_reads_an_uploads_credit_from_the_results_file_through_its_store(tmp_path: Path):
    """What a traced upload's server granted, read back for the runs asked about: a download's trace (no credit)
    and a run not traced give nothing; a file written before traces had the column, and no file, give {}."""
    from replay import store
    from replay.impact_check import upload_credit

    results = tmp_path / "r.duckdb"
    granted = {"upload_stream": 0, "largest_stream_credit": 16_384}
    with store.connect(results) as con:
        store.insert(con, "traces", [{"run_id": "upload", "upload_credit": json.dumps(granted)},
                                     {"run_id": "download", "download_stream": 0}])
    assert upload_credit(results, ["upload", "download", "untraced"]) == {"upload": granted}
    assert upload_credit(results, ["download"]) == {} and upload_credit(results, []) == {}
    assert upload_credit(tmp_path / "none.duckdb", ["upload"]) == {}
    with duckdb.connect(str(results)) as con:
        con.execute("ALTER TABLE traces DROP COLUMN upload_credit")
    assert upload_credit(results, ["upload"]) == {}


def test_receiver_credit_reads_what_the_server_granted_and_a_window_grown_mid_connection():
    """An upload's trace as the check reads it: the server's MAX_STREAM_DATA limits for the upload stream less the
    bytes received by then. A server that starts at 1,000 and later grants 3,000 beyond what it received has grown
    its window (quic-go's auto-tuning does so); one that keeps granting 1,000 has not."""
    from replay.trace import Packet, StreamFrame, receiver_credit

    def up(t: float, offset: int, length: int, stream: int = 0) -> Packet:
        return Packet(time=t, down=False, number=int(t * 10), size=length + 30,
                      streams=(StreamFrame(stream, offset, length, False),))

    def grant(t: float, limit: int, conn: int | None = None) -> Packet:
        return Packet(time=t, down=True, number=int(t * 10), size=40, max_stream_data=((0, limit),),
                      max_data=() if conn is None else (conn,))

    server = {"initial_max_stream_data_bidi_remote": 1_000, "initial_max_data": 5_000}
    fixed = [up(1.0, 0, 1_000), grant(1.1, 2_000), up(1.2, 1_000, 1_000), grant(1.3, 3_000, 7_000),
             up(1.35, 0, 10, stream=4)]  # a request's few bytes on another stream: not the upload
    credit = receiver_credit(fixed, server)
    assert credit["upload_stream"] == 0 and credit["upload_bytes"] == 2_000
    assert credit["stream_credit_over_time"] == [(0.1, 2_000, 1_000), (0.3, 3_000, 1_000)]
    assert credit["conn_credit_over_time"] == [(0.3, 7_000, 5_000)]
    assert credit["largest_stream_credit"] == 1_000 and credit["stream_window_grew"] is False
    assert credit["conn_window_grew"] is False
    # the client had used its whole window each time an update came: the window held it back
    assert credit["least_stream_credit_left"] == 0 and credit["least_conn_credit_left"] == 3_000
    grown = [*fixed[:4], up(1.4, 2_000, 1_000), grant(1.5, 6_000)]
    credit = receiver_credit(grown, server)
    assert credit["largest_stream_credit"] == 3_000 and credit["stream_window_grew"] is True
    assert credit["max_stream_data_updates"] == 3
    assert receiver_credit([up(1.0, 0, 500)], server)["stream_window_grew"] is None  # no update: nothing to say
