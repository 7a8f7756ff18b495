"""Analysis shared by the notebooks and ``qscan report --compare``.

Two scans of one population (the thesis compares 2022-01-27 with 2022-10-13):
which parameter sets appeared, vanished, grew or shrank, and how the share of
each value of each of the twelve parameters moved. Every function returns
polars DataFrames; the loaders read DuckDB through the scan store.

Also here: the published reference tables (datasets/reference/*.csv), so a
notebook can put the project's figures beside the thesis's, and
``render_notebooks`` for the demo.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from tparams.errors import ToolError
from tparams.paramset import PERFORMANCE_PARAMETERS

from scanner.campaign_store import scan_connection

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR = ROOT / "datasets" / "reference"
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = ("parameter_popularity", "scan_comparison", "replay_goodput")
# Environment variables the notebooks' "parameters" cell reads.
SCAN_DB_VARIABLE, OTHER_SCAN_DB_VARIABLE, REPLAY_DB_VARIABLE = "QTP_SCAN_DB", "QTP_SCAN_DB_OTHER", "QTP_REPLAY_DB"

CHANGES = ("appeared", "vanished", "grew", "shrank", "unchanged")
COMPARE_FORMATS = ("table", "markdown", "csv", "json")


def reference(name: str) -> pl.DataFrame:
    """A published table of datasets/reference by file stem, e.g. ``scan_top_values``."""
    path = REFERENCE_DIR / f"{name}.csv"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in REFERENCE_DIR.glob("*.csv")))
        raise ToolError(f"no reference table {name!r} (have: {known})")
    # Values such as 34359738368 and empty cells: read everything as text, cast where used.
    return pl.read_csv(path, infer_schema=False)


def server_params(path: str | Path) -> pl.DataFrame:
    """One row per endpoint (ip, port): its latest completed handshake's twelve and fingerprint."""
    with scan_connection(path) as con:
        return con.sql("SELECT DISTINCT ON (ip, port) * FROM server_params ORDER BY ip, port, handshake_id DESC").pl()


def scan_label(path: str | Path) -> str:
    """The date the scan started (the thesis names scans by date), else the file name."""
    with scan_connection(path) as con:
        rows = con.execute("SELECT CAST(CAST(min(started_at) AS DATE) AS VARCHAR) FROM scans").fetchall()
    return rows[0][0] or Path(path).stem


def _set_counts(params: pl.DataFrame) -> pl.DataFrame:
    total = max(params.height, 1)
    return (
        params.group_by("set_fingerprint", *PERFORMANCE_PARAMETERS)
        .agg(pl.len().alias("endpoints"))
        .with_columns((100.0 * pl.col("endpoints") / total).round(2).alias("share_pct"))
    )


def compare_sets(params_a: pl.DataFrame, params_b: pl.DataFrame) -> pl.DataFrame:
    """Per parameter set of either scan: endpoints and share in each, and the change.

    ``appeared``/``vanished``: present in one scan only; ``grew``/``shrank``: the
    share of endpoints (not the count, since populations differ in size) rose or fell.
    """
    a, b = _set_counts(params_a), _set_counts(params_b)
    joined = a.join(b, on="set_fingerprint", how="full", suffix="_b", coalesce=True)
    for name in PERFORMANCE_PARAMETERS:  # the values of a set are the same in both scans by construction
        joined = joined.with_columns(pl.coalesce(name, f"{name}_b").alias(name)).drop(f"{name}_b")
    joined = joined.rename({"endpoints": "endpoints_a", "share_pct": "share_a_pct",
                            "share_pct_b": "share_b_pct"}).with_columns(
        pl.col("endpoints_a", "endpoints_b").fill_null(0),
        pl.col("share_a_pct", "share_b_pct").fill_null(0.0),
    )
    delta = (pl.col("share_b_pct") - pl.col("share_a_pct")).round(2)
    change = (
        pl.when(pl.col("endpoints_a") == 0).then(pl.lit("appeared"))
        .when(pl.col("endpoints_b") == 0).then(pl.lit("vanished"))
        .when(delta > 0).then(pl.lit("grew"))
        .when(delta < 0).then(pl.lit("shrank"))
        .otherwise(pl.lit("unchanged"))
    )
    return (
        joined.with_columns(delta.alias("share_delta_pp"), change.alias("change"))
        .select("change", "set_fingerprint", "endpoints_a", "endpoints_b", "share_a_pct", "share_b_pct",
                "share_delta_pp", *PERFORMANCE_PARAMETERS)
        .sort(pl.col("share_delta_pp").abs(), "set_fingerprint", descending=[True, False])
    )


