"""`qreplay fidelity`: each browser beside its own set replayed on every replay stack, and the report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from common.cliapp import output_dir, output_file
from common.terminal import cli_console
from replay.commands.run import LinkOpt, UdpBufferOpt
from replay.grids.fidelity import DELAYS_MS, LOSS_PCT, LOSS_SIZE, QUICK_DELAYS_MS, QUICK_REPS, QUICK_SIZE, QUICK_STACKS, REPS, SIZE
from replay.grids.reproduce import LOSS_DELAY_MS
from tparams.errors import ToolError


def register(app: typer.Typer) -> None:
    @app.command("fidelity", epilog="Example: qreplay fidelity --quick")
    def fidelity(
        quick: Annotated[bool, typer.Option(
            "--quick", help=f"Both browsers beside {' and '.join(QUICK_STACKS)}, at "
            f"{' and '.join(f'{d:g}' for d in QUICK_DELAYS_MS)} ms, no loss, {QUICK_SIZE // 1_000_000} MB x "
            f"{QUICK_REPS}: about a minute and a half here.")] = False,
        browsers: Annotated[Optional[str], typer.Option(
            "--browsers", help="Comma-separated browsers (default: chromium,firefox, those installed).")] = None,
        stacks: Annotated[Optional[str], typer.Option(
            "--stacks", help="Comma-separated replay stacks (default: every one usable here, `qreplay doctor`).")]
        = None,
        delays: Annotated[Optional[str], typer.Option(
            "--delays", help="Comma-separated one-way delays, ms when no unit (default: "
            f"{','.join(f'{d:g}' for d in DELAYS_MS)}).")] = None,
        loss: Annotated[Optional[str], typer.Option(
            "--loss", help=f"Loss of one more link, at {LOSS_DELAY_MS} ms (default {LOSS_PCT:g}%; 0: none).")] = None,
        size: Annotated[Optional[str], typer.Option(
            "--size", help=f"Download size without loss (default {SIZE // 1_000_000}MB).")] = None,
        loss_size: Annotated[Optional[str], typer.Option(
            "--loss-size", help=f"Download size at the lossy link (default {LOSS_SIZE // 1_000_000}MB).")] = None,
        reps: Annotated[Optional[int], typer.Option("--reps", min=1, help=f"Runs a condition (default {REPS}).")]
        = None,
        out_dir: Annotated[Path, typer.Option(
            "--out-dir", callback=output_dir, help="Where fidelity.md, fidelity.html and fidelity.png go, and the "
            "results unless --out.")] = Path("out/fidelity"),
        out: Annotated[Optional[Path], typer.Option(
            "--out", callback=output_file, help="Results DuckDB file, appended to (default: OUT_DIR/fidelity.duckdb)."
        )] = None,
        report_only: Annotated[bool, typer.Option(
            "--report-only", help="Run nothing: rewrite the report of the newest campaign in the results.")] = False,
        link: LinkOpt = "auto",
        udp_buffer: UdpBufferOpt = "1664KiB",
    ) -> None:
        """Is a replayed browser set the browser? Each browser beside its own set replayed on every stack.

        Each browser first loads a page once: its ClientHello gives the set it sends today. Then, in one
        experiment whose repetitions interleave, each browser downloads beside that set on every replay stack,
        windows pinned and with --autotune where the stack can grow them, at each delay and at one lossy link.
        The browsers and ngtcp2's client download from ngtcp2's server (HTTP/3); the hq-interop stacks from their
        own. The report gives per stack and mode the ratio replayed/real with its 95% interval, the closest stack
        and mode, why the others differ (windows, the client's CPU, its ACKs) and the thesis's browser finding
        tested on the browsers themselves.
        """
        from replay.commands.run import RunWarnings, comma_list, current_command_line, execute
        from replay.fidelity import modes, plan_fidelity, run_fidelity, write_fidelity_report
        from replay.link import parse_duration_ms, parse_percent, parse_size
        results = out or out_dir / "fidelity.duckdb"
        if not report_only:
            plan = plan_fidelity(
                quick, comma_list(browsers, "--browsers") if browsers else None,
                comma_list(stacks, "--stacks") if stacks else None,
                [parse_duration_ms(d, "--delays") for d in comma_list(delays, "--delays")] if delays else None,
                parse_percent(loss, "--loss") if loss is not None else None,
                parse_size(size, "--size") if size else None, reps,
                parse_size(loss_size, "--loss-size") if loss_size else None)
            runs = (len(plan.links) + bool(plan.loss_link)) * plan.reps * len(plan.browsers) * (
                1 + sum(len(modes(s)) for s in plan.stacks))
            cli_console(stderr=True).print(
                f"fidelity: {', '.join(b.name for b in plan.browsers)} beside "
                f"{', '.join(s.name for s in plan.stacks)}, {len(plan.links) + bool(plan.loss_link)} link(s), {runs} runs (and one page "
                f"load a browser for its set) into {results}")
            results.parent.mkdir(parents=True, exist_ok=True)
            warnings = RunWarnings()  # each said once per stack and set across the campaign's experiments
            run_fidelity(plan, results, link_backend=link, udp_buffer_bytes=parse_size(udp_buffer, "--udp-buffer"),
                         command_line=current_command_line(),
                         execute=lambda experiment, path: execute(
                             experiment, path, json_output=False, warnings=warnings,
                             summary=experiment.tags.get("purpose") == "comparison",
                             title="fidelity" if experiment.tags.get("purpose") == "comparison" else None))
        elif not results.exists():
            raise ToolError(f"--report-only: no results {results}")
        written = write_fidelity_report(results, out_dir)
        for path in (written.markdown, written.html, written.figure):
            typer.echo(str(path))
