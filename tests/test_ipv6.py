"""IPv6 end to end: the dual-stack lab (2001:2::/48), handshakes with every lab kind that
listens on IPv6, from the client namespace only."""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from common.process import ns_command
from lab.kinds import kind_for
from lab.topology import ipv6_of
from scanner.engine import ScanSettings, scan_targets
from scanner.targets import Target

QSCAN = str(Path(sys.executable).parent / "qscan")


def _sent(record) -> dict[str, int | bool]:  # type: ignore[no-untyped-def]
    return {name: value for name, value in record.param_set.as_sent().items() if value is not None}


@pytest.mark.lab
def test_every_kind_that_listens_on_ipv6_completes_and_sends_what_it_sends_on_ipv4(lab):
    dual = [s for s in lab.servers if s.ip6]
    assert {s.kind for s in lab.servers if not s.ip6} <= {"broken", "msquic", "lsquic"}
    assert all(s.ip6 == ipv6_of(s.ip) and kind_for(s.kind).listens_ipv6 for s in dual)
    targets = [Target(ip, s.port, s.sni) for s in dual for ip in (s.ip6, s.ip)]
    records: list = []
    with lab.in_client():
        scan_targets(targets, ScanSettings(timeout=3, rate=0), records.extend)
    by_ip = {record.ip: record for record in records}
    assert len(by_ip) == len(targets)
    for server in dual:
        over6, over4 = by_ip[server.ip6], by_ip[server.ip]
        assert (over6.status, over4.status) == ("ok", "ok"), (server.name, over6.error, over4.error)
        # Exactly what the lab knows the server sends, where it knows; the same as over IPv4 everywhere.
        if server.transport_parameters is not None:
            assert _sent(over6) == server.transport_parameters, server.name
        assert _sent(over6) == _sent(over4), server.name
        assert (over6.alpn, over6.quic_version, over6.retry) == (over4.alpn, over4.quic_version, over4.retry)


@pytest.mark.lab
def test_no_ipv6_route_out_of_the_lab(lab):
    routes = lab.run_in_client(["ip", "-6", "route", "show", "default"]).stdout
    assert routes.split()[:3] == ["default", "via", ipv6_of(lab.state["addresses"]["core_client_side"])], routes
    for namespace in [lab.core_ns, *(s.namespace for s in lab.servers)]:
        result = subprocess.run(ns_command(namespace, ["ip", "-6", "route", "get", "2001:db8::1"]),
                                capture_output=True, text=True)
        assert result.returncode != 0 and "unreachable" in result.stderr, (namespace, result)


@pytest.mark.lab
def test_the_silent_range_has_an_ipv6_twin(lab):
    with lab.in_client():
        silent = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with silent:
        silent.settimeout(0.5)
        silent.connect((ipv6_of("198.18.1.241"), 443))
        silent.send(b"hello")
        with pytest.raises(socket.timeout):
            silent.recv(100)


def _qscan(lab, *args: str, netns: bool = True) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    argv = [QSCAN, *args]
    if netns:
        return lab.run_in_client(argv, timeout=120)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.lab
def test_a_hitlist_scan_probes_an_aliased_prefix_once_and_handshakes_with_what_answers(lab, tmp_path):
    quinn, quiche, alpha = (lab.server(n) for n in ("quinn", "quiche", "ngtcp2-alpha"))
    closed, silent = ipv6_of(lab.addresses["closed_hosts"][0]), ipv6_of("198.18.1.241")
    hitlist = tmp_path / "hitlist.txt"
    full_alpha = ipaddress.IPv6Address(alpha.ip6).exploded  # the service's uncompressed form
    hitlist.write_text(f"# IPv6 Hitlist\n{full_alpha}\n{quinn.ip6}\n{quiche.ip6}\n{closed}\n{silent}\n"
                       f"not-an-address\n{alpha.ip}\n{alpha.ip6}\n")
    aliased = tmp_path / "aliased.txt"
    aliased.write_text("2001:2:0:1::60/126\n")  # quinn (::60) and quiche (::61): one host behind the prefix
    out = tmp_path / "scan.duckdb"
    result = _qscan(lab, "ipv6", "--hitlist", str(hitlist), "--aliased", str(aliased), "--out", str(out),
                    "--rate", "1000", "--cooldown", "1", "--timeout", "3", "--json")
    assert result.returncode == 0, result.stderr
    # Each bad line one warning; the IPv4 one says it is the other family; nothing else lost.
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and "line 7" in warnings[0] and "IPv4 address in an IPv6 hitlist" in warnings[1]
    summary = json.loads(result.stdout)
    assert (summary["probes_sent"], summary["bad_lines"], summary["folded"], summary["aliased_prefixes"]) == (4, 2, 1, 1)
    assert summary["answers"] == {"icmp-unreach": 1, "version-negotiation": 2}
    assert (summary["handshakes"], summary["handshakes_ok"]) == (2, 2)
    with duckdb.connect(str(out), read_only=True) as con:
        assert sorted(r[0] for r in con.execute("SELECT ip FROM discovery").fetchall()) == sorted([alpha.ip6, quinn.ip6])
        assert con.execute("SELECT prefix, ip FROM hitlist_aliased").fetchall() == [("2001:2:0:1::60/126", quinn.ip6)]
        assert con.execute("SELECT targets, bad_lines, blocked, folded FROM hitlist_runs").fetchall() == [(4, 2, 0, 1)]
        assert sorted(con.execute("SELECT ip, status FROM handshakes").fetchall()) == \
            sorted([(alpha.ip6, "ok"), (quinn.ip6, "ok")])


