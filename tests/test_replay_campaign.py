"""qreplay campaigns: a campaign file planned, run as two shards (one killed with SIGKILL and resumed), merged,
and run through a one-node Slurm; real runs through the testbed, tiny sizes."""

from __future__ import annotations

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

from common import cliapp, slurm
from replay import campaign, statistics, store
from replay.cli import app as qreplay_app

pytestmark = pytest.mark.lab
QREPLAY = str(Path(sys.executable).parent / "qreplay")
CAMPAIGN = """campaign = "tiny"
[[experiment]]
name = "sets"
stacks = ["ngtcp2"]
sets = ["firefox", "chrome"]
size = "100KB"
reps = 2
"""


@pytest.fixture
def campaign_file(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (network namespaces)")
    reason = campaign.plan({"campaign": "x", "experiment": [{}]}).experiments[0].stack.unavailable_reason()
    if reason:
        pytest.skip(reason)
    path = tmp_path / "tiny.toml"
    path.write_text(CAMPAIGN)
    return path


def _qreplay(*argv, **options) -> subprocess.CompletedProcess:
    return subprocess.run([QREPLAY, *map(str, argv)], capture_output=True, text=True, timeout=300, **options)


def _descendants(pid: int) -> list[int]:
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(c) for child in children for c in (child, *_descendants(int(child)))]


