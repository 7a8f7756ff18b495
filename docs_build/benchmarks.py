"""The benchmarks page's picture and its opening table of latest figures, both drawn from bench/latest.csv.

bench/latest.csv holds the latest measured figure of each benchmark goal (one row a goal); it is the one
place those numbers live. The chart (docs/benchmark-goals.png) and the table (in docs/benchmarks.md between
its markers) are committed, written by docs_build/committed.py; a test checks they are what the file makes
now. MkDocs calls this hook (mkdocs.yml): ``on_files`` checks the file, so that a malformed row stops the
build with one line naming the row.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from mkdocs.exceptions import PluginError

from common.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
LATEST = ROOT / "bench" / "latest.csv"
PAGE = "benchmarks.md"
CHART = "benchmark-goals.png"
#: the name of benchmarks.md's generated section (common.markdown.generated_section)
SECTION = "latest figures from bench/latest.csv"
COLUMNS = ("benchmark", "goal", "measured", "baseline", "unit", "baseline_is", "ratio", "direction", "target",
           "met", "date", "load", "note")
#: a figure as the CSV writes it: one number, or the span of several runs ("1.02-1.09")
_FIGURE = re.compile(r"^(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?$")


@dataclass(frozen=True)
class Goal:
    row: dict[str, str]
    low: float
    high: float
    target: float
    at_least: bool  # the goal is ratio >= target (else <=)

    @property
    def met(self) -> str:
        return self.row["met"]


def _span(text: str, what: str, where: str) -> tuple[float, float]:
    match = _FIGURE.match(text.strip())
    if not match:
        raise PluginError(f"{where}: {what} {text!r} is neither a number nor a span of runs such as 1.02-1.09")
    low = float(match.group(1))
    high = float(match.group(2) or low)
    if high < low:
        raise PluginError(f"{where}: {what} {text!r} runs backwards (write the lower figure first)")
    return low, high


def read_goals(path: Path = LATEST) -> list[Goal]:
    """Every row of the file, checked: one row a (benchmark, goal), figures are numbers or spans, and `met`
    agrees with ratio and target."""
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise PluginError(f"{rel}: the header must be {','.join(COLUMNS)}")
        goals = []
        lines: dict[tuple[str, str], int] = {}  # (benchmark, goal): its line, so that a goal written twice is named
        for line, row in enumerate(reader, start=2):
            where = f"{rel} line {line}"
            if None in row or any(value is None for value in row.values()):
                raise PluginError(f"{where}: {len(COLUMNS)} columns expected")
            pair = (row["benchmark"], row["goal"])
            if pair in lines:
                raise PluginError(f"{where}: {row['benchmark']}'s goal {row['goal']!r} is line {lines[pair]}'s again "
                                  "(one row a goal: replace the older row)")
            lines[pair] = line
            for column in ("measured", "baseline"):
                if row[column].strip():
                    _span(row[column], column, where)
            low, high = _span(row["ratio"], "ratio", where)
            target, _ = _span(row["target"], "target", where)
            if row["direction"] not in (">=", "<="):
                raise PluginError(f"{where}: direction {row['direction']!r} is neither >= nor <=")
            if not re.match(r"^\d{4}-\d{2}-\d{2}", row["date"]):
                raise PluginError(f"{where}: date {row['date']!r} does not start with YYYY-MM-DD")
            goal = Goal(row, low, high, target, row["direction"] == ">=")
            meets = [ratio >= target if goal.at_least else ratio <= target for ratio in (low, high)]
            verdict = "yes" if all(meets) else "no" if not any(meets) else "partly"
            if row["met"] != verdict:
                raise PluginError(f"{where}: met is {row['met']!r} but ratio {row['ratio']} "
                                  f"{row['direction']} {row['target']} says {verdict!r}")
            goals.append(goal)
    if not goals:
        raise PluginError(f"{rel}: no goals")
    return goals


#: met / not met / met in some runs: colour and hatching, so that print in grey still tells them apart
STYLE = {"yes": ("#2e7d32", ""), "no": ("#c62828", "//"), "partly": ("#ef6c00", "..")}
LABEL = {"yes": "met", "no": "not met", "partly": "met in some runs"}


def chart(goals: list[Goal]) -> bytes:
    """A horizontal bar a goal: its ratio to the baseline (a span of runs drawn lighter past its low end),
    the goal's threshold a black tick on the bar's row."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = list(reversed(goals))  # the file's first row at the top
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.4), dpi=120)
    for y, goal in enumerate(rows):
        colour, hatch = STYLE[goal.met]
        ax.barh(y, goal.low, color=colour, hatch=hatch, edgecolor="white", height=0.6)
        if goal.high > goal.low:
            ax.barh(y, goal.high - goal.low, left=goal.low, color=colour, alpha=0.35, hatch=hatch,
                    edgecolor="white", height=0.6)
        ax.plot([goal.target, goal.target], [y - 0.42, y + 0.42], color="black", linewidth=2.2)
        ax.text(goal.target, y + 0.3, f" {goal.row['direction']} {goal.row['target']}", fontsize=7, va="bottom")
        ax.text(goal.high, y, f" {goal.row['ratio']}", fontsize=7, va="center",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8})
    ax.set_yticks(range(len(rows)), [f"{g.row['benchmark']}\n{g.row['goal']}" for g in rows], fontsize=7)
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlim(0, max(max(g.high, g.target) for g in goals) * 1.12)
    ax.set_xlabel("measured / the baseline of the same run, or / the goal's limit\n"
                  "black tick: the goal's threshold; lighter: the span of several runs", fontsize=8)
    ax.legend(handles=[Patch(facecolor=STYLE[m][0], hatch=STYLE[m][1], edgecolor="white", label=LABEL[m])
                       for m in STYLE if any(g.met == m for g in goals)], loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})
    plt.close(fig)
    return out.getvalue()


def _number(text: str) -> str:
    """62356 as 62,356; spans and decimals as written."""
    return "-".join(f"{int(part):,}" if part.isdigit() else part for part in text.split("-")) if text else ""


def table(goals: list[Goal]) -> str:
    rows = []
    for goal in goals:
        row = goal.row
        unit = f" {row['unit']}" if row["unit"] else ""
        measured = f"{_number(row['measured'])}{unit}" if row["measured"] else "—"
        baseline = f"{_number(row['baseline'])}{unit}" if row["baseline"] else ""
        baseline = f"{baseline} ({row['baseline_is']})" if baseline else row["baseline_is"]
        ratio = f"**{row['ratio']}**" if goal.met != "yes" else row["ratio"]
        when = f"{row['date']} ({row['load']})" if row["load"] else row["date"]
        rows.append((row["benchmark"], row["goal"], measured, baseline, f"{ratio} ({row['direction']} {row['target']})",
                     LABEL[goal.met], when, row["note"]))
    return markdown_table(["benchmark", "goal", "measured", "baseline", "ratio (goal)", "met", "when (load)", "note"],
                          rows) + "\n"


def on_files(files, config):
    """MkDocs hook: check the file before any page is read (a bad row is then the build's one error)."""
    read_goals()
    return files
