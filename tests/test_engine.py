"""The handshake engine against the lab's real servers, checked against the
lab's own configuration and against tshark's decoding of the same handshakes."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from interrupting import ctrl_c_when, interruptible
from common.tshark import wait_until_capturing, wait_until_in_capture
from scanner.scan import scan_into
from scanner.engine import OK, PROTOCOL_ERROR, TIMEOUT, TLS_ALERT, ScanSettings
from lab import Lab
from scanner.targets import Target
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet

pytestmark = pytest.mark.lab

QSCAN = str(Path(sys.executable).with_name("qscan"))
MALFORMED = ("broken-duplicate", "broken-truncated", "broken-short-token")
# tshark field -> our parameter name (tshark 4.0 names).
TSHARK_FIELDS = {
    "tls.quic.parameter.max_idle_timeout": "max_idle_timeout",
    "tls.quic.parameter.initial_max_data": "initial_max_data",
    "tls.quic.parameter.initial_max_stream_data_bidi_local": "initial_max_stream_data_bidi_local",
    "tls.quic.parameter.initial_max_stream_data_bidi_remote": "initial_max_stream_data_bidi_remote",
    "tls.quic.parameter.initial_max_stream_data_uni": "initial_max_stream_data_uni",
    "tls.quic.parameter.initial_max_streams_bidi": "initial_max_streams_bidi",
    "tls.quic.parameter.initial_max_streams_uni": "initial_max_streams_uni",
    "tls.quic.parameter.active_connection_id_limit": "active_connection_id_limit",
}


def lab_targets(lab: Lab) -> list[Target]:
    return [Target(s.ip, s.port, s.sni) for s in lab.servers]


def client_interface(lab: Lab) -> str:
    out = subprocess.run(["ip", "-n", lab.client_ns, "-o", "link"], capture_output=True, text=True, check=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
    return next(name for name in names if name != "lo")


@pytest.fixture(scope="module")
def lab_scan(lab: Lab, tmp_path_factory: pytest.TempPathFactory):
    """One scan of every lab server, captured by tshark in the client namespace, with the TLS secrets."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    tmp = tmp_path_factory.mktemp("engine")
    pcap, keylog, out, log = tmp / "scan.pcapng", tmp / "keys.log", tmp / "scan.duckdb", tmp / "tshark.log"
    with open(log, "wb") as log_file:
        capture = subprocess.Popen(  # ended by SIGINT below, which it must not have inherited ignored
            interruptible(["ip", "netns", "exec", lab.client_ns, "tshark", "-q", "-i", client_interface(lab),
                           "-f", "udp", "-w", str(pcap)]),
            stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_until_capturing(capture, log)
        with lab.in_client():
            outcome = scan_into(out, lab_targets(lab), ScanSettings(timeout=3.0, keylog_file=str(keylog)))
            wait_until_in_capture(pcap, lab.servers[0].ip)
    finally:
        capture.send_signal(signal.SIGINT)
        capture.wait(timeout=10)
    con = duckdb.connect(str(out), read_only=True)
    yield lab, outcome, con, pcap, keylog
    con.close()


def test_every_server_recorded_once(lab_scan):
    lab, outcome, con, *_ = lab_scan
    rows = con.execute("SELECT ip, port, sni, count(*) FROM handshakes GROUP BY ALL").fetchall()
    assert sorted((ip, port, sni) for ip, port, sni, _ in rows) == sorted((s.ip, s.port, s.sni) for s in lab.servers)
    assert all(count == 1 for *_, count in rows)
    assert outcome.attempted == len(lab.servers)


def test_parameters_match_lab_configuration(lab_scan):
    lab, _, con, *_ = lab_scan
    known = [s for s in lab.servers if s.transport_parameters is not None and s.kind in ("ngtcp2", "aioquic")]
    assert any(s.kind == "ngtcp2" for s in known)
    columns = ", ".join(PERFORMANCE_PARAMETERS)
    for server in known:
        row = con.execute(f"SELECT {columns}, set_fingerprint FROM server_params WHERE ip = ?", [server.ip]).fetchall()
        assert len(row) == 1, f"{server.name} did not complete"
        recorded = ParamSet.from_mapping(dict(zip(PERFORMANCE_PARAMETERS, row[0][:-1])))
        expected = ParamSet.from_mapping(server.transport_parameters)
        assert recorded == expected, server.name
        assert row[0][-1] == expected.fingerprint()


def test_parameters_match_tshark(lab_scan):
    lab, _, con, pcap, keylog = lab_scan
    fields = ["ip.src", *TSHARK_FIELDS]
    result = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-Y", "tls.quic.parameter.initial_max_data && ip.src != "
         + lab.addresses["client"], "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f", *[f"-e{f}" for f in fields]],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = {}
    for line in result.stdout.splitlines():
        ip, *values = line.split("\t")
        seen[ip] = dict(zip(TSHARK_FIELDS.values(), values))
    ngtcp2 = [s for s in lab.servers if s.kind == "ngtcp2"]
    malformed = {s.ip for s in lab.servers if s.name in MALFORMED}
    assert ngtcp2 and all(s.ip in seen for s in ngtcp2), f"tshark decoded parameters of {sorted(seen)}"
    for ip, values in seen.items():
        rows = con.execute(
            "SELECT name, value FROM transport_parameters WHERE ip = ? AND value IS NOT NULL ORDER BY position", [ip]
        ).fetchall()
        ours: dict[str, int] = {}
        for name, value in rows:  # tshark's occurrence=f: the first of a duplicated parameter
            ours.setdefault(name, value)
        for name, text in values.items():
            if not text or (ip in malformed and name not in ours):
                continue  # tshark reads a value out of a truncated varint; our codec records a finding instead
            assert ours.get(name) == int(text), (ip, name)


