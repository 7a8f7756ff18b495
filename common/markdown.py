"""Markdown tables, as the report, the identification tables and the reproduction report write them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured table; None is an empty cell, and a cell's or a header's ``|`` and
    line breaks are escaped so that no value (a verdict such as ``aioquic|kwik``) can break
    the table's columns."""

    def cell(value: object) -> str:
        return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(name) for name in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def generated_section(name: str) -> tuple[str, str]:
    """The two HTML comments between which a committed page holds a generated part (invisible if rendered)."""
    return f"<!-- generated: {name}; `make reference` rewrites it -->", f"<!-- end of generated: {name} -->"


def fill_section(text: str, name: str, content: str) -> str:
    """``text`` with what stands between ``name``'s markers replaced by ``content``; ValueError if a marker
    is missing (a page that lost them would otherwise silently keep stale figures)."""
    begin, end = generated_section(name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"the page must hold {begin!r} and then {end!r} once each")
    head, rest = text.split(begin)
    return f"{head}{begin}\n{content.strip()}\n{end}{rest.split(end, 1)[1]}"
