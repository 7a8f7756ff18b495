-- qreplay results, schema version 3 (2: knobs and workloads; 3: each traced run's limit breakdown; migrations/
-- replay_1_to_2.sql and replay_2_to_3.sql migrate older files).
-- One file per campaign; written in batches.
-- JSON-valued columns hold JSON text (VARCHAR) so the file opens without extensions.

CREATE TABLE IF NOT EXISTS schema_version (
    name    VARCHAR PRIMARY KEY,
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO schema_version VALUES ('replay', 3);

CREATE TABLE IF NOT EXISTS experiments (
    experiment_id VARCHAR PRIMARY KEY,
    kind          VARCHAR NOT NULL,      -- single | sweep | matrix
    started_at    TIMESTAMP NOT NULL,
    finished_at   TIMESTAMP,
    stack         VARCHAR NOT NULL,
    link_backend  VARCHAR NOT NULL,      -- as requested: auto | netem | relay | veth | loopback | measured (--server-host)
    size_bytes    BIGINT NOT NULL,
    reps          INTEGER NOT NULL,
    workload      VARCHAR,               -- tparams.workloads: download | upload | requests | stream
    knobs         VARCHAR,               -- JSON {knob: value as asked} (tparams.knobs; runs: what ran)
    command_line  VARCHAR,               -- the qreplay invocation, when run from the CLI
    config        VARCHAR                -- JSON: conditions, timeout_s, qlog_dir, cpu_idle
);

CREATE TABLE IF NOT EXISTS runs (
    experiment_id       VARCHAR NOT NULL,
    run_id              VARCHAR PRIMARY KEY,
    started_at          TIMESTAMP NOT NULL,
    set_name            VARCHAR NOT NULL,   -- client set
    set_fingerprint     VARCHAR,
    server_set_name     VARCHAR,            -- NULL: the stack's own server defaults
    stack               VARCHAR NOT NULL,   -- the client's library
    server_stack        VARCHAR,            -- the server's library (differs from stack in `qreplay pairs`)
    link_backend        VARCHAR,            -- the path actually taken: netem | relay | veth (auto with nothing
                                            -- to emulate) | loopback | measured (two hosts, nothing emulated)
    delay_ms            DOUBLE NOT NULL,    -- one-way, server to client
    delay_up_ms         DOUBLE NOT NULL,
    jitter_ms           DOUBLE NOT NULL,
    loss_pct            DOUBLE NOT NULL,
    rate_bps            BIGINT,
    queue               VARCHAR,            -- the down queue the path held, as ran ("1000p", "262144B"; NULL: none)
    queue_requested     VARCHAR,            -- what --queue asked (NULL: the testbed's default)
    sweep_param         VARCHAR,            -- the swept parameter (sweep experiments)
    sweep_value         BIGINT,
    rep                 INTEGER NOT NULL,
    status              VARCHAR NOT NULL,   -- ok | timeout | failed
    error               VARCHAR,
    size_bytes          BIGINT NOT NULL,    -- bytes each request moves
    workload            VARCHAR,            -- tparams.workloads: download | upload | requests | stream
    requests            INTEGER,            -- requests on the connection
    concurrency         INTEGER,            -- of them open at once
    clients             INTEGER,            -- client processes at once against the one server, a connection each
    bytes               BIGINT,             -- payload bytes moved (received; an upload's: the server's count)
    duration_s          DOUBLE,             -- first request (or client start, see timing) to last response done
    timing              VARCHAR,            -- how duration_s was measured
    goodput_mbps        DOUBLE,             -- bytes * 8 / duration_s / 1e6; of several clients, the mean of theirs
    client_goodputs_mbps VARCHAR,           -- JSON: each client's, when there were several
    fairness            DOUBLE,             -- Jain's index over the clients' goodputs (1: equal shares)
    requests_per_s      DOUBLE,             -- requests / duration_s
    ttfb_ms             DOUBLE,             -- first request sent to the first byte of its response
    latency_p50_ms      DOUBLE,             -- percentiles (nearest rank) of request sent to response done
    latency_p90_ms      DOUBLE,
    latency_p99_ms      DOUBLE,
    wall_s              DOUBLE,             -- client process lifetime
    client_tx_packets   BIGINT,
    client_rx_packets   BIGINT,
    client_tx_bytes     BIGINT,
    client_rx_bytes     BIGINT,
    server_tx_packets   BIGINT,
    server_rx_packets   BIGINT,
    server_tx_bytes     BIGINT,
    server_rx_bytes     BIGINT,
    counters            VARCHAR,            -- JSON: every interface counter delta the testbed gave
    client_cpu_s        DOUBLE,             -- summed over the clients
    client_maxrss_kb    BIGINT,             -- summed over the clients' peaks
    server_cpu_s        DOUBLE,
    server_maxrss_kb    BIGINT,
    -- Each knob of tparams.knobs has two columns, added by replay/store.py from the declarations: <knob>
    -- (what ran: cc the sender's congestion control, autotune whether the receiver's windows could grow,
    -- cipher, gso ...) and <knob>_requested (what was asked).
    udp_buffer_bytes    BIGINT,             -- the testbed's socket buffers; NULL: the machine's own (loopback)
    requested_client    VARCHAR,            -- JSON {parameter: value}
    applied_client      VARCHAR,
    not_applied_client  VARCHAR,
    requested_server    VARCHAR,
    applied_server      VARCHAR,
    not_applied_server  VARCHAR,
    warnings            VARCHAR,            -- JSON list of lines
    client_argv         VARCHAR,            -- JSON list, exactly as executed
    server_argv         VARCHAR,
    browser_version     VARCHAR,            -- browser runs (chromium, firefox and their -tcp variants): exact, as the
                                            -- running browser reports it
    protocol_seen       VARCHAR,            -- h3 | h2: Resource Timing's nextHopProtocol, agreed by the run's capture
    transport_seen      VARCHAR,            -- JSON: the capture's QUIC v1 packets, UDP datagrams, TCP SYNs and payload
                                            -- segments; the client namespace's UDP/TCP counters
    handshake_s         DOUBLE,             -- from the capture, until the client can send its request: QUIC's first
                                            -- Initial to the client's first Handshake packet; TCP's SYN to its first
                                            -- TLS application record; the page's connection, which the download reuses
    client_sent         VARCHAR,            -- JSON: the twelve parameters of the run's own ClientHello
                                            -- (set_fingerprint is theirs)
    resource_timing     VARCHAR,            -- JSON: the page's and the download's entries
    limited_by          VARCHAR,            -- traced runs (--trace): the limit that held the transfer longest
                                            -- (replay/limits.py's rules); NULL for a run not traced
    limits              VARCHAR,            -- JSON: the share of the transfer's time at each limit of
                                            -- replay.limits.LIMITS (summing to 1) and the basis the rules used
    -- Two-host runs (link_backend 'measured', replay/twohost.py): the link columns above hold what was measured
    -- before the runs, not emulated; NULL for a run over the testbed.
    path_mtu            INTEGER,            -- the largest IP packet that crossed with don't-fragment set
    link_measured       VARCHAR             -- JSON: the server's host and launcher, the echo RTT quantiles and loss,
                                            -- the calibration transfer's rate, the path MTU, when measured
);
-- Added within v3 (old readers ignore them): a file written before gains the columns, NULL in its runs.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS path_mtu INTEGER;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS link_measured VARCHAR;
-- The view run_summary (one row per experiment and condition: runs, failed, n, mean, standard deviation
-- and 95% CI of the goodput of the successful runs, packets, socket drops) is created by replay/store.py
-- from replay/statistics.py, where every statistic of stored runs is defined once.

-- `qreplay --trace`: one row per traced run (its capture, decrypted with the client's key log; a TCP run's
-- (tcp-h2) needs no decrypting: its headers hold its sequence numbers, ACKs and window, and no stream or
-- transport parameter columns are set).
CREATE TABLE IF NOT EXISTS traces (
    run_id                             VARCHAR PRIMARY KEY,
    download_stream                    BIGINT,      -- the stream the server sent the most bytes on
    t0_epoch                           DOUBLE,      -- t = 0 of trace_points: the request reaching the server
    ack_delay_exponent                 INTEGER,     -- the client's (3 when it sent none)
    initial_max_data                   BIGINT,      -- the client's, as its ClientHello carried them
    initial_max_stream_data_bidi_local BIGINT,
    packets                            INTEGER,     -- 1-RTT packets decrypted
    points                             INTEGER,     -- of them kept in trace_points (thinned above 20,000)
    undecrypted                        INTEGER,     -- short-header packets tshark could not decrypt (joined apart)
    bursts_split                       INTEGER,     -- datagrams captured as one GSO burst, split before decrypting
    cipher                             VARCHAR,     -- the TLS 1.3 cipher suite the server's ServerHello chose
    capture                            VARCHAR,     -- JSON: device, namespace, backend, tx_udp_segmentation per end,
                                                    -- tshark, buffer_mib, dropped (packets), joined_datagrams per
                                                    -- end (short-header packets put after another: unreadable)
    client_params                      VARCHAR,     -- JSON: every integer transport parameter of the ClientHello
    upload_credit                      VARCHAR      -- JSON, an upload's trace: what the server granted over time
);

-- Wide form: one row per 1-RTT packet the server's namespace saw, in capture order, with the sender's
-- state after it. Counters are bytes of the download stream unless said otherwise; a frame column is
-- set only on the packets that carry that frame.
CREATE TABLE IF NOT EXISTS trace_points (
    run_id              VARCHAR NOT NULL,
    seq                 INTEGER NOT NULL,   -- capture order
    t_s                 DOUBLE NOT NULL,    -- seconds since traces.t0_epoch (negative: the handshake)
    direction           VARCHAR NOT NULL,   -- down (server to client, the data) | up (the client's ACKs and updates)
    packet_number       BIGINT NOT NULL,    -- TCP: the capture's frame number
    packet_bytes        INTEGER,            -- the QUIC packet's size
    stream_bytes        INTEGER,            -- down: download-stream bytes in this packet (retransmissions too)
    sent_max            BIGINT,             -- highest offset + length sent
    sent_total          BIGINT,             -- all stream bytes sent, retransmissions included
    acked               BIGINT,             -- stream bytes of the packets the client's ACKs covered
    in_flight           BIGINT,             -- packet bytes neither acked nor 3 packet numbers below an acked one
    conn_credit         BIGINT,             -- the client's MAX_DATA limit so far (from initial_max_data)
    stream_credit       BIGINT,             -- its MAX_STREAM_DATA limit of the download stream (from bidi_local)
    max_data            BIGINT,             -- up: a MAX_DATA frame's limit
    max_stream_data     BIGINT,             -- up: a MAX_STREAM_DATA frame's limit for the download stream
    data_blocked        BIGINT,             -- down: a DATA_BLOCKED frame's limit
    stream_data_blocked BIGINT,             -- down: a STREAM_DATA_BLOCKED frame's limit (download stream)
    rtt_ms              DOUBLE,             -- up: ACK arrival - send time of its newly acked largest - ack_delay
    cwnd                BIGINT,             -- the sender's congestion window from its qlog, where known
    stream_bytes_all    INTEGER,            -- down: bytes of every stream in this packet
    streams_open        INTEGER,            -- the client's bidirectional streams opened so far (its requests)
    streams_credit      BIGINT,             -- the server's stream limit so far (initial_max_streams_bidi, MAX_STREAMS)
    max_streams         BIGINT,             -- down: a MAX_STREAMS (bidirectional) frame's limit
    streams_blocked     BIGINT,             -- up: a STREAMS_BLOCKED (bidirectional) frame's limit
    read_s              DOUBLE              -- up: when the sender read this packet, by its qlog, where known
);
-- Added within v3 (old readers ignore them): the requests' streams of trace_points; a file written before
-- gains the columns, NULL in its stored points.
-- Added within v3: an upload's trace (the client the sender) is its traces row alone, what the server granted
-- over time in upload_credit (replay/trace.py receiver_credit); NULL for a download's trace.
ALTER TABLE traces ADD COLUMN IF NOT EXISTS upload_credit VARCHAR;
ALTER TABLE trace_points ADD COLUMN IF NOT EXISTS stream_bytes_all INTEGER;
ALTER TABLE trace_points ADD COLUMN IF NOT EXISTS streams_open INTEGER;
ALTER TABLE trace_points ADD COLUMN IF NOT EXISTS streams_credit BIGINT;
ALTER TABLE trace_points ADD COLUMN IF NOT EXISTS max_streams BIGINT;
ALTER TABLE trace_points ADD COLUMN IF NOT EXISTS streams_blocked BIGINT;
-- Added within v3: when the sender read each of the client's packets (its qlog's time on the capture's clock).
ALTER TABLE trace_points ADD COLUMN IF NOT EXISTS read_s DOUBLE;
-- Added within v3: when the sender's qlog logged a packet sent that reached the wire more than 0.5 ms later (on
-- the capture's clock; NULL for the rest): counted in flight by the sender before the capture saw it.
ALTER TABLE trace_points ADD COLUMN IF NOT EXISTS logged_s DOUBLE;
-- Added within v3: why a run has no limit breakdown (limited_by NULL) where tracing it could not give one: several
-- clients over QUIC (decryption and qlog are one connection's; over TCP each connection's is merged), a two-host run (no capture on the server's host), a trace
-- that held no transfer. NULL for a breakdown, and for a run not traced (--trace gives it one).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS no_breakdown VARCHAR;
-- Added within v3: an upload's trace has trace_points too, its sender the client: the data is `up`, and the
-- sender's state is as the server's capture can tell it (replay/trace.py upload_series, tcp_upload_series).
-- Added within v3: a stream's (tparams.workloads' stream) bitrate, as the server paced it and the client played
-- it, and its playback by tparams.workloads.Player: times it ran dry before the end, their total time, the request
-- to playback's start. NULL for the other workloads and in runs stored before.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS bitrate_bps BIGINT;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS stalls INTEGER;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS stall_ms DOUBLE;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS startup_ms DOUBLE;
-- Added within v3: the client-to-server direction's rate limit (--rate-up; its queue sized as rate_bps's), the
-- one an upload's data crosses. NULL: unlimited, as in runs stored before.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS rate_up_bps BIGINT;

-- `qreplay --profile`: where each endpoint's CPU went during the transfer (replay/profile.py), sampled
-- with call stacks (perf's cpu-clock for native programs, py-spy for Python ones) from the server's
-- listening and the client's start until the client finished. Successful runs only.
-- One row per run, endpoint and component (the Kempf thesis's six, and UNMAPPED: samples whose stack
-- no row of datasets/profile/components.csv matched), zero-sample components included.
CREATE TABLE IF NOT EXISTS profiles (
    run_id        VARCHAR NOT NULL,
    endpoint      VARCHAR NOT NULL,   -- client | server
    library       VARCHAR NOT NULL,   -- the endpoint's stack, whose rows of the mapping sorted it
    profiler      VARCHAR NOT NULL,   -- e.g. "perf cpu-clock 999 Hz, dwarf unwinding", "py-spy 100 Hz"
    window_s      DOUBLE,             -- how long the endpoint was sampled
    component     VARCHAR NOT NULL,   -- PACKET_IO | IO | CRYPTO | CONN_MGMT | MARSHALLING | GENERAL | UNMAPPED
    samples       BIGINT NOT NULL,
    share         DOUBLE,             -- of the endpoint's samples (the components of an endpoint sum to 1)
    cpu_s         DOUBLE,             -- CPU seconds the samples stand for (perf: their periods; py-spy:
                                      -- samples / rate)
    cpu_s_per_gb  DOUBLE              -- cpu_s per 10^9 bytes of the download's payload (runs.bytes)
);

-- The folded stacks behind `profiles` (root first, frames joined by ';'; kernel frames end in _[k],
-- unnamed ones are [library]): what `qreplay plot --profile` draws as flame graphs.
CREATE TABLE IF NOT EXISTS profile_stacks (
    run_id     VARCHAR NOT NULL,
    endpoint   VARCHAR NOT NULL,
    folded     VARCHAR NOT NULL,
    samples    BIGINT NOT NULL,
    component  VARCHAR NOT NULL    -- as sorted when the run was stored
);

-- The views profile_summary (per experiment, condition, endpoint and component: profiled runs, mean share
-- and CPU seconds per GB) and profile_syscalls (per run and endpoint: samples under each system call
-- entry the sampled kernel stacks show) are created by replay/store.py from replay/statistics.py.
