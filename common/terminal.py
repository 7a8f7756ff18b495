"""What the command lines print through: one rich console factory, so that
output keeps its shape on a terminal, in a pipe and in a log alike."""

from __future__ import annotations

import os
import sys

from rich.console import Console


def cli_console(stderr: bool = False) -> Console:
    """A console for what the commands print. On a terminal it takes the
    terminal's width; piped or redirected (a log, `| less`) rich would assume
    80 columns, cut set names such as firefox-esr-153.7.0esr to "fire…" in
    tables and break messages mid-path, so it gets room for whole names (long
    reasons still wrap within their cells)."""
    stream = sys.stderr if stderr else sys.stdout
    sized = stream.isatty() or "COLUMNS" in os.environ
    return Console(stderr=stderr, width=None if sized else 160)
