"""The manual's generated files that are committed: the CLI and schema reference, the benchmarks chart, and
the tables that open the results and benchmarks pages, the results page's "what held it back" tables and the scale
page's plan for the seeds' figures (between their markers, common.markdown.fill_section).

They are made from the code and data (docs_build/reference.py, benchmarks.py, results.py, limits.py, scale.py) and
committed into docs/ so that every link of the front page and the manual works where the repository itself is read
(its host shows docs/ as committed, never builds the site) as well as in the built site. `make reference`
(this module) rewrites them; tests/test_docs.py fails when one is not what the code and data make now.
"""

from __future__ import annotations

import sys
from pathlib import Path

from common.markdown import fill_section
from docs_build import benchmarks, limits, results, scale
from docs_build.benchmarks import CHART, chart, read_goals
from docs_build.reference import PROGRAMS, cli_reference, schema_reference

DOCS = Path(__file__).resolve().parents[1] / "docs"


def generated_files() -> dict[Path, bytes]:
    """Each committed generated file, as the code and data make it now."""
    files = {DOCS / "reference" / f"{program}.md": cli_reference(program, module).encode()
             for program, module in PROGRAMS}
    files[DOCS / "reference" / "schema.md"] = schema_reference().encode()
    files[DOCS / CHART] = chart(read_goals())
    pages: dict[str, str] = {}  # a page of several generated sections is filled once for each
    for page, section, table in ((benchmarks.PAGE, benchmarks.SECTION, benchmarks.table(read_goals())),
                                 (results.PAGE, results.SECTION, results.current_table()),
                                 (scale.PAGE, scale.SECTION, scale.table()),
                                 *((limits.PAGE, section, limits.table(name))
                                   for name, section in limits.SECTIONS.items())):
        pages[page] = fill_section(pages.get(page) or (DOCS / page).read_text(), section, table)
    files.update({DOCS / page: text.encode() for page, text in pages.items()})
    return files


def main() -> None:
    for path, content in generated_files().items():
        if not path.exists() or path.read_bytes() != content:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            print(f"wrote {path.relative_to(DOCS.parent)}", file=sys.stderr)


if __name__ == "__main__":
    main()
