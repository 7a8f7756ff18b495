"""The qreplay command line: the contract form, and one-line errors for bad input."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from common import cliapp
from replay import cpuidle
from replay.cli import app as qreplay_app
from replay.link import LINKEM
from replay.sets import resolve_alias
from replay.stacks import get_stack
from replay.stacks.base import GO_BIN_DIR
from timing import measure_until
from interrupting import interruptible, signal_state

QREPLAY = str(Path(sys.executable).with_name("qreplay"))


def qreplay(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """qreplay with this environment, ``env`` changing it (a None value removes the variable)."""
    merged = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([QREPLAY, *args], capture_output=True, text=True, timeout=180, cwd=cwd,
                          env={k: v for k, v in merged.items() if v is not None})


@pytest.mark.parametrize("args, expected", [
    (["--set", "nonexistent", "--reps", "1"], "known sets: alpha"),
    (["--set", "/no/such.json", "--reps", "1"], "set file /no/such.json does not exist"),
    (["--set", "firefox", "--delay", "30 parsecs"], "malformed --delay"),
    (["--set", "firefox", "--loss", "lots"], "malformed --loss"),
    (["--set", "firefox", "--loss", "150%"], "between 0 and 100"),
    (["--set", "firefox", "--rate", "fast"], "malformed rate"),
    (["--set", "firefox", "--size", "big"], "--size"),
    (["--set", "firefox", "--stack", "picoquic"], "unknown stack 'picoquic'"),
    (["--set", "firefox", "--client-param", "initial_max_data=lots"], "initial_max_data takes an integer"),
    (["sweep", "--param", "nope", "--values", "1"], "not one of"),
    (["reproduce", "--figures", "5.9"], "no figure 5.9"),
    (["reproduce", "--stack", "ngtcp2", "--size", "huge"], "--size"),
])
def test_bad_input_is_one_line_exit_2(args, expected, monkeypatch, capsys):
    """Through qreplay's own entry point (cliapp.run, what the console script calls) in this process, as
    tests/test_cli_outputs.py runs its refusals: as 12 programs the cases took 7.3 s of CPU with pytest's start,
    2.7 here."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", ["qreplay", *args])
    with pytest.raises(SystemExit) as exited:  # an exception other than the refusal fails the test with it
        cliapp.run(qreplay_app, "qreplay")
    stderr = capsys.readouterr().err
    assert exited.value.code == 2, stderr
    assert expected in stderr and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.parametrize("args, said", [
    (["--stack", "quic-go", "--param", "initial_max_stream_data_bidi_remote"],
     "quic-go's client cannot set initial_max_stream_data_bidi_remote"),
    (["--server-stack", "quinn", "--side", "server", "--param", "initial_max_stream_data_bidi_local"],
     "quinn's server cannot set initial_max_stream_data_bidi_local")])
