"""The identification page's measured tables, drawn from the committed signatures and evaluation.

datasets/library_signatures.json and datasets/library_evaluation.json are what `python -m scanner.identify
learn` and `evaluate` measured; the page must show what they hold now, not what they held when someone
last pasted `report`'s output. MkDocs calls ``on_page_markdown`` (a hook, mkdocs.yml): each marker
comment of docs/identification.md becomes its table, made by the same functions `report` and the
notebook use. A marker the page lost, or one this hook does not know, stops the build in one line.
"""

from __future__ import annotations

import re

import polars as pl
from mkdocs.exceptions import PluginError

from common.markdown import markdown_table
from scanner import identify

PAGE = "identification.md"
_MARKER = re.compile(r"<!-- generated: ([a-z0-9 -]+) -->")


def _held_out(rows: list[dict]) -> list[dict]:
    return [row for row in rows if row["configuration"] == "held-out"]


def _summary(rows: list[dict], provenance: dict) -> str:
    held_out = _held_out(rows)
    configured = [row for row in rows if row["configuration"] == "default"]

    def right(subset: list[dict], column: str) -> int:
        return sum(row[column] == row["expected"] for row in subset)

    return (f"Measured {provenance['learned_at']} with the signatures learned "
            f"{provenance['signatures_learned_at']}, {provenance['repetitions']} rounds of fresh handshakes "
            f"per server and configuration. Over the held-out configurations {right(held_out, 'named_from_2')} "
            f"of {len(held_out)} decisions were right from two handshakes (h3 and ALPN `invalid`) and "
            f"{right(held_out, 'named_from_1')} from the h3 handshake alone; as configured, in the same run, "
            f"{right(configured, 'named_from_2')} of {len(configured)} and {right(configured, 'named_from_1')}.")


def _handshakes(rows: list[dict]) -> pl.DataFrame:
    per_server = identify.handshakes_per_server(rows)
    return (per_server.pivot(on="configuration", index=["server", "expected"], values="handshakes")
            .rename({"default": "as configured", "held-out": "held out"}, strict=False))


def tables() -> dict[str, str]:
    """Every table the page may ask for, by its marker's name, as Markdown."""
    evaluation = identify.read_evaluation()
    rows, provenance = evaluation["rows"], evaluation["provenance"]
    held_out = _held_out(rows)
    frames = {
        "learned habits": identify.features(),
        "held-out two handshakes": identify.confusion_matrix(held_out),
        "held-out h3 alone": identify.confusion_matrix(held_out, "named_from_1"),
        "handshakes per server": _handshakes(rows),
        "held-out not learned": identify.not_learned(held_out),
        "one-habit pairs": pl.DataFrame(identify.separations(identify.load_signatures()))
        .filter(pl.col("traits") <= 1),
    }
    markdown = {name: markdown_table(frame.columns, frame.iter_rows()) for name, frame in frames.items()}
    markdown["evaluation summary"] = _summary(rows, provenance)
    return markdown


def on_page_markdown(markdown, page, config, files):
    """MkDocs hook: every marker of the identification page becomes its table."""
    if page.file.src_uri != PAGE:
        return markdown
    available = tables()
    asked = _MARKER.findall(markdown)
    unknown = sorted(set(asked) - set(available))
    if unknown:
        raise PluginError(f"docs/{PAGE} asks for tables nobody generates: {', '.join(unknown)}")
    missing = sorted(set(available) - set(asked))
    if missing:
        raise PluginError(f"docs/{PAGE} lost the markers of: {', '.join(missing)}")
    return _MARKER.sub(lambda match: available[match.group(1)], markdown)
