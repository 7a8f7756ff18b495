"""The demo: the whole scan pipeline on the built-in lab, start to finish.

Brings the lab up, scans every lab server from the client namespace, prints
the popularity report, renders the analysis notebooks over the scan, and
tears the lab down whatever happens.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from rich.console import Console

from tparams.errors import ToolError

from scanner.engine import ScanSettings
from scanner.lab import Lab
from scanner.report import build_report, render
from scanner.scan import scan_into
from scanner.targets import Target

_err = Console(stderr=True)


def run_demo(out: Path | None, fmt: str = "table", html_dir: Path | None = None) -> str:
    """Return the printed report; notebooks go to ``html_dir`` when given."""
    if out is not None and out.exists():
        raise ToolError(f"{out} exists; the demo writes a fresh scan")
    with tempfile.TemporaryDirectory(prefix="qscan-demo-") as tmp:
        path = out or Path(tmp) / "demo.duckdb"
        _err.print("bringing up the lab ...")
        with Lab.up() as lab:
            targets = [Target(s.ip, s.port, s.sni) for s in lab.servers]
            _err.print(f"scanning {len(targets)} lab servers from namespace {lab.client_ns} ...")
            with lab.in_client():
                outcome = scan_into(path, targets, ScanSettings(timeout=3.0), kind="demo")
        _err.print(f"lab down; {outcome.ok} of {outcome.attempted} handshakes completed")
        text = render(build_report(path, top=10), fmt)
        sys.stdout.write(text.rstrip("\n") + "\n")
        if html_dir is not None:
            from scanner.analysis import render_notebooks

            _err.print(f"rendering the analysis notebooks into {html_dir} ...")
            for page in render_notebooks(path, html_dir):
                _err.print(f"  {page}")
        return text
