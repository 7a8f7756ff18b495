"""The front page and the manual, checked like code: the site builds strictly, its generated reference
covers every command and every schema object and is committed as the code makes it, every link works in
the repository too, it renders in a real browser, and every command the front page and the manual show
runs as written."""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import http.server
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import duckdb
import matplotlib.image
import pytest
import typer
from markdown_it import MarkdownIt

from conftest import SPARK_TEST_JVM_OPTIONS, lab_unavailable
from demo.cli import app as demo_app
from replay.cli import app as qreplay_app
from scanner.cli import app as qscan_app

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
#: a manual command carrying one of these comments is shown, not run (it needs what CI has not)
NOT_RUN_HERE = ("needs the Internet", "needs your own")


def build_site(site_dir: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site_dir)], capture_output=True, text=True, env=ENV, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    done = build_site(site_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return site_dir


def command_paths(app: typer.Typer, prog: str) -> list[str]:
    """Every command of a typer app, as its reference page titles it (`qscan lab up`)."""
    def walk(command, path):
        yield " ".join(path)
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])
    return list(walk(typer.main.get_command(app), [prog]))


def test_the_reference_pages_hold_every_command_and_every_schema_object(site):
    for prog, app in (("qscan", qscan_app), ("qreplay", qreplay_app)):
        page = (site / "reference" / f"{prog}.html").read_text()
        for path in command_paths(app, prog):
            assert f"<code>{path}</code>" in page, f"{path} is missing from the {prog} reference"
    page = (site / "reference" / "schema.html").read_text()
    for ddl in sorted((ROOT / "schemas" / "duckdb").glob("*.sql")):
        for kind, name in re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?(TABLE|VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)",
                                     ddl.read_text(), re.I):
            assert f"<code>{name}</code>" in page, f"{kind} {name} of {ddl.name} is missing from the schema reference"


def manual_pages() -> list[Path]:
    """The front page and every page of the manual, as the repository holds them."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_link_of_the_front_page_and_the_manual_works_in_the_repository():
    """Where the repository is read as it is (its host shows docs/ as committed, no site is built), every
    relative link and image of README.md and docs/ must name a committed file: none may exist only after
    `make docs`. Anchors are the site's business (its strict build checks them)."""
    dead = []
    for page in manual_pages():
        tokens = MarkdownIt().parse(page.read_text())
        for token in (child for block in tokens for child in (block.children or [])):
            target = token.attrs.get("href") or token.attrs.get("src")
            if not target or re.match(r"[a-z]+:|#", target):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists() or not path.is_relative_to(ROOT):
                dead.append(f"{page.relative_to(ROOT)}: {target}")
    assert dead == [], f"links to files the repository does not hold: {dead}"


def test_the_committed_generated_files_are_what_the_code_makes_now():
    """docs/reference/*.md (typer's and the DDL's reference) and the benchmarks chart are committed so that
    their links work in the repository; `make reference` rewrites them after a change to a command, a
    schema or bench/latest.csv."""
    from docs_build.committed import generated_files

    stale = [str(path.relative_to(ROOT)) for path, content in generated_files().items()
             if not path.exists() or path.read_bytes() != content]
    assert stale == [], f"stale generated files (run `make reference` and commit them): {stale}"


def test_the_site_front_page_is_the_readme(site):
    page = (site / "index.html").read_text()
    title = (ROOT / "README.md").read_text().splitlines()[0].lstrip("# ")
    assert title.split(":")[0] in page and "Three uses" in page


def test_a_broken_link_fails_the_strict_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    (docs / "extending.md").write_text((docs / "extending.md").read_text() + "\nSee [nowhere](no-such-page.md).\n")
    config = tmp_path / "mkdocs.yml"
    (tmp_path / "docs_build").symlink_to(ROOT / "docs_build")  # the hooks, found beside the configuration
    # INHERIT keeps the real configuration (hooks, nav, validation); only the pages differ.
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\n")
    done = build_site(tmp_path / "site", config)
    assert done.returncode != 0 and "no-such-page.md" in done.stderr


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on loopback, as a reader's browser would load it (search needs a worker)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def render(url: str, screenshot: Path) -> tuple[list[str], str]:
    """Console messages and the DOM of a page loaded by headless Chromium, with a screenshot."""
    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--log-level=0",
            "--window-size=1280,900", "--virtual-time-budget=3000"]
    shot = subprocess.run([*base, f"--screenshot={screenshot}", url], capture_output=True, text=True, timeout=120)
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    console = [line for line in shot.stderr.splitlines() + dom.stderr.splitlines() if ":CONSOLE" in line]
    return console, dom.stdout


