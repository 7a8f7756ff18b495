"""`qreplay reproduce`: the thesis's goodput figures on any stack(s), and the report beside the published ones."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from common.cliapp import output_dir
from common.terminal import cli_console
from replay.commands.run import LinkOpt, UdpBufferOpt
from replay.grids.reproduce import FIGURE_TITLES, FULL_CAMPAIGN_TIME, STREAMS_FIGURE
from tparams.errors import ToolError


def register(app: typer.Typer) -> None:
    @app.command("reproduce", epilog="Example: qreplay reproduce --stack ngtcp2 --quick")
    def reproduce(
        stack: Annotated[Optional[list[str]], typer.Option(
            "--stack", help="Stack to run (repeatable: the report puts the stacks side by side).")] = None,
        quick: Annotated[bool, typer.Option(
            "--quick", help="Only the conditions of the published headline numbers, small downloads: about a "
            f"minute per stack (40 s on LSQUIC here). Default: every figure, {FULL_CAMPAIGN_TIME} (measured "
            "here on two cores, docs/reproduce.md).")] = False,
        figures: Annotated[Optional[str], typer.Option(
            "--figures", help=f"Comma-separated figures to run, of {', '.join(FIGURE_TITLES)} (5.5 and 5.7 "
            f"come with 5.4 and 5.6; {STREAMS_FIGURE}: the server's stream limit against many requests at once, "
            "on the stacks whose client makes them).")] = None,
        size: Annotated[Optional[str], typer.Option(
            "--size", help="One download size for every download figure, e.g. 5MB (default: each figure's "
            f"own; {STREAMS_FIGURE}'s requests keep theirs).")] = None,
        reps: Annotated[Optional[int], typer.Option("--reps", min=1, help="Repetitions for every figure.")] = None,
        out_dir: Annotated[Path, typer.Option(
            "--out-dir", callback=output_dir, help="Where the results (reproduce.duckdb, appended to), report.md, "
            "report.html and the figures go.")] = Path("out/reproduce"),
        report_only: Annotated[bool, typer.Option(
            "--report-only", help="Run nothing: rewrite the report of the newest campaign in --out-dir.")] = False,
        link: LinkOpt = "auto",
        udp_buffer: UdpBufferOpt = "1664KiB",
    ) -> None:
        """Run the thesis's experiments (figures 5.1-5.7) and the stream-count sweep, and write a report beside
        the published figures.

        Each figure is an ordinary experiment per stack (stored like `qreplay matrix` and `sweep` runs);
        the report gives each headline number with the thesis's, the ratio, a verdict and the cause
        measured (window model, the client's socket drops).
        """
        from replay.commands.run import RunWarnings, current_command_line, comma_list, execute
        from replay.link import parse_size
        from replay.reproduce import FIGURE_TAG, build_report, plan_campaign, refused, run_campaign
        from replay.stacks import get_stack
        results = out_dir / "reproduce.duckdb"
        console = cli_console(stderr=True)
        if not report_only:
            stacks = [get_stack(name) for name in (stack or ["lsquic"])]
            plans = plan_campaign(quick, set(comma_list(figures, "--figures")) if figures else None,
                                  parse_size(size, "--size") if size else None, reps)
            out_dir.mkdir(parents=True, exist_ok=True)
            for line in refused(plans, stacks):
                console.print(f"not run: {line}")
            runs = sum(len(p.conditions) * p.reps for p in plans for s in stacks if p.refusal(s) is None)
            console.print(f"reproduce: {len(plans)} figure(s) x {len(stacks)} stack(s), {runs} runs into {results}")

            warnings = RunWarnings()  # each said once per stack and set across the campaign's experiments

            def run_one(experiment, out):
                return execute(experiment, out, json_output=False, warnings=warnings,
                               title=f"figure {experiment.tags[FIGURE_TAG]} on {experiment.stack.name} "
                                     f"({FIGURE_TITLES[experiment.tags[FIGURE_TAG]]})")

            run_campaign(stacks, plans, results, link_backend=link, udp_buffer_bytes=parse_size(udp_buffer,
                         "--udp-buffer"), mode="quick" if quick else "full", command_line=current_command_line(),
                         execute=run_one)
        elif not results.exists():
            raise ToolError(f"--report-only: no results in {out_dir} ({results.name} missing)")
        written = build_report(results, out_dir)
        for path in (written.markdown, written.html):
            typer.echo(str(path))
