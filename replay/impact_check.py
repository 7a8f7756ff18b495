"""`qreplay impact --check`: the spot checks. The candidate sets (the ones covering most endpoints and the worst,
replay.impact.spot_check_candidates) are run with the real browsers uploading, and loading a page of many
objects, through the h3 server of the library the scan identified for each set, in the testbed at the check's
round-trip times; measured beside predicted for the same size, objects and link.

A set is checked only through its own library's server: the stack whose library (tparams.libraries) is the one
identified, that serves a browser's page over h3 and answers the workload (Stack.server_refusal). A set whose
library has none here is predicted only, its row saying why; it is never replayed on another library. A
server that cannot be configured with the set (caddy runs quic-go with its own) runs with its own, and every
run is held against what the server actually sent (the browser's capture, transport_seen.server_sent): a run
whose server sent other values of the parameters the prediction uses checks nothing, and says so.

The runs are stored like any qreplay run (a results DuckDB file: `qreplay plot`, `qreplay why` read it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from replay import impact, store
from replay.link import LinkConfig
from replay.runner import Condition, Experiment, run_experiment
from replay.sets import NamedSet, own_set
from replay.stacks import every_stack, get_stack
from replay.stacks.base import RunOptions, Stack
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet
from tparams.workloads import REQUESTS, UPLOAD, Workload

# Within this of the prediction a window-bound case counts as predicted (issue 34).
TOLERANCE = 0.25
RUN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class CheckOptions:
    """How the spot checks run: small by default (one round-trip time, a 2 MB upload, a page of 20 objects)."""

    delays_ms: tuple[float, ...] = (30.0,)
    browsers: tuple[str, ...] = ("chromium", "firefox")
    upload_bytes: int = 2_000_000
    objects: int = 20
    object_bytes: int = 10_000
    reps: int = 1
    #: capture and decrypt each upload: what the server granted over time (trace.receiver_credit), so that a
    #: miss can be read against what the server did (a window grown mid-connection, say)
    trace: bool = False


Execute = Callable[[Experiment, Path], list[dict]]


def h3_server(library: str | None, browser: Stack, workload: Workload) -> tuple[Stack | None, str]:
    """The stack whose h3 server is ``library``'s and answers ``browser``'s page in ``workload`` here, or None
    and why not (one line)."""
    own = [stack for stack in every_stack().values() if stack.library is not None
           and stack.library.identified_as == library and stack.serves_page and stack.serves("h3")]
    if not own:  # also where no single library was identified: no stack is identified as that
        return None, impact.check_note(library, None)
    reasons = []
    options = RunOptions(size=1, workload=workload)  # only the workload matters to a refusal
    for stack in own:
        if refused := stack.server_refusal(browser, options):
            reasons.append(refused)
        elif unusable := stack.unavailable_reason():
            reasons.append(f"{stack.name}: {unusable}")
        else:
            return stack, ""
    return None, "not checked: " + "; ".join(reasons)


def run_checks(scan: str, sets: pl.DataFrame, candidates: pl.DataFrame, predicted: pl.DataFrame,
               options: CheckOptions, rate_mbps: float, results: Path,
               execute: Execute | None = None) -> pl.DataFrame:
    """One row per candidate x workload x browser x round-trip time: predicted (``predicted``: replay.impact.
    predict at the check's sizes and delays), measured where checked, their ratio, or why not checked.

    ``sets``: replay.impact_report.read_sets' frame (every parameter as sent, for the server's set)."""
    execute = execute or (lambda experiment, out: run_experiment(experiment, out))
    browsers = [get_stack(name) for name in options.browsers]
    rows = []
    for candidate in candidates.iter_rows(named=True):
        fingerprint, library = candidate["set_fingerprint"], candidate["library"]
        whole = sets.filter((pl.col("set_fingerprint") == fingerprint)
                            & pl.col("library").eq_missing(library)).row(0, named=True)
        params = ParamSet.from_mapping({name: whole[name] for name in PERFORMANCE_PARAMETERS})
        for workload in (UPLOAD, REQUESTS):
            for browser in browsers:
                server, why_not = h3_server(library, browser, workload)
                runs = _run(scan, fingerprint, library, candidate["endpoints"], params, server, browser, workload,
                            options, rate_mbps, results, execute) if server else []
                credit = upload_credit(results, [r["run_id"] for r in runs]) if workload is UPLOAD else {}
                for rtt in options.delays_ms:
                    model = predicted.filter((pl.col("set_fingerprint") == fingerprint)
                                             & pl.col("library").eq_missing(library)
                                             & (pl.col("browser") == browser.name)
                                             & (pl.col("rtt_ms") == rtt)).row(0, named=True)
                    mine = [r for r in runs if r["delay_ms"] == rtt and r["stack"] == browser.name]
                    rows.append(_row(candidate, workload, browser.name, rtt, model, server, why_not, mine, params)
                                | granted(mine, credit))
    return pl.DataFrame(rows, infer_schema_length=None)


def _run(scan: str, fingerprint: str, library: str | None, endpoints: int, params: ParamSet, server: Stack,
         browser: Stack, workload: Workload, options: CheckOptions, rate_mbps: float, results: Path,
         execute: Execute) -> list[dict]:
    # a server that sets none of the parameters runs with its own (what it sent is held against the set)
    server_set = NamedSet(f"scan-{fingerprint}", params, f"{scan}: {endpoints} endpoints, identified {library}",
                          "server") if server.settable.get("server") else None
    conditions = [Condition(own_set(browser), server_set, LinkConfig(delay_down_ms=rtt, rate_bps=int(rate_mbps * 1e6)),
                            stack=browser) for rtt in options.delays_ms]
    size = options.upload_bytes if workload is UPLOAD else options.object_bytes
    run_options = RunOptions(size=size, timeout_s=RUN_TIMEOUT_S, workload=workload,
                             trace=options.trace and workload is UPLOAD,
                             **({"requests": options.objects, "concurrency": options.objects}
                                if workload is REQUESTS else {}))
    experiment = Experiment("matrix", browser, conditions, run_options, options.reps,
                            command_line=f"qreplay impact --check {scan}", server_stack=server,
                            tags={"impact_set": fingerprint, "impact_library": library})
    return execute(experiment, results)


def _row(candidate: dict, workload: Workload, browser: str, rtt: float, model: dict, server: Stack | None,
         why_not: str, runs: list[dict], params: ParamSet) -> dict:
    upload = workload is UPLOAD
    binding = model["upload_binding"] if upload else model["page_binding"]
    row = {"why": candidate["why"], "set_fingerprint": candidate["set_fingerprint"], "library": candidate["library"],
           "endpoints": candidate["endpoints"], "workload": workload.name, "browser": browser, "rtt_ms": rtt,
           "server_stack": server.name if server else None, "binding": binding,
           "window_bound": binding not in (impact.LINK, impact.NONE),
           "rule_assumed": model["rule_assumed"],
           # the page's load opened the connection before the measured fetches: the handshake's round trip is not
           # in the measured time, so it is taken out of the prediction
           "predicted": model["upload_mbps"] if upload else _minus(model["page_load_ms"], rtt),
           "unit": "Mbit/s" if upload else "ms"}
    ok = [r for r in runs if r["status"] == "ok"]
    sent_wrong = sorted({mismatch for r in ok if (mismatch := _sent_mismatch(r, params))})
    checked = bool(ok) and not sent_wrong
    measured = (sum(r["goodput_mbps"] if upload else r["duration_s"] * 1000 for r in ok) / len(ok)) if checked else None
    if not server:
        note = why_not
    elif not ok:
        note = "not checked: " + ("; ".join(sorted({str(r.get("error") or r["status"]) for r in runs}))[:300]
                                  or "no run")
    elif sent_wrong:
        note = f"not checked: {server.name}'s server sent " + "; ".join(sent_wrong)
    else:
        note = f"checked through {server.name}'s h3 server ({len(ok)} of {len(runs)} runs ok)"
    ratio = measured / row["predicted"] if measured is not None and row["predicted"] else None
    return {**row, "checked": checked, "measured": measured, "ratio": ratio,
            "within_tolerance": None if ratio is None else abs(ratio - 1) <= TOLERANCE,
            "server_cpu_s": _mean([r.get("server_cpu_s") for r in ok]),
            "duration_s": _mean([r.get("duration_s") for r in ok]),
            "run_ids": ",".join(r["run_id"] for r in runs), "note": note}


def upload_credit(results: Path, run_ids: list[str]) -> dict[str, dict]:
    """run id -> what the server granted in that traced upload (traces.upload_credit), for the runs traced."""
    if not run_ids or not Path(results).exists():
        return {}
    con = store.open_read_only(results)
    try:
        return store.upload_credit(con, run_ids)
    finally:
        con.close()


def granted(runs: list[dict], credit: dict[str, dict]) -> dict:
    """The columns of what the server granted in a case's ok runs, traced: its initial stream window, the
    largest stream and connection credit it ran at (limit less bytes received), the least the client had left
    when an update left (near 0: it had used its window; see trace.receiver_credit), its updates, and whether
    a window grew past the initial value (a miss the fixed-window model cannot see); None where not traced."""
    traced = [credit[r["run_id"]] for r in runs if r["status"] == "ok" and r["run_id"] in credit]

    def over(key: str, pick=max) -> int | None:  # the runs' largest (or least) of one figure
        values = [t[key] for t in traced if t.get(key) is not None]
        return pick(values) if values else None
    return {"traced_runs": len(traced), "server_initial_stream_window": over("initial_stream_window"),
            "largest_stream_credit": over("largest_stream_credit"),
            "largest_conn_credit": over("largest_conn_credit"),
            "max_stream_data_updates": over("max_stream_data_updates"),
            "least_stream_credit_left": over("least_stream_credit_left", min),
            "least_conn_credit_left": over("least_conn_credit_left", min),
            "stream_window_grew": any(t.get("stream_window_grew") for t in traced) if traced else None,
            "conn_window_grew": any(t.get("conn_window_grew") for t in traced) if traced else None}


def _minus(value: float | None, rtt: float) -> float | None:
    return None if value is None else value - rtt


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _sent_mismatch(run: dict, params: ParamSet) -> str | None:
    """What the server sent (the browser's capture) of the parameters the prediction uses, where it is not the
    set's; None where it is."""
    seen = json.loads(run.get("transport_seen") or "{}").get("server_sent")
    if seen is None:
        return "nothing the capture shows (no EncryptedExtensions decrypted)"
    wanted = params.as_sent()
    wrong = [f"{name} = {seen.get(name)}, not the set's {wanted.get(name)}" for name in impact.SET_COLUMNS
             if seen.get(name) != wanted.get(name)]
    return ", ".join(wrong) or None


def mark_checked(predictions: pl.DataFrame, checks: pl.DataFrame) -> pl.DataFrame:
    """``checked`` true on the predictions of a set, browser and round-trip time some spot check measured."""
    done = (checks.filter(pl.col("checked")).select("set_fingerprint", "library", "browser", "rtt_ms").unique()
            .with_columns(pl.lit(True).alias("_checked")))
    return (predictions.join(done, on=["set_fingerprint", "library", "browser", "rtt_ms"], how="left",
                             nulls_equal=True)
            .with_columns(pl.col("_checked").fill_null(False).alias("checked")).drop("_checked"))
