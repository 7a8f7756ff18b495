"""`qreplay impact`: what every server set of a scan does to browsers' uploads and page loads, predicted."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from common.cliapp import output_dir
from replay.grids import impact as grid
from tparams.errors import ToolError


def register(app: typer.Typer) -> None:
    @app.command("impact", epilog="Example: qreplay impact scan.duckdb --delays 10,30,100,200 --rate 100mbit")
    def impact_command(
        scan: Annotated[Path, typer.Argument(help="A qscan scan file (scanned with --identify) or campaign directory.")],
        out_dir: Annotated[Path, typer.Option(
            "--out-dir", callback=output_dir, help="Where impact.duckdb, one Parquet file a table, report.md, "
            "report.html and the figures go.")] = Path("out/impact"),
        delays: Annotated[str, typer.Option("--delays", help="Comma-separated round-trip times (ms when no unit).")]
        = ",".join(str(d) for d in grid.DELAYS_MS),
        rate: Annotated[str, typer.Option("--rate", help="The link's rate, e.g. 100mbit: what an upload would "
                                          "reach if no window capped it.")] = f"{grid.RATE_MBPS:g}mbit",
        upload_size: Annotated[str, typer.Option("--upload-size", help="The upload's body (its start is charged: "
                                                 "handshake, response, the browser's slow start).")] = "10MB",
        objects: Annotated[int, typer.Option("--objects", min=1, help="Objects on the page, one request each.")]
        = grid.PAGE_OBJECTS,
        object_size: Annotated[str, typer.Option("--object-size", help="Each object's size.")] = "10KB",
        request_size: Annotated[str, typer.Option("--request-size", help="Each request's bytes on its stream (an "
                                                  "h3 GET's HEADERS; assumed, not measured).")]
        = f"{grid.REQUEST_BYTES}B",
        concurrency: Annotated[Optional[int], typer.Option(
            "--concurrency", min=1, help="Requests a browser keeps open at once (default: all objects; browsers' "
            "own limit is not measured here).")] = None,
        assumed_fraction: Annotated[float, typer.Option(
            "--assumed-fraction", min=0.0, max=1.0, help="Receiver rule (share of the window read before an "
            "update) for libraries with none measured; every such row says it was assumed.")]
        = grid.ASSUMED_FRACTION,
        top: Annotated[int, typer.Option("--top", min=0, help="Spot-check candidates: sets covering most "
                                         "endpoints.")] = 3,
        worst: Annotated[int, typer.Option("--worst", min=0, help="Spot-check candidates: worst sets.")] = 3,
        check: Annotated[bool, typer.Option(
            "--check", help="Spot-check the candidates: the browsers upload and load a page through the h3 server "
            "of each set's identified library in the testbed (needs root); runs into OUT_DIR/spot_checks.duckdb.")]
        = False,
        check_delays: Annotated[str, typer.Option("--check-delays", help="Round-trip times of the spot checks.")]
        = "30",
        check_browsers: Annotated[str, typer.Option("--check-browsers", help="Browsers of the spot checks.")]
        = "chromium,firefox",
        check_upload_size: Annotated[str, typer.Option("--check-upload-size", help="The spot checks' upload.")]
        = "2MB",
        check_objects: Annotated[int, typer.Option("--check-objects", min=1, help="The spot checks' page: objects, "
                                                   "all requested at once.")] = 20,
        check_reps: Annotated[int, typer.Option("--check-reps", min=1, help="Runs of each spot check.")] = 1,
        check_trace: Annotated[bool, typer.Option(
            "--check-trace", help="Capture and decrypt each spot-check upload: what the server granted over time "
            "(MAX_STREAM_DATA, MAX_DATA less the bytes received), beside each case in spot_check_results.")]
        = False,
    ) -> None:
        """Predict each browser's upload goodput and page-load time for every distinct server set of a scan.

        Each set (weighted by the endpoints that sent it, with the library identified for it) at each round-trip
        time: the upload's goodput, the parameter that caps it and the value that would lift the cap to the
        link's rate; the page's load time and the parameter that slows it. Predicted from the window model with
        the server library's measured update rule (or an assumed one, said in the row) and the stream-credit
        model. With --check, the sets covering most endpoints and the worst are run with the real browsers
        through their own library's h3 server, measured beside predicted (`checked`, table spot_check_results);
        a set whose library has no h3 server here is marked not checked, with the reason.
        """
        from replay.commands.run import comma_list
        from replay.impact_check import CheckOptions
        from replay.impact_report import BROWSERS, ImpactOptions, run_impact
        from replay.link import parse_duration_ms, parse_rate_bps, parse_size
        rtts = tuple(parse_duration_ms(d, "--delays") for d in comma_list(delays, "--delays"))
        if any(d <= 0 for d in rtts):
            raise ToolError("--delays: round-trip times must be above 0 (no round trip, no window limit)")
        if check and any(parse_duration_ms(d, "--check-delays") <= 0 for d in comma_list(check_delays, "--check-delays")):
            raise ToolError("--check-delays: round-trip times must be above 0")
        options_object_bytes = parse_size(object_size, "--object-size")
        for browser in comma_list(check_browsers, "--check-browsers"):
            if browser not in BROWSERS:
                raise ToolError(f"--check-browsers: {browser} is not one of {', '.join(BROWSERS)}")
        options = ImpactOptions(
            delays_ms=rtts, rate_mbps=parse_rate_bps(rate) / 1e6, upload_bytes=parse_size(upload_size, "--upload-size"),
            objects=objects, object_bytes=options_object_bytes,
            request_bytes=parse_size(request_size, "--request-size"), concurrency=concurrency,
            assumed_fraction=assumed_fraction, top=top, worst=worst,
            check=CheckOptions(
                delays_ms=tuple(parse_duration_ms(d, "--check-delays") for d in comma_list(check_delays, "--check-delays")),
                browsers=tuple(comma_list(check_browsers, "--check-browsers")),
                upload_bytes=parse_size(check_upload_size, "--check-upload-size"), objects=check_objects,
                object_bytes=options_object_bytes, reps=check_reps, trace=check_trace) if check else None)
        result = run_impact(scan, out_dir, options, execute=_progress if check else None)
        for line in result.summary_lines():
            typer.echo(line)
        typer.echo(f"wrote {out_dir / 'report.md'}, {out_dir / 'report.html'}, {out_dir / 'impact.duckdb'}")


def _progress(experiment, out):
    from replay.commands.run import execute

    return execute(experiment, out, False, summary=False)