def assert_drawn(screenshot: Path) -> None:
    pixels = matplotlib.image.imread(screenshot)
    assert pixels.shape[0] >= 800 and pixels.shape[1] >= 1200
    assert pixels.std() > 0.05, "the screenshot is (nearly) one colour: nothing was drawn"


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (scripts/setup.sh installs it)")
def test_the_front_page_and_a_manual_page_render_in_chromium(served, tmp_path):
    for page, heading in (("index.html", "Three uses"), ("qreplay.html", "qreplay")):
        screenshot = tmp_path / f"{page}.png"
        console, dom = render(f"{served}/{page}", screenshot)
        assert console == [], f"{page} logged to the console: {console}"
        assert "md-content" in dom and heading in dom, f"{page} did not render its content"
        assert_drawn(screenshot)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (scripts/setup.sh installs it)")
def test_a_console_error_is_seen(tmp_path):
    # The check above must be able to fail: a page that logs an error is caught by the same reading.
    page = tmp_path / "broken.html"
    page.write_text("<html><body><p>text</p><script>console.error('deliberate'); no_such_function();</script>")
    console, _ = render(page.as_uri(), tmp_path / "broken.png")
    assert any("deliberate" in line for line in console) and any("no_such_function" in line for line in console)


@dataclasses.dataclass(frozen=True)
class Step:
    """One thing a manual page tells the reader to run: a shell command line or a Python block."""

    kind: str  # "sh" or "python"
    text: str
    shown_only: str | None = None  # why the test does not run it (a NOT_RUN_HERE reason, or the test that does)


#: a shell command that the manual's test runs with these options added, its page saying so (a long
#: experiment run smaller): `qreplay --set firefox  # ...; tested with `--size 2MB --reps 1``
TESTED_WITH = re.compile(r"tested with `([^`]+)`")
#: a shell command that a test of its own runs and checks, its page naming the file, which holds the command as the
#: page's test would run it (`tested with` options added) word for word (check_run_by): run there, not twice
RUN_BY = re.compile(r"run by `(tests/[\w.]+\.py)`")
PYTHON_END = "END_OF_THE_PAGES_PYTHON"  # the here-document that feeds a page's Python block to python


def page_steps(page: Path) -> list[Step]:
    """Every command of every shell block and every Python block of a page, in order. A shell line's
    comment (after two spaces and `#`), or a Python block's first line, may say it is not run here
    (NOT_RUN_HERE) or how the test runs it smaller (TESTED_WITH); a trailing backslash continues a line."""
    steps = []
    for token in MarkdownIt().parse(page.read_text()):
        if token.type != "fence":
            continue
        info = token.info.strip()
        if info == "python":
            first = token.content.lstrip().splitlines()[0] if token.content.strip() else ""
            reason = next((r for r in NOT_RUN_HERE if first.startswith("#") and r in first), None)
            steps.append(Step("python", textwrap.dedent(token.content), reason))
        elif info in ("sh", "bash", "console"):
            pending = ""
            for line in token.content.splitlines():
                command, _, comment = line.partition("  #")
                if command.rstrip().endswith("\\"):
                    pending += command.rstrip()[:-1] + " "
                    continue
                command, pending = (pending + command).strip(), ""
                if not command or command.startswith("#"):
                    continue
                reason = next((r for r in NOT_RUN_HERE if r in comment), None)
                smaller, owner = TESTED_WITH.search(comment), RUN_BY.search(comment)
                steps.append(Step("sh", f"{command} {smaller.group(1)}" if smaller else command,
                                  reason or (owner and f"run by {owner.group(1)}")))
    return steps


