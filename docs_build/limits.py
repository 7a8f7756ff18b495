"""The results page's "what held it back" tables: per condition of the traced runs behind a section (the
fidelity campaign's conditions, the 0 ms pairs, the window sweep), the limit replay/limits.py finds, from
datasets/limits.

datasets/limits/NAME.runs.csv holds a traced qreplay results file's runs, each with its breakdown as
replay/limits.py computes it from the run's stored trace points (:func:`export`, ``python -m docs_build.limits
RESULTS.duckdb NAME``; the trace points, megabytes a run, stay out of git like every results file). The
qreplay runs behind each dataset are declared here (EXPERIMENTS); ``python -m docs_build.limits --measure NAME``
runs them again, traced, into a new results file (out/limits/NAME.duckdb) and exports that: measured anew,
on this machine at its load, not the stored runs recomputed.
:func:`table` reads them back through replay.statistics.limits_summary, the summary ``qreplay why`` prints,
with its models' predictions (replay/commands/why.py), the conditions short of theirs first; docs_build/
committed.py writes each table into docs/results.md between its markers, and a test fails while one is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from common.markdown import markdown_table
from tparams.errors import ToolError

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "datasets" / "limits"
PAGE = "results.md"
#: each dataset's section of the page, by the dataset's name
SECTIONS = {"fidelity": "what held the fidelity conditions back", "pairs": "what held the traced pairs back",
            "sweep": "what held the traced window sweep back"}
#: the qreplay invocations (arguments, --out added) whose traced runs each dataset holds, in the order they ran:
#: the fidelity campaign's conditions behind the page's hand explanations, the 0 ms implementation pairs, the
#: window sweep (datasets/limits/PROVENANCE.md says when each ran)
EXPERIMENTS = {
    "fidelity": ("--stack ngtcp2 --set firefox --delay 30ms --size 20MB --reps 2 --trace",
                 "--stack ngtcp2 --set chromium --delay 200ms --size 50MB --reps 2 --trace",
                 "--stack ngtcp2 --set firefox --delay 10ms --loss 1 --size 10MB --reps 2 --trace",
                 "--stack aioquic --set firefox --delay 0ms --size 10MB --reps 2 --trace",
                 "--stack chromium --delay 0ms --size 50MB --reps 2 --trace",
                 "--stack chromium --delay 200ms --size 50MB --reps 2 --trace",
                 "--stack firefox --delay 200ms --size 50MB --reps 2 --trace",
                 "--stack firefox --delay 30ms --size 50MB --reps 2 --trace",
                 "--stack quiche --set firefox --delay 10ms --loss 1 --size 10MB --reps 2 --trace"),
    "pairs": ("--stack quinn --server-stack quiche --delay 0ms --size 50MB --reps 2 --trace",
              "--stack quinn --server-stack msquic --delay 0ms --size 50MB --reps 2 --trace",
              "--stack quinn --server-stack aioquic --delay 0ms --size 10MB --reps 2 --trace",
              "--stack aioquic --server-stack quinn --delay 0ms --size 10MB --reps 2 --trace"),
    "sweep": tuple(f"sweep --stack {stack} --param initial_max_data --values 196608 --delay 30ms --size 10MB "
                   "--reps 2 --trace" for stack in ("ngtcp2", "quic-go")),
}
#: what the page's hand explanations say held the traced conditions back, held against the runs' breakdowns in
#: a generated line beneath each table (a test fails where one disagrees): (dataset, the paragraph, the
#: condition (runs columns and values), the limit it names, and whether it names it as the condition's label or
#: as a share of its time (why's SHOWN_SHARE or more); it agrees where at least half the condition's runs bear it out)
HAND = (
    ("fidelity", "0-10 ms: the client's CPU", {"stack": "aioquic", "delay_ms": 0}, "receiver_cpu_socket", "label"),
    ("fidelity", "0-10 ms: the client's CPU", {"stack": "chromium", "delay_ms": 0}, "receiver_cpu_socket", "share"),
    *(("fidelity", "The receive socket", {"stack": stack, "delay_ms": delay}, "receiver_cpu_socket", "share")
      for stack, delay in (("ngtcp2", 30), ("ngtcp2", 200), ("chromium", 200), ("firefox", 30))),
    *(("fidelity", "The update rule", {"stack": stack, "delay_ms": 200}, limit, how)
      for stack, label in (("chromium", None), ("ngtcp2", "congestion_window"))
      for limit in ("congestion_window", "receive_window_stream")
      for how in ("label" if limit == label else "share",)),
    *(("fidelity", "The lossy link", {"stack": stack, "loss_pct": 1}, "loss_recovery", "label")
      for stack in ("ngtcp2", "quiche")),
    *(("pairs", "the table agrees with it", {"stack": "quinn", "server_stack": server}, "sender_cpu", "label")
      for server in ("quiche", "msquic", "aioquic")),
    ("pairs", "the table agrees with it", {"stack": "aioquic", "server_stack": "quinn"}, "receiver_cpu_socket",
     "label"),
    *(("sweep", "flow control, not congestion control", {"stack": stack}, "receive_window_connection", "label")
      for stack in ("ngtcp2", "quic-go")),
)
MEASURED = ROOT / "out" / "limits"
#: what an export keeps of a run besides its conditions (replay.statistics.present_conditions)
KEPT = ("run_id", "experiment_id", "started_at", "status", "goodput_mbps", "bytes", "wall_s", "server_cpu_s",
        "client_cpu_s", "requested_client")


def export(results: Path, name: str, directory: Path = DATASETS) -> Path:
    """``results``' runs into DIRECTORY/NAME.runs.csv (datasets/limits), each traced run's breakdown computed
    now from its trace points (an untraced run keeps what it stored)."""
    import polars as pl

    from replay import statistics, store
    from replay.limits import as_columns

    con = store.open_read_only(results)
    try:
        found = pl.DataFrame([{"run_id": run["run_id"], **as_columns(breakdown)}
                              for run, breakdown in statistics.traced_breakdowns(con)],
                             schema={"run_id": pl.String, "limited_by": pl.String, "limits": pl.String})
        con.register("recomputed", found)
        keys = ", ".join(f"r.{k}" for k in (*KEPT[:2], *statistics.present_conditions(con), *KEPT[2:]))
        out = directory / f"{name}.runs.csv"
        out.parent.mkdir(parents=True, exist_ok=True)
        con.execute(f"""COPY (SELECT {keys},
                                CASE WHEN n.run_id IS NULL THEN r.limited_by ELSE n.limited_by END AS limited_by,
                                CASE WHEN n.run_id IS NULL THEN r.limits ELSE n.limits END AS limits
                              FROM runs r LEFT JOIN recomputed n USING (run_id) ORDER BY r.started_at)
                        TO '{out}' (HEADER)""")
    finally:
        con.close()
    return out


def measure(name: str, results: Path | None = None, directory: Path = DATASETS,
            experiments: dict[str, tuple[str, ...]] = EXPERIMENTS) -> Path:
    """Run dataset ``name``'s qreplay invocations again, traced, into ``results`` (a new file; default
    out/limits/NAME.duckdb), then export it to DIRECTORY/NAME.runs.csv; ToolError (one line) when the name is
    unknown, the file exists (runs of another measurement would join the dataset) or an invocation fails."""
    import shlex
    import subprocess

    if name not in experiments:
        raise ToolError(f"no dataset {name!r}: one of {', '.join(experiments)}")
    results = Path(results or MEASURED / f"{name}.duckdb")
    if results.exists():
        raise ToolError(f"{results} exists: --measure writes a new results file")
    results.parent.mkdir(parents=True, exist_ok=True)
    for arguments in experiments[name]:
        command = [sys.executable, "-c", "from replay.cli import main; main()", *shlex.split(arguments), "--out",
                   str(results)]
        ran = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if ran.returncode:
            said = ran.stderr.strip().splitlines()[-1:] or [f"exit {ran.returncode}"]
            raise ToolError(f"qreplay {arguments}: {said[0]}")
    return export(results, name, directory)


def _source(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection whose ``runs`` are the dataset's; its breakdowns are stored, so no trace is read."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW runs AS SELECT * FROM read_csv_auto('{path}', header = true)")
    con.execute("CREATE VIEW traces AS SELECT NULL::VARCHAR AS run_id WHERE false")
    return con


def table(name: str, directory: Path = DATASETS) -> str:
    """DIRECTORY/NAME.runs.csv's conditions, what held each back, as a dated Markdown table (anomalies first)."""
    from replay import statistics
    from replay.commands.why import SHOWN_SHARE, differed, prediction, shown_shares
    from replay.measured_rules import load_update_rules

    path = directory / f"{name}.runs.csv"
    con = _source(path)
    summary = statistics.limits_summary(con)
    first, last, runs = con.execute("SELECT min(started_at), max(started_at), count(*) FROM runs").fetchone()
    con.close()
    rules = load_update_rules()
    differing = statistics.varying(summary)
    rows = []
    for row in summary.iter_rows(named=True):
        bound = prediction(row, rules) if row["traced"] else None
        short = bool(bound and bound.short_of(row["mean_mbps"]))
        shares = ", ".join(f"{limit.replace('_', ' ')} {share:.0%}" for limit, share in shown_shares(row))
        rows.append((not short, [
            statistics.describe(row, differing),
            f"`{row['limited_by']}` ({row['agreeing']} of {row['traced']})" if row["traced"] else "not traced",
            shares or "-", "-" if row["mean_mbps"] is None else f"{row['mean_mbps']:,.0f}",
            f"{bound.text()}: {bound.basis}" if bound else "-",
            f"**short**: {differed(row)}" if short else ""]))
    header = ["condition", "held back by (runs)", "time at each limit", "Mbit/s", "its limit allows", "anomaly"]
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return (f"Generated by `docs_build/limits.py` from `{shown}`: "
            f"{runs} runs, {first:%Y-%m-%d %H:%M}-{last:%H:%M} UTC, each run's breakdown computed by replay/limits.py "
            f"from its trace. All: {statistics.shared(summary)}. Per condition the limit most of its runs were held "
            f"by, the mean share of the transfer's time at each limit of {SHOWN_SHARE:.0%} or more, the mean goodput "
            "and what the limit's model allows (`qreplay why`); a condition well short of it (an anomaly) first.\n\n"
            + markdown_table(header, [cells for _, cells in sorted(rows, key=lambda r: r[0])]) + "\n"
            + (f"\n{hand}" if (hand := hand_line(name, directory)) else ""))