def test_wire_order_and_raw_bytes_kept(lab_scan):
    lab, _, con, *_ = lab_scan
    for server in lab.servers:
        rows = con.execute(
            "SELECT position, raw_hex FROM transport_parameters WHERE ip = ? ORDER BY position", [server.ip]
        ).fetchall()
        raw = con.execute("SELECT transport_parameters_raw FROM handshakes WHERE ip = ?", [server.ip]).fetchall()[0][0]
        if raw is None:
            continue
        assert [p for p, _ in rows] == list(range(len(rows)))
        # Every parameter's raw value is a slice of the extension, in order.
        offset = 0
        for _, raw_hex in rows:
            found = bytes(raw).find(bytes.fromhex(raw_hex), offset)
            assert found >= 0
            offset = found + len(raw_hex) // 2


def test_broken_servers_yield_error_rows(lab_scan):
    lab, _, con, *_ = lab_scan
    for name in MALFORMED:
        server = lab.server(name)
        status, findings, error = con.execute(
            "SELECT status, findings, error FROM handshakes WHERE ip = ?", [server.ip]
        ).fetchall()[0]
        assert status == PROTOCOL_ERROR, name
        assert findings and error, name
    garbage = lab.server("broken-garbage")
    status, received = con.execute("SELECT status, datagrams_received FROM handshakes WHERE ip = ?", [garbage.ip]).fetchall()[0]
    assert status in (TIMEOUT, PROTOCOL_ERROR) and received > 0


def test_good_servers_complete_with_tls_details(lab_scan):
    lab, _, con, *_ = lab_scan
    for server in (s for s in lab.servers if s.kind in ("ngtcp2", "caddy", "aioquic")):
        row = con.execute(
            "SELECT status, alpn, tls_version, cipher_suite, key_exchange_group, len(certificates), quic_version, handshake_ms"
            " FROM handshakes WHERE ip = ?",
            [server.ip],
        ).fetchall()[0]
        assert row[0] == OK, server.name
        assert row[1] == "h3" and row[2] == "TLS 1.3" and row[3] and row[4] and row[5] >= 1 and row[6] == 1
        assert 0 < row[7] < 3000


def test_invalid_alpn_is_a_tls_alert(lab: Lab, tmp_path: Path):
    server = lab.server("ngtcp2-alpha")
    with lab.in_client():
        scan_into(tmp_path / "a.duckdb", [Target(server.ip, server.port, server.sni)], ScanSettings(alpn="invalid", timeout=3))
    con = duckdb.connect(str(tmp_path / "a.duckdb"), read_only=True)
    status, code, closed_by, frame_type, phrase, retry_token_length = con.execute(
        "SELECT status, error_code, closed_by, close_frame_type, close_reason_phrase, retry_token_length FROM handshakes"
    ).fetchall()[0]
    assert status == TLS_ALERT and code == 0x100 + 120 and closed_by == "server"  # no_application_protocol
    # ngtcp2 0.12 names no triggering frame (type 0) and gives no reason phrase; it sends no Retry.
    assert (frame_type, phrase, retry_token_length) == (0, "", None)


