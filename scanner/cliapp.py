"""Shared plumbing of the qscan and qreplay command lines.

Both CLIs are thin typer layers over library functions. Typer already turns
usage errors and Ctrl-C into one line and an exit status; this adds the same
for ToolError, raised anywhere below for bad input or an unusable machine.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.console import Console

from tparams.errors import ToolError


def make_app(help_text: str) -> typer.Typer:
    return typer.Typer(
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


def stdout_console() -> Console:
    """A console for tables on stdout. On a terminal it takes the terminal's
    width; piped or redirected (a log, `| less`) rich would assume 80 columns
    and cut set names such as firefox-esr-153.7.0esr to "fire…", so it gets
    room for whole names (long reasons wrap within their cells)."""
    sized = sys.stdout.isatty() or "COLUMNS" in os.environ
    return Console(width=None if sized else 160)


def run(app: typer.Typer, prog_name: str) -> None:
    try:
        app(prog_name=prog_name)
    except ToolError as exc:
        print(f"{prog_name}: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
