"""`qreplay --profile`: real profiled downloads (perf on ngtcp2 and quic-go, py-spy on aioquic), sorted into the
Kempf thesis's components by datasets/profile/components.csv, drawn as flame graphs by inferno."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from replay import profile, sets
from replay.commands.plot import plot_profiles
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, run_experiment
from replay.stacks import get_stack
from replay.stacks.base import RunOptions

STACKS = ("ngtcp2", "quic-go", "aioquic")
pytestmark = [
    pytest.mark.timing,  # a profile's samples against the process's own CPU time (tests/conftest.py)
    pytest.mark.skipif(shutil.which("perf") is None, reason="perf (linux-perf) missing"),
    pytest.mark.skipif(any(get_stack(s).unavailable_reason() for s in STACKS), reason="a stack is missing"),
]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """One profiled download per stack at 0 ms, perf at 999 Hz so that a short one has samples enough:
    (results file, {stack: run row})."""
    results = tmp_path_factory.mktemp("profile") / "r.duckdb"
    rows = {}
    for name in STACKS:
        # aioquic: py-spy samples at 100 Hz; 5 MB ran its server 0.5 s, and its packet protection once got no sample
        size = 20_000_000 if name == "aioquic" else 50_000_000
        experiment = Experiment("single", get_stack(name), [Condition(sets.resolve_one("firefox"), None, LinkConfig())],
                                RunOptions(size=size, timeout_s=60, profile=True), reps=1)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(profile, "PERF_HZ", 999)
            row = run_experiment(experiment, results)[0]
        assert row["status"] == "ok", row.get("error")
        assert "no profile" not in row["warnings"], row["warnings"]
        rows[name] = row
    return results, rows


def _profiles(results, run_id):
    con = duckdb.connect(str(results), read_only=True)
    try:
        return con.sql(f"SELECT * FROM profiles WHERE run_id = '{run_id}'").pl().to_dicts()
    finally:
        con.close()


def _softirq_share(results, run_id, endpoint) -> float:
    with duckdb.connect(str(results), read_only=True) as con:
        return con.execute("SELECT sum(samples) FILTER (folded LIKE '%handle_softirqs%' OR folded LIKE '%do_softirq%') "
                           "/ sum(samples) FROM profile_stacks WHERE run_id = ? AND endpoint = ?",
                           [run_id, endpoint]).fetchone()[0] or 0.0


@pytest.mark.parametrize("stack", ["ngtcp2", "quic-go"])
def test_native_endpoints_are_sorted_into_components(profiled, stack):
    results, rows = profiled
    found = _profiles(results, rows[stack]["run_id"])
    for endpoint in ("client", "server"):
        mine = {p["component"]: p for p in found if p["endpoint"] == endpoint}
        assert set(mine) == {*profile.COMPONENTS, profile.UNMAPPED}
        assert sum(p["share"] for p in mine.values()) == pytest.approx(1.0)
        assert mine["CRYPTO"]["samples"] > 0 and mine["PACKET_IO"]["samples"] > 0
        assert mine["PACKET_IO"]["profiler"].startswith("perf cpu-clock")
        # the samples' CPU (their periods) is the endpoint's, as GNU time counted it over its whole life (the
        # server's included its start-up and idle wait, unsampled), less the softirqs perf caught it running: on
        # the veth the receiver's delivery runs in the sender's context, which the kernel counts as softirq
        # time, not the task's (measured: 53 of an ngtcp2 server's 158 samples, 0.158 s against GNU time's 0.09)
        cpu = sum(p["cpu_s"] for p in mine.values())
        assert 0 < cpu * (1 - _softirq_share(results, rows[stack]["run_id"], endpoint)) \
            <= rows[stack][f"{endpoint}_cpu_s"] + 0.05
        assert mine["CRYPTO"]["cpu_s_per_gb"] == pytest.approx(mine["CRYPTO"]["cpu_s"] / 0.05)
    assert any(p["profiler"].endswith("fp unwinding") for p in found) == (stack == "quic-go")


def test_python_frames_are_named(profiled):
    results, rows = profiled
    found = _profiles(results, rows["aioquic"]["run_id"])
    assert {p["profiler"] for p in found} == {f"py-spy {profile.PY_SPY_HZ} Hz"}
    con = duckdb.connect(str(results), read_only=True)
    leaves = con.execute("SELECT endpoint, split_part(folded, ';', -1), samples FROM profile_stacks "
                         "WHERE run_id = ? AND component = 'CRYPTO'", [rows["aioquic"]["run_id"]]).fetchall()
    con.close()
    # Each end's packet protection sorted into CRYPTO by its Python function's name, not only the import of
    # the cryptography package a run begins with. (Its encryption happens under several functions, C calls
    # below them: at 20 MB the server's encrypt_packet had 2 of its 12 CRYPTO samples, decrypt_packet and
    # HeaderProtection.remove 3 each; in another run 17 samples of the server's, 8 of the client's, matched.)
    for endpoint in ("client", "server"):
        protection = sum(n for end, leaf, n in leaves if end == endpoint and re.search(
            r"^\w+\.(en|de)crypt_packet \(aioquic/quic/crypto\.py\)$|\(aioquic/_crypto\.py\)$", leaf))
        assert protection > 0, (endpoint, leaves)


def test_unmapped_frames_are_counted_not_guessed(profiled):
    """The same stored stacks sorted by a mapping that knows only the kernel's socket calls: everything
    else is UNMAPPED, nothing lands in a component no row names."""
    results, rows = profiled
    con = duckdb.connect(str(results), read_only=True)
    stacks = dict(con.execute("SELECT folded, samples FROM profile_stacks WHERE run_id = ? AND endpoint = 'server'",
                              [rows["ngtcp2"]["run_id"]]).fetchall())
    con.close()
    only_sockets = tuple(r for r in profile.load_mapping() if r.library == "*" and r.component == "PACKET_IO")
    sorter = profile.Sorter("ngtcp2", only_sockets)
    sorted_ = {}
    for folded, samples in stacks.items():
        sorted_[sorter.component(folded)] = sorted_.get(sorter.component(folded), 0) + samples
    assert set(sorted_) == {"PACKET_IO", profile.UNMAPPED}
    assert sorted_[profile.UNMAPPED] > 0
    # and the full mapping leaves the unnamed internals of Debian's stripped libngtcp2 unmapped too
    full = profile.Sorter("ngtcp2")
    assert full.component("main;ev_run;[libngtcp2.so.9.0.1]") == profile.UNMAPPED
    assert full.component("main;[libngtcp2.so.9.0.1];__libc_sendmsg;udp_sendmsg_[k];memcpy_orig_[k]") == "PACKET_IO"


def test_the_innermost_known_frame_decides():
    sorter = profile.Sorter("quinn")
    assert sorter.component("main;quinn_proto::connection::Connection::poll_transmit;"
                            "ring_core_0_17_14_aes_gcm_enc_update") == "CRYPTO"
    assert sorter.component("main;quinn_proto::connection::Connection::poll_transmit;memcpy") == "MARSHALLING"
    assert sorter.component("main;something_unknown") == profile.UNMAPPED


def test_a_bad_mapping_row_is_one_line(tmp_path):
    bad = tmp_path / "components.csv"
    bad.write_text("stack,component,pattern,note\nngtcp2,SPEED,^x,\n")
    with pytest.raises(profile.ToolError, match="SPEED"):
        profile.load_mapping(bad)


def test_plot_draws_flame_graphs(profiled, tmp_path):
    results, rows = profiled
    written = plot_profiles(results, tmp_path)
    svgs = [p for p in written if p.suffix == ".svg"]
    assert len(svgs) == 2 * len(STACKS)
    text = svgs[0].read_text()
    assert text.startswith("<?xml") and "<svg" in text and "inferno" in text.lower()
    assert (tmp_path / "profile_components.png").stat().st_size > 20_000


def test_cli_profile_option_and_plot(tmp_path):
    """`qreplay --profile` then `qreplay plot --profile` from the command line."""
    results = tmp_path / "r.duckdb"
    qreplay = str(Path(sys.executable).with_name("qreplay"))
    run = subprocess.run([qreplay, "--stack", "quic-go", "--size", "100MB", "--reps", "1",
                          "--profile", "--out", str(results), "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    plot = subprocess.run([qreplay, "plot", str(results), "--profile", "--out-dir",
                           str(tmp_path / "plots")], capture_output=True, text=True)
    assert plot.returncode == 0, plot.stderr
    assert len([line for line in plot.stdout.splitlines() if line.endswith(".svg")]) == 2


def test_a_program_started_through_env_is_profiled_as_itself():
    """A stack whose command line carries an environment starts through env(1) (aioquic's h3 server names its
    document root so): env execs the program in its own process, so the program decides the profiler, not env."""
    python = profile.executable_of([sys.executable])
    assert profile.executable_of(["env", "QREPLAY_HTDOCS=/tmp/x", sys.executable, "-m", "replay.aioquic_endpoints"]) \
        == python and profile.is_python(python)
    assert not profile.gated(["env", "SSLKEYLOGFILE=/tmp/k", sys.executable, "-m", "x"])