def test_an_icmp_unreachable_is_its_own_status_and_a_black_hole_a_timeout(lab: Lab, tmp_path: Path):
    """A UDP-closed host, a closed port on a server's host, an unassigned address of the lab's /24 (the core's
    ARP fails: host unreachable) and a blackholed one (silent): only the last is a timeout."""
    alpha = lab.server("ngtcp2-alpha")
    closed, unassigned, blackholed = lab.addresses["closed_hosts"][0], "198.18.1.99", "198.18.1.250"
    (tmp_path / "hosts.txt").write_text(f"{closed}\n{alpha.ip},4433\n{unassigned}\n{blackholed}\n")
    done = lab.run_in_client([QSCAN, "targets", str(tmp_path / "hosts.txt"), "--out", str(tmp_path / "u.duckdb"),
                              "--timeout", "6"])
    assert done.returncode == 0, done.stderr
    assert "4 handshakes (0 ok, 4 failed, 3 of them unreachable)" in done.stdout
    with duckdb.connect(str(tmp_path / "u.duckdb"), read_only=True) as con:
        rows = dict(((ip, port), (status, error)) for ip, port, status, error in
                    con.execute("SELECT ip, port, status, error FROM handshakes").fetchall())
    core = lab.addresses["core_client_side"]  # the router answers from the side the Initial came in
    assert rows == {
        (closed, 443): ("unreachable", f"ICMP port unreachable (type 3 code 3) from {closed}"),
        (alpha.ip, 4433): ("unreachable", f"ICMP port unreachable (type 3 code 3) from {alpha.ip}"),
        (unassigned, 443): ("unreachable", f"ICMP host unreachable (type 3 code 1) from {core}"),
        (blackholed, 443): ("timeout", "no handshake within 6 s (0 datagram(s) received)"),
    }


