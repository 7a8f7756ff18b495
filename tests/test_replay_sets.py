"""Set resolution: built-in names, browser aliases (newest capture, thesis fallback), files, scan top-N, overrides."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest

from replay import sets
from tparams.errors import ToolError
from tparams.paramset import PERFORMANCE_PARAMETERS


def test_aliases_fall_back_to_the_thesis_sets_when_nothing_was_captured(tmp_path):
    for name in ("firefox-109", "chrome-109"):
        shutil.copy(sets.SETS_DIR / f"{name}.json", tmp_path)
    assert sets.resolve_one("firefox", tmp_path).name == "firefox-109"
    assert sets.resolve_one("chrome", tmp_path).name == "chrome-109"
    assert sets.resolve_one("chromium", tmp_path).name == "chrome-109"


def test_aliases_pick_the_newest_captured_browser_set(tmp_path):
    document = json.loads((sets.SETS_DIR / "firefox-109.json").read_text())
    for name in ("firefox-109", "firefox-esr-128.0", "firefox-esr-153.0.1", "chromium-99.0", "chromium-156.0.7"):
        (tmp_path / f"{name}.json").write_text(json.dumps({**document, "name": name}))
    assert sets.resolve_alias("firefox", tmp_path) == "firefox-esr-153.0.1"  # numeric, not lexical, order
    assert sets.resolve_alias("chrome", tmp_path) == "chromium-156.0.7"


def test_unknown_set_lists_what_exists():
    with pytest.raises(ToolError) as err:
        sets.resolve("no-such-set")
    message = str(err.value)
    assert "firefox-109" in message and "chrome-109" in message and "firefox" in message and "\n" not in message


def test_set_file_and_overrides(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"name": "mine", "role": "client", "parameters": {"initial_max_data": 1000}}))
    named = sets.resolve_one(str(path))
    assert named.name == "mine" and named.params.initial_max_data == 1000
    changed = sets.with_overrides(named, ["initial_max_data=196608", "initial_max_stream_data_bidi_local=131072"])
    assert changed.params.initial_max_data == 196608
    assert changed.params.initial_max_stream_data_bidi_local == 131072
    assert changed.name.startswith("mine+") and changed.params.fingerprint() != named.params.fingerprint()
    with pytest.raises(ToolError):
        sets.with_overrides(named, ["initial_max_data"])
    with pytest.raises(ToolError):
        sets.with_overrides(named, ["not_a_parameter=1"])


def test_scan_top_n_reads_the_server_params_view(tmp_path):
    scan = tmp_path / "scan.duckdb"
    con = duckdb.connect(str(scan))
    columns = ", ".join(f"{name} {'BOOLEAN' if name == 'disable_active_migration' else 'BIGINT'}"
                        for name in PERFORMANCE_PARAMETERS)
    con.execute(f"CREATE TABLE servers (set_fingerprint VARCHAR, {columns})")
    common = ["aaaa", 30000, 1472, 16777216, 1048576, 1048576, 1048576, 100, 100, None, None, None, None]
    rare = ["bbbb", 30000, 1472, 196608, 131072, 131072, 131072, 100, 3, None, None, None, None]
    con.executemany(f"INSERT INTO servers VALUES ({', '.join('?' * 13)})", [common] * 3 + [rare])
    con.execute("CREATE VIEW server_params AS SELECT * FROM servers")
    con.close()
    found = sets.resolve(f"{scan}:top2")
    assert [s.params.initial_max_data for s in found] == [16777216, 196608]
    assert found[0].name == "scan-top1-aaaa" and "3 servers" in found[0].source
    with pytest.raises(ToolError):
        sets.resolve(f"{tmp_path / 'missing.duckdb'}:top1")
    with pytest.raises(ToolError, match="holds 2 distinct server sets, fewer than the top 99"):
        sets.resolve(f"{scan}:top99")  # never fewer sets than asked, unsaid
    assert [s.role for s in found] == ["server", "server"]


def test_a_cut_or_damaged_set_file_is_refused_in_one_line_with_its_byte(tmp_path):
    """A set file is one JSON document: cut anywhere, no set in it can be trusted; the error names the byte
    where it stops being readable, and the other sets of the directory are still listed."""
    real = (sets.SETS_DIR / "chrome-109.json").read_bytes()
    shutil.copy(sets.SETS_DIR / "alpha.json", tmp_path)
    # inside a key, after a comma, inside a number, at the last brace, and inside a UTF-8 character
    for cut in (len(real) // 3, real.index(b",", len(real) // 2) + 1, real.rindex(b"}") - 1, len(real) - 2):
        (tmp_path / "cut.json").write_bytes(real[:cut])
        with pytest.raises(ToolError) as err:
            sets.resolve_one(str(tmp_path / "cut.json"))
        message = str(err.value)
        assert "\n" not in message and "is damaged at byte" in message and f"of {cut:,}" in message, message
        listed = {row["name"]: row for row in sets.list_sets(tmp_path)}
        assert listed["cut"]["role"] == "damaged" and listed["alpha"]["role"] != "damaged"
    (tmp_path / "cut.json").write_bytes(b'{"name": "caf\xc3')
    with pytest.raises(ToolError, match=r"no UTF-8 at byte 13 of 14"):
        sets.load_file(tmp_path / "cut.json")
    (tmp_path / "cut.json").write_bytes(b"[1, 2]")
    with pytest.raises(ToolError, match="holds a JSON list"):
        sets.load_file(tmp_path / "cut.json")