def _kill_after_first_run(argv: list[str]) -> None:
    """Start a shard; once it has stored one run, SIGKILL it and everything it started (its host dies).
    Stopped first, so that it stores nothing more while its tree is listed: a CI run listed it for longer than
    the shard's second 100 KB run took, and that run was stored before the kill."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        line = process.stderr.readline()
        assert ": ok" in line, line + process.stderr.read()
        os.kill(process.pid, signal.SIGSTOP)
        tree = [process.pid, *_descendants(process.pid)]
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL


def _grouping(results: Path) -> list[tuple]:
    """What `qreplay plot` draws: per experiment and condition, the runs it pools."""
    con = store.open_read_only(results)
    try:
        frame = statistics.summary(con)
    finally:
        con.close()
    keys = ["experiment_id", *(c for c in statistics.conditions() if c in frame.columns)]
    return sorted(frame.select([*keys, "runs", "n"]).rows(), key=repr)


def test_two_shards_one_killed_and_resumed_merge_into_exactly_the_plan(campaign_file, tmp_path):
    plan = campaign.load(campaign_file)
    directory = tmp_path / "campaign"
    _kill_after_first_run([QREPLAY, "campaign", "run", str(campaign_file), "--shard", "0/2", "--out", str(directory)])
    resumed = _qreplay("campaign", "run", campaign_file, "--shard", "0/2", "--out", directory, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert {key: summary[key] for key in ("shard", "shards", "planned", "already", "ran", "failed")} == \
        {"shard": 0, "shards": 2, "planned": 2, "already": 1, "ran": 1, "failed": 0}
    other = _qreplay("campaign", "run", campaign_file, "--shard", "1/2", "--out", directory, "--quiet")
    assert other.returncode == 0, other.stderr
    again = _qreplay("campaign", "run", campaign_file, "--shard", "1/2", "--out", directory, "--quiet")
    assert json.loads(again.stdout)["ran"] == 0  # a finished shard run again runs nothing twice

    merged = tmp_path / "merged.duckdb"
    done = _qreplay("campaign", "merge", directory, "--out", merged)
    assert done.returncode == 0, done.stderr
    with duckdb.connect(str(merged), read_only=True) as con:
        stored = [run_id for (run_id,) in con.execute("SELECT run_id FROM runs").fetchall()]
        assert con.execute("SELECT count(*), min(status), max(status) FROM runs").fetchone() == (4, "ok", "ok")
        assert con.execute("SELECT count(*), count(finished_at) FROM experiments").fetchone() == (1, 1)
    assert sorted(stored) == sorted(run.run_id for run in plan.runs)  # none missing, none twice

    one_host = tmp_path / "one-host"
    alone = _qreplay("campaign", "run", campaign_file, "--shard", "0/1", "--out", one_host, "--quiet")
    assert alone.returncode == 0, alone.stderr
    # a host's own time, for the projection: its shard's time outside the experiments and its process's start-up
    times = json.loads(alone.stdout)
    assert times["startup_seconds"] > 0
    measured, _, fixed = campaign.measured_durations([one_host])
    assert fixed == [pytest.approx(times["outside_seconds"] + times["startup_seconds"])]
    # each run's time beside the machine's load at its experiment's start and end, and the plan says it
    assert all(len(run["loads"]) == 2 and None not in run["loads"] for run in measured)
    # of it the transfer's own (what grows with the size); all of it kept in a file that --measured reads too
    assert all(0 < run["transfer"] < run["seconds"] for run in measured)
    campaign.save_measured([one_host], tmp_path / "measured.json", {"date": "now"})
    assert json.loads(json.dumps(campaign.measured_durations([one_host]))) == \
        json.loads(json.dumps(campaign.measured_durations([tmp_path / "measured.json"])))
    planned = _qreplay("campaign", "plan", campaign_file, "--hosts", "2", "--measured", one_host)
    assert planned.returncode == 0, planned.stderr
    assert re.search(r"^load: +\d+\.\d-\d+\.\d when measured, \d+\.\d now ", planned.stdout, re.MULTILINE), \
        planned.stdout
    assert _qreplay("campaign", "merge", one_host, "--out", tmp_path / "one.duckdb").returncode == 0
    assert _grouping(merged) == _grouping(tmp_path / "one.duckdb")
    assert len(_grouping(merged)) == 2  # the two sets, each of its two repetitions
    drawn = _qreplay("plot", merged, "--out-dir", tmp_path / "plots")
    assert drawn.returncode == 0 and (tmp_path / "plots" / "goodput_vs_delay.png").is_file(), drawn.stderr

    # A merge into a file that exists, and of a campaign missing a shard, are refused in one line.
    refused = _qreplay("campaign", "merge", directory, "--out", merged)
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1, refused.stderr
    partial = tmp_path / "partial"
    assert _qreplay("campaign", "run", campaign_file, "--shard", "0/2", "--out", partial, "--quiet").returncode == 0
    missing = _qreplay("campaign", "merge", partial, "--out", tmp_path / "p.duckdb")
    assert missing.returncode != 0 and "2 missing" in missing.stderr and missing.stderr.count("\n") == 1


FIDELITY = """campaign = "browser"
[[experiment]]
name = "fidelity"
fidelity = true
stacks = ["firefox", "ngtcp2"]
delays = ["10ms"]
size = "100KB"
reps = 1
"""


def test_a_fidelity_campaign_in_two_shards_merges_into_a_file_fidelity_and_the_notebook_read(campaign_file, tmp_path):
    """`fidelity = true`: qreplay fidelity's comparison (Firefox beside its set on ngtcp2, pinned and growing), its
    three runs dealt to two hosts; the merged file is read by `qreplay fidelity --report-only` and the replay
    notebook as a campaign one host ran."""
    from nbconvert import HTMLExporter

    from replay.stacks import get_stack
    from scanner.analysis import REPLAY_DB_VARIABLE, execute_notebook

    if reason := get_stack("firefox").unavailable_reason():
        pytest.skip(reason)
    path, directory, merged = tmp_path / "browser.toml", tmp_path / "campaign", tmp_path / "merged.duckdb"
    path.write_text(FIDELITY)
    for shard in ("0/2", "1/2"):
        done = _qreplay("campaign", "run", path, "--shard", shard, "--out", directory, "--quiet")
        assert done.returncode == 0 and json.loads(done.stdout)["failed"] == 0, done.stderr
    done = _qreplay("campaign", "merge", directory, "--out", merged)
    assert done.returncode == 0, done.stderr
    with duckdb.connect(str(merged), read_only=True) as con:
        assert sorted(con.execute("SELECT stack, autotune_requested, status FROM runs").fetchall(), key=repr) == \
            [("firefox", False, "ok"), ("ngtcp2", False, "ok"), ("ngtcp2", True, "ok")]
    report = _qreplay("fidelity", "--report-only", "--out", merged, "--out-dir", tmp_path / "report",
                      env={**os.environ, "COLUMNS": "200"})
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "fidelity.md").read_text()
    assert "| ngtcp2 | pinned |" in text and "| ngtcp2 | autotune |" in text, text[:2000]
    assert "ran the set the replay campaign file named" in text and "- firefox: " in text
    html, _ = HTMLExporter().from_notebook_node(execute_notebook("replay_goodput", {REPLAY_DB_VARIABLE: merged}))
    notebook = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    fidelity = notebook[notebook.index("Do replayed browser sets behave like the browsers?"):]
    assert "beside its set firefox-" in fidelity and "ngtcp2 pinned" in fidelity, fidelity[:2000]


FIGURE = """campaign = "figure"
[[experiment]]
name = "5.1a"
stacks = ["ngtcp2"]
set-pairs = [["config4+initial_max_data=4294967295", "config4+initial_max_data=4294967295"]]
losses = ["0%", "1%"]
cc = ["cubic", "bbr"]
size = "100KB"
reps = 1
"""


def test_a_campaign_experiment_named_after_a_figure_is_that_figure_in_reproduce_s_report(campaign_file, tmp_path):
    """A campaign file's experiment named 5.1a (datasets/campaign/full-grid.toml's), merged, is read by `qreplay
    reproduce --report-only` as figure 5.1a: its set is named as reproduce names the thesis's config4, and its run
    at the thesis's condition (CUBIC, no loss) is the figure's point; its runs beyond the thesis's grid (BBR, 1% loss:
    full-grid.toml runs both) are counted in the page's opening, not drawn into the figure beside it."""
    from replay.reproduce import plan_campaign

    path, out = tmp_path / "figure.toml", tmp_path / "report"
    path.write_text(FIGURE)
    (figure,) = plan_campaign(figures={"5.1a"})
    set_name = "config4+initial_max_data=4294967295"
    assert set_name in {c.client.name for c in figure.conditions}  # one name for the set on both sides
    done = _qreplay("campaign", "run", path, "--shard", "0/1", "--out", tmp_path / "c", "--quiet")
    assert done.returncode == 0 and json.loads(done.stdout)["failed"] == 0, done.stderr
    out.mkdir()
    assert _qreplay("campaign", "merge", tmp_path / "c", "--out", out / "reproduce.duckdb").returncode == 0
    report = _qreplay("reproduce", "--report-only", "--out-dir", out)
    assert report.returncode == 0, report.stderr
    markdown = (out / "report.md").read_text()
    assert "Campaign `figure` (full)" in markdown, markdown[:1000]
    assert f"| ngtcp2 | {set_name} | {set_name} / {set_name}, 0 ms | 1 | " in markdown, markdown
    assert f"{set_name}, 0 ms, loss 1%" not in markdown and "cc bbr" not in markdown, markdown
    assert ("Beyond the thesis's conditions the campaign ran 3 more (congestion control bbr; other loss rates or "
            "delays than the figure's own)") in markdown, markdown[:1500]
    assert (out / "figure_5.1a.png").is_file()


