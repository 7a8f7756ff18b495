"""Implementation pairs: goodput of every client x server of the given stacks that speak one application
protocol, as the QUIC-on-the-Highway extension of the Interop Runner tabulates it, drawn as heat maps.

Each pair is one ordinary experiment (the client's stack, ``server_stack`` the server's), tagged with the
pairs campaign, so its runs sit in the results file beside every other run.

    campaign = run_pairs([get_stack("quinn"), get_stack("quiche")], resolve_one("firefox"),
                         [LinkConfig(), LinkConfig(delay_down_ms=30)], RunOptions(size=20_000_000), 2, "p.duckdb")
    written = write_pairs_report("p.duckdb", "out/pairs")
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from matplotlib.colors import LogNorm

from common.markdown import markdown_table
from replay import store
from replay.figures import markdown_page, pyplot, save_png
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, run_experiment
from replay.sets import NamedSet
from replay.stacks.base import RunOptions, Stack
from tparams.errors import ToolError


def pairs_of(stacks: list[Stack]) -> list[tuple[Stack, Stack]]:
    """(client, server) for every two stacks (a stack with itself included) that speak one protocol; a
    browser is a client only, caddy a server only."""
    return [(client, server) for client in stacks if "client" in client.roles for server in stacks
            if server.serves(client.protocol)]


def run_pairs(stacks: list[Stack], client_set: NamedSet, links: list[LinkConfig], options: RunOptions, reps: int,
              results: str | Path, *, link_backend: str = "auto", command_line: str | None = None,
              execute: Callable[[Experiment, Path], list[dict]] | None = None) -> str:
    """Run every pair under every link; returns the campaign id the experiments are tagged with."""
    if not stacks:
        raise ToolError("no stacks to pair")
    campaign = uuid.uuid4().hex[:12]
    started = datetime.datetime.now().isoformat(timespec="seconds")
    for client, server in pairs_of(stacks):
        experiment = Experiment("pairs", client, [Condition(client_set, None, link) for link in links], options, reps,
                                link_backend, command_line, server_stack=server,
                                tags={"pairs": campaign, "pairs_started_at": started})
        (execute or run_experiment)(experiment, Path(results))
    return campaign


@dataclass(frozen=True)
class PairCell:
    client: str
    server: str
    delay_ms: float
    runs: int
    ok: int
    mean_mbps: float | None
    stddev_mbps: float | None
    error: str | None  # one failed run's error, where some failed

    def text(self, digits: int, failed: str) -> str:
        """The cell as a reader sees it: the mean, and (``failed``, a format of the count) how many runs
        failed where some did."""
        if self.mean_mbps is None:
            return "failed"
        return f"{self.mean_mbps:.{digits}f}" + ("" if self.ok == self.runs else failed.format(self.runs - self.ok))


def read_pairs(results: str | Path, campaign: str | None = None) -> tuple[str, list[PairCell]]:
    """The newest pairs campaign of a results file (or the one named), one cell per pair and delay."""
    con = store.open_read_only(results)
    try:
        campaigns = con.execute(
            "SELECT json_extract_string(config, '$.pairs') AS campaign, max(started_at) FROM experiments "
            "WHERE kind = 'pairs' GROUP BY ALL ORDER BY 2 DESC").fetchall()
        if not campaigns:
            raise ToolError(f"{results} holds no pairs campaign (run `qreplay pairs` first)")
        campaign = campaign or campaigns[0][0]
        if campaign not in {c for c, _ in campaigns}:
            raise ToolError(f"{results} has no pairs campaign {campaign!r}")
        rows = con.execute(
            """SELECT r.stack, r.server_stack, r.delay_ms, count(*), count(*) FILTER (WHERE r.status = 'ok'),
                      avg(r.goodput_mbps) FILTER (WHERE r.status = 'ok'),
                      stddev_samp(r.goodput_mbps) FILTER (WHERE r.status = 'ok'),
                      any_value(r.error) FILTER (WHERE r.status != 'ok')
               FROM runs r JOIN experiments e USING (experiment_id)
               WHERE json_extract_string(e.config, '$.pairs') = ?
               GROUP BY ALL ORDER BY ALL""", [campaign]).fetchall()
    finally:
        con.close()
    return campaign, [PairCell(*row) for row in rows]


@dataclass(frozen=True)
class PairsReport:
    markdown: Path
    html: Path
    heatmaps: list[Path]


def write_pairs_report(results: str | Path, out_dir: str | Path, campaign: str | None = None) -> PairsReport:
    """Heat maps (one per delay: clients as rows, servers as columns) and a report beside them."""
    campaign, cells = read_pairs(results, campaign)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    delays = sorted({c.delay_ms for c in cells})
    heatmaps = [draw_heatmap([c for c in cells if c.delay_ms == delay], delay, out / f"pairs_{delay:g}ms.png")
                for delay in delays]
    markdown = _markdown(campaign, cells, heatmaps)
    md_path, html_path = out / "pairs.md", out / "pairs.html"
    md_path.write_text(markdown)
    html_path.write_text(markdown_page("qreplay pairs", markdown,
                                       [(f"pairs at {delay:g} ms", image) for delay, image in zip(delays, heatmaps)]))
    return PairsReport(md_path, html_path, heatmaps)


def draw_heatmap(cells: list[PairCell], delay_ms: float, path: Path) -> Path:
    plt = pyplot()
    clients = sorted({c.client for c in cells})
    servers = sorted({c.server for c in cells})
    grid = [[next((c for c in cells if c.client == client and c.server == server), None) for server in servers]
            for client in clients]
    values = [[cell.mean_mbps if cell and cell.mean_mbps is not None else float("nan") for cell in row]
              for row in grid]
    fig, ax = plt.subplots(figsize=(1.2 * len(servers) + 2.5, 0.8 * len(clients) + 1.8))
    finite = [v for row in values for v in row if v == v]
    # Pairs differ by orders of magnitude (a Python stack beside C ones): colour by the logarithm.
    norm = LogNorm(min(finite), max(finite)) if finite and min(finite) > 0 and max(finite) > min(finite) else None
    image = ax.imshow(values, cmap="viridis", norm=norm)
    ax.set_xticks(range(len(servers)), servers, rotation=30, ha="right")
    ax.set_yticks(range(len(clients)), clients)
    ax.set_xlabel("server")
    ax.set_ylabel("client")
    ax.set_title(f"goodput, Mbit/s, {delay_ms:g} ms")
    middle = (max(finite) * min(finite)) ** 0.5 if finite and norm else 0
    for i, row in enumerate(grid):
        for j, cell in enumerate(row):
            text = "-" if cell is None else cell.text(0, "\n{} failed")  # "-": the pair speaks no common protocol
            light = cell is None or cell.mean_mbps is None or cell.mean_mbps > middle
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="black" if light else "white")
    fig.colorbar(image, ax=ax, label="Mbit/s")
    return save_png(fig, path)


def matrix(cells: list[PairCell], delay_ms: float) -> tuple[list[str], list[list[str]]]:
    """(servers, one row per client: its name, then its mean goodput from each server) at one delay; `-`
    where a pair speaks no common protocol."""
    servers = sorted({c.server for c in cells})
    rows = []
    for client in sorted({c.client for c in cells}):
        row = [client]
        for server in servers:
            cell = next((c for c in cells if c.client == client and c.server == server and c.delay_ms == delay_ms),
                        None)
            row.append("-" if cell is None else cell.text(1, " ({} failed)"))
        rows.append(row)
    return servers, rows


def _markdown(campaign: str, cells: list[PairCell], heatmaps: list[Path]) -> str:
    parts = ["# Implementation pairs", "",
             f"Campaign `{campaign}`: goodput of each client (rows) downloading from each server (columns), "
             "mean of the successful runs in Mbit/s; `-`: no common application protocol.", ""]
    for delay, image in zip(sorted({c.delay_ms for c in cells}), heatmaps):
        servers, rows = matrix(cells, delay)
        parts += [f"## {delay:g} ms", "", f"![pairs at {delay:g} ms]({image.name})", "",
                  markdown_table(["client \\ server", *servers], rows), ""]
    failures = [c for c in cells if c.error]
    if failures:
        parts += ["## Failed runs", "", markdown_table(["client", "server", "delay ms", "failed", "one error"],
                                                       [[c.client, c.server, f"{c.delay_ms:g}", str(c.runs - c.ok),
                                                         c.error or ""] for c in failures]), ""]
    return "\n".join(parts)
