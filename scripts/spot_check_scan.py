"""A small scan file whose sets are identified to every library with an h3 server here, for
`qreplay impact --check`: the lab's scan identifies quiche, quinn and tquic servers, but with one endpoint a
set its sets are never among the candidates beside aioquic's, caddy's and ngtcp2's, and their sets bind no
window at the check's delays. Each set here is one the Internet sends (datasets/reference/common_server_sets.csv)
or the library's own, one endpoint each (192.0.2.0/24: documentation addresses, never contacted: the check runs
the set on the library's server in the testbed); caddy's is the one caddy sends (it takes no set).

    .venv/bin/python scripts/spot_check_scan.py OUT.duckdb
    qreplay impact OUT.duckdb --check --top 6 --worst 0 --check-delays 100 --check-trace
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scanner.engine import OK, Certificate, HandshakeRecord
from scanner.identify import store_identifications
from scanner.store import ScanStore
from tparams.codec import decode_transport_parameters, encode_transport_parameters
from tparams.paramset import ParamSet

BETA = ParamSet(max_idle_timeout=120000, initial_max_data=196_608, initial_max_stream_data_bidi_local=131_072,
                initial_max_stream_data_bidi_remote=131_072, initial_max_stream_data_uni=131_072,
                initial_max_streams_bidi=100, initial_max_streams_uni=103)  # the scan's commonest (2022-10-13)
# (address, library identified, set)
ENDPOINTS = [
    ("192.0.2.1", "quiche", BETA),
    ("192.0.2.2", "tquic", BETA),
    ("192.0.2.3", "quinn", ParamSet(max_idle_timeout=30000, initial_max_data=1_048_576,
                                    initial_max_stream_data_bidi_remote=262_144, initial_max_streams_bidi=100)),
    ("192.0.2.4", "aioquic", ParamSet(max_idle_timeout=60000, initial_max_data=1_048_576,  # the lab's aioquic set
                                      initial_max_stream_data_bidi_local=1_048_576,
                                      initial_max_stream_data_bidi_remote=1_048_576,
                                      initial_max_stream_data_uni=1_048_576, initial_max_streams_bidi=128,
                                      initial_max_streams_uni=128)),
    ("192.0.2.5", "quic-go", ParamSet(max_idle_timeout=30000, initial_max_data=786_432,  # what caddy sends
                                      initial_max_stream_data_bidi_local=524_288,
                                      initial_max_stream_data_bidi_remote=524_288,
                                      initial_max_stream_data_uni=524_288, initial_max_streams_bidi=100,
                                      initial_max_streams_uni=100)),
    ("192.0.2.6", "ngtcp2", ParamSet(max_idle_timeout=30000, initial_max_data=16_777_216,  # alpha
                                     initial_max_stream_data_bidi_local=1_048_576,
                                     initial_max_stream_data_bidi_remote=32_768,
                                     initial_max_stream_data_uni=1_048_576, initial_max_streams_bidi=100,
                                     initial_max_streams_uni=10)),
]


def handshake(ip: str, params: ParamSet, when: dt.datetime) -> HandshakeRecord:
    raw = encode_transport_parameters(params.transport_parameters())
    return HandshakeRecord(ip=ip, port=443, sni="example.test", started_at=when, finished_at=when, handshake_ms=1.0,
                           status=OK, quic_version=1, alpn="h3",
                           certificates=[Certificate("ab" * 32, "CN=x", "CN=y", ["example.test"], when, when)],
                           transport_parameters_raw=raw, decoded=decode_transport_parameters(raw, "server"))


def main() -> int:
    if len(sys.argv) != 2 or Path(sys.argv[1]).exists():
        print("usage: spot_check_scan.py OUT.duckdb (a new file)", file=sys.stderr)
        return 2
    out, now = Path(sys.argv[1]), dt.datetime.now(dt.timezone.utc)
    with ScanStore.open(out) as store:
        scan_id = store.begin_scan("targets", {"made_by": "scripts/spot_check_scan.py"})
        store.append_records(scan_id, [handshake(ip, params, now) for ip, _, params in ENDPOINTS])
        store.finish_scan(scan_id)
    store_identifications(out, pl.DataFrame(
        {"ip": [ip for ip, _, _ in ENDPOINTS], "port": [443] * len(ENDPOINTS),
         "library": [library for _, library, _ in ENDPOINTS], "identified_at": [now] * len(ENDPOINTS),
         "library_evidence": ["scripts/spot_check_scan.py"] * len(ENDPOINTS)}, schema_overrides={"port": pl.Int32}))
    print(f"wrote {out}: {len(ENDPOINTS)} endpoints, libraries {', '.join(lib for _, lib, _ in ENDPOINTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
