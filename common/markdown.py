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
