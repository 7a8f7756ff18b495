-- qreplay results: a schema version 1 file becomes version 2 (knobs and workloads), in one transaction run by
-- replay/store.py. Nothing is dropped that a run stored: the experiments' two knob columns move into its
-- knobs JSON, every run is a download of one request, and the knob columns runs had stay as they were.

-- Version 1 files of every age: the columns later version 1 files had.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS server_stack VARCHAR;
-- Files written before runs stored what ran beside what was asked: filled in below.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS autotune_requested BOOLEAN;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS cc_requested VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS udp_buffer_bytes BIGINT;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS queue_requested VARCHAR;
-- Browser runs (stacks chromium, firefox and their -tcp variants; NULL for every other stack).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS browser_version VARCHAR;   -- exact, as the running browser reports it
ALTER TABLE runs ADD COLUMN IF NOT EXISTS protocol_seen VARCHAR;     -- h3 | h2: Resource Timing's nextHopProtocol,
                                                                     -- agreed by the run's capture
ALTER TABLE runs ADD COLUMN IF NOT EXISTS transport_seen VARCHAR;    -- JSON: the capture's QUIC v1 packets, UDP
                                                                     -- datagrams, TCP SYNs and payload segments;
                                                                     -- the client namespace's UDP/TCP counters
ALTER TABLE runs ADD COLUMN IF NOT EXISTS handshake_s DOUBLE;        -- from the capture, until the client can send
                                                                     -- its request: QUIC's first Initial to the
                                                                     -- client's first Handshake packet; TCP's SYN to
                                                                     -- its first TLS application record; the page's
                                                                     -- connection, which the download reuses
ALTER TABLE runs ADD COLUMN IF NOT EXISTS client_sent VARCHAR;       -- JSON: the twelve parameters of the run's own
                                                                     -- ClientHello (set_fingerprint is theirs)
ALTER TABLE runs ADD COLUMN IF NOT EXISTS resource_timing VARCHAR;   -- JSON: the page's and the download's entries


-- Until 2026-11-25 runs stored the requested --cc, --autotune and --queue as their conditions. What ran
-- instead: aioquic's endpoints never named a congestion control, so aioquic ran its default, Reno; quic-go
-- has only CUBIC; quinn and s2n-quic cannot grow their windows; a rate limit without --queue held the larger
-- of 1000 packets and one bandwidth-delay product of 1500-byte packets.
UPDATE runs SET cc_requested = cc, autotune_requested = autotune, queue_requested = queue,
    cc = CASE coalesce(server_stack, stack) WHEN 'aioquic' THEN 'reno' WHEN 'quic-go' THEN 'cubic' ELSE cc END,
    autotune = autotune AND stack NOT IN ('quinn', 's2n-quic'),
    queue = CASE WHEN queue IS NULL AND rate_bps IS NOT NULL AND link_backend IN ('relay', 'netem')
                 THEN greatest(1000, ceil(rate_bps / 8 * greatest(delay_ms + delay_up_ms, 1) / 1000 / 1500))::BIGINT
                      || 'p'
                 ELSE queue END
WHERE cc_requested IS NULL;
UPDATE runs SET udp_buffer_bytes = json_extract(e.config, '$.udp_buffer_bytes')::BIGINT
FROM experiments e
WHERE runs.experiment_id = e.experiment_id AND runs.udp_buffer_bytes IS NULL AND runs.link_backend != 'loopback';

-- Version 2: workloads (every version 1 run downloaded --size bytes in one request) ...
ALTER TABLE runs ADD COLUMN workload VARCHAR DEFAULT 'download';
ALTER TABLE runs ADD COLUMN requests INTEGER DEFAULT 1;
ALTER TABLE runs ADD COLUMN concurrency INTEGER DEFAULT 1;
ALTER TABLE runs ADD COLUMN clients INTEGER DEFAULT 1;
ALTER TABLE runs ADD COLUMN client_goodputs_mbps VARCHAR;
ALTER TABLE runs ADD COLUMN fairness DOUBLE;
ALTER TABLE runs ADD COLUMN requests_per_s DOUBLE;
ALTER TABLE runs ADD COLUMN ttfb_ms DOUBLE;
ALTER TABLE runs ADD COLUMN latency_p50_ms DOUBLE;
ALTER TABLE runs ADD COLUMN latency_p90_ms DOUBLE;
ALTER TABLE runs ADD COLUMN latency_p99_ms DOUBLE;
ALTER TABLE experiments ADD COLUMN workload VARCHAR DEFAULT 'download';
-- ... and knobs: the runs' cc and autotune columns are knob columns now, which a run of a stack that does not
-- decide a knob leaves NULL; an experiment's asked values are its knobs JSON.
ALTER TABLE runs ALTER COLUMN autotune DROP NOT NULL;
ALTER TABLE runs ALTER COLUMN cc DROP NOT NULL;
ALTER TABLE experiments ADD COLUMN knobs VARCHAR;
UPDATE experiments SET knobs = json_object('cc', cc, 'autotune', autotune)::VARCHAR;
ALTER TABLE experiments DROP COLUMN autotune;
ALTER TABLE experiments DROP COLUMN cc;
ALTER TABLE traces ADD COLUMN IF NOT EXISTS cipher VARCHAR;
UPDATE schema_version SET version = 2 WHERE name = 'replay';
