"""What the server sets a scan found do to browsers: each browser's upload goodput and its time to load a
page of many objects, predicted for every distinct set at several round-trip times (issue 34, `qreplay
impact`). Pure arithmetic over a polars frame of sets, no I/O: replay/impact_report.py reads the scan and
writes the tables and the report.

A server's parameters bound what the *client sends*. For an upload the browser is the sender and the server
the receiver, so the server's initial_max_stream_data_bidi_remote (its window on the request stream the
browser opens) and initial_max_data (its connection window) cap the browser's flight whatever its congestion
window, and the server library's window-update rule (replay/flowcontrol.py, measured in
datasets/flowcontrol/rules.csv) says how fast it re-opens them; a library that auto-tunes (quic-go) grows a window
that binds, so its upload is bounded by the window it grows to (UpdateRule.max_stream_window), not the one it sent. For a page load the browser sends one
request per object: the server's initial_max_streams_bidi limits how many are open (replay.flowcontrol.
stream_rounds, the discrete form of stream_credit_bound), and its windows the requests' own bytes; the
objects' bytes flow the other way, bounded by the link, the server's slow start (from its library's initial window:
quic-go's 32 packets, RFC 9002's ten where the source has no other) and the browser's own windows.

A parameter the server did not send is RFC 9000's default for it: 0 (no credit until the server raises
it, which the model cannot time: such a prediction is empty). Every row says which receiver rule it used
and whether that rule was measured for the identified library or assumed: an upload's receiver is the
library's h3 server, whose rule measured with that browser's upload (datasets/flowcontrol/upload_receivers.csv)
stands where there is one, before the library's rule measured under a download.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from replay.flowcontrol import (
    STARTUP_RTTS, UpdateRule, burst_share, delivery_rounds, slow_start_rtts, stream_rounds,
)
from tparams.libraries import no_h3_server
from tparams.library import CANDIDATE_SEPARATOR, UNKNOWN

from replay.grids.impact import (
    DELAYS_MS, RATE_MBPS, UPLOAD_BYTES, PAGE_OBJECTS, OBJECT_BYTES, REQUEST_BYTES, ASSUMED_FRACTION, ASSUMED_CWND
)
UPLOAD_PARAMETERS = ("initial_max_stream_data_bidi_remote", "initial_max_data")
SET_COLUMNS = ("initial_max_data", "initial_max_stream_data_bidi_remote", "initial_max_streams_bidi")
LINK = "link"  # binding: nothing of the server's set binds
NONE = "none"


@dataclass(frozen=True)
class BrowserClient:
    """What of a browser the prediction needs: its sender's initial congestion window (uploads), how many
    requests it keeps open (page loads), and its own receive window and update rule (the objects' bytes)."""

    name: str
    initial_cwnd: int
    cwnd_source: str
    receive_window: int  # its initial_max_data, as its captured ClientHello sends it
    receive_fraction: float  # its measured update rule (rules.csv)
    concurrency: int | None = None  # None: every object at once (not measured; see BROWSER_CONCURRENCY)


# Neither browser's initial congestion window has been measured here; both are their sources' constants.
BROWSER_CWND = {
    "chromium": (32 * 1460, "Chromium's QUIC (quiche quic_constants.h): kInitialCongestionWindow 32 packets "
                            "x kDefaultTCPMSS 1,460 bytes; from the source, not measured"),
    "firefox": (10 * 1232, "Firefox's neqo (cc/classic_cc.rs): CWND_INITIAL_PKTS 10 x 1,232-byte datagrams "
                           "(min(10 x MTU, max(2 x MTU, 14,720))); from the source, not measured"),
}
BROWSER_CONCURRENCY = ("not measured: a browser opens one request stream per object over its one h3 connection "
                       "and is assumed to hold no object back below the server's stream limit (--concurrency "
                       "sets it)")


@dataclass(frozen=True)
class ReceiverRule:
    consumed_fraction: float
    initial_cwnd: int  # the library's sender, for the page's responses
    source: str
    assumed: bool
    max_stream_window: int = 0  # what auto-tuning grows the windows to (UpdateRule's); 0: they stay as sent
    max_conn_window: int = 0


def receiver_rule(library: str | None, rules: Mapping[str, UpdateRule], rule_keys: Mapping[str, str],
                  assumed_fraction: float = ASSUMED_FRACTION) -> ReceiverRule:
    """The window-update rule of the server library identified as ``library`` as the receiver of an upload.

    ``rules``: replay.measured_rules.load_update_rules() (measured rules over the written ones), by stack;
    ``rule_keys``: identification's library name -> its stack's name (tparams.libraries). The measured rules
    come from the library as a download's receiver (our client of it): the same flow-control code receives
    an upload in its server, which the row says. A verdict naming several candidates takes their rule where
    all share one; anything else takes ``assumed_fraction`` and says so."""
    candidates = [] if library is None else library.split(CANDIDATE_SEPARATOR)
    known = [(name, rules[rule_keys[name]]) for name in candidates if name in rule_keys and rule_keys[name] in rules]
    fractions = {rule.consumed_fraction for _, rule in known}
    if known and len(known) == len(candidates) and len(fractions) == 1:
        name, rule = known[0]
        role = (" (measured as a download's receiver, our client of it; taken for its server receiving the upload)"
                if rule.source.startswith("measured") else "")
        prefix = "" if len(candidates) == 1 else f"identified as one of {', '.join(candidates)}, all with this rule: "
        return ReceiverRule(rule.consumed_fraction, rule.initial_cwnd, f"{prefix}{name}: {rule.source}{role}", False,
                            rule.max_stream_window, rule.max_conn_window)
    if library is None:
        why = "no library identified for these endpoints"
    elif library == UNKNOWN:
        why = "identification named no library (unknown)"
    elif len(candidates) > 1:
        why = f"identified only as one of {', '.join(candidates)}"
    else:
        why = f"no receiver rule of {library} measured or written down"
    return ReceiverRule(assumed_fraction, ASSUMED_CWND, f"ASSUMED {assumed_fraction:g} of the window a round trip "
                        f"(the half-window rule of ngtcp2, LSQUIC, quiche, tquic): {why}; initial congestion window "
                        f"{ASSUMED_CWND:,} assumed (RFC 9002)", True)


def check_note(library: str | None, h3_server: str | None) -> str:
    """Why a set is not checked (the spot checks, replay/impact_check.py, run only with --check)."""
    if h3_server:
        return f"not checked yet: can be, through {h3_server}'s h3 server"
    if library is None or library == UNKNOWN:
        return "not checked: no library identified"
    if CANDIDATE_SEPARATOR in library:
        return f"not checked: library not singled out ({library})"
    why = no_h3_server(library)
    return f"not checked: the project has no h3 server of {library}" + (f" ({why})" if why else "")


def predict(sets: pl.DataFrame, browsers: Sequence[BrowserClient], rules: Mapping[str, UpdateRule],
            rule_keys: Mapping[str, str], h3_servers: Mapping[str, str], *, delays_ms: Sequence[float] = DELAYS_MS,
            rate_mbps: float = RATE_MBPS, upload_bytes: int = UPLOAD_BYTES, objects: int = PAGE_OBJECTS,
            object_bytes: int = OBJECT_BYTES, request_bytes: int = REQUEST_BYTES,
            assumed_fraction: float = ASSUMED_FRACTION,
            upload_rules: Mapping[tuple[str, str], UpdateRule] | None = None) -> pl.DataFrame:
    """One row per set x browser x round-trip time.

    ``sets``: one row per distinct set and identified library, with ``set_fingerprint``, ``library`` (None:
    not identified), ``endpoints`` (the weight) and SET_COLUMNS as sent (None: not sent). ``h3_servers``:
    identified library -> the replay stack whose h3 server a browser can load from (the spot check's).
    ``upload_rules``: (h3 server's stack, browser) -> that server's rule measured receiving that browser's upload
    (replay.measured_rules.load_upload_receiver_rules()); where one is measured it replaces the library's rule,
    measured under a download, for that browser."""
    libraries = sets["library"].unique().to_list()
    chosen = {name: receiver_rule(name, rules, rule_keys, assumed_fraction) for name in libraries}
    rule_frame = pl.DataFrame({
        "library": libraries,
        "receiver_fraction": [chosen[n].consumed_fraction for n in libraries],
        "server_initial_cwnd": [chosen[n].initial_cwnd for n in libraries],
        "max_stream_window": [chosen[n].max_stream_window for n in libraries],
        "max_conn_window": [chosen[n].max_conn_window for n in libraries],
        "rule_source": [chosen[n].source for n in libraries],
        "rule_assumed": [chosen[n].assumed for n in libraries],
        "h3_server": [h3_servers.get(n) if n is not None else None for n in libraries],
        "check_note": [check_note(n, h3_servers.get(n) if n is not None else None) for n in libraries],
    }, schema_overrides={"library": pl.String, "h3_server": pl.String})
    browser_frame = pl.DataFrame({
        "browser": [b.name for b in browsers], "browser_initial_cwnd": [b.initial_cwnd for b in browsers],
        "browser_window": [b.receive_window for b in browsers],
        "browser_fraction": [b.receive_fraction for b in browsers],
        "concurrency": [b.concurrency or objects for b in browsers],
    })
    rows = _upload_rules((sets.select("set_fingerprint", "library", "endpoints", *SET_COLUMNS)
                          .join(rule_frame, on="library", how="left", nulls_equal=True)
                          .join(browser_frame, how="cross")), upload_rules or {})
    rows = rows.join(pl.DataFrame({"rtt_ms": [float(d) for d in delays_ms]}), how="cross")
    return rows.hstack(_arithmetic(rows, rate_mbps, upload_bytes, objects, object_bytes, request_bytes)).with_columns(
        pl.lit(rate_mbps).alias("rate_mbps"), pl.lit(False).alias("checked"))


def _upload_rules(rows: pl.DataFrame, upload_rules: Mapping[tuple[str, str], UpdateRule]) -> pl.DataFrame:
    """Each row's receiver rule, the one its h3 server was measured with receiving its browser's upload where
    there is one."""
    if not upload_rules:
        return rows
    measured = pl.DataFrame({"h3_server": [server for server, _ in upload_rules],
                             "browser": [browser for _, browser in upload_rules],
                             "_fraction": [rule.consumed_fraction for rule in upload_rules.values()],
                             "_source": [f"{server}'s h3 server {rule.source}"
                                         for (server, _), rule in upload_rules.items()]})
    return (rows.join(measured, on=["h3_server", "browser"], how="left")
            .with_columns(pl.coalesce("_fraction", "receiver_fraction").alias("receiver_fraction"),
                          pl.coalesce("_source", "rule_source").alias("rule_source"),
                          (pl.col("rule_assumed") & pl.col("_fraction").is_null()).alias("rule_assumed"))
            .drop("_fraction", "_source"))


def _arithmetic(rows: pl.DataFrame, rate_mbps: float, upload_bytes: int, objects: int, object_bytes: int,
                request_bytes: int) -> pl.DataFrame:
    """The model over every row at once (numpy arrays)."""
    def column(name: str) -> np.ndarray:
        return rows[name].fill_null(0).to_numpy().astype(float)

    rtt_s = column("rtt_ms") / 1000
    link = rate_mbps * 1e6 / 8 * rtt_s  # bytes a round trip the link carries
    share = burst_share(column("receiver_fraction"))
    windows = {name: column(name) for name in UPLOAD_PARAMETERS}
    # A receiver that auto-tunes grows a window that binds (quic-go's: whenever the sender delivers more than a
    # quarter window a round trip), so an upload's steady flight is bounded by the window it grows to.
    grown = {name: np.where(windows[name] > 0, np.maximum(windows[name], column(most)), 0.0)
             for name, most in zip(UPLOAD_PARAMETERS, ("max_stream_window", "max_conn_window"))}

    # Upload: the browser's flight is at most what the tighter window re-opens a round trip (the burst bound).
    per_rtt = {name: share * w for name, w in grown.items()}
    window_per_rtt = np.minimum(*per_rtt.values())
    stream_binds = per_rtt["initial_max_stream_data_bidi_remote"] <= per_rtt["initial_max_data"]
    capped = window_per_rtt < link
    flight = np.minimum(window_per_rtt, link)
    steady = flight * 8 / rtt_s / 1e6
    whole = np.minimum(np.minimum(*grown.values()), link) * 8 / rtt_s / 1e6
    started = np.where(flight > 0, flight, 1.0)
    start_s = (STARTUP_RTTS + slow_start_rtts(started, column("browser_initial_cwnd"))) * rtt_s
    upload = upload_bytes * 8 / (upload_bytes * 8 / (started * 8 / rtt_s) + start_s) / 1e6
    lifting = np.ceil(link / share)
    capped_by = _capped_by(per_rtt, link)

    # Page load: the requests under the stream limit, the responses' bytes under slow start and the link (or
    # the browser's own window), and the requests' bytes under the server's windows.
    concurrency = column("concurrency")
    limit = column("initial_max_streams_bidi")
    rounds_streams = stream_rounds(objects, concurrency, limit)
    rounds_free = stream_rounds(objects, concurrency, math.inf)
    browser_flight = np.minimum(link, burst_share(column("browser_fraction")) * column("browser_window"))
    rounds_data = delivery_rounds(objects * object_bytes, column("server_initial_cwnd"), browser_flight)
    extra = {name: _wait_rounds(bytes_, windows[name], share)
             for name, bytes_ in (("initial_max_data", objects * request_bytes),
                                  ("initial_max_stream_data_bidi_remote", request_bytes))}
    base_rounds = np.maximum(rounds_free, rounds_data)
    added = {"initial_max_streams_bidi": np.maximum(rounds_streams - base_rounds, 0), **extra}
    total = 1 + np.maximum(rounds_streams, rounds_data) + sum(extra.values())  # 1: the handshake
    names = list(added)
    stacked = np.vstack([added[n] for n in names])
    worst = np.argmax(stacked, axis=0)
    slowed = stacked.max(axis=0) > 0
    page_binding = np.where(slowed, np.array(names, dtype=object)[worst], NONE)
    lift_streams = _stream_lift(objects, concurrency, base_rounds)
    page_lift = np.select([page_binding == "initial_max_streams_bidi", page_binding == "initial_max_data",
                           page_binding == "initial_max_stream_data_bidi_remote"],
                          [lift_streams, np.full_like(lift_streams, objects * request_bytes),
                           np.full_like(lift_streams, request_bytes)], np.nan)
    page_ms = np.where(np.isfinite(total), total * rtt_s * 1000, np.nan)

    return pl.DataFrame({
        "upload_mbps": np.where(flight > 0, np.minimum(upload, rate_mbps), np.nan),
        "upload_steady_mbps": steady,
        "upload_whole_window_mbps": whole,
        "upload_capped": capped,
        "upload_binding": np.where(capped, np.where(stream_binds, UPLOAD_PARAMETERS[0], UPLOAD_PARAMETERS[1]), LINK),
        "upload_lifting_value": np.where(capped, lifting, np.nan),
        "upload_capped_by": capped_by,
        "page_load_ms": page_ms,
        "page_load_unbound_ms": (1 + base_rounds) * rtt_s * 1000,
        "page_stream_rounds": np.where(np.isfinite(rounds_streams), rounds_streams, np.nan),
        "page_slowed": slowed,
        "page_binding": page_binding.astype(str),
        "page_lifting_value": page_lift,
    }, nan_to_null=True).with_columns(pl.col("upload_lifting_value", "page_lifting_value").cast(pl.Int64))


def _capped_by(per_rtt: Mapping[str, np.ndarray], link: np.ndarray) -> pl.Series:
    """Every upload window below the link's round trip, comma-joined (None: none)."""
    below = pl.DataFrame({name: per_rtt[name] < link for name in UPLOAD_PARAMETERS})
    joined = pl.concat_str([pl.when(pl.col(name)).then(pl.lit(name)) for name in UPLOAD_PARAMETERS],
                           separator=", ", ignore_nulls=True)
    return below.select(pl.when(pl.any_horizontal(UPLOAD_PARAMETERS)).then(joined).alias("upload_capped_by")).to_series()


def _wait_rounds(needed: float, window: np.ndarray, share: np.ndarray) -> np.ndarray:
    """Round trips bytes wait beyond the first for a server window of ``window`` re-opened ``share`` of it a
    round trip (infinite where it is 0: nothing moves until the server raises it)."""
    short = np.maximum(needed - window, 0.0)
    safe = np.where(window > 0, window * share, 1.0)
    return np.where(short == 0, 0.0, np.where(window > 0, np.ceil(short / safe), np.inf))


def _stream_lift(objects: int, concurrency: np.ndarray, rounds: np.ndarray) -> np.ndarray:
    """The smallest initial_max_streams_bidi whose stream rounds are within ``rounds`` (bisection over 1..objects,
    every row at once: stream_rounds falls as the limit grows)."""
    low, high = np.ones_like(concurrency), np.full_like(concurrency, float(max(objects, 1)))
    while np.any(low < high):
        middle = np.floor((low + high) / 2)
        fits = stream_rounds(objects, concurrency, middle) <= rounds
        high = np.where(fits, middle, high)
        low = np.where(fits, low, middle + 1)
    return low


# --- what the report says -------------------------------------------------------------------------------

def endpoint_shares(predictions: pl.DataFrame, binding: str) -> pl.DataFrame:
    """Share of the endpoints (each set weighted by its endpoints) per browser, round-trip time and what
    binds (``binding``: upload_binding or page_binding)."""
    return (predictions.group_by("browser", "rtt_ms", binding).agg(pl.col("endpoints").sum())
            .with_columns((100 * pl.col("endpoints") / pl.col("endpoints").sum().over("browser", "rtt_ms"))
                          .round(2).alias("share_pct"))
            .sort("browser", "rtt_ms", pl.col("endpoints"), descending=[False, False, True]))


def lifting_values(predictions: pl.DataFrame) -> pl.DataFrame:
    """Per round-trip time and binding parameter: the endpoints whose upload it caps, the values they send and
    the value that lifts their cap to the link's rate (it depends on the receiver's rule: a range)."""
    capped = predictions.filter(pl.col("upload_capped") & (pl.col("browser") == pl.col("browser").first()))
    return (capped.group_by("rtt_ms", "upload_binding")
            .agg(pl.col("endpoints").sum(),
                 pl.col("initial_max_stream_data_bidi_remote").median().alias("median_bidi_remote_sent"),
                 pl.col("initial_max_data").median().alias("median_max_data_sent"),
                 pl.col("upload_lifting_value").min().alias("lifting_value_min"),
                 pl.col("upload_lifting_value").max().alias("lifting_value_max"))
            .sort("rtt_ms", "upload_binding"))


def rule_table(predictions: pl.DataFrame) -> pl.DataFrame:
    """Per identified library: its endpoints, the receiver rule used, whether it was assumed, and whether a
    set of it can be checked with real browsers (an h3 server of that library in the project)."""
    one = predictions.filter(pl.col("rtt_ms") == pl.col("rtt_ms").first())
    return (one.group_by("library", "browser")
            .agg(pl.col("endpoints").sum(), pl.len().alias("sets"), pl.col("receiver_fraction").first(),
                 pl.col("rule_assumed").first(), pl.col("rule_source").first(), pl.col("h3_server").first())
            .sort("endpoints", "library", "browser", descending=[True, False, False], nulls_last=True))


def spot_check_candidates(predictions: pl.DataFrame, top: int = 5, worst: int = 5) -> pl.DataFrame:
    """The sets to check with real browsers: the ``top`` covering most endpoints and the ``worst`` (the
    lowest upload goodput against the link at any browser and delay, then the slowest page load against an
    unbound one), each once, with whether the project has an h3 server of its library (``h3_server``)."""
    per_set = (predictions.group_by("set_fingerprint", "library")
               .agg(pl.col("endpoints").first(), pl.col(*SET_COLUMNS).first(), pl.col("h3_server").first(),
                    pl.col("check_note").first(),
                    (pl.col("upload_steady_mbps") / pl.col("rate_mbps")).min().alias("worst_upload_share"),
                    (pl.col("page_load_ms") / pl.col("page_load_unbound_ms")).max().alias("worst_page_slowdown")))
    # among sets of as many endpoints, those whose library has an h3 server here first: they can be checked
    most = per_set.sort("endpoints", pl.col("h3_server").is_null(), "set_fingerprint",
                        descending=[True, False, False]).head(top)
    worst_sets = (per_set.filter(~pl.col("set_fingerprint").is_in(most["set_fingerprint"].implode()))
                  .sort(pl.col("worst_upload_share").fill_null(-1), pl.col("worst_page_slowdown").fill_null(math.inf),
                        "endpoints", descending=[False, True, True]).head(worst))
    return pl.concat([most.with_columns(pl.lit("most endpoints").alias("why")),
                      worst_sets.with_columns(pl.lit("worst").alias("why"))])
