"""The scan store on real DuckDB files: schema contract, batches, bad --out."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from scanner.engine import OK, TIMEOUT, Certificate, HandshakeRecord
from scanner.store import ScanStore
from scanner.targets import Target, parse_targets
from tparams.codec import decode_transport_parameters, encode_transport_parameters
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet, order_signature
from tparams.registry import REGISTRY, spec_for

QSCAN = str(Path(sys.executable).with_name("qscan"))
NOW = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


def record(ip: str, params: ParamSet | None, extra: list[tuple[int, bytes]] = (), status: str = OK) -> HandshakeRecord:
    raw = None if params is None else encode_transport_parameters([*extra, *params.transport_parameters()])
    return HandshakeRecord(
        ip=ip, port=443, sni="example.test", started_at=NOW, finished_at=NOW, handshake_ms=1.5 if status == OK else None,
        status=status, quic_version=1, alpn="h3",
        certificates=[Certificate("ab" * 32, "CN=x", "CN=y", ["example.test"], NOW, NOW)],
        transport_parameters_raw=raw, decoded=None if raw is None else decode_transport_parameters(raw, "server"),
    )  # fmt: skip


ALPHA = ParamSet(max_idle_timeout=30000, initial_max_data=16777216, disable_active_migration=True)


def test_contract_views_hold_values_as_sent(tmp_path: Path):
    path = tmp_path / "s.duckdb"
    with ScanStore.open(path) as store:
        scan_id = store.begin_scan("targets", {"rate": 1})
        store.append_records(scan_id, [record("192.0.2.1", ALPHA, extra=[(0x1B, b"\x01\x02")]), record("192.0.2.2", None, status=TIMEOUT)])
        store.finish_scan(scan_id)
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT name, version FROM schema_version").fetchall() == [("scan", 3)]
    handshakes = con.sql("SELECT * FROM handshakes ORDER BY ip").pl()
    assert {"ip", "port", "sni", "status", "error", "handshake_ms", "quic_version", "alpn", "scan_id"} <= set(handshakes.columns)
    assert handshakes["status"].to_list() == ["ok", "timeout"]
    params = con.sql("SELECT * FROM server_params").pl()
    assert params.height == 1
    assert params.select(PERFORMANCE_PARAMETERS).to_dicts()[0] == ALPHA.as_sent()
    assert params["disable_active_migration"].dtype == pl.Boolean
    assert params["set_fingerprint"][0] == ALPHA.fingerprint()
    long = con.sql("SELECT position, param_id, name, value, raw_hex FROM transport_parameters ORDER BY position").fetchall()
    assert long[0] == (0, 0x1B, "GREASE", None, "0102")  # GREASE kept, in wire order
    assert ("initial_max_data", 16777216) in [(n, v) for _, _, n, v, _ in long]


def test_the_projects_python_fetches_a_scan_files_timestamps_as_the_manual_does(tmp_path: Path):
    # duckdb's Python fetches TIMESTAMPTZ through pytz (pinned for it; it once failed for want of it); pandas
    # is not installed, so the manual reads tables into polars (.pl()) and prints them with .show().
    path = tmp_path / "s.duckdb"
    with ScanStore.open(path) as store:
        store.append_records(store.begin_scan("targets", {}), [record("192.0.2.1", ALPHA)])
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT started_at FROM handshakes").fetchall() == [(NOW,)]
        assert con.sql("SELECT started_at FROM handshakes").pl()["started_at"].to_list() == [NOW]


def test_batches_accumulate_and_ids_stay_unique(tmp_path: Path):
    path = tmp_path / "s.duckdb"
    with ScanStore.open(path) as store:
        scan_id = store.begin_scan("targets", {})
        store.append_records(scan_id, [record(f"192.0.2.{i}", ALPHA) for i in range(10)])
    with ScanStore.open(path) as store:  # reopening continues the handshake ids
        scan_id = store.begin_scan("targets", {}, resume=True)
        assert scan_id == 1
        store.append_records(scan_id, [record(f"198.51.100.{i}", ALPHA) for i in range(5)])
        assert store.recorded_targets(scan_id) >= {Target("192.0.2.3", 443, "example.test")}
        ids = store.con.execute("SELECT count(DISTINCT handshake_id), count(*) FROM handshakes").fetchall()[0]
    assert ids == (15, 15)


def test_columns_sent_in_pieces_store_as_one_batch(tmp_path: Path):
    # Scan workers convert their own batches (numbered from 0) and the store numbers them
    # on arrival: the rows must be those of the same records converted at once.
    from scanner.columns import handshake_columns

    records = [record(f"192.0.2.{i}", ALPHA if i % 3 else ParamSet(), extra=[(0x0F, bytes([i]))]) for i in range(9)]
    records.insert(4, record("192.0.2.200", None, status=TIMEOUT))
    tables = {}
    for name, pieces in (("whole", None), ("pieces", [records[:4], [], records[4:5], records[5:]])):
        with ScanStore.open(tmp_path / f"{name}.duckdb") as store:
            scan_id = store.begin_scan("targets", {})
            if pieces is None:
                assert store.append_records(scan_id, records) == len(records)
            else:
                assert store.append_columns(scan_id, [handshake_columns(p) for p in pieces]) == len(records)
            tables[name] = [store.con.execute(f"SELECT * FROM {t} ORDER BY ALL").to_arrow_table()
                            for t in ("handshakes", "handshake_parameters")]  # fmt: skip
    assert tables["pieces"][0].equals(tables["whole"][0]) and tables["pieces"][1].equals(tables["whole"][1])
    assert tables["whole"][0].column("handshake_id").to_pylist() == list(range(1, len(records) + 1))
    assert tables["whole"][1].num_rows > 9


def test_failed_batch_leaves_nothing(tmp_path: Path):
    with ScanStore.open(tmp_path / "s.duckdb") as store:
        bad = pl.DataFrame({"no_such_column": [1]})
        with pytest.raises(duckdb.Error):
            store.append({"handshakes": store.con.sql("SELECT * FROM handshakes").pl(), "scans": bad})
        assert store.handshake_count() == 0


def test_foreign_schema_is_one_line_error_before_any_packet(tmp_path: Path):
    foreign = tmp_path / "foreign.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    targets = tmp_path / "t.txt"
    targets.write_text("192.0.2.1\n")  # never contacted: the check comes first
    result = subprocess.run([QSCAN, "targets", str(targets), "--out", str(foreign)], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "another schema" in result.stderr
    not_duckdb = tmp_path / "text.duckdb"
    not_duckdb.write_text("hello")
    result = subprocess.run([QSCAN, "targets", str(targets), "--out", str(not_duckdb)], capture_output=True, text=True)
    assert result.returncode == 2 and "cannot open" in result.stderr and "Traceback" not in result.stderr


def test_unwritable_out_is_one_line_error(tmp_path: Path):
    targets = tmp_path / "t.txt"
    targets.write_text("192.0.2.1\n")
    result = subprocess.run(
        [QSCAN, "targets", str(targets), "--out", str(tmp_path / "missing-dir" / "s.duckdb")], capture_output=True, text=True
    )
    assert result.returncode == 2 and result.stderr.startswith("qscan: error: cannot open")
    assert result.stderr.count("\n") == 1


def test_existing_scan_needs_resume(tmp_path: Path):
    path = tmp_path / "s.duckdb"
    with ScanStore.open(path) as store:
        store.append_records(store.begin_scan("targets", {}), [record("192.0.2.1", ALPHA)])
    targets = tmp_path / "t.txt"
    targets.write_text("192.0.2.1,443,example.test\nnot-an-ip\n")
    result = subprocess.run([QSCAN, "targets", str(targets), "--out", str(path)], capture_output=True, text=True)
    # The refusal alone: the output is checked before the bad line is read and reported.
    assert result.returncode == 2 and result.stderr == (
        f"qscan: error: {path} already holds handshakes; pass --resume to continue that scan, or use a new --out\n")
    # With --resume the only target is already recorded: nothing is sent, nothing duplicated.
    result = subprocess.run([QSCAN, "targets", str(targets), "--out", str(path), "--resume", "--json"], capture_output=True, text=True)
    assert result.returncode == 0 and '"skipped": 1' in result.stdout


def test_target_lines():
    targets, bad = parse_targets(["192.0.2.1", "# c", "2001:db8::1,8443,a.test  # x", "bad", "192.0.2.1,0", "192.0.2.1", "[2001:db8::2],443"])
    assert targets == [Target("192.0.2.1", 443, None), Target("2001:db8::1", 8443, "a.test"), Target("2001:db8::2", 443, None)]
    assert [b.line_number for b in bad] == [4, 5]


def test_a_targets_file_or_hitlist_cut_short_keeps_its_whole_lines_and_names_the_cut_one(tmp_path: Path):
    """A last line without its newline may be cut (2001:2::1234 cut to 2001:2::12 still parses, as another
    address): it is left out and named; every whole line before it is kept."""
    from scanner.discovery.hitlist import parse_ipv6
    from scanner.targets import read_lines, read_targets

    whole = "198.18.0.1,443,alpha.lab.test\n# lab\n2001:2::1234,8443\n198.18.0.20\n"
    hitlist = "2001:2::1\n2001:2::1234\n2001:2::abcd\n"
    path = tmp_path / "cut.txt"
    for text, parse, kept in ((whole, None, 3), (hitlist, parse_ipv6, 3)):
        for cut in range(1, len(text)):
            path.write_text(text[:cut])
            items, bad = read_targets(str(path)) if parse is None else read_lines(str(path), parse, "hitlist")
            lines = text[:cut].split("\n")
            ended = [line for line in lines[:-1] if line and not line.startswith("#")]
            assert len(items) == len(ended) <= kept, (cut, items)
            if lines[-1] and not lines[-1].startswith("#"):  # the cut line, named with its number
                assert [(b.line_number, b.text) for b in bad] == [(len(lines), lines[-1])] and "cut short" in bad[0].reason
            else:
                assert bad == []
    # The command scans the whole lines and says which one it left out (loopback's discard port: no answer).
    path.write_text("127.0.0.1,9\n127.0.0.1,19")
    result = subprocess.run([QSCAN, "targets", str(path), "--out", str(tmp_path / "a.duckdb"), "--timeout", "0.2", "--json"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr.count("\n") == 1 and "line 2" in result.stderr and "cut short" in result.stderr, result.stderr
    assert '"bad_lines": 1' in result.stdout


def test_strict_rejects_file_and_lenient_reports_lines(tmp_path: Path):
    targets = tmp_path / "t.txt"
    targets.write_text("not-an-ip\n")
    result = subprocess.run([QSCAN, "targets", str(targets), "--out", str(tmp_path / "a.duckdb"), "--strict"], capture_output=True, text=True)
    assert result.returncode == 2 and "line 1" in result.stderr
    assert not (tmp_path / "a.duckdb").exists()
    result = subprocess.run([QSCAN, "targets", str(targets), "--out", str(tmp_path / "b.duckdb")], capture_output=True, text=True)
    assert result.returncode == 0 and "line 1" in result.stderr


def test_long_form_names_and_texts_equal_the_codec(tmp_path: Path):
    # The v2 store keeps neither names nor the hex of bytes values; the view must give back
    # exactly what the codec decoded, for every kind of parameter, across reopened stores.
    version_information = (0x11, bytes.fromhex("00000001" "00000001" "6b3343cf"))
    extra = [
        (0x0F, bytes.fromhex("c0ffee")),  # initial_source_connection_id: bytes
        (27 + 31 * 5, b"\x07"),  # GREASE
        (0x3127, b"\x01"),  # unknown id
        (0x0C, b""),  # disable_active_migration: flag
        version_information,  # structure
        (0x01, b"\xff"),  # max_idle_timeout, truncated varint: undecodable
    ]
    path = tmp_path / "s.duckdb"
    raw = encode_transport_parameters(extra)
    records = [record("192.0.2.1", ParamSet())]
    records[0].transport_parameters_raw, records[0].decoded = raw, decode_transport_parameters(raw, "server")
    for _ in range(2):
        with ScanStore.open(path) as store:
            store.append_records(store.begin_scan("targets", {}), records)
    con = duckdb.connect(str(path), read_only=True)
    rows = con.execute("SELECT handshake_id, name, value, value_text, raw_hex FROM transport_parameters ORDER BY handshake_id, position").fetchall()
    expected = [
        (p.name, p.value if type(p.value) is int else None,
         "true" if p.value is True else p.raw.hex() if p.value is None or isinstance(p.value, bytes) else rows[i][3], p.raw.hex())
        for i, p in enumerate(records[0].decoded.parameters)
    ]  # fmt: skip
    assert [row[1:] for row in rows] == expected * 2
    assert rows[4][3].startswith("chosen=0x00000001")
    listed = {param_id for (param_id,) in con.execute("SELECT param_id FROM parameter_names").fetchall()}
    assert listed == set(REGISTRY)  # the registry, and no GREASE id


def test_sql_names_every_id_as_the_registry_does(tmp_path: Path):
    # One definition of GREASE: Firefox's min_ack_delay 0xff02de1a is 31*N+27 but registered,
    # so the views, the order signature and the order grouping must all keep its name.
    grease, unknown = 27 + 31 * 977, 0x1234
    ids = [grease, *REGISTRY, unknown]
    path = tmp_path / "s.duckdb"
    raw = encode_transport_parameters([(param_id, b"\x01") for param_id in ids])
    records = [record("192.0.2.1", ParamSet()), record("192.0.2.2", ParamSet())]
    for r in records:
        r.transport_parameters_raw, r.decoded = raw, decode_transport_parameters(raw, "server")
    # The second record differs only in its GREASE id: it must share the first one's order.
    raw = encode_transport_parameters([(grease + 31, b"\x01"), *[(i, b"\x01") for i in ids[1:]]])
    records[1].transport_parameters_raw, records[1].decoded = raw, decode_transport_parameters(raw, "server")
    with ScanStore.open(path) as store:
        store.append_records(store.begin_scan("targets", {}), records)
    con = duckdb.connect(str(path), read_only=True)
    names = con.execute("SELECT param_id, name FROM transport_parameters WHERE ip = '192.0.2.1' ORDER BY position").fetchall()
    assert names == [(i, spec_for(i).name) for i in ids]
    assert ("ff02de1a", "min_ack_delay_draft_delayed_ack_02") in [(f"{i:x}", n) for i, n in names]
    signatures = con.execute("SELECT DISTINCT order_signature FROM handshakes").fetchall()
    assert signatures == [(order_signature(ids),)] and "-ff02de1a-" in signatures[0][0]
    assert signatures[0][0].startswith("G-")


def test_derived_columns_equal_each_records_own_computation(tmp_path: Path):
    # The store groups records with array operations; every record's derived columns must
    # still be what its own parameters give: GREASE ids differ per connection, values and
    # orders differ between sets, and findings or empty extensions take the exact path.
    import random

    from tparams.paramset import order_fingerprint, order_signature

    rng = random.Random(7)
    # Two sets with the same ids and other values: only the values tell them apart.
    sets = [ALPHA, ParamSet(initial_max_data=1 << 20, max_ack_delay=25), ParamSet(initial_max_data=1 << 21, max_ack_delay=25),
            ParamSet(), ParamSet(disable_active_migration=True)]  # fmt: skip
    records = []
    for i in range(400):
        chosen = rng.choice(sets)
        extra = [(0x0F, rng.randbytes(8)), (27 + 31 * rng.randrange(1000), rng.randbytes(rng.randrange(3)))]
        rng.shuffle(extra)
        if i % 50 == 7:
            extra.append((0x0C, b"\x01"))  # disable_active_migration with a body: a finding, value None
        records.append(record(f"192.0.2.{i % 250}", chosen, extra=extra))
    records.append(record("192.0.2.251", None, status=TIMEOUT))
    empty = record("192.0.2.252", ParamSet())
    empty.transport_parameters_raw, empty.decoded = b"", decode_transport_parameters(b"", "server")
    records.append(empty)
    with ScanStore.open(tmp_path / "s.duckdb") as store:
        store.append_records(store.begin_scan("targets", {}), records)
        rows = store.con.execute(
            f"SELECT {', '.join(PERFORMANCE_PARAMETERS)}, set_fingerprint, order_signature, order_fingerprint "
            "FROM handshakes ORDER BY handshake_id"
        ).fetchall()
    for row, rec in zip(rows, records, strict=True):
        if rec.decoded is None:
            assert set(row) == {None}
            continue
        params = ParamSet.from_decoded(rec.decoded)
        assert row == (*params.as_sent().values(), params.fingerprint(), order_signature(rec.decoded.ids), order_fingerprint(rec.decoded.ids))
    assert len({row[-3] for row in rows if row[-3]}) >= len(sets)


def test_long_form_rows_equal_each_parameter_as_decoded(tmp_path: Path):
    # The store reads the long form back from the extension bytes with array operations;
    # every row must still be the parameter the codec decoded. Clean extensions carry every
    # value type and varint size here (they take the array path), beside records with
    # findings (their decoded values), empty extensions and handshakes without any.
    import random

    from scanner.columns import value_text

    rng = random.Random(11)
    preferred_address = bytes(4) + b"\x01\xbb" + bytes(16) + b"\x01\xbb" + b"\x04" + rng.randbytes(4) + rng.randbytes(16)
    clean = [
        (0x0F, b""), (0x00, rng.randbytes(20)), (0x02, rng.randbytes(16)), (0x0C, b""), (0x0D, preferred_address),
        (0x11, bytes.fromhex("00000001" "00000001" "6b3343cf")), (0xFF73DB, bytes.fromhex("00000001")),
        (0x03, b"\x44\xd0"), (0x05, b"\x80\x01\x00\x00"), (0x07, b"\xc0\x00\x00\x00\x40\x00\x00\x00"), (0x08, b"\x03"),
        (0xFF02DE1A, b"\x43\xe8"), (0x3127, b"\x01\x02"), (0x3FFFFFFFFFFFFFFF, rng.randbytes(70)),
    ]  # fmt: skip
    broken = [(0x01, b"\xff"), (0x0C, b"\x01"), (0x03, b"\x10"), (0x11, b"\x01\x02\x03")]
    records = []
    for i in range(300):
        extra = rng.sample(clean, rng.randrange(len(clean))) + [(27 + 31 * rng.randrange(1 << 40), rng.randbytes(rng.randrange(3)))]
        if i % 10 == 3:
            extra.append(rng.choice(broken))
        rec = record(f"192.0.2.{i % 250}", ParamSet(), extra=extra)
        if i % 25 == 7:  # framing broke off: a truncated tail
            raw = rec.transport_parameters_raw[: -rng.randrange(1, 4)]
            rec.transport_parameters_raw, rec.decoded = raw, decode_transport_parameters(raw, "server")
        records.append(rec)
    records.insert(5, record("192.0.2.251", None, status=TIMEOUT))
    empty = record("192.0.2.252", ParamSet())
    empty.transport_parameters_raw, empty.decoded = b"", decode_transport_parameters(b"", "server")
    records.insert(9, empty)
    assert sum(1 for r in records if r.decoded is not None and r.decoded.findings) >= 30
    with ScanStore.open(tmp_path / "s.duckdb") as store:
        store.append_records(store.begin_scan("targets", {}), records)
        rows = store.con.execute(
            "SELECT handshake_id, position, param_id, value, value_text, raw FROM handshake_parameters ORDER BY handshake_id, position"
        ).fetchall()
    expected = [
        (handshake_id, p.position, p.id, p.value if type(p.value) is int else None, value_text(p.value), p.raw)
        for handshake_id, rec in enumerate(records, start=1) if rec.decoded is not None for p in rec.decoded.parameters
    ]  # fmt: skip
    assert rows == expected
    assert {type(p.value) for rec in records if rec.decoded for p in rec.decoded.parameters} >= {int, bool, bytes, type(None)}


def test_a_v3_file_written_before_hello_retry_request_gains_it(tmp_path: Path):
    """A column v3 gained later (schemas/README.md): an older v3 file, without it, takes new
    records when opened for writing, its old rows NULL."""
    old = tmp_path / "old.duckdb"
    with ScanStore.open(old) as store:
        store.append_records(store.begin_scan("targets", {}), [record("192.0.2.1", ALPHA)])
    with duckdb.connect(str(old)) as con:
        con.execute("ALTER TABLE handshakes DROP COLUMN hello_retry_request")  # as files written before it were
    with ScanStore.open(old) as store:
        retried = record("198.51.100.1", ALPHA)
        retried.hello_retry_request = True
        store.append_records(store.begin_scan("targets", {}, resume=True), [retried, record("198.51.100.2", ALPHA)])
    with duckdb.connect(str(old), read_only=True) as con:
        rows = con.execute("SELECT hello_retry_request FROM handshakes ORDER BY handshake_id").fetchall()
    assert rows == [(None,), (True,), (False,)]


def test_merging_a_v3_file_without_hello_retry_request_first_keeps_the_column(tmp_path: Path):
    from scanner.merge import merge_scans

    old, new, merged = tmp_path / "old.duckdb", tmp_path / "new.duckdb", tmp_path / "merged.duckdb"
    for path in (old, new):
        with ScanStore.open(path) as store:
            retried = record(f"192.0.2.{path.stem == 'new'}", ALPHA)
            retried.hello_retry_request = True
            store.append_records(store.begin_scan("targets", {}), [retried])
    with duckdb.connect(str(old)) as con:
        con.execute("ALTER TABLE handshakes DROP COLUMN hello_retry_request")  # as files written before it were
    merge_scans([old, new], merged)
    with duckdb.connect(str(merged), read_only=True) as con:
        assert con.execute("SELECT hello_retry_request FROM handshakes ORDER BY ip").fetchall() == [(None,), (True,)]
