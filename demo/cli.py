"""quictp-demo: the whole pipeline on the built-in lab, scan and replay, in one command.

It sits above qscan and qreplay (it uses both); neither imports it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from common.cliapp import make_app, run
from demo import run_demo
from scanner.formats import FORMATS

app = make_app(__doc__.splitlines()[0], "quictp-demo --quick")


# A one-command typer app shows its command's epilog, not the app's: hand it over.
@app.command(epilog=app.info.epilog)
def demo(
    out: Path = typer.Option(None, help="Write the scan to this new DuckDB file, the replay, the log (demo.log) "
                             "and the page of results (index.html) beside it (default: out/demo/scan.duckdb, "
                             "replaced by each demo)."),
    fmt: str = typer.Option("table", "--format", "-f", help=f"The scan report's format: {', '.join(FORMATS)}."),
    html: Path = typer.Option(Path("out/demo"), help="Render the analysis notebooks on the scan as HTML here."),
    notebooks: bool = typer.Option(True, "--notebooks/--no-notebooks", help="Render the notebooks at all."),
    replay: bool = typer.Option(
        True, "--replay/--no-replay", help="Also replay the browsers' client sets (ngtcp2, 0 and 30 ms, 20 MB x 2), "
        "the thesis's figures 5.3a, 5.4 and 5.6 on every stack usable here (qreplay reproduce --quick; LSQUIC where a "
        "build is configured), every client x server pair at 30 ms (qreplay pairs), the browsers against their own "
        "sets (qreplay fidelity --quick) and QuicSand's workloads beside TCP."
    ),
    lab: str = typer.Option(None, "--lab", help="The lab instance's name (default: qscan's own, qlab); another "
                            "name runs the demo beside a lab that is up."),
    quick: bool = typer.Option(False, "--quick", help="The same steps small: two stacks (ngtcp2, quic-go), one "
                               "repetition, 1-2 MB, figure 5.6 only, Chromium alone against its set; a couple of "
                               "minutes."),
) -> None:
    """Bring up the lab, scan every lab server, tear down; replay. One line a step here, the details in the log
    and everything linked from index.html."""
    run_demo(out, fmt, html if notebooks else None, replay, quick, lab)


def main() -> None:
    run(app, "quictp-demo")