@pytest.mark.parametrize("option, value, said", [
    ("stacks", '["nosuch"]', "unknown stack 'nosuch'"), ("sets", '["nosuch"]', "unknown set 'nosuch'"),
    ("cc", '"vegas"', "--cc takes cubic, bbr"), ("colour", '"red"', "unknown option 'colour'"),
    ("server-host", '"node2.example"\nlauncher = "ssh:node2"', "'node2.example' is not an IP address"),
    ("server-host", '"198.18.0.2"', "--server-host and --launcher go together"),
    ("server-host", '"198.18.0.2"\nlauncher = "ssh:node2"\ndelays = ["30ms"]', "emulates nothing"),
    ("server-host", '"198.18.0.2"\nlauncher = "ssh:node2"\nlink = "netem"', "link chooses how a path is emulated"),
    ("launcher", '"telnet:node2"\nserver-host = "198.18.0.2"', "give KIND:WHERE"),
    ("fidelity", 'true\nstacks = ["ngtcp2"]', "at least one of each"),
    ("fidelity", 'true\nstacks = ["firefox", "ngtcp2"]\ncc = "bbr"', "a fidelity experiment takes"),
    ("fidelity", '"yes"', "fidelity = true makes"),
    ("param", '"initial_max_data"', "a sweep takes param"), ("side", '"server"', "a sweep takes param"),
    ("param", '"initial_max_dat"\nvalues = [1]', "param: 'initial_max_dat' is not one of"),
    ("param", '"initial_max_data"\nvalues = []', "values: the values of initial_max_data"),
    ("param", '"initial_max_data"\nvalues = ["big"]', "initial_max_data takes an integer, not 'big'"),
    ("param", '"initial_max_data"\nvalues = [1]\nside = "both"', "side must be client or server"),
    ("param", '"initial_max_data"\nvalues = [1]\nstacks = ["firefox"]', "a browser's parameters are its own"),
    ("param", '"initial_max_stream_data_bidi_remote"\nvalues = [1]\nstacks = ["quic-go"]',
     "quic-go's client cannot set initial_max_stream_data_bidi_remote, which the sweep varies"),
    ("set-pairs", '[["alpha"]]', "set-pairs is a list of [client set, server set]"),
    ("set-pairs", '[["alpha", "nosuch"]]', "unknown set 'nosuch'"),
    ("set-pairs", '[["alpha", "alpha"]]\nsets = ["alpha"]', "leave sets and server-set out"),
    ("server-set", '["alpha", "nosuch"]', "unknown set 'nosuch'"),
    ("server-stack", '["quinn", "nosuch"]', "unknown stack 'nosuch'"),
    ("sets", '["alpha", "alpha"]', "a condition is listed twice")])
