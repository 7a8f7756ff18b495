"""The demo tells its story: a quick demo's terminal fits one screen, and its index page, loaded in headless
Chromium, links only files that are there and shows every picture."""

from __future__ import annotations

import datetime
import functools
import json
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import lab_instance, lab_unavailable
from demo import QUICK, Entry, write_index
from replay.browser_driver import BROWSERS, launch_chromium, quiet_chromium
from replay.commands.run import REQUEST_COLUMNS, RunWarnings, _extra_columns

SCREEN_LINES = 60

# Every link fetched by the page itself and every picture's decoded width, as the browser sees them.
CHECK_PAGE = """(async () => {
  const links = [...new Set([...document.querySelectorAll('a[href]')].map(a => a.href))];
  const fetched = await Promise.all(links.map(async href => {
    try { return [href, (await fetch(href)).status]; } catch (error) { return [href, String(error)]; }
  }));
  const images = [...document.images].map(image => [image.src, image.complete ? image.naturalWidth : 0]);
  return JSON.stringify({title: document.title, fetched, images});
})()"""


def load_in_chromium(url: str, workdir: Path) -> dict:
    """What CHECK_PAGE finds on ``url`` in headless Chromium (the replay's quiet launch: no background
    networking, updates or telemetry)."""
    home = workdir / "home"
    home.mkdir(parents=True)
    environment = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    browser, devtools = launch_chromium(quiet_chromium(workdir / "profile"), environment, workdir / "chromium.log",
                                        60.0)
    try:
        page = next(t for t in devtools.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        session = devtools.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        devtools.call("Page.enable", session=session)
        assert not devtools.call("Page.navigate", {"url": url}, session).get("errorText")
        devtools.wait_event("Page.loadEventFired")
        found = devtools.call("Runtime.evaluate", {"expression": CHECK_PAGE, "awaitPromise": True,
                                                   "returnByValue": True}, session)
        devtools.call("Browser.close")
        return json.loads(found["result"]["value"])
    finally:
        devtools.close()
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait()


@pytest.fixture
def served(tmp_path):
    """A loopback HTTP server over tmp_path/demo, as a person would open the page from a plain web server."""
    (tmp_path / "demo").mkdir()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "demo"))
    handler.log_message = lambda *args: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def test_quick_demo_fits_a_screen_and_its_page_loads_whole(tmp_path, served):
    if reason := lab_unavailable():
        pytest.skip(reason)
    if shutil.which(BROWSERS["chromium"]) is None:
        pytest.skip("Chromium is not installed (scripts/setup.sh installs Debian's)")
    out = tmp_path / "demo"
    done = subprocess.run([str(Path(sys.executable).parent / "quictp-demo"), "--quick", "--lab", lab_instance("demo"),
                           "--out", str(out / "scan.duckdb"), "--html", str(out)],
                          capture_output=True, text=True, timeout=600)
    printed = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 0, "\n".join(printed[-20:])
    assert len(printed) <= SCREEN_LINES, "\n".join(printed)
    # one headline a step, each step there; the details went to the log, which is longer than the screen
    steps = [line.split()[0] for line in printed if line[:1].isdigit()]
    assert steps == [str(n) for n in range(1, 10)], "\n".join(printed)
    warnings = [line for line in printed if "warning" in line]
    assert len(warnings) == len(set(warnings)), "\n".join(warnings)  # once per stack and set, never per run
    log = (out / "demo.log").read_text()
    assert "failed runs excluded" in log and len(log.splitlines()) > len(printed)

    seen = load_in_chromium(f"{served}/index.html", tmp_path / "chromium")
    fetched = dict(seen["fetched"])
    # every report, results file and rendered notebook the demo made is linked, and every link is there
    for wanted in ("demo.log", "scan.duckdb", "scan-replay.duckdb", "scan-replay-reproduce/report.html",
                   "scan-replay-reproduce/figure_5.6.png", "scan-replay-pairs/pairs.html", "replay_goodput.html",
                   "scan-impact/report.html", "scan-impact/spot_checks.duckdb"):
        assert f"{served}/{wanted}" in fetched, sorted(fetched)
    assert {href: status for href, status in fetched.items() if status != 200} == {}
    assert seen["images"] and all(width > 0 for _, width in seen["images"]), seen["images"]


def test_a_warning_is_said_once_per_stack_and_set_not_once_per_run():
    warnings = RunWarnings()

    def run(stack: str, set_name: str, *lines: str) -> list[str]:
        return warnings.add({"stack": stack, "set_name": set_name, "warnings": json.dumps(lines)})

    # a sweep: each run could not apply the same parameter at its own value
    assert run("quic-go", "lsquic-client-default+initial_max_data=196608",
               "quic-go client could not apply: max_ack_delay=25") == [
        "quic-go client could not apply: max_ack_delay=25"]
    assert run("quic-go", "lsquic-client-default+initial_max_data=15728640",
               "quic-go client could not apply: max_ack_delay=10") == []
    assert run("quic-go", "firefox", "quic-go client could not apply: max_ack_delay=25")  # another set: said
    assert run("ngtcp2", "firefox", "ngtcp2 server could not apply: a=1, b=2, c=3, d=4", "client: a note")
    assert warnings.grouped() == [
        "quic-go: client could not apply max_ack_delay (lsquic-client-default, firefox)",
        "ngtcp2: server could not apply 4 parameters; client: a note (firefox)"]
    assert warnings.grouped() == []  # each said once


def test_a_table_shows_request_columns_only_for_a_workload_of_requests():
    """A download's one request has a rate and a TTFB too, which say nothing: its table has no requests/s,
    TTFB or percentiles; a requests workload's has them all (fairness only where several clients ran)."""
    import polars as pl

    def row(workload: str, clients: int = 1) -> dict:
        return {"workload": workload, "clients": clients, "mean_fairness": 0.9 if clients > 1 else None,
                **{column: 12.5 for column, _ in REQUEST_COLUMNS.values()}}

    assert _extra_columns(pl.DataFrame([row("download"), row("download")])) == {}
    assert _extra_columns(pl.DataFrame([row("download", clients=4)])) == {"fairness": "mean_fairness"}
    assert list(_extra_columns(pl.DataFrame([row("requests"), row("download")]))) == list(REQUEST_COLUMNS)
    assert {"requests/s", "TTFB ms", "p99 ms"} <= set(REQUEST_COLUMNS)


def test_the_index_says_which_results_were_not_made(tmp_path):
    """An entry whose file a step did not write is listed as not made, with its sentence, not left out: the
    page says what the demo would have shown and that it is missing."""
    made, missing = tmp_path / "fidelity" / "report.html", tmp_path / "pairs" / "report.html"
    made.parent.mkdir()
    made.write_text("<p>fidelity</p>")
    page = write_index(tmp_path / "index.html", [Entry(made, "How well each stack stands in for a browser."),
                                                 Entry(missing, "Every client against every server.")],
                       QUICK, datetime.datetime(2026, 11, 29, 4, 0), ["scan: 5 servers answered"])
    text = page.read_text()
    assert "<a href='fidelity/report.html'>report.html</a>" in text
    assert "pairs/report.html" in text and "not made" in text and "Every client against every server." in text
    assert "href='pairs/report.html'" not in text  # no link to a file that is not there