@pytest.mark.lab
def test_ipv6_discovery_refuses_addresses_outside_the_lab_without_yes(lab, tmp_path):
    hitlist = tmp_path / "hitlist.txt"
    hitlist.write_text("2001:2:0:1::10\n2606:4700::1111\n")
    out = tmp_path / "scan.duckdb"
    result = _qscan(lab, "ipv6", "--hitlist", str(hitlist), "--out", str(out), netns=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == ("qscan: error: refusing to probe IPv6 addresses outside the "
                                                      "lab (2001:2::/48) without confirmation: pass --yes (no "
                                                      "terminal to ask on)")
    assert not out.exists() and not Path(f"{out}.prober6").exists()
    # The special-purpose ranges stay out whatever --yes says.
    hitlist.write_text("fe80::1\n2001:db8::1\n")
    result = _qscan(lab, "ipv6", "--hitlist", str(hitlist), "--out", str(out), "--yes", netns=False)
    assert result.returncode != 0 and "nothing to probe" in result.stderr and "2 blocklisted" in result.stderr


@pytest.mark.lab
def test_qscan_targets_takes_both_families_and_the_report_splits_by_family(lab, tmp_path):
    alpha, quinn = lab.server("ngtcp2-alpha"), lab.server("quinn")
    targets = tmp_path / "targets.txt"
    targets.write_text(f"{alpha.ip},443,{alpha.sni}\n[{alpha.ip6}],443,{alpha.sni}\n{quinn.ip6},443,{quinn.sni}\n")
    out = tmp_path / "scan.duckdb"
    result = _qscan(lab, "targets", str(targets), "--out", str(out), "--rate", "0", "--timeout", "3")
    assert result.returncode == 0 and "3 handshakes (3 ok" in result.stdout, result.stdout + result.stderr
    report = json.loads(_qscan(lab, "report", str(out), "--format", "json", netns=False).stdout)
    assert [(f["ip_family"], f["targets"], f["reached"]) for f in report["families"]] == [("IPv4", 1, 1), ("IPv6", 2, 2)]
    assert "### By address family" in _qscan(lab, "report", str(out), "--format", "markdown", netns=False).stdout
    # A campaign shard keeps the family: the campaign's report splits the same way.
    campaign = tmp_path / "campaign"
    assert _qscan(lab, "export", str(out), "--parquet", str(campaign), "--campaign", "w48", "--vantage", "lab",
                  "--shard", "0", netns=False).returncode == 0
    report = json.loads(_qscan(lab, "report", str(campaign), "--format", "json", netns=False).stdout)
    assert [(f["ip_family"], f["targets"]) for f in report["families"]] == [("IPv4", 1), ("IPv6", 2)]


@pytest.mark.lab
def test_the_shards_of_a_hitlist_scan_merge_into_one_scan_nothing_twice(lab, tmp_path):
    servers = [lab.server(n) for n in ("ngtcp2-alpha", "quinn", "quiche", "aioquic")]
    hitlist = tmp_path / "hitlist.txt"
    hitlist.write_text("".join(f"{s.ip6}\n" for s in servers))
    aliased = tmp_path / "aliased.txt"
    aliased.write_text("2001:2:0:1::60/126\n")
    shards = []
    for index in range(2):
        out = tmp_path / f"shard{index}.duckdb"
        result = _qscan(lab, "ipv6", "--hitlist", str(hitlist), "--aliased", str(aliased), "--out", str(out),
                        "--shard", f"{index}/2", "--seed", "7", "--cooldown", "1", "--timeout", "3", "--json")
        assert result.returncode == 0, result.stderr
        shards.append(str(out))
    merged = tmp_path / "merged.duckdb"
    assert _qscan(lab, "merge", *shards, "--out", str(merged), netns=False).returncode == 0
    with duckdb.connect(str(merged), read_only=True) as con:
        assert con.execute("SELECT kind, count(*) FROM scans GROUP BY kind").fetchall() == [("ipv6", 1)]
        probed = {lab.server(n).ip6 for n in ("ngtcp2-alpha", "quinn", "aioquic")}  # quiche folded into quinn's prefix
        assert sorted(r[0] for r in con.execute("SELECT ip FROM discovery").fetchall()) == sorted(probed)
        assert sorted(r[0] for r in con.execute("SELECT ip FROM handshakes WHERE status = 'ok'").fetchall()) == \
            sorted(probed)
        assert con.execute("SELECT prefix FROM hitlist_aliased").fetchall() == [("2001:2:0:1::60/126",)]


def _lab_hitlist(lab, tmp_path, names=("ngtcp2-alpha", "quinn", "quiche", "aioquic")) -> Path:  # type: ignore[no-untyped-def]
    hitlist = tmp_path / "hitlist.txt"
    hitlist.write_text("".join(f"{lab.server(n).ip6}\n" for n in names) + f"{ipv6_of(lab.addresses['closed_hosts'][0])}\n")
    return hitlist


@pytest.mark.lab
def test_dry_run_prints_the_prober_command_and_sends_nothing(lab, tmp_path):
    hitlist = _lab_hitlist(lab, tmp_path)
    out = tmp_path / "new" / "dry.duckdb"
    done = _qscan(lab, "ipv6", "--hitlist", str(hitlist), "--out", str(out), "--seed", "7", "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"hitlist:    {hitlist}: 5 addresses to probe")
    command = next(line for line in lines if line.startswith("command:"))
    assert "qscan-prober6 --target-port=443 --rate=10000 --cooldown-time=8 --seed=7 --shards=1 --shard=0" in command
    assert f"--output-file={out}.prober6/results.csv" in command  # where a real run writes it
    payload = next(line for line in lines if line.startswith("payload:")).split()[1]
    assert len(bytes.fromhex(payload)) >= 1200
    assert not out.parent.exists()  # nothing written, no directory made: the prober never started
    # Nothing is sent, so an address outside the lab needs no --yes to be shown.
    hitlist.write_text("2001:2:0:1::10\n2606:4700::1111\n")
    done = _qscan(lab, "ipv6", "--hitlist", str(hitlist), "--out", str(out), "--dry-run", netns=False)
    assert done.returncode == 0 and "command:    qscan-prober6" in done.stdout, done.stderr
    assert not out.parent.exists()


@pytest.mark.lab
def test_ctrl_c_while_probing_says_what_is_kept_and_resume_finishes(lab, tmp_path):
    from interrupting import ctrl_c_when

    hitlist = _lab_hitlist(lab, tmp_path)
    out = tmp_path / "cut.duckdb"
    results = Path(f"{out}.prober6") / "results.csv"  # the prober opens it before its first probe
    # 5 probes at 1 a second: the prober is still sending when Ctrl-C comes.
    status, stderr = ctrl_c_when(ns_command(lab.client_ns, [QSCAN, "ipv6", "--hitlist", str(hitlist), "--out",
                                                                  str(out), "--rate", "1", "--quiet"]),
                                 results.exists, within=30)
    said = stderr.splitlines()[-1]  # after the plan
    assert status == 130 and "Traceback" not in stderr, stderr
    assert said == (f"qscan: error: interrupted during the prober: scan 1 is begun in {out} but holds no answers "
                    f"(the prober's partial output: {out}.prober6); the same command with --resume runs the prober "
                    "again, then the handshakes")
    done = _qscan(lab, "ipv6", "--hitlist", str(hitlist), "--out", str(out), "--resume", "--cooldown", "1",
                  "--timeout", "3", "--quiet", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["scan_id"], summary["probes_sent"], summary["quic_servers"]) == (1, 5, 4)
    assert (summary["handshakes"], summary["handshakes_ok"]) == (4, 4)
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM discovery_runs").fetchone() == (1,)
        assert con.execute("SELECT targets FROM hitlist_runs").fetchall() == [(5,)]


@pytest.mark.lab
def test_resume_keeps_a_finished_probing_run_and_refuses_another_hitlist(lab, tmp_path):
    hitlist = _lab_hitlist(lab, tmp_path, ("ngtcp2-alpha", "quinn"))
    out = tmp_path / "s.duckdb"
    scan = ["ipv6", "--hitlist", str(hitlist), "--out", str(out), "--cooldown", "1", "--timeout", "3", "--json"]
    found = json.loads(_qscan(lab, *scan, "--discover-only").stdout)
    assert (found["quic_servers"], found["handshakes"]) == (2, 0)
    results = Path(f"{out}.prober6") / "results.csv"
    probed_at = results.stat().st_mtime_ns
    done = _qscan(lab, *scan, "--resume")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["scan_id"], summary["probes_sent"], summary["quic_servers"]) == (1, 3, 2)
    assert (summary["handshakes"], summary["handshakes_ok"]) == (2, 2)
    assert results.stat().st_mtime_ns == probed_at  # not probed again
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM discovery_runs").fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM hitlist_runs").fetchone() == (1,)
    # Without --resume the file is refused; with it, another hitlist is too.
    again = _qscan(lab, *scan)
    assert again.returncode == 2 and again.stderr.strip().splitlines()[-1].endswith("or --resume"), again.stderr
    other = tmp_path / "other.txt"
    other.write_text(f"{lab.server('quinn').ip6}\n")
    refused = _qscan(lab, *scan[:2], str(other), *scan[3:], "--resume")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"qscan: error: {out} holds another scan: hitlist {hitlist} (asked {other}); refusing to resume it with this one")