def test_a_bad_campaign_file_ends_in_one_line_before_any_run(tmp_path, option, value, said, monkeypatch, capsys):
    """Every refusal of an experiment's table, its sweeps and set pairs among them: one line, exit 2, in `campaign
    plan` and `campaign run` alike, before anything starts. Through qreplay's own entry point (cliapp.run, what the
    console script calls) in this process, as tests/test_cli_outputs.py runs its refusals: as 50 programs (the 25
    files of then, plan and run each) the cases took 30.6 s of CPU, most of it the programs' starts; 4.3 s here."""
    path = tmp_path / "bad.toml"
    path.write_text(f'campaign = "bad"\n[[experiment]]\n{option} = {value}\n')
    for argv in (["plan", path], ["run", path, "--shard", "0/1", "--out", tmp_path / "out"]):
        monkeypatch.setattr(sys, "argv", ["qreplay", "campaign", *map(str, argv)])
        with pytest.raises(SystemExit) as exited:  # an exception other than the refusal fails the test with it
            cliapp.run(qreplay_app, "qreplay")
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.count("\n") == 1 and said in err, err
        assert err.startswith("qreplay: error: ") and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing started


def test_the_sbatch_file_runs_every_shard_under_a_one_node_slurm(campaign_file, tmp_path):
    if reason := slurm.unavailable_reason():
        pytest.skip(reason)
    job, directory = tmp_path / "tiny.sbatch", tmp_path / "campaign"
    planned = _qreplay("campaign", "plan", campaign_file, "--hosts", "2", "--out", directory, "--slurm", job)
    assert planned.returncode == 0, planned.stderr
    assert "#SBATCH --array=0-1" in job.read_text() and "#SBATCH --exclusive" in job.read_text()
    with slurm.single_node_cluster(tmp_path / "slurm") as env:
        started = time.monotonic()
        done = subprocess.run(["sbatch", "--wait", f"--chdir={tmp_path}", str(job)], env=env | {"QREPLAY": QREPLAY},
                              capture_output=True, text=True, timeout=300)
        logs = " | ".join(p.read_text()[-400:] for p in tmp_path.glob("qreplay-tiny-*.log"))
        assert done.returncode == 0, f"{done.stderr} {logs}"
        assert time.monotonic() - started < 300
    merged = _qreplay("campaign", "merge", directory, "--out", tmp_path / "merged.duckdb")
    assert merged.returncode == 0, merged.stderr + logs
    with duckdb.connect(str(tmp_path / "merged.duckdb"), read_only=True) as con:
        assert sorted(r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()) == \
            sorted(run.run_id for run in campaign.load(campaign_file).runs)


