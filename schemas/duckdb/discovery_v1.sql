-- qscan discovery results, schema component 'discovery', version 1. Lives in the
-- same DuckDB file as the 'scan' component (handshakes) and shares its scan_id.

CREATE TABLE IF NOT EXISTS schema_version (
    name    VARCHAR PRIMARY KEY,
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO schema_version VALUES ('discovery', 1);

-- One row per address that answered the probe with a valid Version Negotiation packet.
CREATE TABLE IF NOT EXISTS discovery (
    scan_id  INTEGER NOT NULL,
    shard    INTEGER NOT NULL,       -- ZMap shard I of discovery_runs.shards (0 when unsharded)
    ip       VARCHAR NOT NULL,
    port     INTEGER NOT NULL,
    versions BIGINT[] NOT NULL,      -- as listed, in the server's order (same type as handshakes.offered_versions)
    time     TIMESTAMPTZ NOT NULL    -- when ZMap received the answer
);

-- One row per ZMap run (a shard of a scan): what was sent, and what came back
-- that is NOT in `discovery` (ICMP, invalid answers, repeats), by reason.
CREATE TABLE IF NOT EXISTS discovery_runs (
    scan_id       INTEGER NOT NULL,
    shard         INTEGER NOT NULL,
    shards        INTEGER NOT NULL,
    seed          BIGINT NOT NULL,       -- ZMap's permutation seed: equal across the shards of one scan
    targets       VARCHAR[] NOT NULL,    -- CIDRs; empty = the whole IPv4 space
    blocklist     VARCHAR[] NOT NULL,    -- CIDRs as applied
    port          INTEGER NOT NULL,
    rate          INTEGER NOT NULL,      -- probes/s asked for
    probe_version BIGINT NOT NULL,       -- the reserved 0x?a?a?a?a version sent
    probe_hex     VARCHAR NOT NULL,      -- the whole UDP payload
    probes_sent   BIGINT,
    answers       MAP(VARCHAR, BIGINT) NOT NULL,  -- version-negotiation, icmp-unreachable, invalid:<reason>, repeat
    started_at    TIMESTAMPTZ NOT NULL,
    finished_at   TIMESTAMPTZ NOT NULL,
    zmap_command  VARCHAR NOT NULL
);

-- `qscan domains`: what led to each (domain, address, port) target. One row per piece of evidence.
CREATE TABLE IF NOT EXISTS domain_evidence (
    scan_id  INTEGER NOT NULL,
    domain   VARCHAR NOT NULL,
    evidence VARCHAR NOT NULL,   -- a-record | aaaa-record | https-record | alt-svc | dns-error | alt-svc-error
    ip       VARCHAR,            -- the address it applies to (NULL: the domain as a whole)
    port     INTEGER,            -- the QUIC port it points at (https-record port=, Alt-Svc h3=":port")
    detail   VARCHAR,            -- the record / header / error text as received
    time     TIMESTAMPTZ NOT NULL
);