def hand_checks(name: str, directory: Path = DATASETS) -> list[tuple[tuple, bool, str]]:
    """Each of HAND's claims on dataset ``name``: (the claim, whether the runs bear it out, what they say)."""
    import csv
    import json

    from replay.commands.why import SHOWN_SHARE

    with (directory / f"{name}.runs.csv").open() as stored:
        runs = [r for r in csv.DictReader(stored) if r["limits"]]
    checked = []
    for claim in (c for c in HAND if c[0] == name):
        _, _, condition, limit, how = claim
        found = [r for r in runs if all(_same(r[column], value) for column, value in condition.items())]
        breakdowns = [json.loads(r["limits"]) for r in found]
        labels = [r["limited_by"] for r in found]
        shares = [b["fractions"][limit] for b in breakdowns]
        bearing = labels.count(limit) if how == "label" else sum(share >= SHOWN_SHARE for share in shares)
        holds = bool(found) and bearing * 2 >= len(found)
        basis = [b["basis"] for b in breakdowns]
        said = (f"{_span(shares, 100, '%')} of the time, the label of {labels.count(limit)} of {len(found)} runs; "
                f"the client busy {_span([b['receiver_cpu_share'] for b in basis], 100, '%')}, the server "
                f"{_span([b['sender_cpu_share'] for b in basis], 100, '%')} of the run; "
                f"{_span([b['client_socket_drops'] for b in basis])} datagrams dropped at the client's socket, "
                f"{_span([b['link_drops'] for b in basis])} on the link" if found else "no such runs")
        checked.append((claim, holds, said))
    return checked


