"""Drawing helpers shared by `qreplay plot` and the reproduction report: one look for every figure."""

from __future__ import annotations

import base64
import html
from pathlib import Path


def pyplot():
    """matplotlib's pyplot on the file-only backend (no display on a test or CI machine)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_band(ax, xs: list, mean: list[float], sd: list[float | None], label: str, **line) -> None:
    """A mean line with a band of one standard deviation, as the thesis draws its figures."""
    sd = [s or 0.0 for s in sd]
    drawn = ax.plot(xs, mean, marker="o", label=label, **line)
    ax.fill_between(xs, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)], alpha=0.25,
                    color=drawn[0].get_color())


def legend_beside(ax, **options) -> None:
    """The legend right of the axes, never over the curves (a figure of many stacks has a dozen entries).
    ``options`` go to ``ax.legend`` over these defaults: a title, a larger font, an anchor further right past
    a twin axis's label, or the handles and labels of another panel of the row whose colours this one shares."""
    ax.legend(**{"fontsize": 7, "loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0, **options})


def save_png(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # a legend or note outside the axes stays in the picture
    pyplot().close(fig)
    return path


def embedded_img(title: str, path: Path) -> str:
    """An <img> carrying the PNG itself, so that the HTML page is one self-contained file."""
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>"


def markdown_page(title: str, markdown: str, figures: list[tuple[str, Path]]) -> str:
    """The Markdown rendered, its images carried inside the page, so one file travels alone."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(markdown)
    for alt, path in figures:
        body = body.replace(f'<img src="{path.name}" alt="{html.escape(alt)}" />', embedded_img(alt, path))
    style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto}table{border-collapse:collapse;"
             "font-size:90%}td,th{border:1px solid #bbb;padding:3px 6px;vertical-align:top}")
    return f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title><style>{style}</style>\n{body}"
