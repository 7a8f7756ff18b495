"""qreplay fidelity's grid: the browsers, delays, loss, sizes and repetitions it runs, and --quick's.

Light on purpose (no DuckDB, polars or runner): the CLI's help shows these values without importing the experiment."""

from __future__ import annotations

BROWSERS = ("chromium", "firefox")
DELAYS_MS = (0.0, 10.0, 30.0, 50.0, 100.0, 200.0)
LOSS_PCT = 1.0  # at the thesis's LOSS_DELAY_MS
# 50 MB: at 200 ms a 6 MiB window re-opened by halves needs a dozen round trips beyond slow start's to show;
# at 1% loss CUBIC holds ~15 Mbit/s, so that link downloads less.
SIZE = 50_000_000
LOSS_SIZE = 10_000_000
REPS = 5
#: --quick: both browsers, two replay stacks, two delays, small downloads (a few minutes)
QUICK_STACKS = ("ngtcp2", "quic-go")
QUICK_DELAYS_MS = (10.0, 50.0)
QUICK_SIZE = 5_000_000
QUICK_REPS = 2
CAPTURE_SIZE = 1_000_000  # the page load that records a browser's set
#: the thesis's finding under test: Firefox's set ahead of Chrome's at >= 20 ms (figure 5.3a)
THESIS_FROM_MS = 20.0
