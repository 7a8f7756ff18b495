"""qscan diff | trends: what changed between two scans or campaigns, and a population over many."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from common.cliapp import output_dir
from tparams.errors import ToolError


def register(app: typer.Typer) -> None:
    @app.command("diff", epilog="Example: qscan diff census/2026-w01 census/2026-w02 --out changes/")
    def diff_command(
        old: Path = typer.Argument(..., help="The earlier scan file or campaign directory."),
        new: Path = typer.Argument(..., help="The later scan file or campaign directory."),
        out: Path = typer.Option(None, "--out", "-o", callback=output_dir,
                                 help="Also write every change (changes.parquet) and the counts (counts.parquet) here."),
        as_json: bool = typer.Option(False, "--json", help="Print the counts and every change as one JSON document."),
        top: int = typer.Option(10, help="How many of the most common transitions to list."),
    ) -> None:
        """Endpoints that appeared and disappeared, and changed parameters, library verdicts, versions,
        ALPN and certificates, from OLD to NEW (one row per change; counts per kind)."""
        from scanner.analysis import frames_as_text
        from scanner.diff import diff

        if top < 1:
            raise ToolError("--top must be >= 1")
        result = diff(old, new)
        try:
            if out is not None:
                result.write(out)
            if as_json:
                sys.stdout.write(json.dumps(result.as_dict(top), indent=1, default=str) + "\n")
                return
            sys.stdout.write(frames_as_text({
                f"endpoints completed in {old} (old) and {new} (new)": result.endpoints(),
                "endpoints per kind of change": result.counts(),
                "endpoints per changed parameter": result.parameters(),
                "most common transitions": result.transitions(top),
            }))
        finally:
            result.close()

    @app.command("trends", epilog="Example: qscan trends census/ --top 5")
    def trends_command(
        directory: Path = typer.Argument(..., help="A directory of campaign directories and scan files, one campaign each."),
        top: int = typer.Option(5, help="How many sets to follow."),
        as_json: bool = typer.Option(False, "--json", help="Print the tables as one JSON document."),
    ) -> None:
        """Campaigns over time: set churn between consecutive campaigns, shares of the top sets and of
        each library. An entry that is not a readable campaign is named in one line and left out."""
        from scanner import trends as api
        from scanner.analysis import frames_as_text

        opened = api.open_trends(directory)
        try:
            for line in opened.skipped:
                print(f"qscan: skipped {line}", file=sys.stderr)
            shares = api.set_shares(opened, top).pivot(on="campaign", index="set_fingerprint", values="share_pct")
            libraries = api.library_shares(opened).pivot(on="campaign", index="library", values="share_pct")
            tables = {"campaigns": api.campaigns(opened), "set churn": api.set_churn(opened),
                      f"share of the top {top} sets (%)": shares, "share of each library (%)": libraries}
            if as_json:
                sys.stdout.write(json.dumps({name: frame.to_dicts() for name, frame in tables.items()}, default=str) + "\n")
            else:
                sys.stdout.write(frames_as_text(tables))
        finally:
            opened.close()
