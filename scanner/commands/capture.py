"""qscan pcap / qscan browser: client transport parameters from captures and installed browsers."""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from scanner.browser import BROWSERS, capture_browser
from scanner.capture.extract import CaptureResult, ClientHelloRecord, read_capture
from common.tshark import tshark_version
from scanner.capture.results import browser_set_document, choose_hello, set_document, store_capture
from common.cliapp import output_dir, output_file
from common.setfiles import SETS_DIR
from common.terminal import cli_console
from tparams.paramset import ParamSet
from tparams.setfile import describe



def register(app: typer.Typer) -> None:
    app.command("pcap", epilog="Example: qscan pcap datasets/captures/mixed-clients.pcapng --out clients.duckdb")(pcap)
    app.command("browser", epilog="Example: qscan browser chromium --out clients.duckdb --save-set")(browser)


def pcap(
    capture: Annotated[Path, typer.Argument(help="pcap or pcapng file holding QUIC client Initials")],
    out: Annotated[Optional[Path], typer.Option("--out", callback=output_file, help="DuckDB file to append to (views client_params, client_transport_parameters)")] = None,
    keylog: Annotated[Optional[Path], typer.Option("--keylog", help="SSLKEYLOGFILE of the clients: adds the servers' transport parameters from EncryptedExtensions")] = None,
    as_set: Annotated[Optional[str], typer.Option("--as-set", help="also write a replayable client set NAME.json into --sets-dir, by default this checkout's datasets/sets beside the built-in sets (for qreplay --set NAME)")] = None,
    hello: Annotated[Optional[int], typer.Option("--hello", help="which ClientHello --as-set uses when the capture holds several different sets")] = None,
    client: Annotated[Optional[str], typer.Option("--client", help="label for the client column (default: Google user_agent when sent)")] = None,
    sets_dir: Annotated[Path, typer.Option("--sets-dir", callback=output_dir, help="where --as-set writes")] = SETS_DIR,
    as_json: Annotated[bool, typer.Option("--json", help="print the ClientHellos as JSON lines instead of a table")] = False,
) -> None:
    """Every QUIC ClientHello in a capture: SNI, ALPN, version and all client transport parameters in wire order."""
    result = read_capture(capture, keylog, client)
    if out is not None:
        store_capture(out, result, capture, "pcap", {"capture": str(capture), "keylog": str(keylog) if keylog else None}, _command_line())
    if as_set:
        chosen = choose_hello(result.hellos, hello)
        provenance = {
            "source": f"qscan pcap {capture.name}",
            "method": "ClientHello extracted from the capture by qscan (scanner.capture)",
            "capture_file": str(capture),
            "hello_id": chosen.hello_id,
            "client": chosen.client,
            "tshark": tshark_version(),
        }
        _write_set(sets_dir, as_set, set_document(as_set, chosen, provenance, f"client set from ClientHello {chosen.hello_id} of {capture.name}"))
    _report(result, as_json, out)


def browser(
    name: Annotated[str, typer.Argument(help=f"installed browser to run headless: {' | '.join(BROWSERS)}")],
    out: Annotated[Optional[Path], typer.Option("--out", callback=output_file, help="DuckDB file to append to")] = None,
    save_set: Annotated[bool, typer.Option("--save-set", help="write the set as <browser>-<version>.json into --sets-dir, by default this checkout's datasets/sets beside the built-in sets")] = False,
    sets_dir: Annotated[Path, typer.Option("--sets-dir", callback=output_dir, help="where --save-set writes")] = SETS_DIR,
    keep_capture: Annotated[Optional[Path], typer.Option("--keep-capture", callback=output_dir, help="directory that keeps the pcapng, key log and logs (default: a temporary one, deleted)")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds to wait for the browser's ClientHello")] = 40.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the ClientHellos as JSON lines instead of a table")] = False,
) -> None:
    """Run an installed browser against a QUIC server on loopback, capture it with tshark and store its client parameters."""
    console = cli_console(stderr=True)
    with tempfile.TemporaryDirectory(prefix=f"qscan-{name}-") as scratch:
        workdir = keep_capture or Path(scratch)
        with console.status(f"capturing {name}") as status:
            captured = capture_browser(name, workdir, timeout, progress=lambda text: status.update(f"capturing {text}"))
        settings = {"browser": captured.browser, "version": captured.version, "command": captured.command}
        if out is not None:
            store_capture(out, captured.result, captured.capture_file, "browser", settings, _command_line())
        if save_set:
            _write_set(sets_dir, captured.label, browser_set_document(captured))
    _report(captured.result, as_json, out)


def _write_set(sets_dir: Path, name: str, document: dict[str, Any]) -> None:
    sets_dir.mkdir(parents=True, exist_ok=True)
    path = sets_dir / f"{name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    # Into the checkout is where qreplay finds a set by name, and where `git status` will show it.
    checkout = sets_dir.resolve() == SETS_DIR.resolve()
    where = " (this checkout's datasets/sets, beside the built-in sets; --sets-dir writes elsewhere)" if checkout else ""
    print(f"wrote set {path}{where}; qreplay --set {name if checkout else path} replays it", file=sys.stderr)


def _command_line() -> str:
    return shlex.join(["qscan", *sys.argv[1:]])


def hello_summary(hello: ClientHelloRecord) -> dict[str, Any]:
    """One ClientHello as plain JSON-able data (what --json prints)."""
    server = hello.server_transport_parameters
    return {
        "hello_id": hello.hello_id,
        "frame": hello.frame,
        "src": f"{hello.src_ip}:{hello.src_port}",
        "dst": f"{hello.dst_ip}:{hello.dst_port}",
        "quic_version": f"0x{hello.quic_version:08x}",
        "sni": hello.sni,
        "alpn": list(hello.alpn),
        "client": hello.client,
        "parameters": ParamSet.from_decoded(hello.transport_parameters).as_sent(),
        "wire_order": [f"0x{p.id:x}" for p in hello.transport_parameters.parameters],
        "findings": [f._asdict() for f in hello.transport_parameters.findings],
        "server_parameters": None if server is None else ParamSet.from_decoded(server).as_sent(),
    }


def _report(result: CaptureResult, as_json: bool, out: Optional[Path]) -> None:
    summary = f"{result.summary.datagrams} long-header datagrams: {result.summary.left_out()}"
    if as_json:
        for hello in result.hellos:
            print(json.dumps(hello_summary(hello)))
        # What was left out, by version, on stderr: stdout stays one JSON document a line.
        print(f"qscan: {len(result.hellos)} ClientHello(s) in {summary}", file=sys.stderr)
        return
    table = Table(title=f"{len(result.hellos)} ClientHello(s)" + (f" -> {out}" if out else ""))
    table.caption = summary
    for column in ("id", "client", "sni", "alpn", "set", "performance parameters as sent", "all"):
        table.add_column(column, overflow="fold")
    for hello in result.hellos:
        params = ParamSet.from_decoded(hello.transport_parameters)
        table.add_row(
            str(hello.hello_id),
            hello.client or f"{hello.src_ip}:{hello.src_port}",
            hello.sni or "",
            ",".join(hello.alpn),
            params.fingerprint(),
            describe(params),
            str(len(hello.transport_parameters.parameters)),
        )
    cli_console().print(table)