def value_shares(params: pl.DataFrame) -> pl.DataFrame:
    """Long form: parameter, value (text; 'not sent' when absent), endpoints, share_pct."""
    total = max(params.height, 1)
    long = params.select(
        [pl.col(name).cast(pl.String).fill_null("not sent").alias(name) for name in PERFORMANCE_PARAMETERS]
    ).unpivot(on=list(PERFORMANCE_PARAMETERS), variable_name="parameter", value_name="value")
    return (
        long.group_by("parameter", "value").agg(pl.len().alias("endpoints"))
        .with_columns((100.0 * pl.col("endpoints") / total).round(2).alias("share_pct"))
    )


def compare_values(shares_a: pl.DataFrame, shares_b: pl.DataFrame) -> pl.DataFrame:
    """Per parameter and value, its share in each scan and the shift in percentage points."""
    joined = shares_a.join(shares_b, on=["parameter", "value"], how="full", suffix="_b", coalesce=True)
    order = {name: i for i, name in enumerate(PERFORMANCE_PARAMETERS)}
    return (
        joined.rename({"endpoints": "endpoints_a", "share_pct": "share_a_pct", "share_pct_b": "share_b_pct"})
        .with_columns(pl.col("endpoints_a", "endpoints_b").fill_null(0),
                      pl.col("share_a_pct", "share_b_pct").fill_null(0.0))
        .with_columns((pl.col("share_b_pct") - pl.col("share_a_pct")).round(2).alias("share_delta_pp"),
                      pl.col("parameter").replace_strict(order, return_dtype=pl.Int32).alias("_order"))
        .sort("_order", pl.col("share_delta_pp").abs(), "value", descending=[False, True, False])
        .drop("_order")
        .select("parameter", "value", "endpoints_a", "endpoints_b", "share_a_pct", "share_b_pct", "share_delta_pp")
    )


def compare_frames(params_a: pl.DataFrame, params_b: pl.DataFrame,
                   labels: tuple[str, str] = ("a", "b")) -> dict[str, pl.DataFrame]:
    """The comparison of two scans given their ``server_params`` rows (one per endpoint)."""
    sets = compare_sets(params_a, params_b)
    result = {
        "summary": pl.DataFrame({
            "scan": list(labels),
            "endpoints": [params_a.height, params_b.height],
            "distinct_sets": [params_a["set_fingerprint"].n_unique(), params_b["set_fingerprint"].n_unique()],
        }),
        "sets": sets,
        "value_shifts": compare_values(value_shares(params_a), value_shares(params_b)),
    }
    for change in CHANGES[:4]:
        result[change] = sets.filter(pl.col("change") == change)
    return result


def compare_scans(a: str | Path, b: str | Path) -> dict[str, pl.DataFrame]:
    """Scan ``a`` (earlier) against scan ``b`` (later): summary, sets, appeared,
    vanished, grew, shrank, value_shifts. Endpoints count once each (latest handshake)."""
    labels = (scan_label(a), scan_label(b))
    if labels[0] == labels[1]:  # two scans of one day: their files tell them apart
        labels = (Path(a).stem, Path(b).stem)
    return compare_frames(server_params(a), server_params(b), labels)


# The thesis's two Internet-wide scans: targets reached and distinct sets (datasets/reference/PROVENANCE.md).
PUBLISHED_SCANS = {"2022-01-27": (290_746, 91), "2022-10-13": (516_877, 148)}


def published_scans() -> pl.DataFrame:
    return pl.DataFrame([{"scan": scan, "reached": reached, "distinct_sets": sets}
                         for scan, (reached, sets) in PUBLISHED_SCANS.items()])


def values_beside_published(top_values: pl.DataFrame, parameter: str) -> pl.DataFrame:
    """Our most common values of ``parameter`` (``scanner.report.top_values`` rows) by rank,
    beside the thesis's values and endpoints of both scans (tables 5.2-5.7)."""
    ours = (top_values.filter(pl.col("parameter") == parameter)
            .select(pl.col("rank").cast(pl.Int64), "value", "endpoints", "share_pct"))
    published = reference("scan_top_values").filter(pl.col("parameter") == parameter)
    for scan in PUBLISHED_SCANS:
        column = (published.filter(pl.col("scan") == scan)
                  .select(pl.col("rank").cast(pl.Int64), pl.col("value").alias(f"value_{scan}"),
                          pl.col("endpoints").cast(pl.Int64).alias(f"endpoints_{scan}")))
        ours = ours.join(column, on="rank", how="full", coalesce=True)
    return ours.sort("rank")


def stream_data_triples(params: pl.DataFrame, top: int = 10) -> pl.DataFrame:
    """The most common (bidi_local, bidi_remote, uni) stream-data triples (table 5.5's shape)."""
    return (
        params.group_by(bidi_local="initial_max_stream_data_bidi_local",
                        bidi_remote="initial_max_stream_data_bidi_remote", uni="initial_max_stream_data_uni")
        .agg(pl.len().alias("endpoints"))
        .sort("endpoints", "bidi_local", "bidi_remote", "uni", descending=[True, False, False, False], nulls_last=True)
        .head(top)
        .with_row_index("rank", offset=1)
    )


