"""qscan pcap / qscan browser: client transport parameters from captures and installed browsers."""

from __future__ import annotations

import contextlib
import gc
import json
import shlex
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional, TYPE_CHECKING

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from scanner.browser import BROWSERS
from common.cliapp import output_dir, output_file
from common.setfiles import SETS_DIR
from common.terminal import cli_console
from tparams.paramset import ParamSet
from tparams.setfile import describe

if TYPE_CHECKING:  # named in annotations only; imported where the commands run
    from scanner.capture.extract import CaptureScan, CaptureSummary, ClientHelloRecord
    from scanner.capture.parallel import ShardedScan
    from scanner.capture.results import HelloTally

# Up to this many ClientHellos are listed one a row; more are summarised by parameter set, the TOP_SETS most common.
LISTED = 20
TOP_SETS = 10


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
    as_json: Annotated[bool, typer.Option("--json", help="print every ClientHello as a JSON line instead of a table")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress line")] = False,
    workers: Annotated[int, typer.Option("--workers", min=1, help="processes reading the capture, each following its share of the connections (1 with --json, --keylog or --as-set); on a busy 2-core machine two cost more CPU and finished sooner only by taking a larger share of it (docs/benchmarks.md)")] = 1,
) -> None:
    """Every QUIC ClientHello in a capture: SNI, ALPN, version and all client transport parameters in wire order.

    A capture of any size is read as a stream and stored batch by batch; more than {LISTED} ClientHellos are
    summarised by parameter set (--json lists them all). A capture cut short or damaged keeps every
    ClientHello before the damage, with one warning that says where the file stops being readable.
    """
    from scanner.capture.extract import CaptureScan, collecting_for_capture
    from common.tshark import tshark_version
    from scanner.capture.parallel import ShardedScan
    from scanner.capture.results import CaptureWriter, HelloTally, choose_hello, set_document
    one_process = as_json or keylog is not None or as_set is not None  # these want every record in this process
    scan: CaptureScan | ShardedScan = CaptureScan(capture, keylog, client) if workers == 1 or one_process else ShardedScan(capture, client, workers)
    tally = HelloTally(keep=LISTED, wanted=hello)
    writer = CaptureWriter(out, capture, "pcap", {"capture": str(capture), "keylog": str(keylog) if keylog else None}, _command_line()) if out else None
    try:
        with collecting_for_capture(), _reading(scan, tally, not quiet and sys.stderr.isatty()):
            if isinstance(scan, ShardedScan):
                scan.run(writer, tally)
            for batch in scan.batches() if isinstance(scan, CaptureScan) else ():
                if writer is not None:
                    writer.add(batch)
                tally.add(batch)
                if as_json:
                    sys.stdout.writelines(json.dumps(hello_summary(h)) + "\n" for h in batch)
                gc.freeze()  # collecting_for_capture says why
    finally:
        if writer is not None:
            writer.close()
    if not tally.count:
        raise scan.nothing_found()  # which names the damage, if any
    damage = scan.datagrams.damage if isinstance(scan, CaptureScan) else scan.damage
    if damage is not None:
        print(f"qscan: warning: {capture}: {damage}; the {tally.count:,} ClientHello(s) before it are kept", file=sys.stderr)
    if as_set:
        chosen = choose_hello(tally)
        provenance = {
            "source": f"qscan pcap {capture.name}",
            "method": "ClientHello extracted from the capture by qscan (scanner.capture)",
            "capture_file": str(capture),
            "hello_id": chosen.hello_id,
            "client": chosen.client,
            "tshark": tshark_version(),
        }
        _write_set(sets_dir, as_set, set_document(as_set, chosen, provenance, f"client set from ClientHello {chosen.hello_id} of {capture.name}"))
    _report(tally, scan.summary, as_json, out)


pcap.__doc__ = (pcap.__doc__ or "").replace("{LISTED}", str(LISTED))


