"""`qreplay impact`: what every server set of a scan does to browsers' uploads and page loads, predicted."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from common.cliapp import output_dir
from replay import impact
from tparams.errors import ToolError


def register(app: typer.Typer) -> None:
    @app.command("impact", epilog="Example: qreplay impact scan.duckdb --delays 10,30,100,200 --rate 100mbit")
    def impact_command(
        scan: Annotated[Path, typer.Argument(help="A qscan scan file (scanned with --identify) or campaign directory.")],
        out_dir: Annotated[Path, typer.Option(
            "--out-dir", callback=output_dir, help="Where impact.duckdb, one Parquet file a table, report.md, "
            "report.html and the figures go.")] = Path("out/impact"),
        delays: Annotated[str, typer.Option("--delays", help="Comma-separated round-trip times (ms when no unit).")]
        = ",".join(str(d) for d in impact.DELAYS_MS),
        rate: Annotated[str, typer.Option("--rate", help="The link's rate, e.g. 100mbit: what an upload would "
                                          "reach if no window capped it.")] = f"{impact.RATE_MBPS:g}mbit",
        upload_size: Annotated[str, typer.Option("--upload-size", help="The upload's body (its start is charged: "
                                                 "handshake, response, the browser's slow start).")] = "10MB",
        objects: Annotated[int, typer.Option("--objects", min=1, help="Objects on the page, one request each.")]
        = impact.PAGE_OBJECTS,
        object_size: Annotated[str, typer.Option("--object-size", help="Each object's size.")] = "10KB",
        request_size: Annotated[str, typer.Option("--request-size", help="Each request's bytes on its stream (an "
                                                  "h3 GET's HEADERS; assumed, not measured).")]
        = f"{impact.REQUEST_BYTES}B",
        concurrency: Annotated[Optional[int], typer.Option(
            "--concurrency", min=1, help="Requests a browser keeps open at once (default: all objects; browsers' "
            "own limit is not measured here).")] = None,
        assumed_fraction: Annotated[float, typer.Option(
            "--assumed-fraction", min=0.0, max=1.0, help="Receiver rule (share of the window read before an "
            "update) for libraries with none measured; every such row says it was assumed.")]
        = impact.ASSUMED_FRACTION,
        top: Annotated[int, typer.Option("--top", min=0, help="Spot-check candidates: sets covering most "
                                         "endpoints.")] = 5,
        worst: Annotated[int, typer.Option("--worst", min=0, help="Spot-check candidates: worst sets.")] = 5,
    ) -> None:
        """Predict each browser's upload goodput and page-load time for every distinct server set of a scan.

        Each set (weighted by the endpoints that sent it, with the library identified for it) at each round-trip
        time: the upload's goodput, the parameter that caps it and the value that would lift the cap to the
        link's rate; the page's load time and the parameter that slows it. Predicted from the window model with
        the server library's measured update rule (or an assumed one, said in the row) and the stream-credit
        model; nothing is checked with a browser here (column `checked`).
        """
        from replay.commands.run import comma_list
        from replay.impact_report import ImpactOptions, run_impact
        from replay.link import parse_duration_ms, parse_rate_bps, parse_size
        rtts = tuple(parse_duration_ms(d, "--delays") for d in comma_list(delays, "--delays"))
        if any(d <= 0 for d in rtts):
            raise ToolError("--delays: round-trip times must be above 0 (no round trip, no window limit)")
        options = ImpactOptions(
            delays_ms=rtts, rate_mbps=parse_rate_bps(rate) / 1e6, upload_bytes=parse_size(upload_size, "--upload-size"),
            objects=objects, object_bytes=parse_size(object_size, "--object-size"),
            request_bytes=parse_size(request_size, "--request-size"), concurrency=concurrency,
            assumed_fraction=assumed_fraction, top=top, worst=worst)
        result = run_impact(scan, out_dir, options)
        for line in result.summary_lines():
            typer.echo(line)
        typer.echo(f"wrote {out_dir / 'report.md'}, {out_dir / 'report.html'}, {out_dir / 'impact.duckdb'}")