def test_a_sweep_the_swept_side_cannot_set_is_one_line_before_any_run(tmp_path, args, said):
    """Its values' runs would all be the same: refused as a campaign's sweep and reproduce's figures are
    (replay.commands.run.sweep_refusal), before anything is written."""
    out = tmp_path / "sweep.duckdb"
    result = qreplay("sweep", *args, "--values", "131072,1048576", "--reps", "1", "--out", str(out))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert said in result.stderr and "which the sweep varies" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_a_socket_buffer_the_kernel_refuses_is_named_as_such(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    result = qreplay("--set", "firefox", "--udp-buffer", "1KiB", "--size", "100kB", "--reps", "1",
                     "--out", str(tmp_path / "r.duckdb"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "the kernel refuses" in last and "= 1024 bytes (--udp-buffer)" in last and "root" not in last, last


def test_ctrl_c_keeps_the_finished_runs_and_says_so(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    out = tmp_path / "r.duckdb"
    process = subprocess.Popen(interruptible([QREPLAY, "--set", "firefox", "--stack", "quic-go", "--delay", "100ms",
                                              "--size", "100kB", "--reps", "500", "--out", str(out)]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Interrupt once a third client has started, so that at least two runs are finished (a fixed sleep
    # interrupted a slow start-up on a loaded machine before any run had ended). The 100 ms delay keeps each
    # client alive for about 0.3 s: on loopback a client lived a few milliseconds, and in CI's loaded suite the
    # polling missed them until all 500 runs had ended (exit 0 after about a minute).
    clients: set[str] = set()
    deadline = time.monotonic() + 120
    while len(clients) < 3:
        if time.monotonic() > deadline:
            process.kill()
        assert process.poll() is None, process.communicate()
        clients |= set(subprocess.run(["pgrep", "-f", f"^{GO_BIN_DIR / 'qgclient'} "], capture_output=True,
                                      text=True).stdout.split())
        time.sleep(0.05)
    taking = signal_state(process.pid)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and "Traceback" not in stderr, (stderr, taking)
    kept = re.search(r"interrupted: (\d+) of 500 runs finished and are kept in (\S+) \(experiment", stderr)
    assert kept and kept[2] == str(out), stderr
    stored = duckdb.connect(str(out), read_only=True).execute("SELECT count(*) FROM runs").fetchone()[0]
    assert stored == int(kept[1]) > 0


def test_a_client_set_as_server_set_is_named_once(tmp_path):
    result = qreplay("--set", "firefox", "--server-set", "firefox-109", "--stack", "quic-go", "--link", "loopback",
                     "--size", "100kB", "--reps", "2", "--out", str(tmp_path / "r.duckdb"))
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("--server-set firefox-109: firefox-109 is a client's set") == 1, result.stderr


def test_missing_lsquic_says_how_to_get_it():
    result = qreplay("--set", "firefox", "--stack", "lsquic", "--reps", "1",
                     env={"QREPLAY_LSQUIC_CLIENT": None, "QREPLAY_LSQUIC_SERVER": None})
    assert result.returncode == 2 and "QREPLAY_LSQUIC_CLIENT is not set; QREPLAY_LSQUIC_SERVER is not set" in result.stderr
    assert "build LSQUIC" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_program_that_is_not_lsquic_is_refused_in_one_line():
    result = qreplay("--set", "firefox", "--stack", "lsquic", "--reps", "1",
                     env={"QREPLAY_LSQUIC_CLIENT": "/bin/true", "QREPLAY_LSQUIC_SERVER": "/bin/true"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == ("qreplay: error: stack lsquic is not usable here: QREPLAY_LSQUIC_CLIENT=/bin/true "
                                     "is not LSQUIC's http_client: `/bin/true -h` printed nothing (exit status 0), "
                                     "not LSQUIC's 'Usage: http_client [opts]'")


def test_sets_lists_builtins_and_aliases():
    result = qreplay("sets", "--json")
    assert result.returncode == 0
    assert '"name": "firefox-109"' in result.stdout and '"name": "chromium"' in result.stdout


@pytest.mark.lab
def test_contract_form_runs_and_names_the_concrete_set(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    result = qreplay("--set", "firefox", "--delay", "30ms", "--size", "2MB", "--reps", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    concrete = resolve_alias("firefox")  # newest captured Firefox set, else firefox-109
    assert f"set: {concrete} " in result.stderr
    rows = duckdb.connect(str(tmp_path / "qreplay-results.duckdb")).execute(
        "SELECT set_name, delay_ms, status, bytes FROM runs ORDER BY rep").fetchall()
    assert rows == [(concrete, 30.0, "ok", 2_000_000)] * 2


def test_a_piped_summary_keeps_whole_set_names(tmp_path):
    """Redirected to a file or a pipe, rich would assume 80 columns and print "fire…"."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = subprocess.run([QREPLAY, "--set", "firefox", "--link", "loopback", "--size", "1MB", "--reps", "1",
                             "--out", str(tmp_path / "r.duckdb")], capture_output=True, text=True, timeout=120,
                            env=env)
    assert result.returncode == 0, result.stderr
    assert f"│ {resolve_alias('firefox')} " in result.stdout, result.stdout


@pytest.mark.parametrize("stack, ran", [("quic-go", "cubic"), ("aioquic", "cubic")])
def test_a_run_stores_the_congestion_control_that_ran_and_the_one_asked_beside_it(stack, ran, tmp_path):
    """quic-go has only CUBIC, aioquic (whose own default is Reno) is told CUBIC: asked for BBR, each run
    stores what ran, with the request beside it, and the warning is printed once."""
    out = tmp_path / "r.duckdb"
    result = qreplay("--set", "firefox", "--stack", stack, "--cc", "bbr", "--link", "loopback", "--size", "200kB",
                     "--reps", "2", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(f"has no bbr: it ran {ran}") == 1, result.stderr  # the sender's, once
    con = duckdb.connect(str(out), read_only=True)
    assert con.execute("SELECT DISTINCT cc, cc_requested, status FROM runs").fetchall() == [(ran, "bbr", "ok")]
    if stack == "aioquic":  # named on its command line, never left to aioquic's default
        assert "--cc=cubic" in con.execute("SELECT server_argv FROM runs LIMIT 1").fetchone()[0]
    assert [json.loads(line)["cc"] for line in result.stdout.splitlines()] == [ran]


def test_doctor_says_what_works_here_and_why_not():
    from replay.link import NetemBackend

    result = qreplay("doctor", "--json")
    assert result.returncode == 0, result.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(result.stdout)}
    assert rows[("link backend", "relay")]["ok"] is (os.path.exists(LINKEM))
    netem = NetemBackend.availability() if os.geteuid() == 0 else None
    if netem is not None:
        assert rows[("link backend", "netem")]["ok"] is netem.ok
        assert rows[("link backend", "auto")]["detail"] == f"uses {'netem' if netem.ok else 'relay'}"
    lsquic = rows[("stack", "lsquic")]
    if get_stack("lsquic").unavailable_reason():
        assert not lsquic["ok"] and "QREPLAY_LSQUIC_CLIENT" in lsquic["detail"]
    else:  # the version is the one the server names in its responses
        assert lsquic["ok"] and re.fullmatch(r"version \d+\.\d+\.\d+; client sets 8 of 12; server sets 9 of 12; "
                                             r"knobs: none .*; workloads: download", lsquic["detail"]), lsquic
    assert rows[("stack", "aioquic")]["detail"] == (f"version {importlib.metadata.version('aioquic')}; "
                                                     "client sets 12 of 12; server sets 12 of 12; knobs: --cipher, "
                                                     "--aes-ni (besides --cc, --autotune); workloads: download, upload, "
                                                     "requests, stream")
    assert rows[("stack", "quic-go")]["detail"].endswith("knobs: --gso, --aes-ni (besides --cc, --autotune); "
                                                         "workloads: download, upload, requests, stream")


@pytest.mark.timing
@pytest.mark.lab
def test_calibrate_measures_what_was_configured():
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")

    def calibrate() -> dict:
        result = qreplay("calibrate", "--link", "relay", "--delay", "8ms", "--delay-up", "2ms", "--pings", "300",
                         "--no-rate", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    measured = measure_until(calibrate, lambda c: abs(c["rtt"]["rtt_p50_ms"] - 10) < 1)
    assert measured["backend"] == "relay" and measured["configured_rtt_ms"] == 10
    assert measured["rtt"]["sent"] == 300 and measured["link_counters"]["down"]["packets_in"] >= 300
    assert measured["wakeups"]["deadlines"] == 999  # the machine's floor: 1 ms deadlines for 1 s


@pytest.mark.lab
def test_matrix_stores_every_condition_and_plots_it(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    out = tmp_path / "m.duckdb"
    result = qreplay("matrix", "--sets", "firefox-109,chrome-109", "--delays", "0,5ms", "--size", "1MB", "--reps",
                     "1", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    summaries = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(s["set_name"], s["delay_ms"], s["n"]) for s in summaries] == [
        ("firefox-109", 0, 1), ("chrome-109", 0, 1), ("firefox-109", 5, 1), ("chrome-109", 5, 1)]
    con = duckdb.connect(str(out))
    (kind, reps, config), = con.execute("SELECT kind, reps, config FROM experiments").fetchall()
    idle = json.loads(config)["cpu_idle"]
    assert (kind, reps) == ("matrix", 1)
    assert idle == "held" if cpuidle.availability()[0] else idle.startswith("unavailable"), idle
    assert con.execute("SELECT count(*), count(*) FILTER (status = 'ok') FROM runs").fetchone() == (4, 4)
    con.close()
    plotted = qreplay("plot", str(out), "--out-dir", str(tmp_path / "plots"))
    assert plotted.returncode == 0, plotted.stderr
    assert (tmp_path / "plots" / "goodput_vs_delay.png").stat().st_size > 1000


@pytest.mark.lab
def test_a_server_side_sweep_applies_each_value_to_the_server(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    out = tmp_path / "s.duckdb"
    result = qreplay("sweep", "--param", "initial_max_data", "--values", "1000000,2000000", "--side", "server",
                     "--delay", "0ms", "--size", "1MB", "--reps", "1", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    rows = duckdb.connect(str(out)).execute(
        "SELECT sweep_value, status, applied_server FROM runs ORDER BY sweep_value").fetchall()
    assert [(value, status, json.loads(applied)["initial_max_data"]) for value, status, applied in rows] == [
        (1000000, "ok", 1000000), (2000000, "ok", 2000000)]
