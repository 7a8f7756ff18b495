-- qreplay results, schema version 1. One file per campaign; written in batches.
-- JSON-valued columns hold JSON text (VARCHAR) so the file opens without extensions.

CREATE TABLE IF NOT EXISTS schema_version (
    name    VARCHAR PRIMARY KEY,
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO schema_version VALUES ('replay', 1);

CREATE TABLE IF NOT EXISTS experiments (
    experiment_id VARCHAR PRIMARY KEY,
    kind          VARCHAR NOT NULL,      -- single | sweep | matrix
    started_at    TIMESTAMP NOT NULL,
    finished_at   TIMESTAMP,
    stack         VARCHAR NOT NULL,
    link_backend  VARCHAR NOT NULL,      -- as requested: auto | netem | relay | veth | loopback
    size_bytes    BIGINT NOT NULL,
    reps          INTEGER NOT NULL,
    autotune      BOOLEAN NOT NULL,
    cc            VARCHAR NOT NULL,
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
                                            -- to emulate) | loopback
    delay_ms            DOUBLE NOT NULL,    -- one-way, server to client
    delay_up_ms         DOUBLE NOT NULL,
    jitter_ms           DOUBLE NOT NULL,
    loss_pct            DOUBLE NOT NULL,
    rate_bps            BIGINT,
    queue               VARCHAR,
    sweep_param         VARCHAR,            -- the swept parameter (sweep experiments)
    sweep_value         BIGINT,
    rep                 INTEGER NOT NULL,
    status              VARCHAR NOT NULL,   -- ok | timeout | failed
    error               VARCHAR,
    size_bytes          BIGINT NOT NULL,    -- requested download size
    bytes               BIGINT,             -- payload bytes received
    duration_s          DOUBLE,             -- request (or client start, see timing) to last byte
    timing              VARCHAR,            -- how duration_s was measured
    goodput_mbps        DOUBLE,             -- bytes * 8 / duration_s / 1e6
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
    client_cpu_s        DOUBLE,
    client_maxrss_kb    BIGINT,
    server_cpu_s        DOUBLE,
    server_maxrss_kb    BIGINT,
    autotune            BOOLEAN NOT NULL,
    cc                  VARCHAR NOT NULL,
    requested_client    VARCHAR,            -- JSON {parameter: value}
    applied_client      VARCHAR,
    not_applied_client  VARCHAR,
    requested_server    VARCHAR,
    applied_server      VARCHAR,
    not_applied_server  VARCHAR,
    warnings            VARCHAR,            -- JSON list of lines
    client_argv         VARCHAR,            -- JSON list, exactly as executed
    server_argv         VARCHAR
);
-- Files written before pairs of stacks existed: the server was the client's library.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS server_stack VARCHAR;

-- n, mean and standard deviation per condition; failed runs are kept in `runs`
-- and counted here, but only successful runs enter the goodput statistics.
CREATE OR REPLACE VIEW run_summary AS
SELECT experiment_id, stack, server_stack, set_name, server_set_name, delay_ms, loss_pct, sweep_param, sweep_value,
       autotune, count(*) AS runs, count(*) FILTER (WHERE status = 'ok') AS n,
       avg(goodput_mbps) FILTER (WHERE status = 'ok') AS mean_mbps,
       stddev_samp(goodput_mbps) FILTER (WHERE status = 'ok') AS stddev_mbps,
       avg(client_tx_packets) AS mean_client_tx_packets,
       avg(server_tx_packets) AS mean_server_tx_packets,
       -- datagrams the client's full socket buffer dropped, per 100 reaching its UDP layer (ok runs)
       100.0 * sum(json_extract(counters, '$.client_udp_rcvbuf_errors')::BIGINT) FILTER (WHERE status = 'ok')
         / nullif(sum(json_extract(counters, '$.client_udp_rcvbuf_errors')::BIGINT
                      + json_extract(counters, '$.client_udp_in_datagrams')::BIGINT) FILTER (WHERE status = 'ok'), 0)
         AS client_socket_drop_pct
FROM runs
GROUP BY ALL;
