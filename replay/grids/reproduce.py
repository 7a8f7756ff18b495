"""qreplay reproduce's grid: the thesis's sets, delays, losses and swept values, figure by figure.

Light on purpose (no DuckDB, polars or runner): the CLI's help shows these values without importing the experiment."""

from __future__ import annotations

#: How long the whole campaign takes a stack, as measured on two cores (2026-11-23: LSQUIC alone 16 min for
#: 422 runs at load 1.5-7.1, LSQUIC with ngtcp2 39 min for 844 at load 3.8-11.2). `reproduce --help` and
#: docs/reproduce.md both quote it (tests/test_reproduce.py holds them to it).
FULL_CAMPAIGN_TIME = "16-20 min a stack"

# The thesis's sets (tables 2.1, 5.1, 5.8; section 5.2). "lsquic-defaults" is each side's own default set.
SAME_SET_BOTH_SIDES = ("lsquic-defaults", "alpha", "beta", "config3", "config4")
SERVER_SETS = ("lsquic-server-default", "alpha", "beta", "config3", "config4")
CLIENT_SETS = ("firefox-109", "chrome-109", "lsquic-client-default")
DELAYS_MS = (0, 10, 20, 30, 40, 50)
LOSSES_PCT = (0.001, 0.01, 0.1, 1.0)
LOSS_DELAY_MS = 10  # the thesis fixes 10 ms for its loss figures, "to amplify the effects"
SWEEP_DELAY_MS = 30
INITIAL_MAX_DATA_VALUES = (196608, 1572864, 3145728, 6291456, 15728640, 25165824)
BIDI_LOCAL_VALUES = (131072, 524288, 1048576, 3145728, 6291456, 12582912)
# The stream counts servers advertise most (the thesis's table 5.6: the five of scan 22-10-13, those of
# 22-01-27 the same in another order) as the server's initial_max_streams_bidi, against a client keeping 100
# requests open (the commonest value, so that the popular ones fall below, at and above it), plus 4, 50 and
# 200 around it: a stream's credit comes back a round trip after its request ends, so the limit binds up to
# twice the concurrency (stream_credit_bound). Table 5.7's initial_max_streams_uni is not swept: the replay
# protocol opens no unidirectional stream, so no value of it can matter here. 1,000-byte responses are
# QuicSand's.
STREAMS_FIGURE = "streams"
STREAMS_PARAM = "initial_max_streams_bidi"
TABLE_5_6 = (100, 128, 100000, 256, 16)
STREAMS_VALUES = tuple(sorted({*TABLE_5_6, 4, 50, 200}))
STREAMS_CONCURRENCY = 100
STREAMS_RESPONSE_BYTES = 1000
# The server-side twins (issue 34): the thesis swept the client's windows under a download, where they bound the
# server's sending; the server's own windows bound what a browser sends, an upload, and its stream limit how many
# requests a page has open. Each browser is the client (its own parameters), the stack the server, LSQUIC's
# default server set with the swept value (as the thesis's sweeps held the other side at LSQUIC's defaults).
SERVER_TWINS = {"server-5.4": "initial_max_data", "server-5.6": "initial_max_stream_data_bidi_remote"}
SERVER_STREAMS_FIGURE = "server-streams"
TWIN_BROWSERS = ("chromium", "firefox")
#: the figures whose clients are the browsers, the stack their server
TWIN_FIGURES = (*SERVER_TWINS, SERVER_STREAMS_FIGURE)

FIGURE_TITLES = {
    "5.1a": "Same set on client and server, goodput vs delay",
    "5.1b": f"Same set on client and server, goodput vs loss at {LOSS_DELAY_MS} ms",
    "5.2a": "Server sets (LSQUIC's default client), goodput vs delay",
    "5.2b": f"Server sets (LSQUIC's default client), goodput vs loss at {LOSS_DELAY_MS} ms",
    "5.3a": "Client sets (LSQUIC's default server), goodput vs delay",
    "5.3b": f"Client sets (LSQUIC's default server), goodput vs loss at {LOSS_DELAY_MS} ms",
    "5.4": f"Client initial_max_data sweep at {SWEEP_DELAY_MS} ms (packets: figure 5.5)",
    "5.6": f"Client initial_max_stream_data_bidi_local sweep at {SWEEP_DELAY_MS} ms (packets: figure 5.7)",
    STREAMS_FIGURE: f"Server {STREAMS_PARAM} sweep at {SWEEP_DELAY_MS} ms, {STREAMS_CONCURRENCY} requests at once",
    **{figure: f"Server {param} sweep at {SWEEP_DELAY_MS} ms under each browser's upload (twin of "
               f"{figure.removeprefix('server-')})" for figure, param in SERVER_TWINS.items()},
    SERVER_STREAMS_FIGURE: f"Server {STREAMS_PARAM} at table 5.6's values under each browser's page load, "
                           f"{SWEEP_DELAY_MS} ms",
}
PACKET_FIGURES = {"5.4": "5.5", "5.6": "5.7"}