def page_script(steps: list[Step]) -> str:
    """The page's steps as one bash script: stop at the first failure, the lab down whatever happens."""
    lines = ["set -euo pipefail",
             f"trap '{BIN / 'qscan'} lab down >/dev/null 2>&1 || true; "
             f"{BIN / 'qscan'} lab down --instance qpop >/dev/null 2>&1 || true' EXIT"]
    for step in steps:
        if step.shown_only or step.text.startswith("make "):
            continue
        if step.kind == "python":
            lines += [f"echo '$ python <<{PYTHON_END}'", f"python - <<'{PYTHON_END}'", step.text.rstrip(), PYTHON_END]
        else:
            lines += [f"echo {shlex.quote('$ ' + step.text)}", step.text]
    return "\n".join(lines) + "\n"


def check_run_by(steps: list[Step]) -> None:
    """A command another test runs must be in that test's file as written (a string literal, or adjacent ones
    continued over lines), or the page would show one command and the suite run another."""
    for step in steps:
        if step.shown_only and step.shown_only.startswith("run by "):
            owner = ROOT / step.shown_only.removeprefix("run by ")
            assert owner.is_file() and step.text in re.sub(r'"\s*\n\s*"', "", owner.read_text()), \
                f"{owner.relative_to(ROOT)} does not run `{step.text}` as the page shows it"


def check_make_steps(steps: list[Step]) -> None:
    """`make demo` and `make test` ARE the demo and the suite: checked to be the Makefile's targets."""
    for step in steps:
        if step.text.startswith("make ") and not step.shown_only:
            dry = subprocess.run(["make", "-n", "-C", str(ROOT), *step.text.split()[1:]], capture_output=True, text=True)
            assert dry.returncode == 0, dry.stderr


def run_page(page: Path, workdir: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """A page's commands as a reader runs them: from the checkout (here a directory that mirrors it, so
    what the commands write stays out of it) with set-up's .venv/bin on PATH."""
    steps = page_steps(page)
    check_make_steps(steps)
    check_run_by(steps)
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True).stdout
    # The checkout's tracked entries and what set-up makes, nothing else: a stray scan.duckdb left in the
    # checkout must not stand in for the one a page writes.
    for name in {line.split("/")[0] for line in tracked.splitlines()} | {".venv", ".venv-picoquic", "build"}:
        if (ROOT / name).exists():
            (workdir / name).symlink_to(ROOT / name)
    # SPARK_SUBMIT_OPTS: a page's Spark driver with the tests' JVM options (conftest), the commands as written
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "VIRTUAL_ENV": str(BIN.parent),
           "SPARK_SUBMIT_OPTS": SPARK_TEST_JVM_OPTIONS}
    return subprocess.run([*PRIVATE_RUN_DIR, "bash", "-c", page_script(steps)], cwd=workdir, capture_output=True,
                          text=True, env=env, timeout=timeout)


# A page's commands name the default lab (qlab, qlab-client) as a reader's do, so two pages at once, or a page
# beside a reader's own lab, would meet in /run/qlab and /run/netns. Each page runs with a private /run, where its
# lab's state, lock files and named namespaces live (the lab makes its interfaces inside its namespaces, so the
# shared root namespace never sees their names); only /run/qreplay is the machine's, since the socket-buffer
# sysctls it coordinates are global, and settable only from the root namespace, which is why the page keeps it.
PRIVATE_RUN = """set -e
mkdir -p /run/qreplay
held=$(mktemp -d)
mount --bind /run/qreplay "$held"
mount -t tmpfs private-run /run
mkdir /run/qreplay /run/netns
mount --move "$held" /run/qreplay
rmdir "$held"
exec "$@"
"""
PRIVATE_RUN_DIR = ["unshare", "--mount", "--propagation", "private", "--", "bash", "-c", PRIVATE_RUN,
                "private-run"]


def failed(page: Path, done: subprocess.CompletedProcess) -> str:
    return f"a command of {page.relative_to(ROOT)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


# The popularity notebook rendered by jupyter's command line, as the front page shows it; docs/store.md shows the
# same command and marks it as run here (its Python block runs the notebook on its own scan)
POPULARITY_NOTEBOOK = ("QTP_SCAN_DB=$PWD/scan.duckdb .venv/bin/jupyter nbconvert --to html --execute "
                       "notebooks/parameter_popularity.ipynb --output-dir out/")


