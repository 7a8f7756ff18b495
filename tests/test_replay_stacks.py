"""Every replay stack of a library the registries give, through the real testbed: a window-limited
download at 30 ms, and every parameter it says it applied read back from the wire.

LSQUIC has its own file (test_lsquic.py): it runs only where the user points qreplay at a build.
"""

from __future__ import annotations

import json
import os

import pytest

from capturing import assert_applied_is_on_the_wire, captured_handshakes
from replay.flowcontrol import UpdateRule, window_bound
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, open_path, run_experiment, run_once
from replay.sets import NamedSet, resolve_one, with_overrides
from replay.stacks import get_stack
from replay.stacks.base import RunOptions
from tparams.paramset import ParamSet

pytestmark = pytest.mark.lab

STACKS = ["ngtcp2", "quic-go", "aioquic", "quinn", "quiche", "s2n-quic", "tquic", "msquic"]

# Values no library sends by default, so that a value on the wire can only have come from the setting.
CLIENT_ASKS = ["max_idle_timeout=45000", "max_udp_payload_size=1444", "initial_max_data=5000000",
               "initial_max_stream_data_bidi_local=3000001", "initial_max_stream_data_bidi_remote=70000",
               "initial_max_stream_data_uni=80000", "initial_max_streams_bidi=17", "initial_max_streams_uni=16",
               "disable_active_migration=true", "ack_delay_exponent=5", "max_ack_delay=20",
               "active_connection_id_limit=5"]
SERVER_ASKS = ["max_idle_timeout=20000", "max_udp_payload_size=1400", "initial_max_data=4000000",
               "initial_max_stream_data_bidi_local=90000", "initial_max_stream_data_bidi_remote=2000000",
               "initial_max_stream_data_uni=60000", "initial_max_streams_bidi=50", "initial_max_streams_uni=7",
               "disable_active_migration=true", "ack_delay_exponent=4", "max_ack_delay=30",
               "active_connection_id_limit=6"]


def _usable(name: str):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    stack = get_stack(name)
    reason = stack.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return stack


@pytest.mark.parametrize("name", STACKS)
def test_every_applied_parameter_is_what_went_on_the_wire(name, tmp_path):
    """A download through the emulated link; the ClientHello's transport parameters (Initial keys) and
    the server's EncryptedExtensions (the client's key log) hold exactly what the run stored as applied,
    and differ from it where the run stored not applied."""
    stack = _usable(name)
    keylog = tmp_path / "keys.log"
    condition = Condition(with_overrides(resolve_one("firefox-109"), CLIENT_ASKS),
                          with_overrides(NamedSet("stack-default", ParamSet(), ""), SERVER_ASKS),
                          LinkConfig(delay_down_ms=5))
    pcap = tmp_path / "handshake.pcapng"
    options = RunOptions(size=1_000_000, timeout_s=60, keylog=keylog)
    with open_path("auto", condition.link) as path, captured_handshakes(path.client_ns, pcap, tmp_path / "tshark.log"):
        row = run_once(stack, path, condition, options, 1, "wire", "auto")
    assert row["status"] == "ok" and row["bytes"] == options.size, row.get("error")

    assert_applied_is_on_the_wire(row, pcap, keylog, {"client": CLIENT_ASKS, "server": SERVER_ASKS})
    for role in ("client", "server"):
        applied = json.loads(row[f"applied_{role}"])
        assert len(applied) >= 4, (role, "a stack must carry at least the flow-control windows", applied)


@pytest.mark.parametrize("name", STACKS)
def test_a_pinned_stream_window_limits_goodput_at_30ms(name, tmp_path):
    """The thesis's figure 5.6 point (bidi_local 131,072 at 30 ms), small: the run completes, and no
    stack gets more than a whole window a round trip through it, as it would if it grew the window
    (its auto-tuning left on) or ignored the setting."""
    stack = _usable(name)
    window, rtt_ms, size = 131_072, 30.0, 1_500_000
    client = with_overrides(resolve_one("firefox-109"), [f"initial_max_stream_data_bidi_local={window}"])
    experiment = Experiment("test", stack, [Condition(client, None, LinkConfig(delay_down_ms=rtt_ms))],
                            RunOptions(size=size, timeout_s=60), reps=1)
    (row,) = run_experiment(experiment, tmp_path / "r.duckdb")
    assert row["status"] == "ok", row.get("error")
    # A whole window per round trip, the download's start charged with the largest initial window any
    # stack here uses (LSQUIC's 32 x 1,460 B): the ceiling whatever the stack's update rule.
    ceiling = window_bound(window, rtt_ms, UpdateRule(0.0, "ceiling", initial_cwnd=32 * 1460), size).high_mbps
    assert row["goodput_mbps"] < 1.15 * ceiling, (row["goodput_mbps"], ceiling)
    assert json.loads(row["applied_client"])["initial_max_stream_data_bidi_local"] == window
