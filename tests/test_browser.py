"""qscan browser with Debian's chromium and firefox-esr, live on loopback.

Each run starts a lab server, tshark and the browser, and must leave none of
them behind. Where tshark decodes the browser's ClientHello itself, its
values and order must agree with ours.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import jsonschema
import pytest

from scanner.browser import browser_version
from scanner.capture.frontend import TSHARK_NAMED, tshark_client_hellos

ROOT = Path(__file__).resolve().parent.parent
QSCAN = str(Path(sys.executable).parent / "qscan")
EXECUTABLES = {"chromium": "chromium", "firefox": "firefox-esr"}

pytestmark = [pytest.mark.lab, pytest.mark.timeout(90)]


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found.append(f"{proc.name}: {command[:120]}")
    return found


# docs/qscan.md's two `qscan browser` commands as its page test would run them (their `tested with` options added:
# the set saved, the capture kept, the ClientHellos printed): the page names this file as the one that runs them,
# and its test checks that they are here word for word.
PAGE_COMMANDS = {
    "chromium": "qscan browser chromium --out clients.duckdb --save-set --sets-dir . --keep-capture chromium-capture --json",
    "firefox": "qscan browser firefox --out clients.duckdb --keep-capture ff-capture --save-set --sets-dir . --json"}


@pytest.mark.parametrize("browser", ["chromium", "firefox"])
def test_qscan_browser_stores_a_complete_client_set(browser: str, tmp_path: Path) -> None:
    """The manual's command for the browser, from a directory of the reader's own."""
    executable = EXECUTABLES[browser]
    if os.geteuid() != 0:
        pytest.skip("capturing on lo needs root")
    for tool in (executable, "gtlsserver", "tshark"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/setup.sh installs it)")
    version, _ = browser_version(browser)
    out, sets = tmp_path / "clients.duckdb", tmp_path
    kept = tmp_path / {"chromium": "chromium-capture", "firefox": "ff-capture"}[browser]
    done = subprocess.run([QSCAN, *shlex.split(PAGE_COMMANDS[browser])[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=80)
    assert done.returncode == 0, done.stderr
    # the programs were given the directory as the command names it, relative to where it ran
    assert processes_mentioning(kept.name) == [], "browser, server or tshark outlived qscan browser"

    label = f"{executable} {version}"
    with duckdb.connect(str(out), read_only=True) as con:
        rows = con.execute(
            "SELECT hello_id, client, sni, initial_max_data, initial_max_streams_bidi, max_idle_timeout FROM client_params"
        ).fetchall()
        assert rows and all(r[1] == label and r[2] == "lab.test" for r in rows)
        assert all(r[3] and r[4] and r[5] for r in rows), "flow-control parameters missing"
        (settings,) = con.execute("SELECT settings FROM scans WHERE kind = 'browser'").fetchone()
        assert json.loads(settings)["version"] == version
        for hello_id, *_ in rows:
            count = con.execute("SELECT count(*) FROM client_transport_parameters WHERE hello_id = ?", [hello_id]).fetchone()
            assert count[0] >= 8

    document = json.loads((sets / f"{executable}-{version}.json").read_text())
    jsonschema.validate(document, json.loads((ROOT / "schemas" / "paramset.schema.json").read_text()))
    assert document["provenance"]["browser_version"] == version

    # Cross-check against tshark wherever it decodes the same packet.
    printed = {hello["frame"]: hello for hello in map(json.loads, done.stdout.splitlines())}
    for frame, tshark in tshark_client_hellos(kept / f"{executable}.pcapng").items():
        ours = printed[frame]
        assert [int(i, 16) for i in ours["wire_order"]] == tshark["type"]
        for name in TSHARK_NAMED:
            assert ours["parameters"][name] == (tshark[name][0] if name in tshark else None)