@pytest.mark.xdist_group("manual-README.md")
def test_the_front_page_commands_run(tmp_path):
    """Every command the front page shows, in its order, from a directory of the reader's own: the lab
    comes up, a ZMap scan of it, its report, a replay and its plot, the popularity notebook, the lab down."""
    steps = page_steps(ROOT / "README.md")
    run = [step.text for step in steps if not step.shown_only and not step.text.startswith("make ")]
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert POPULARITY_NOTEBOOK in run
    assert any(c.startswith("qscan lab up") for c in run) and run[-1].startswith("qscan lab down")
    done = run_page(ROOT / "README.md", tmp_path)
    assert done.returncode == 0, failed(ROOT / "README.md", done)
    assert duckdb.connect(str(tmp_path / "scan.duckdb"), read_only=True).execute(
        "SELECT count(*) FROM server_params").fetchone()[0] >= 5
    assert (tmp_path / "out" / "parameter_popularity.html").stat().st_size > 100_000
    assert any((tmp_path / "plots").glob("*.png"))


@pytest.mark.lab
@pytest.mark.parametrize("page", [pytest.param(p.name, marks=pytest.mark.xdist_group(f"manual-{p.name}"))
                                  for p in sorted((ROOT / "docs").glob("*.md"))])
def test_every_command_of_the_manual_runs(page, tmp_path):
    """Every shell command and Python block of each manual page, in its order, as a reader runs it; the few
    that need the Internet or something of the reader's own are only shown, and the long experiments the
    page marks run smaller, as the page says."""
    steps = page_steps(ROOT / "docs" / page)
    if not steps:
        pytest.skip(f"{page} shows no commands")
    if lab_unavailable():
        pytest.skip(lab_unavailable())
    done = run_page(ROOT / "docs" / page, tmp_path)
    assert done.returncode == 0, failed(ROOT / "docs" / page, done)


def test_every_block_of_the_front_page_and_the_manual_declares_its_language():
    # A command block without one (```) would escape the test above unseen.
    bare = [f"{page.relative_to(ROOT)}:{token.map[0] + 1}" for page in manual_pages()
            if page.parent.name != "reference"
            for token in MarkdownIt().parse(page.read_text()) if token.type == "fence" and not token.info.strip()]
    assert bare == [], f"code blocks without a language (sh, python, text, ...): {bare}"


def test_a_failing_manual_command_fails_the_page_and_markers_are_honoured(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```sh\necho one > one.txt  # tested with `two`\nqscan --version  # needs the Internet\n"
                    "qreplay sets --json  # run by `tests/test_docs.py`\n"
                    "false\necho never > never.txt\n```\n\n```python\n# needs your own thing\nraise SystemExit(1)\n```\n")
    steps = page_steps(page)
    assert [(s.text, bool(s.shown_only)) for s in steps] == [
        ("echo one > one.txt two", False), ("qscan --version", True), ("qreplay sets --json", True), ("false", False),
        ("echo never > never.txt", False), ("# needs your own thing\nraise SystemExit(1)\n", True)]
    # a command another test runs is shown, not run, and must be in that test's file as the page shows it
    check_run_by(steps)
    with pytest.raises(AssertionError, match="conftest.py does not run `qreplay sets --json`"):
        check_run_by([Step("sh", "qreplay sets --json", "run by tests/conftest.py")])
    work = tmp_path / "work"
    work.mkdir()
    done = run_page(page, work)
    assert done.returncode != 0 and (work / "one.txt").read_text() == "one two\n" and not (work / "never.txt").exists()


def commands(app: typer.Typer, prog: str):
    """(path, click command) for an app and every command below it."""
    def walk(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])
    return list(walk(typer.main.get_command(app), [prog]))