def test_the_plan_deals_rounds_so_every_host_interleaves_every_condition():
    """Four conditions on two hosts: with a plain deal host 0 would run conditions 0 and 2 only; rotated
    rounds give each host every condition, its runs in rounds (repetitions never going back), 8 runs each."""
    plan = campaign.plan({"campaign": "p", "experiment": [
        {"sets": ["firefox", "chrome", "chrome-109", "lsquic-client-default"], "reps": 4, "size": "1MB"}]})
    assert len({run.run_id for run in plan.runs}) == len(plan.runs) == 16
    for shard in range(2):
        share = plan.share(shard, 2)
        assert len(share) == 8
        assert {run.condition.client.name for run in share} == {c.client.name for c in plan.experiments[0].conditions}
        assert [run.rep for run in share] == sorted(run.rep for run in share)
    assert campaign.plan({"campaign": "p", "experiment": [{"reps": 4, "size": "1MB"}]}).digest != plan.digest


def test_a_campaign_naming_its_run_times_deals_its_runs_by_them(tmp_path):
    """`measured`: the run times the runs are dealt by. A 0 ms run takes five times a 40 ms one, three of each on
    two hosts: by count one host gets 11 s and the other 7 s, by time 10 and 8, a condition's first two repetitions
    on different hosts; each host runs its share in the plan's order, every load deals the same (the deal is the
    plan's alone), other run times make another digest (the campaign directory refuses a shard of it), and
    `campaign plan` projects from the file's run times unless given others."""
    measured = [{"stack": "ngtcp2", "server_stack": "ngtcp2", "delay_ms": delay, "loss_pct": 0, "rate_bps": None,
                 "size_bytes": 10_000_000, "workload": "download", "seconds": seconds, "transfer": seconds - 0.5}
                for delay, seconds in ((0, 5.0), (40, 1.0))]
    (tmp_path / "times.json").write_text(json.dumps({"provenance": {}, "setups": [], "fixed": [], "runs": measured}))
    text = '[[experiment]]\nstacks = ["ngtcp2"]\ndelays = ["0ms", "40ms"]\nsize = "10MB"\nreps = 3\n'
    (tmp_path / "count.toml").write_text(f'campaign = "d"\n{text}')
    (tmp_path / "timed.toml").write_text(f'campaign = "d"\nmeasured = "times.json"\n{text}')
    by_count, by_time = campaign.load(tmp_path / "count.toml"), campaign.load(tmp_path / "timed.toml")
    assert by_count.weights is None and sorted(by_time.weights) == [1.0] * 3 + [5.0] * 3
    assert sorted(campaign.project(by_count, 2, measured, []).host_seconds) == [7.0, 11.0]
    assert sorted(campaign.project(by_time, 2, measured, []).host_seconds) == [8.0, 10.0]
    for shard in range(2):
        share = by_time.share(shard, 2)
        assert [run.index for run in share] == sorted(run.index for run in share)
        assert share == campaign.load(tmp_path / "timed.toml").share(shard, 2)
    slow = [run for run in by_time.runs if run.condition.link.delay_down_ms == 0]
    assert by_time.deal(2)[slow[0].index] != by_time.deal(2)[slow[1].index]
    assert by_count.digest != by_time.digest
    planned = _qreplay("campaign", "plan", tmp_path / "timed.toml", "--hosts", "2")
    assert planned.returncode == 0 and re.search(r"^on 2: +10 s ", planned.stdout, re.MULTILINE), planned.stdout
    (tmp_path / "times.json").write_text(json.dumps({"provenance": {}, "setups": [], "fixed": [],
                                                     "runs": measured[:1]}))
    assert campaign.load(tmp_path / "timed.toml").digest != by_time.digest


