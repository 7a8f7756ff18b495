"""Shared plumbing of the qscan and qreplay command lines.

Both CLIs are thin typer layers over library functions. Typer already turns
usage errors and Ctrl-C into one line and an exit status; this adds the same
for ToolError, raised anywhere below for bad input or an unusable machine.
"""

from __future__ import annotations

import sys

import typer

from tparams.errors import ToolError


# Where a reader goes from any --help: the manual's pages within the repository.
MANUAL = "Manual: docs/overview.md and the pages beside it (make docs builds them as a site: out/docs/index.html)."


def make_app(help_text: str, example: str) -> typer.Typer:
    return typer.Typer(
        help=help_text,
        epilog=f"Example: {example}\n\n{MANUAL}",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


def run(app: typer.Typer, prog_name: str) -> None:
    try:
        app(prog_name=prog_name)
    except ToolError as exc:
        print(f"{prog_name}: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