@pytest.mark.parametrize("prog,app", [("qscan", qscan_app), ("qreplay", qreplay_app), ("quictp-demo", demo_app)])
def test_every_help_shows_one_example_that_parses_and_the_top_one_names_the_manual(prog, app):
    for path, command in commands(app, prog):
        examples = re.findall(r"Example: (.+)", command.epilog or "")
        assert len(examples) == 1, f"{' '.join(path)} --help shows {len(examples)} examples"
        words = examples[0].split()
        assert words[:len(path)] == path, f"{' '.join(path)}'s example runs another command: {examples[0]}"
        # click parses the example as it would the real command line: unknown options, missing
        # arguments and values of the wrong type fail here
        command.make_context(" ".join(path), words[len(path):])
    shown = subprocess.run([str(BIN / prog), "--help"], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "200"}, check=True).stdout
    manual = re.search(r"Manual: (docs/\S+)", shown.strip().splitlines()[-1])
    assert manual and (ROOT / manual.group(1)).is_file(), f"{prog} --help does not end with the manual's page"


def test_the_benchmarks_page_shows_the_generated_chart_and_a_row_for_every_latest_figure(site):
    import csv
    import html

    page = html.unescape((site / "benchmarks.html").read_text())
    assert '<img alt="' in page and 'src="benchmark-goals.png"' in page, "benchmarks.md no longer shows the chart"
    pixels = matplotlib.image.imread(site / "benchmark-goals.png")  # a PNG, or imread fails
    assert pixels.shape[0] > 300 and pixels.shape[1] > 300
    assert pixels.std() > 0.05, "the chart is (nearly) one colour: nothing was drawn"
    first_table = page.split("<table>")[1].split("</table>")[0]
    rows = [re.sub(r"<[^>]+>", "", row) for row in re.findall(r"<tr>(.*?)</tr>", first_table, re.S)][1:]
    with (ROOT / "bench" / "latest.csv").open(newline="") as handle:
        latest = list(csv.DictReader(handle))
    # One row a goal: a goal written twice is shown twice, and a row-a-line count cannot see it.
    pairs = collections.Counter((goal["benchmark"], goal["goal"]) for goal in latest)
    twice = [pair for pair, count in pairs.items() if count > 1]
    assert twice == [], f"bench/latest.csv holds these (benchmark, goal) pairs more than once: {twice}"
    assert len(rows) == len(latest), "the Latest figures table is not one row a line of bench/latest.csv"
    for row, goal in zip(rows, latest):
        for column in ("benchmark", "goal", "ratio", "date"):
            assert goal[column] in row, f"{goal['benchmark']}: {goal['goal']}: its {column} is not in its table row"


def test_a_goal_written_twice_in_the_latest_figures_is_named_in_one_line(tmp_path):
    """A new run's row added beside the old one instead of replacing it: the page would show the goal twice."""
    from mkdocs.exceptions import PluginError

    from docs_build.benchmarks import LATEST, read_goals

    lines = LATEST.read_text().splitlines(keepends=True)
    (tmp_path / "latest.csv").write_text("".join([*lines, lines[2]]))
    with pytest.raises(PluginError, match=rf"line {len(lines) + 1}: .* is line 3's again"):
        read_goals(tmp_path / "latest.csv")


@pytest.mark.parametrize("column,bad,says", [("ratio", "fast", "ratio 'fast' is neither a number"),
                                             ("met", "yes", "met is 'yes' but ratio")])
