"""The manual's generated pages: the front page, the CLI reference and the schema reference.

MkDocs calls ``on_files`` (a hook, mkdocs.yml) for the front page: README.md with its links re-rooted at
docs/, so that the strict build checks every link of the front page too. The CLI and schema reference are
made here but committed in docs/reference/ (docs_build/committed.py writes them, a test checks they are
what the code says now), so that the manual never restates by hand what the code says and its links
also work where the repository is read without building the site.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb

from common.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "schemas" / "duckdb"
#: (program name, the typer module the typer CLI documents)
PROGRAMS = (("qscan", "scanner.cli"), ("qreplay", "replay.cli"))

_CREATE = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(TABLE|VIEW|MACRO)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)


def front_page() -> str:
    """README.md as the site's index: links into docs/ lose their prefix, the rest stays."""
    text = (ROOT / "README.md").read_text()
    return re.sub(r"\]\(docs/", "](", text)


def cli_reference(program: str, module: str) -> str:
    """typer's own Markdown for a whole command tree (`typer MODULE utils docs`), one page a program."""
    done = subprocess.run([sys.executable, "-m", "typer", module, "utils", "docs", "--name", program],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"typer could not document {module}: {done.stderr.strip().splitlines()[-1:]}")
    # Defaults inside the checkout (datasets/sets) are shown from wherever it lies, not from this clone's path.
    return done.stdout.replace(str(ROOT), "<checkout>")


def schema_reference() -> str:
    """Every component of schemas/duckdb: its objects as DuckDB creates them, with the DDL's comments."""
    parts = ["# Schema reference", "",
             "Generated from `schemas/duckdb/*.sql` when the manual is built: every component's DDL is applied "
             "to one empty DuckDB database (as a scan file holds several components) and each table and view is "
             "listed with the columns and types DuckDB reports, beside the comment the DDL gives them. The rules "
             "(components, versions, what may change within a version) are in [The store](../store.md).", ""]
    con = duckdb.connect()
    listed: set[str] = set()
    try:
        for path in _in_dependency_order(con, sorted(SCHEMAS.glob("*.sql"))):
            made = []
            if path.name.startswith("replay_"):
                from replay.store import add_knob_columns, create_views

                add_knob_columns(con)  # each knob's two columns come from its declaration (tparams/knobs.py)
                create_views(con)  # run_summary is defined where every statistic is (replay/statistics.py)
                made = [("VIEW", "run_summary", "One row per experiment and condition (every stored condition, "
                         "`replay/statistics.py`): runs, failed, n, mean, standard deviation and 95% CI of the "
                         "goodput of the successful runs, mean packets, the client's socket drops.", {})]
            parts += _component(con, path, listed, made)
    finally:
        con.close()
    return "\n".join(parts) + "\n"


def _in_dependency_order(con: duckdb.DuckDBPyConnection, paths: list[Path]) -> list[Path]:
    """Apply each DDL once the ones it builds on are applied (a component may use another's tables)."""
    done: list[Path] = []
    while paths:
        waiting = []
        for path in paths:
            try:
                con.execute(path.read_text())
                done.append(path)
            except duckdb.CatalogException:
                waiting.append(path)
        if len(waiting) == len(paths):
            raise RuntimeError(f"these DDL files need objects no other file creates: {[p.name for p in waiting]}")
        paths = waiting
    return done


def _component(con: duckdb.DuckDBPyConnection, path: Path, listed: set[str], made: list = ()) -> list[str]:
    """A component's objects, each listed once in the page (every component creates schema_version);
    ``made``: objects the component has that code, not its DDL, creates (as _objects yields them)."""
    ddl = path.read_text()
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, type_ in con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position").fetchall():
        columns.setdefault(table, []).append((column, type_))
    name, version = path.stem.rsplit("_v", 1)
    header = " ".join(line[2:].strip() for line in _leading_comments(ddl.splitlines()))
    lines = [f"## Component `{name}` v{version}", "", f"`schemas/duckdb/{path.name}`. {header}", ""]
    for kind, obj, comment, column_comments in [*_objects(ddl), *made]:
        if kind.upper() == "MACRO" or obj not in kinds or obj in listed:
            continue
        listed.add(obj)
        what = "view" if kinds[obj] == "VIEW" else "table"
        lines += [f"### `{obj}` ({what})", ""]
        if comment:
            lines += [comment, ""]
        lines += [markdown_table(["column", "type", "note"],
                                 [(f"`{column}`", f"`{type_}`", column_comments.get(column, ""))
                                  for column, type_ in columns.get(obj, [])]), ""]
    return lines


def _objects(ddl: str):
    """(kind, name, the comment above it, {column: its trailing comment}) for each CREATE, in file order."""
    lines = ddl.splitlines()
    for number, line in enumerate(lines):
        match = _CREATE.search(line)
        if not match:
            continue
        above = []
        for previous in reversed(lines[:number]):
            if not previous.startswith("--"):
                break
            above.insert(0, previous[2:].strip())
        column_comments = {}
        for body in lines[number + 1:]:
            if _CREATE.search(body) or body.startswith(");"):
                break
            column = re.match(r"\s+(\w+)\s+[A-Z].*?--\s*(.*)$", body)
            if column:
                column_comments[column.group(1)] = column.group(2).strip()
        yield match.group(1), match.group(2), " ".join(above), column_comments


def _leading_comments(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if not line.startswith("--"):
            break
        out.append(line)
    return out


def on_files(files, config):
    """MkDocs hook: add the front page to the build (never written into docs/)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "index.md", content=front_page()))
    return files
