-- qscan handshake results, schema component 'scan', version 3. One DuckDB file per scan
-- (or campaign); written in batches by scanner.store, one transaction a batch.
-- Contract (see schemas/README.md): handshakes, server_params, transport_parameters.

CREATE TABLE IF NOT EXISTS schema_version (
    name    VARCHAR PRIMARY KEY,
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO schema_version VALUES ('scan', 3);

-- One row per invocation that wrote into the file (a resumed scan keeps its scan_id).
CREATE TABLE IF NOT EXISTS scans (
    scan_id       INTEGER PRIMARY KEY,
    kind          VARCHAR NOT NULL,      -- targets | ipv4 | domains | ... (the qscan command)
    started_at    TIMESTAMPTZ NOT NULL,
    finished_at   TIMESTAMPTZ,           -- NULL: still running, or killed
    command_line  VARCHAR,
    settings      VARCHAR                -- JSON: the engine settings of the scan
);

-- One row per handshake attempt.
CREATE TABLE IF NOT EXISTS handshakes (
    scan_id             INTEGER NOT NULL,
    handshake_id        BIGINT NOT NULL,     -- unique in the file; joins handshake_parameters
    ip                  VARCHAR NOT NULL,
    port                INTEGER NOT NULL,
    sni                 VARCHAR,
    started_at          TIMESTAMPTZ NOT NULL,
    finished_at         TIMESTAMPTZ NOT NULL,
    handshake_ms        DOUBLE,              -- first Initial sent -> handshake complete; ok only
    status              VARCHAR NOT NULL,    -- ok | timeout | unreachable | version_negotiation | connection_close | tls_alert | protocol_error
    -- unreachable (added within v3; the column was always free text): an ICMP error answered before the server
    -- said anything, its type, code and sender in error, e.g. 'ICMP port unreachable (type 3 code 3) from 198.18.1.100'
    error               VARCHAR,             -- human-readable reason when status <> 'ok'
    error_code          BIGINT,              -- QUIC error code of the CONNECTION_CLOSE (0x100+alert for TLS)
    closed_by           VARCHAR,             -- server | client
    close_frame_type    BIGINT,              -- CONNECTION_CLOSE 0x1c's Frame Type field; NULL for 0x1d (application)
    close_reason_phrase VARCHAR,             -- its reason phrase as sent ('' = empty)
    offered_versions    BIGINT[],            -- from a Version Negotiation packet
    retry               BOOLEAN NOT NULL,    -- a Retry packet was seen
    retry_token_length  INTEGER,             -- of the first Retry's token
    datagrams_received  INTEGER NOT NULL,
    quic_version        BIGINT,
    alpn                VARCHAR,
    tls_version         VARCHAR,
    cipher_suite        VARCHAR,
    key_exchange_group  VARCHAR,             -- x25519, secp384r1, x25519mlkem768, ... (the ServerHello's)
    certificates        STRUCT(sha256 VARCHAR, subject VARCHAR, issuer VARCHAR, sans VARCHAR[],
                               not_before TIMESTAMPTZ, not_after TIMESTAMPTZ)[],  -- leaf first
    certificate_verified BOOLEAN,            -- against certifi's roots and the SNI/IP; recorded, not enforced
    certificate_error   VARCHAR,
    transport_parameters_raw BLOB,           -- the server's extension body exactly as received
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
    set_fingerprint     VARCHAR,             -- ParamSet.fingerprint() of the twelve
    order_fingerprint   VARCHAR,             -- of the wire order of all ids (GREASE normalised)
    order_signature     VARCHAR,             -- the same order, readable: '00-02-0f-...-G'
    -- Added within v3 (scanner.store.SCAN_V3_ADDED_COLUMNS; NULL in rows written before):
    hello_retry_request BOOLEAN              -- the server answered the first ClientHello with a HelloRetryRequest
);

-- Every parameter the server sent, in wire order (GREASE and unknown ids included).
-- v2 keeps only what is not derivable: a parameter's name comes from parameter_names
-- and the hex of bytes-valued parameters from raw, in the views; storing both as text
-- for ~13 rows a handshake was half of a million-record scan's write time.
CREATE TABLE IF NOT EXISTS handshake_parameters (
    handshake_id BIGINT NOT NULL,
    position     INTEGER NOT NULL,           -- 0-based wire position
    param_id     BIGINT NOT NULL,
    value        BIGINT,                     -- integer-typed parameters that decoded
    value_text   VARCHAR,                    -- flags ('true') and structures (version_information, preferred_address)
    raw          BLOB NOT NULL
);

-- The names of tparams.registry (all of it, written when the file is opened for writing)
-- and of every other non-GREASE id that occurs in the file (also for
-- client_hello_parameters), written with the batch that first holds it.
CREATE TABLE IF NOT EXISTS parameter_names (
    param_id BIGINT PRIMARY KEY,
    name     VARCHAR NOT NULL                -- registry name or 'unknown_0x..'
);

-- GREASE ids (unregistered 31 * N + 27, RFC 9000 18.1; tparams.registry.is_grease) are
-- random per connection, so they are the ids parameter_names leaves out. A registered id
-- of that form (Firefox's min_ack_delay 0xff02de1a) is listed and keeps its name.
CREATE OR REPLACE MACRO parameter_name(param_id, listed_name) AS
    coalesce(listed_name, 'GREASE');
-- What is neither an integer nor a flag or structure is bytes (ids, tokens, opaque, undecodable): its hex.
CREATE OR REPLACE MACRO parameter_value_text(value, value_text, raw) AS
    coalesce(value_text, CASE WHEN value IS NULL THEN lower(hex(raw)) END);

CREATE OR REPLACE VIEW server_params AS
SELECT scan_id, handshake_id, ip, port, sni,
       max_idle_timeout, max_udp_payload_size, initial_max_data,
       initial_max_stream_data_bidi_local, initial_max_stream_data_bidi_remote,
       initial_max_stream_data_uni, initial_max_streams_bidi, initial_max_streams_uni,
       ack_delay_exponent, max_ack_delay, disable_active_migration, active_connection_id_limit,
       set_fingerprint, order_fingerprint, order_signature
FROM handshakes
WHERE status = 'ok';

CREATE OR REPLACE VIEW transport_parameters AS
SELECT h.scan_id, h.handshake_id, h.ip, h.port, h.sni, h.status,
       p.position, p.param_id, parameter_name(p.param_id, n.name) AS name, p.value,
       parameter_value_text(p.value, p.value_text, p.raw) AS value_text, lower(hex(p.raw)) AS raw_hex
FROM handshake_parameters p
JOIN handshakes h USING (handshake_id)
LEFT JOIN parameter_names n USING (param_id);