def test_a_bad_latest_figure_fails_the_build_in_one_line(tmp_path, column, bad, says):
    import csv

    with (ROOT / "bench" / "latest.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    missed = next(row for row in rows if row["met"] == "no")  # a missed goal, so that met=yes contradicts it
    missed[column] = bad
    (tmp_path / "bench").mkdir()
    with (tmp_path / "bench" / "latest.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=reader.fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    # The hooks beside the configuration: the real ones, but a copy of the benchmarks hook, which finds
    # bench/latest.csv from where it lies (here, the altered one).
    (tmp_path / "docs_build").mkdir()
    for hook in (ROOT / "docs_build").glob("*.py"):
        if hook.name == "benchmarks.py":
            shutil.copy(hook, tmp_path / "docs_build" / hook.name)
        else:
            (tmp_path / "docs_build" / hook.name).symlink_to(hook)
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {ROOT / 'docs'}\n")
    done = build_site(tmp_path / "site", config)
    line = rows.index(missed) + 2
    assert done.returncode != 0
    errors = [text for text in done.stderr.splitlines() if "ERROR" in text]
    assert len(errors) == 1 and f"bench/latest.csv line {line}: {says}" in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_the_identification_page_shows_what_the_committed_evaluation_holds(site):
    from docs_build.identification import tables
    from scanner.identify import read_evaluation

    page = (site / "identification.html").read_text()
    assert "generated:" not in page, "a marker of the identification page was left unreplaced"
    summary = tables()["evaluation summary"]
    assert read_evaluation()["provenance"]["learned_at"] in summary
    assert summary.split(" Over the")[0] in page.replace("\n", " ")
    # the habits table holds one row per learned library, NEW_TOKEN included
    habits = page.split('id="the-learned-habits"')[1].split("</table>")[0]
    assert habits.count("<tr>") == 1 + len(json.loads((ROOT / "datasets/library_signatures.json").read_text())["libraries"])
    assert "NEW_TOKEN frames" in habits


def test_the_scale_page_plans_every_reproduced_figure_on_every_stack_that_runs_here():
    """docs/scale.md's plan for the seeds' figures at the full grid (docs_build/scale.py, which plans the campaign
    file datasets/campaign/full-grid.toml; kept current by the committed-files test) has a row for every figure
    `qreplay reproduce` runs and every replay stack; the file runs each figure's series (reproduce's own: its set
    pairs or swept values, size and workload) on each replay stack that can run it, LSQUIC's included, at 5
    delays x 3 loss rates x both congestion controls (a twin's browsers: their own), 10 repetitions."""
    from common.markdown import generated_section
    from docs_build.scale import FULL_GRID, MEASURED, SECTION, figure_of, measured_stacks, stack_of
    from replay import campaign
    from replay.reproduce import plan_campaign
    from replay.stacks import all_stacks, get_stack

    begin, end = generated_section(SECTION)
    section = (ROOT / "docs" / "scale.md").read_text().split(begin)[1].split(end)[0]
    rows = {line.split("|")[1].strip().removesuffix(" (not measured here)") for line in section.splitlines()
            if line.startswith("| ")}
    figures = plan_campaign()
    usable = [name for name, stack in all_stacks().items() if stack.unavailable_reason() is None]
    assert {p.figure for p in figures} | set(all_stacks()) <= rows, sorted(rows)
    assert set(usable) <= set(measured_stacks(json.loads(MEASURED.read_text())["runs"]))
    plan = campaign.load(FULL_GRID)
    by_figure: dict[tuple, set] = {}
    for experiment in plan.experiments:
        for condition in experiment.conditions:
            client, server = experiment.stacks(condition)
            key = (experiment.tags["campaign_experiment"], server.name if client.own_parameters else client.name)
            by_figure.setdefault(key, set()).add(condition)
    assert set(by_figure) == {(p.figure, name) for p in figures for name in all_stacks()
                              if p.refusal(get_stack(name)) is None}
    for figure in figures:
        series = {(c.client.params, c.server and c.server.params, c.sweep_param, c.sweep_value,
                   c.stack and c.stack.name) for c in figure.conditions}
        for (name, stack), conditions in by_figure.items():
            if name != figure.figure:
                continue
            assert {(c.client.params, c.server and c.server.params, c.sweep_param, c.sweep_value,
                     c.stack.name if c.stack and c.stack.own_parameters else None) for c in conditions} == series
            links = {(c.link.delay_down_ms, c.link.loss_pct) for c in conditions}
            assert links == {(d, x) for d in (0, 10, 20, 30, 40) for x in (0, 0.1, 1)}
            ccs = {c.knobs.get("cc") for c in conditions}
            assert ccs == ({None} if figure.browsers else {"cubic", "bbr"})
            assert len(conditions) == len(series) * len(links) * len(ccs)
    for experiment in plan.experiments:
        figure = next(p for p in figures if p.figure == experiment.tags["campaign_experiment"])
        assert experiment.reps == 10
        assert (experiment.options.size, experiment.options.workload, experiment.options.requests,
                experiment.options.concurrency) == (figure.size, figure.workload, figure.requests, figure.concurrency)
    assert {stack_of(plan, run) for run in plan.runs} == set(all_stacks())
    assert {figure_of(plan, run) for run in plan.runs} == {p.figure for p in figures}
