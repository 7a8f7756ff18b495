"""`qreplay pairs`: every client x server of the stacks here that share an application protocol, as heat maps."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from common.cliapp import output_dir
from common.terminal import cli_console
from replay.commands.run import LinkOpt, ProfileOpt, SetOpt, SizeOpt, TimeoutOpt
from tparams.errors import ToolError


def register(app: typer.Typer) -> None:
    @app.command("pairs", epilog="Example: qreplay pairs --stacks quic-go,ngtcp2 --delays 0,30 --size 20MB --reps 2")
    def pairs(
        stacks: Annotated[Optional[str], typer.Option(
            "--stacks", help="Comma-separated stacks (default: every stack usable here, see `qreplay doctor`).")]
        = None,
        delays: Annotated[str, typer.Option("--delays", help="Comma-separated one-way delays (ms when no unit).")]
        = "0,30",
        set_spec: SetOpt = "firefox", size: SizeOpt = "20MB",
        reps: Annotated[int, typer.Option("--reps", min=1, help="Repetitions per pair and delay.")] = 2,
        link: LinkOpt = "auto", timeout: TimeoutOpt = None, profile: ProfileOpt = False,
        out_dir: Annotated[Path, typer.Option(
            "--out-dir", callback=output_dir, help="Where results (pairs.duckdb, appended to), pairs.md, pairs.html "
            "and the heat maps go.")] = Path("out/pairs"),
        report_only: Annotated[bool, typer.Option(
            "--report-only", help="Run nothing: redraw the newest pairs campaign in --out-dir.")] = False,
    ) -> None:
        """Goodput of every client x server pair that speaks one protocol (hq-interop or h3), per delay.

        As the QUIC-on-the-Highway table of the Interop Runner: each client downloads from each server,
        the client's transport parameters from --set, each server with its library's defaults.
        Example: `qreplay pairs --stacks quinn,quiche,quic-go --delays 0,30 --size 10MB`.
        """
        from replay import sets as sets_api
        from replay.commands.run import RunWarnings, comma_list, current_command_line, execute, make_link, make_options
        from replay.pairs import matrix, pairs_of, read_pairs, run_pairs, write_pairs_report
        from replay.stacks import all_stacks, get_stack
        results = out_dir / "pairs.duckdb"
        console = cli_console(stderr=True)
        if not report_only:
            if stacks:
                chosen = [get_stack(name) for name in comma_list(stacks, "--stacks")]
                unusable = [f"{s.name}: {s.unavailable_reason()}" for s in chosen if s.unavailable_reason()]
                if unusable:
                    raise ToolError("not usable here: " + "; ".join(unusable))
            else:
                chosen = [s for s in all_stacks().values() if not s.unavailable_reason()]
            links = [make_link(d, "0ms", "0ms", "0%", None, None) for d in comma_list(delays, "--delays")]
            options = make_options(size, None, timeout, profile=profile)
            client_set = sets_api.resolve_one(set_spec)
            pairs_count = len(pairs_of(chosen))
            console.print(f"pairs: {pairs_count} client x server pairs of {', '.join(s.name for s in chosen)}, "
                          f"{len(links)} delay(s) x {reps} runs each, into {results}")
            out_dir.mkdir(parents=True, exist_ok=True)

            warnings = RunWarnings()  # each said once per stack and set across the pairs

            def run_one(experiment, out):  # one live line a pair; the matrix comes at the end
                return execute(experiment, out, json_output=False, summary=False, warnings=warnings)

            run_pairs(chosen, client_set, links, options, reps, results, link_backend=link,
                      command_line=current_command_line(), execute=run_one)
        elif not results.exists():
            raise ToolError(f"--report-only: no results in {out_dir} ({results.name} missing)")
        written = write_pairs_report(results, out_dir)
        campaign, cells = read_pairs(results)
        for delay in sorted({c.delay_ms for c in cells}):
            servers, rows = matrix(cells, delay)
            table = Table(title=f"goodput (Mbit/s) at {delay:g} ms, campaign {campaign}: client (rows) x server "
                                "(columns); -: no common protocol")
            for column in ("client \\ server", *servers):
                table.add_column(column, justify="left" if column.startswith("client") else "right")
            for row in rows:
                table.add_row(*row)
            cli_console().print(table)
        for path in (written.markdown, written.html, *written.heatmaps):
            typer.echo(str(path))