def test_a_run_at_an_unmeasured_size_is_its_link_s_transfer_scaled():
    """A 100 MB run whose link was measured at 10 MB: the transfer scaled, the rest as measured (1 s + 10 x 4 s);
    one on a link measured at no size falls back to the stack's runs; set-ups counted once an experiment."""
    plan = campaign.plan({"campaign": "p", "experiment": [
        {"stacks": ["ngtcp2"], "delays": ["0ms", "40ms"], "size": "100MB", "reps": 1}]})
    measured = [{"stack": "ngtcp2", "server_stack": "ngtcp2", "delay_ms": 40, "loss_pct": 0, "rate_bps": None,
                 "size_bytes": 10_000_000, "workload": "download", "seconds": 5.0, "transfer": 4.0}]
    projection = campaign.project(plan, 1, measured, [2.0])
    assert projection.matched == {"its link at another size, scaled": 1, "stack": 1}
    assert projection.one_host_seconds == pytest.approx(41.0 + 5.0 + 2.0)
    failed = [run | {"transfer": None} for run in measured]  # a failed run counts whole, not scaled
    assert campaign.project(plan, 1, failed, []).one_host_seconds == pytest.approx(5.0 + 5.0)


SWEEP = """campaign = "swept"
[[experiment]]
name = "window"
stacks = ["ngtcp2"]
sets = ["lsquic-client-default"]
server-set = "lsquic-server-default"
param = "initial_max_data"
values = [196608, 15728640]
delays = ["0ms", "5ms"]
size = "100KB"
reps = 1
"""


def test_a_sweep_campaign_runs_each_value_at_each_delay_and_merges_into_exactly_the_plan(campaign_file, tmp_path):
    """2 values x 2 delays, once each: planned (each run its value), run as one host, merged into the plan's runs,
    each stored with its swept parameter and value."""
    path = tmp_path / "swept.toml"
    path.write_text(SWEEP)
    plan = campaign.load(path)
    assert sorted((r.condition.sweep_value, r.condition.link.delay_down_ms) for r in plan.runs) == \
        [(196608, 0), (196608, 5), (15728640, 0), (15728640, 5)]
    done = _qreplay("campaign", "run", path, "--shard", "0/1", "--out", tmp_path / "c", "--quiet")
    assert done.returncode == 0, done.stderr
    assert _qreplay("campaign", "merge", tmp_path / "c", "--out", tmp_path / "m.duckdb").returncode == 0
    with duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT run_id, sweep_param, sweep_value, delay_ms, status FROM runs").fetchall()
    assert sorted(r[0] for r in rows) == sorted(run.run_id for run in plan.runs)  # none missing, none twice
    assert sorted(r[1:] for r in rows) == [("initial_max_data", v, d, "ok") for v in (196608, 15728640)
                                           for d in (0, 5)]