def published_value_shifts() -> pl.DataFrame:
    """The thesis's own two scans as ``compare_values`` shapes them, from the published
    top values (tables 5.2-5.7) and the reached targets of each scan."""
    reached = {scan: figures[0] for scan, figures in PUBLISHED_SCANS.items()}
    top = reference("scan_top_values").with_columns(pl.col("endpoints").cast(pl.Int64))

    def shares(scan: str) -> pl.DataFrame:
        return (top.filter(pl.col("scan") == scan).select("parameter", "value", "endpoints")
                .with_columns((100.0 * pl.col("endpoints") / reached[scan]).round(2).alias("share_pct")))

    return compare_values(shares("2022-01-27"), shares("2022-10-13"))


def render_comparison(result: Mapping[str, pl.DataFrame], fmt: str = "table", top: int = 10) -> str:
    """The comparison as text: table (terminal), markdown, csv (one table, a section column) or json."""
    if fmt not in COMPARE_FORMATS:
        raise ToolError(f"unknown format {fmt!r} (one of {', '.join(COMPARE_FORMATS)})")
    sections = {name: frame for name, frame in result.items() if name not in CHANGES}
    if fmt == "json":
        return json.dumps({name: frame.to_dicts() for name, frame in sections.items()}, indent=2, default=str)
    if fmt == "csv":
        long = pl.concat([frame.select(pl.all().cast(pl.String)).with_columns(pl.lit(name).alias("section"))
                          for name, frame in sections.items()], how="diagonal")
        return long.select("section", pl.exclude("section")).write_csv()
    shown = {
        "summary": result["summary"],
        **{f"sets that {change}": _compact_sets(result[change].head(top)) for change in CHANGES[:4]},
        "largest value shifts": result["value_shifts"].filter(pl.col("share_delta_pp") != 0).sort(
            pl.col("share_delta_pp").abs(), descending=True).head(top),  # a value whose share held is no shift
    }
    return frames_as_text(shown, markdown=fmt == "markdown")


def frames_as_text(frames: Mapping[str, pl.DataFrame], markdown: bool = False) -> str:
    """Titled tables for a terminal (or markdown): every row and column, no dtypes (also `qscan diff`'s)."""
    style = "MARKDOWN" if markdown else "UTF8_FULL_CONDENSED"
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=250, fmt_str_lengths=250, tbl_formatting=style,
                   tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        return "\n\n".join(f"### {title} ({frame.height})\n{frame if frame.height else '(none)'}"
                            for title, frame in frames.items()) + "\n"


def _compact_sets(sets: pl.DataFrame) -> pl.DataFrame:
    """Sets for a terminal: the twelve folded into one 'name=value' column (sent ones only)."""
    sent = [pl.when(pl.col(name).is_not_null()).then(pl.format(f"{name}={{}}", pl.col(name).cast(pl.String)))
            for name in PERFORMANCE_PARAMETERS]
    return sets.select(pl.exclude(*PERFORMANCE_PARAMETERS, "change"),
                       pl.concat_str(sent, separator=" ", ignore_nulls=True).alias("parameters_sent"))


def execute_notebook(name: str, parameters: Mapping[str, str], timeout: int = 600):  # type: ignore[no-untyped-def]
    """Run notebooks/<name>.ipynb top to bottom with ``parameters`` as its
    environment variables; returns the executed nbformat notebook."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    env = {**os.environ, **{key: str(value) for key, value in parameters.items()}}
    # The kernel talks to this process over loopback TCP only (jupyter_client's default);
    # its warning that such TCP is unencrypted would be noise on every demo run.
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            extra_arguments=["--IPKernelApp.log_level=ERROR"],
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    client.execute(env=env)
    return notebook


def render_notebooks(scan_db: str | Path, out_dir: str | Path, other_scan_db: str | Path | None = None,
                     replay_db: str | Path | None = None) -> list[Path]:
    """Execute the notebooks against these databases and write each as HTML into
    ``out_dir`` (for the demo). The comparison compares ``scan_db`` with itself
    when no other scan is given; the replay notebook runs only with ``replay_db``."""
    from nbconvert import HTMLExporter

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parameters = {SCAN_DB_VARIABLE: str(Path(scan_db).resolve()),
                  OTHER_SCAN_DB_VARIABLE: str(Path(other_scan_db or scan_db).resolve())}
    names = list(NOTEBOOKS[:2])
    if replay_db is not None:
        parameters[REPLAY_DB_VARIABLE] = str(Path(replay_db).resolve())
        names.append("replay_goodput")
    written = []
    for name in names:
        html, _ = HTMLExporter().from_notebook_node(execute_notebook(name, parameters))
        target = out_dir / f"{name}.html"
        target.write_text(html)
        written.append(target)
    return written
