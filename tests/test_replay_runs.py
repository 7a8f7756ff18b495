"""Real downloads through real stacks over the real testbed (small sizes, 2 reps)."""

from __future__ import annotations

import json
import os

import duckdb
import pytest

from replay.link import LinkConfig
from replay import statistics
from replay.runner import Condition, Experiment, run_experiment
from replay.sets import resolve_one, with_overrides
from replay.stacks import get_stack
from replay.stacks.base import RunOptions
from replay.stacks.ngtcp2 import Ngtcp2

pytestmark = pytest.mark.lab


@pytest.fixture(autouse=True)
def _root():
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")


def _usable(name: str):
    stack = get_stack(name)
    reason = stack.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return stack


def _run(stack, conditions, tmp_path, size=3_000_000, reps=2, backend="auto", udp_buffer_bytes=None, **options):
    experiment = Experiment("test", stack, conditions, RunOptions(size=size, timeout_s=options.pop("timeout_s", 60),
                                                                  **options), reps, backend,
                            udp_buffer_bytes=udp_buffer_bytes)
    rows = run_experiment(experiment, tmp_path / "r.duckdb")
    return rows


@pytest.mark.parametrize("name", ["ngtcp2", "quic-go", "aioquic"])
def test_each_stack_downloads_and_records_everything(name, tmp_path):
    stack = _usable(name)
    size = 1_000_000 if name == "aioquic" else 3_000_000
    rows = _run(stack, [Condition(resolve_one("firefox"), None, LinkConfig())], tmp_path, size=size)
    assert [r["status"] for r in rows] == ["ok", "ok"], [r.get("error") for r in rows]
    for row in rows:
        assert row["bytes"] == size and row["goodput_mbps"] > 1
        assert row["server_tx_packets"] >= size / 1500 and row["client_tx_packets"] > 0
        assert row["client_cpu_s"] is not None and 1000 < row["client_maxrss_kb"] < 500_000
        applied, not_applied = json.loads(row["applied_client"]), json.loads(row["not_applied_client"])
        assert applied["initial_max_data"] == 25165824
        assert set(applied) | set(not_applied) == {k for k, v in resolve_one("firefox").params.as_sent().items()
                                                   if v is not None}
        assert json.loads(row["client_argv"])[:3] == ["ip", "netns", "exec"]
        # Every datagram of the body reached the client's UDP layer (the namespace's own counters).
        assert json.loads(row["counters"])["client_udp_in_datagrams"] >= size / 1500
        if name == "quic-go":  # our server reports the sender's view: packets it sent are the ones the link carried
            counters = json.loads(row["counters"])
            assert abs(counters["sender_packets_sent"] - row["server_tx_packets"]) <= 0.02 * row["server_tx_packets"]
            assert counters["sender_packets_lost"] >= 0 and counters["sender_min_rtt_ms"] > 0
    stored = duckdb.connect(str(tmp_path / "r.duckdb")).execute("SELECT count(*), min(status) FROM runs").fetchone()
    assert stored == (2, "ok")


def test_aioquic_sets_every_parameter_separately(tmp_path):
    stack = _usable("aioquic")
    assert stack.settable["client"] == stack.settable["server"] and len(stack.settable["client"]) == 12
    tweaked = with_overrides(resolve_one("firefox"), ["initial_max_stream_data_bidi_remote=70000",
                                                      "initial_max_stream_data_uni=80000", "max_ack_delay=30"])
    rows = _run(stack, [Condition(tweaked, None, LinkConfig())], tmp_path, size=200_000, reps=1)
    assert rows[0]["status"] == "ok", rows[0].get("error")
    assert json.loads(rows[0]["not_applied_client"]) == {}


@pytest.mark.timing
def test_pinned_small_connection_window_throttles_at_30ms(tmp_path):
    """The thesis's headline (figure 5.4) in miniature: 196,608 B vs 15,728,640 B at 30 ms, windows pinned."""
    stack = _usable("ngtcp2")
    base = resolve_one("lsquic-client-default")
    link = LinkConfig(delay_down_ms=30)
    conditions = [Condition(with_overrides(base, [f"initial_max_data={v}"]), None, link, "initial_max_data", v)
                  for v in (196608, 15728640)]
    rows = _run(stack, conditions, tmp_path, size=4_000_000)
    # Round-robin, so that drift on a shared machine is not mistaken for a difference between conditions.
    assert [(r["sweep_value"], r["rep"]) for r in sorted(rows, key=lambda r: r["started_at"])] == [
        (196608, 1), (15728640, 1), (196608, 2), (15728640, 2)]
    con = duckdb.connect(str(tmp_path / "r.duckdb"), read_only=True)
    by_value = {s["sweep_value"]: s for s in statistics.summary(con).iter_rows(named=True)}
    assert by_value[196608]["n"] == 2 and by_value[15728640]["n"] == 2
    assert by_value[196608]["mean_mbps"] < 0.5 * by_value[15728640]["mean_mbps"]


