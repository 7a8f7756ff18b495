"""qreplay impact's grid: the round-trip times, link rate, upload and page it predicts for, and what it assumes where nothing was measured.

Light on purpose (no DuckDB, polars or runner): the CLI's help shows these values without importing the experiment."""

from __future__ import annotations

DELAYS_MS = (10, 30, 100, 200)  # round-trip times
RATE_MBPS = 100.0
UPLOAD_BYTES = 10_000_000
PAGE_OBJECTS = 100
OBJECT_BYTES = 10_000
# Not measured: an HTTP/3 GET's HEADERS frame as a browser sends it, QPACK-encoded without the dynamic table
# (method, scheme, authority, path, user agent, accept headers): a few hundred bytes.
REQUEST_BYTES = 300
# Where the identified library's receiver rule is not known: the half-window rule of ngtcp2, LSQUIC, quiche
# and tquic (rules.csv), the slowest the measured stacks re-open (the burst bound is half a window).
ASSUMED_FRACTION = 0.5
ASSUMED_CWND = 12_000  # RFC 9002: ten 1,200-byte datagrams
