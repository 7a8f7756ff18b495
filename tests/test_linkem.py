"""linkem: its pure parts (Go tests) and its timing through real namespaces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from common.process import ns_command
from replay.link import LINKEM, LinkConfig, RelayBackend
from replay.testbed import IPERF_PORT, Testbed, measure_rtt
from timing import measure_until

pytestmark = pytest.mark.timing  # (tests/conftest.py: runs while the other worker waits)

REPO = LINKEM.parents[2]


def test_go_unit_tests_pass():
    """Queue, loss models, rate shaper, path model, histogram."""
    if shutil.which("go") is None:
        pytest.skip("Go toolchain not installed (scripts/setup.sh needs it for linkem)")
    done = subprocess.run(["go", "test", "./replay/linkem/..."], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_bad_flags_are_one_line_errors():
    if not LINKEM.exists():
        pytest.skip("build/bin/linkem missing (scripts/setup.sh builds it)")
    done = subprocess.run([str(LINKEM), "relay", "--client-netns", "x", "--client-dev", "y", "--server-netns", "x",
                           "--server-dev", "y", "--down-gilbert", "1,2"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["linkem: --down-gilbert wants P,R,LOSS_BAD,LOSS_GOOD"]


def test_timer_meets_every_deadline_and_reports_its_error():
    """`linkem timer`, the benchmark's floor: a writer's waiting policy alone, one deadline per interval."""
    if not LINKEM.exists():
        pytest.skip("build/bin/linkem missing (scripts/setup.sh builds it)")
    done = subprocess.run([str(LINKEM), "timer", "--interval", "1ms", "--duration", "300ms", "--realtime=false"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["deadlines"] == 299
    assert 0 <= result["error_p50_us"] <= result["error_p99_us"] <= result["error_max_us"] + 1
    refused = subprocess.run([str(LINKEM), "timer", "--interval", "2s", "--duration", "1s"], capture_output=True,
                             text=True)
    assert refused.returncode == 2 and refused.stderr.startswith("linkem: --interval must be")


needs_relay = pytest.mark.skipif(os.geteuid() != 0 or not RelayBackend.availability().ok,
                                 reason="needs root and build/bin/linkem")


@pytest.mark.lab
@needs_relay
def test_delay_error_is_sub_millisecond_and_counters_add_up():
    with Testbed(link=LinkConfig(delay_down_ms=10, delay_up_ms=5), backend="relay") as tb:
        measure_until(lambda: measure_rtt(tb, count=500, interval_ms=1.0),
                      lambda rtt: rtt["received"] == 500 and abs(rtt["rtt_p50_ms"] - 15.0) < 1.0)
        stats = tb.link_counters()
    for direction in ("down", "up"):
        c = stats[direction]
        assert c["packets_in"] >= 500 and c["packets_out"] == c["packets_in"], c
        assert c["dropped_loss"] == c["dropped_queue"] == c["dropped_overflow"] == 0
        assert c["delay_error_p50_us"] < 200, c


@pytest.mark.lab
@needs_relay
def test_reconfigure_changes_the_delay_in_place():
    with Testbed(link=LinkConfig(delay_down_ms=2), backend="relay") as tb:
        def p50() -> float:
            return measure_rtt(tb, count=100, interval_ms=2.0)["rtt_p50_ms"]

        measure_until(p50, lambda before: 1.8 < before < 3.0)
        tb.reconfigure(LinkConfig(delay_down_ms=12))
        measure_until(p50, lambda after: 11.8 < after < 13.0)


def _blast(tb: Testbed, pps: int, seconds: float, delay_ms: float) -> dict:
    """linkem blast (server) -> linkem sink (client): one-way latency from payload and kernel time stamps."""
    sink = subprocess.Popen(ns_command(tb.client_ns, [str(LINKEM), "sink", "--listen", f"{tb.client_ip}:9000",
                                                            "--delay", f"{delay_ms}ms"]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening" in sink.stderr.readline()
        sent = tb.run_in(tb.server_ns, [str(LINKEM), "blast", "--target", f"{tb.client_ip}:9000", "--pps", str(pps),
                                        "--duration", f"{seconds}s"], timeout=seconds + 20)
        out, _ = sink.communicate(timeout=20)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return {"sent": json.loads(sent.stdout)["sent"], **json.loads(out)}


@pytest.mark.lab
@needs_relay
def test_merged_udp_writes_arrive_intact_and_on_time():
    """At 20,000 datagrams/s the writer merges datagrams due together into UDP GSO writes; the kernel must
    split them back into every datagram, in order, each 10 ms late to within a millisecond."""
    with Testbed(link=LinkConfig(delay_down_ms=10), backend="relay") as tb:
        result = measure_until(lambda: _blast(tb, 20_000, 1.0, 10),
                               lambda r: r["received"] == r["sent"] == r["highest_seq"] + 1
                               and abs(r["error_p50_ms"]) < 1.0)
        down = tb.link_counters()["down"]
    assert down["bursts_out"] > 0 and down["packets_out"] == down["packets_in"] >= result["sent"], down


@pytest.mark.lab
@needs_relay
@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 missing (scripts/setup.sh installs it)")
@pytest.mark.parametrize("link, whole", [(LinkConfig(delay_down_ms=1), True),
                                         (LinkConfig(delay_down_ms=1, loss_pct=0.01), False)])
def test_tcp_bursts_cross_whole_only_under_a_pure_delay(link, whole):
    """TSO bursts are taken whole (one read) under a pure delay and counted per wire packet; with loss the
    kernel segments them first, so loss still strikes single wire packets."""
    with Testbed(link=link, backend="relay") as tb:
        server = tb.start_server(["iperf3", "-s", "-1", "-B", tb.server_ip, "-p", str(IPERF_PORT)], "iperf3.log")
        tb.wait_listening(IPERF_PORT, "tcp")
        done = tb.run_client(["iperf3", "-c", tb.server_ip, "-p", str(IPERF_PORT), "-R", "-n", "20M", "-J"],
                             timeout=60)
        tb.stop(server)
        down = tb.link_counters()["down"]
    assert done.returncode == 0, done.stdout[-300:]
    assert (down["bursts_in"] > 0) == whole, down
    # 20 MB in packets of at most 1500 B: at least 13,981 wire packets either way.
    assert down["packets_in"] >= 20 * 2**20 / 1500 and down["bytes_in"] >= 20 * 2**20, down