@pytest.mark.timing
@pytest.mark.alone  # its small buffer is the machine's: another testbed starting would raise it under the run
def test_a_receive_buffer_too_small_drops_datagrams_and_each_run_counts_them(tmp_path):
    """The Kempf thesis's lesson, observable per run: what the path delivered but the socket could not hold."""
    stack = _usable("ngtcp2")
    rows = _run(stack, [Condition(resolve_one("firefox-109"), None, LinkConfig())], tmp_path, size=5_000_000,
                udp_buffer_bytes=64 * 1024)
    assert [r["status"] for r in rows] == ["ok", "ok"], [r.get("error") for r in rows]
    for row in rows:
        counters = json.loads(row["counters"])
        # Nothing to emulate: the path is a plain veth (no emulator to drop anything), and every drop is
        # the client socket's.
        assert row["link_backend"] == "veth" and "link_down_dropped_loss" not in counters, row["link_backend"]
        assert counters["client_udp_rcvbuf_errors"] > 0, counters
    con = duckdb.connect(str(tmp_path / "r.duckdb"))
    assert json.loads(con.execute("SELECT config FROM experiments").fetchone()[0])["udp_buffer_bytes"] == 64 * 1024
    # The summary's share of dropped datagrams: of those reaching the client's UDP layer, the socket's drops.
    dropped, delivered = (sum(json.loads(r["counters"])[key] for r in rows)
                          for key in ("client_udp_rcvbuf_errors", "client_udp_in_datagrams"))
    (in_view,) = con.execute("SELECT client_socket_drop_pct FROM run_summary").fetchone()
    assert 0 < in_view < 100 and in_view == pytest.approx(100 * dropped / (dropped + delivered))


def test_a_crashing_client_is_a_failed_run_and_the_experiment_goes_on(tmp_path):
    crashing = Ngtcp2(client_binary="false")
    if crashing.unavailable_reason():
        pytest.skip(crashing.unavailable_reason())
    rows = _run(crashing, [Condition(resolve_one("firefox"), None, LinkConfig())], tmp_path)
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert all("client exited with status 1" in r["error"] and r["goodput_mbps"] is None for r in rows)
    assert duckdb.connect(str(tmp_path / "r.duckdb")).execute("SELECT count(*) FROM runs").fetchone() == (2,)


def test_a_run_past_its_timeout_is_kept_as_timeout(tmp_path):
    stack = _usable("ngtcp2")
    rows = _run(stack, [Condition(resolve_one("firefox"), None, LinkConfig(delay_down_ms=50))], tmp_path,
                size=200_000_000, reps=1, timeout_s=1.0)
    assert rows[0]["status"] == "timeout" and rows[0]["goodput_mbps"] is None


def test_a_run_stores_the_queue_the_path_held_beside_the_one_asked(tmp_path):
    """linkem behind a 100 Mbit/s limit at 5 ms holds the larger of 1000 packets and one BDP (42 packets) when
    --queue says nothing, and exactly what --queue says otherwise; without a rate it queues nothing."""
    stack = _usable("quic-go")
    conditions = [Condition(resolve_one("firefox"), None, LinkConfig(delay_down_ms=5, rate_bps=100_000_000)),
                  Condition(resolve_one("firefox"), None, LinkConfig(delay_down_ms=5, rate_bps=100_000_000,
                                                                     queue="300")),
                  Condition(resolve_one("firefox"), None, LinkConfig(delay_down_ms=5))]
    rows = _run(stack, conditions, tmp_path, size=300_000, reps=1, backend="relay")
    assert [(r["status"], r["queue"], r["queue_requested"]) for r in rows] == [
        ("ok", "1000p", None), ("ok", "300p", "300"), ("ok", None, None)], [r.get("error") for r in rows]