@contextlib.contextmanager
def _reading(scan: CaptureScan | ShardedScan, tally: HelloTally, shown: bool) -> Iterator[None]:
    """One progress line on stderr while the capture is read (a terminal only), refreshed from a thread so
    that it moves through stretches of packets that hold no ClientHello."""
    from scanner.capture.extract import CaptureScan
    if not shown:
        yield
        return
    progress = Progress(
        TextColumn("capture"), BarColumn(), DownloadColumn(), TextColumn("{task.fields[hellos]:,} ClientHellos"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=cli_console(stderr=True), transient=True,
    )
    size, offset = (scan.datagrams.size, lambda: scan.datagrams.offset) if isinstance(scan, CaptureScan) else (scan.size, lambda: scan.offset)
    task = progress.add_task("read", total=size, hellos=0)
    done = threading.Event()

    def refresh() -> None:
        while not done.wait(0.25):
            progress.update(task, completed=offset(), hellos=tally.count)

    with progress:
        updater = threading.Thread(target=refresh, daemon=True)
        updater.start()
        try:
            yield
        finally:
            done.set()
            updater.join()


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
    from scanner.browser import capture_browser
    from scanner.capture.results import HelloTally, browser_set_document, store_capture
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
    tally = HelloTally(keep=LISTED)
    tally.add(captured.result.hellos)
    if as_json:
        for hello in captured.result.hellos:
            print(json.dumps(hello_summary(hello)))
    _report(tally, captured.result.summary, as_json, out)


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
        "parameters": hello.parameter_set.as_sent(),
        "wire_order": [f"0x{p.id:x}" for p in hello.transport_parameters.parameters],
        "findings": [f._asdict() for f in hello.transport_parameters.findings],
        "server_parameters": None if server is None else ParamSet.from_decoded(server).as_sent(),
    }


def _report(tally: HelloTally, summary: CaptureSummary, as_json: bool, out: Optional[Path]) -> None:
    """What was found: every ClientHello when there are at most LISTED, else how many of each parameter set
    (the most common first); with ``as_json`` the ClientHellos went to stdout already and this is one line
    on stderr."""
    from scanner.capture.extract import version_name
    left_out = f"{summary.datagrams} long-header datagrams: {summary.left_out()}"
    if as_json:
        # What was left out, by version, on stderr: stdout stays one JSON document a line.
        print(f"qscan: {tally.count} ClientHello(s) in {left_out}", file=sys.stderr)
        return
    stored = f" -> {out}" if out else ""
    if tally.count <= LISTED:
        table = Table(title=f"{tally.count} ClientHello(s){stored}", caption=left_out)
        for column in ("id", "client", "sni", "alpn", "set", "performance parameters as sent", "all"):
            table.add_column(column, overflow="fold")
        for hello in tally.first:
            params = hello.parameter_set
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
        return
    versions = ", ".join(f"{version_name(v)} {n:,}" for v, n in tally.versions.most_common(5))
    sets = len(tally.sets)
    # Said as counted: a capture of one client's retries is "1 parameter set", listed whole, not "the 1 most common sets".
    listed = "the set" if sets == 1 else f"all {sets} sets" if sets <= TOP_SETS else f"the {TOP_SETS} most common sets"
    title = (f"{tally.count:,} ClientHellos in {sets:,} parameter set{'' if sets == 1 else 's'} "
             f"({versions}){stored}; {listed}")
    table = Table(title=title, caption=f"{left_out}. --json prints every ClientHello.")
    for column in ("set", "ClientHellos", "share", "first seen (frame, client, sni)", "performance parameters as sent"):
        table.add_column(column, overflow="fold")
    for fingerprint, count in tally.sets.most_common(TOP_SETS):
        first = tally.first_of_set[fingerprint]
        table.add_row(
            fingerprint, f"{count:,}", f"{count / tally.count:.1%}",
            f"{first.frame} {first.client or f'{first.src_ip}:{first.src_port}'} {first.sni or ''}".strip(),
            describe(first.parameter_set),
        )
    cli_console().print(table)
