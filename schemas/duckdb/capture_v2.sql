-- Client parameters from captures and browsers, schema component 'capture', version 2.
-- Lives beside the 'scan' component in the same DuckDB file (scanner.store); written
-- in batches by scanner.capture.results. Contract: client_params, client_transport_parameters.

INSERT OR IGNORE INTO schema_version VALUES ('capture', 2);

-- One row per complete ClientHello found in a capture.
CREATE TABLE IF NOT EXISTS client_hellos (
    scan_id             INTEGER NOT NULL,     -- the qscan pcap / qscan browser invocation (table scans)
    hello_id            BIGINT NOT NULL,      -- unique in the file; joins client_hello_parameters
    capture_file        VARCHAR NOT NULL,
    first_frame         INTEGER NOT NULL,     -- first packet carrying part of the ClientHello
    frame               INTEGER NOT NULL,     -- the packet that completed it
    seen_at             TIMESTAMPTZ NOT NULL,
    src_ip              VARCHAR NOT NULL,     -- the client
    src_port            INTEGER NOT NULL,
    dst_ip              VARCHAR NOT NULL,     -- the server
    dst_port            INTEGER NOT NULL,
    original_dcid       BLOB NOT NULL,        -- the client's first Destination Connection ID
    quic_version        BIGINT NOT NULL,
    sni                 VARCHAR,
    alpn                VARCHAR[],            -- offered, in the client's order
    client              VARCHAR,              -- browser label ('chromium 156.0.8078.79') or Google user_agent
    transport_parameters_raw BLOB NOT NULL,   -- the client's extension body exactly as sent
    findings            STRUCT(kind VARCHAR, detail VARCHAR, position INTEGER, param_id BIGINT)[],
    -- The twelve performance parameters as sent (NULL = not sent), tparams.paramset names.
    max_idle_timeout                    BIGINT,
    max_udp_payload_size                BIGINT,
    initial_max_data                    BIGINT,
    initial_max_stream_data_bidi_local  BIGINT,
    initial_max_stream_data_bidi_remote BIGINT,
    initial_max_stream_data_uni         BIGINT,
    initial_max_streams_bidi            BIGINT,
    initial_max_streams_uni             BIGINT,
    ack_delay_exponent                  BIGINT,
    max_ack_delay                       BIGINT,
    disable_active_migration            BOOLEAN,
    active_connection_id_limit          BIGINT,
    set_fingerprint     VARCHAR NOT NULL,
    order_fingerprint   VARCHAR NOT NULL,
    order_signature     VARCHAR NOT NULL,
    server_transport_parameters_raw BLOB      -- from EncryptedExtensions; only with a key log
);

-- Every parameter in wire order (GREASE, Google and unknown ids included), of the client
-- and, with a key log, of the server that answered. Stored like the scan component's
-- handshake_parameters (names and hex derived in the views, same macros).
CREATE TABLE IF NOT EXISTS client_hello_parameters (
    hello_id     BIGINT NOT NULL,
    sender       VARCHAR NOT NULL,           -- client | server
    position     INTEGER NOT NULL,           -- 0-based wire position
    param_id     BIGINT NOT NULL,
    value        BIGINT,                     -- integer-typed parameters that decoded
    value_text   VARCHAR,                    -- flags ('true') and structures
    raw          BLOB NOT NULL
);

CREATE OR REPLACE VIEW client_params AS
SELECT scan_id, hello_id, src_ip, src_port, dst_ip, dst_port, sni, alpn, quic_version, client,
       max_idle_timeout, max_udp_payload_size, initial_max_data,
       initial_max_stream_data_bidi_local, initial_max_stream_data_bidi_remote,
       initial_max_stream_data_uni, initial_max_streams_bidi, initial_max_streams_uni,
       ack_delay_exponent, max_ack_delay, disable_active_migration, active_connection_id_limit,
       set_fingerprint, order_fingerprint, order_signature
FROM client_hellos;

-- Both senders' parameters, named; the two contract views below each take one sender.
CREATE OR REPLACE VIEW hello_transport_parameters AS
SELECT p.sender, h.scan_id, h.hello_id, h.src_ip, h.src_port, h.dst_ip, h.dst_port, h.sni, h.client,
       p.position, p.param_id, parameter_name(p.param_id, n.name) AS name, p.value,
       parameter_value_text(p.value, p.value_text, p.raw) AS value_text, lower(hex(p.raw)) AS raw_hex
FROM client_hello_parameters p
JOIN client_hellos h USING (hello_id)
LEFT JOIN parameter_names n USING (param_id);

CREATE OR REPLACE VIEW client_transport_parameters AS
SELECT * EXCLUDE (sender, dst_ip, dst_port) FROM hello_transport_parameters WHERE sender = 'client';

-- The lab or traced server's parameters, where a key log opened its EncryptedExtensions.
CREATE OR REPLACE VIEW capture_server_transport_parameters AS
SELECT * EXCLUDE (sender, src_ip, src_port, client) FROM hello_transport_parameters WHERE sender = 'server';