def test_set_pairs_sweeps_and_server_stacks_expand_to_their_product():
    """A list of server sets is each client set against each; set-pairs as given; a list of server stacks one
    experiment each; a server-side sweep varies the server's set; sets as a run stores them with overrides."""
    product = campaign.plan({"campaign": "p", "experiment": [
        {"stacks": ["ngtcp2", "quic-go"], "sets": ["firefox-109", "chrome-109"], "server-set": ["alpha", "beta"],
         "cc": ["cubic", "bbr"], "reps": 1}]})
    assert len(product.runs) == 2 * 2 * 2 * 2
    assert {(r.condition.client.name, r.condition.server.name) for r in product.runs} == \
        {(c, s) for c in ("firefox-109", "chrome-109") for s in ("alpha", "beta")}
    pairs = campaign.plan({"campaign": "p", "experiment": [
        {"set-pairs": [["alpha", "alpha"], ["config4+initial_max_data=4294967295"] * 2], "reps": 1}]})
    assert [(r.condition.client.name, r.condition.server.name) for r in pairs.runs] == \
        [("alpha", "alpha"), *[("config4+initial_max_data=4294967295",) * 2]]
    assert pairs.runs[1].condition.client.params.initial_max_data == 4294967295
    twins = campaign.plan({"campaign": "p", "experiment": [
        {"stacks": ["chromium", "firefox"], "server-stack": ["quinn", "aioquic"], "server-set": "lsquic-server-default",
         "param": "initial_max_data", "side": "server", "values": [196608, 1572864], "workload": "upload",
         "reps": 1}]})
    assert [e.server_stack.name for e in twins.experiments] == ["quinn", "aioquic"]
    assert {(r.condition.client.name, r.condition.server.name, r.condition.sweep_value) for r in twins.runs} == \
        {(f"{b}-own", f"lsquic-server-default+initial_max_data={v}", v) for b in ("chromium", "firefox")
         for v in (196608, 1572864)}
    assert len(twins.runs) == 2 * 2 * 2


def test_a_clients_set_named_as_a_server_set_is_said_once(tmp_path):
    """As `--server-set firefox-109` warns: the server would advertise a browser's values, allowed but more often a
    slip; said once for the experiment, not once per run or per client set."""
    path = tmp_path / "warn.toml"
    path.write_text('campaign = "w"\n[[experiment]]\nname = "e"\nstacks = ["ngtcp2"]\nsets = ["alpha", "beta"]\n'
                    'server-set = ["firefox-109", "alpha"]\nreps = 3\n')
    planned = _qreplay("campaign", "plan", path)
    assert planned.returncode == 0, planned.stderr
    assert planned.stderr.count("is a client's set") == 1, planned.stderr
    assert "experiment 'e': server set firefox-109: firefox-109 is a client's set" in " ".join(planned.stderr.split())


def test_runs_that_need_a_stack_missing_here_are_planned_and_a_shard_holding_them_refused_before_any_run(tmp_path):
    """LSQUIC's runs stay in the plan, said as needing it; a shard holding one is refused before anything starts,
    and a shard of the same experiment holding only the other stack's runs runs here."""
    from replay.stacks import get_stack

    reason = get_stack("lsquic").unavailable_reason()
    if reason is None:
        pytest.skip("LSQUIC is built here")
    path = tmp_path / "lsquic.toml"
    path.write_text('campaign = "l"\n[[experiment]]\nstacks = ["lsquic", "ngtcp2"]\nsize = "100KB"\nreps = 2\n')
    plan = campaign.load(path)
    assert [run.condition.stack.name for run in plan.share(1, 4)] == ["ngtcp2"]
    if os.geteuid() == 0 and get_stack("ngtcp2").unavailable_reason() is None:
        alone = _qreplay("campaign", "run", path, "--shard", "1/4", "--out", tmp_path / "other", "--quiet")
        assert alone.returncode == 0 and json.loads(alone.stdout)["ran"] == 1, alone.stderr
    planned = _qreplay("campaign", "plan", path)
    assert planned.returncode == 0 and "2 runs need lsquic, not usable here" in planned.stdout, planned.stdout
    done = _qreplay("campaign", "run", path, "--shard", "0/1", "--out", tmp_path / "out")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "2 of its runs need lsquic" in done.stderr, \
        done.stderr
    assert not (tmp_path / "out").exists()  # nothing started