def test_lab_targets_out_of_reach_are_refused_and_netns_reaches_them(lab: Lab, tmp_path: Path):
    """From this (the root) namespace Initials to the lab would leave by the default route: refused in one
    line before the store is made; --netns runs the same scan from the lab's client namespace."""
    alpha = lab.server("ngtcp2-alpha")
    hosts, out = tmp_path / "hosts.txt", tmp_path / "t.duckdb"
    for address in (alpha.ip, "2001:2::10"):
        hosts.write_text(f"{address},{alpha.port},{alpha.sni}\n")
        refused = subprocess.run([QSCAN, "targets", str(hosts), "--out", str(out)], capture_output=True, text=True,
                                 timeout=60)
        assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
        assert refused.stderr.startswith(f"qscan: error: {address} is a lab address that this network namespace "
                                         "does not reach"), refused.stderr
        assert "`ip netns exec <client ns> qscan ...`, or give --netns <client ns>" in refused.stderr
        assert not out.exists()
    hosts.write_text(f"{alpha.ip},{alpha.port},{alpha.sni}\n")
    done = subprocess.run([QSCAN, "targets", str(hosts), "--out", str(out), "--netns", lab.client_ns, "--timeout",
                           "3"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "1 handshakes (1 ok" in done.stdout, done.stdout + done.stderr


def committed_handshakes(scan: Path, workdir: Path) -> int:
    """Handshakes committed to ``scan`` so far, read while its writer holds the file's lock
    (which refuses even read-only connections): a copy of the file and its WAL is counted."""
    workdir.mkdir(exist_ok=True)
    for source in (scan, scan.with_name(scan.name + ".wal")):
        target = workdir / source.name
        target.unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(source, target)
    try:
        with duckdb.connect(str(workdir / scan.name), read_only=True) as con:
            return con.execute("SELECT count(*) FROM handshakes").fetchall()[0][0]
    except duckdb.Error:  # not created yet, no table yet, or copied mid-write: nothing counted
        return 0


def test_resume_after_kill_completes_without_duplicates(lab: Lab, tmp_path: Path):
    # Lab servers plus silent addresses (timeouts) so the scan runs long enough to be killed mid-way.
    silent = [f"198.18.1.{host},{port}" for host in range(241, 255) for port in range(1000, 1004)]
    lines = [f"{s.ip},{s.port},{s.sni}" for s in lab.servers] + silent
    targets = tmp_path / "targets.txt"
    targets.write_text("\n".join(lines) + "\n")
    out = tmp_path / "scan.duckdb"
    argv = [QSCAN, "targets", str(targets), "--out", str(out), "--rate", "20", "--timeout", "1", "-q"]
    process = subprocess.Popen(["ip", "netns", "exec", lab.client_ns, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Killed once its first batch is committed, not after a fixed time: qscan alone takes seconds
    # to start on a loaded machine.
    deadline = time.monotonic() + 60
    while committed_handshakes(out, tmp_path / "copy") == 0:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "qscan committed no handshakes within 60 s"
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)  # ip netns exec execs qscan: this is the scanner itself
    process.wait()
    con = duckdb.connect(str(out), read_only=True)
    before = con.execute("SELECT count(*) FROM handshakes").fetchall()[0][0]
    con.close()
    assert 0 < before < len(lines)
    resumed = lab.run_in_client([*argv, "--resume"], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    con = duckdb.connect(str(out), read_only=True)
    total, distinct = con.execute("SELECT count(*), count(DISTINCT (ip, port, sni)) FROM handshakes").fetchall()[0]
    assert total == distinct == len(lines)
    assert con.execute("SELECT count(*) FROM handshakes WHERE status = 'ok'").fetchall()[0][0] >= 4
    assert con.execute("SELECT count(DISTINCT scan_id) FROM handshakes").fetchall()[0][0] == 1


def test_two_workers_hand_the_store_columns(lab: Lab, tmp_path: Path):
    """Enough targets for two worker processes, which send their records as columns:
    every target stored once, ids dense, each parameter row on its own handshake, and
    every name a server answers to recorded as that server's single-worker scan records it."""
    servers = [s for s in lab.servers if not s.kind.startswith("broken")]
    names = 600 // len(servers) + 1
    targets = [Target(s.ip, s.port, f"name{n}.example") for s in servers for n in range(names)]
    settings = ScanSettings(timeout=3.0, rate=0, workers=2)
    with lab.in_client():
        outcome = scan_into(tmp_path / "two.duckdb", targets, settings)
        single = scan_into(tmp_path / "one.duckdb", [Target(s.ip, s.port, "name0.example") for s in servers], settings)
    assert len(targets) // 256 >= 2 and outcome.attempted == len(targets) and single.attempted == len(servers)
    con = duckdb.connect(str(tmp_path / "two.duckdb"), read_only=True)
    rows = con.execute("SELECT count(*), count(DISTINCT (ip, port, sni)), min(handshake_id), max(handshake_id), "
                       "count(*) FILTER (status = 'ok') FROM handshakes").fetchall()[0]  # fmt: skip
    assert rows == (len(targets), len(targets), 1, len(targets), outcome.ok)
    orphans = con.execute("SELECT count(*) FROM handshake_parameters p ANTI JOIN handshakes h USING (handshake_id)").fetchall()
    assert orphans == [(0,)]
    # What a server sends does not depend on the name asked for, nor on which worker asked
    # (the order does for quinn, which shuffles its parameters per connection).
    fields = "ip, port, status, set_fingerprint, quic_version, alpn, cipher_suite, key_exchange_group, retry"
    two = con.execute(f"SELECT DISTINCT {fields} FROM handshakes WHERE status = 'ok' ORDER BY ALL").fetchall()
    con.close()
    con = duckdb.connect(str(tmp_path / "one.duckdb"), read_only=True)
    one = con.execute(f"SELECT DISTINCT {fields} FROM handshakes WHERE status = 'ok' ORDER BY ALL").fetchall()
    con.close()
    assert len(one) >= 10 and two == one


def test_ctrl_c_keeps_what_the_workers_finished(tmp_path: Path):
    """Ctrl-C to a two-worker scan (the whole process group, as a terminal sends it): one
    line, exit 130, every handshake the line counts is in the file, no worker traceback,
    and --resume finishes the rest without duplicates. Loopback only: a bound socket that
    never answers makes every handshake a timeout."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    targets = tmp_path / "targets.txt"
    targets.write_text("".join(f"127.0.0.1,{port},n{i}.test\n" for i in range(600)))
    out = tmp_path / "scan.duckdb"
    argv = [QSCAN, "targets", str(targets), "--out", str(out), "--timeout", "1", "--workers", "2", "-q"]
    try:
        status, stderr = ctrl_c_when([*argv, "--rate", "100"], lambda: committed_handshakes(out, tmp_path / "copy") > 0,
                                     within=60)
    finally:
        silent.close()
    assert status == 130, stderr
    assert "Traceback" not in stderr and len(stderr.splitlines()) == 1, stderr
    said = int(re.search(r"interrupted: (\d+) handshakes", stderr).group(1))
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM handshakes").fetchall()[0][0] == said
    assert 0 < said < 600
    resumed = subprocess.run([*argv, "--rate", "0", "--resume"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT count(*), count(DISTINCT sni) FROM handshakes").fetchall()[0] == (600, 600)
