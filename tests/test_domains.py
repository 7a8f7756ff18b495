"""qscan domains: evidence from HTTPS records and Alt-Svc, handshakes with SNI = domain.

The default lab's resolver (lab/dns_server.py at RESOLVER_IP) serves the zone in
lab/topology.py; caddy answers HTTPS/TCP with Alt-Svc."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dns.message
import duckdb
import pytest

from scanner.domains import ALT_SVC, HTTPS_RECORD, parse_alt_svc, read_domains
from lab.dns_server import answer, load_zone
from lab.topology import LAB_DOMAINS, LAB_ZONE, RESOLVER_IP
from tparams.errors import ToolError

QSCAN = str(Path(sys.executable).parent / "qscan")


def test_alt_svc_entries():
    assert parse_alt_svc('h3=":443"; ma=2592000, h3-29="alt.example:8443", h2=":443", clear') == [
        ("h3", None, 443), ("h3-29", "alt.example", 8443), ("h2", None, 443)]


def test_domain_list_skips_a_bad_name_as_targets_do(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("# lab\nAlpha.lab.test.\nalpha.lab.test\n\nbeta.lab.test  # comment\n")
    assert read_domains(good) == (["alpha.lab.test", "beta.lab.test"], [])
    bad = tmp_path / "bad.txt"
    bad.write_text("alpha.lab.test\nnot a domain\n")
    domains, skipped = read_domains(bad)
    assert domains == ["alpha.lab.test"] and [str(line) for line in skipped] == [
        "line 2: not a domain name: 'not a domain'"]
    with pytest.raises(ToolError, match=r"bad.txt: 1 malformed line\(s\), first line 2: not a domain name"):
        read_domains(bad, strict=True)
    # The command goes on with the good names (its resolver here: loopback, where nothing answers).
    done = subprocess.run([QSCAN, "domains", str(bad), "--out", str(tmp_path / "d.duckdb"), "--resolver",
                           "127.0.0.1", "--no-alt-svc", "--discover-only", "--timeout", "1", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"skipped {bad} line 2: not a domain name: 'not a domain'\n"
    assert json.loads(done.stdout)["domains"] == 1 and json.loads(done.stdout)["bad_lines"] == 1
    # An --out already holding a scan is refused first, alone.
    again = subprocess.run([QSCAN, "domains", str(bad), "--out", str(tmp_path / "d.duckdb")], capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 2
    assert again.stderr == f"qscan: error: {tmp_path / 'd.duckdb'} already holds a scan; use a new --out\n"


def test_lab_dns_answers_formerr_to_non_dns_and_nxdomain_outside_the_zone():
    zone = load_zone(LAB_ZONE)
    assert answer(b"\x12\x34" + bytes(1198), zone)[:4] == b"\x12\x34\x80\x01"  # FORMERR, same id
    reply = dns.message.from_wire(answer(dns.message.make_query("missing.lab.test", "A").to_wire(), zone))
    assert reply.rcode() == dns.rcode.NXDOMAIN


@pytest.fixture(scope="module")
def domains_scan(lab, tmp_path_factory):
    """The default lab as `qscan lab up` makes it: its resolver answers for the lab's domains."""
    assert lab.addresses["resolver"] == RESOLVER_IP
    work = tmp_path_factory.mktemp("domains")
    (work / "domains.txt").write_text("\n".join(LAB_DOMAINS) + "\n")
    out = work / "domains.duckdb"
    done = lab.run_in_client([QSCAN, "domains", str(work / "domains.txt"), "--out", str(out),
                              "--resolver", RESOLVER_IP, "--timeout", "2", "--quiet", "--json"], timeout=180)
    assert done.returncode == 0, done.stderr
    with duckdb.connect(str(out), read_only=True) as con:
        evidence = con.execute("SELECT domain, evidence, ip, port FROM domain_evidence").fetchall()
        handshakes = {(sni, ip): status for ip, sni, status in
                      con.execute("SELECT ip, sni, status FROM handshakes").fetchall()}
        scan_ids = {r[0] for r in con.execute("SELECT scan_id FROM domain_evidence UNION SELECT scan_id FROM handshakes").fetchall()}
    return json.loads(done.stdout), evidence, handshakes, scan_ids


@pytest.mark.lab
def test_https_records_and_alt_svc_are_found(domains_scan):
    _, evidence, _, _ = domains_scan
    quic = {(d, kind, ip, port) for d, kind, ip, port in evidence if kind in (HTTPS_RECORD, ALT_SVC) and ip}
    assert quic == {
        ("alpha.lab.test", HTTPS_RECORD, "198.18.1.10", 443),
        ("aioquic.lab.test", HTTPS_RECORD, "198.18.1.30", 443),
        ("other.caddy.lab.test", HTTPS_RECORD, "198.18.1.20", 443),
        ("closed.lab.test", HTTPS_RECORD, "198.18.1.100", 443),
        ("caddy.lab.test", ALT_SVC, "198.18.1.20", 443),  # caddy's HTTPS/TCP answer
        ("other.caddy.lab.test", ALT_SVC, "198.18.1.20", 443),
    }
    assert ("missing.lab.test", "dns-error", None, None) in evidence
    assert not any(d == "beta.lab.test" and kind in (HTTPS_RECORD, ALT_SVC) for d, kind, _, _ in evidence)


@pytest.mark.lab
def test_handshakes_send_the_domain_and_record_sni_dependent_results(domains_scan):
    summary, _, handshakes, scan_ids = domains_scan
    assert scan_ids == {summary["scan_id"]}
    assert handshakes[("alpha.lab.test", "198.18.1.10")] == "ok"
    assert handshakes[("aioquic.lab.test", "198.18.1.30")] == "ok"
    # One address, two names: caddy has a site (certificate) for one of them only.
    assert handshakes[("caddy.lab.test", "198.18.1.20")] == "ok"
    assert handshakes[("other.caddy.lab.test", "198.18.1.20")] == "tls_alert"
    assert handshakes[("closed.lab.test", "198.18.1.100")] == "unreachable"  # ICMP port unreachable
    assert len(handshakes) == 5 == summary["handshakes"]