def hand_line(name: str, directory: Path = DATASETS) -> str:
    """The generated line beneath a table: each hand explanation's claim on its conditions and what the runs'
    breakdowns say of them."""
    from replay.commands.why import SHOWN_SHARE

    parts = [f"- *{paragraph}*, {_condition(condition)}: `{limit}` "
             f"{'its label' if how == 'label' else 'a share of its time'}, {'agrees' if holds else '**disagrees**'}: "
             f"{said}." for (_, paragraph, condition, limit, how), holds, said in hand_checks(name, directory)]
    return (f"What the hand explanations below say held these conditions back, held against the runs' "
            f"breakdowns (generated: a claim agrees where at least half the condition's runs carry its label, or "
            f"that limit's share at {SHOWN_SHARE:.0%} or more):\n\n" + "\n".join(parts) + "\n") if parts else ""


def _condition(condition: dict) -> str:
    """A HAND condition in words."""
    words = {"stack": "{}", "server_stack": "server {}", "delay_ms": "{:g} ms", "loss_pct": "{:g}% loss"}
    return ", ".join(words[column].format(value) for column, value in condition.items())


def _same(stored: str, wanted) -> bool:
    """A CSV cell against a HAND condition's value (numbers as numbers)."""
    try:
        return float(stored) == float(wanted) if isinstance(wanted, (int, float)) else stored == wanted
    except ValueError:
        return False


def _span(values: list, scale: float = 1, unit: str = "") -> str:
    """The range of ``values`` x ``scale``, whole numbers, ``unit`` after ("-" where none is known)."""
    known = sorted(v * scale for v in values if v is not None)
    if not known:
        return "-"
    low, high = f"{known[0]:,.0f}", f"{known[-1]:,.0f}"
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def main() -> None:
    arguments = sys.argv[1:]
    if not (len(arguments) == 2 or (arguments[:1] == ["--measure"] and len(arguments) in (2, 3))):
        sys.exit("usage: python -m docs_build.limits RESULTS.duckdb NAME | --measure NAME [RESULTS.duckdb] "
                 "(writes datasets/limits/NAME.runs.csv)")
    try:
        if arguments[0] == "--measure":
            out = measure(arguments[1], Path(arguments[2]) if len(arguments) == 3 else None)
        else:
            out = export(Path(arguments[0]), arguments[1])
    except ToolError as exc:
        sys.exit(str(exc))
    print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
