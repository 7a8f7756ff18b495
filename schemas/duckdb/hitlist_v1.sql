-- qscan ipv6 (an IPv6 hitlist scan), schema component 'hitlist', version 1. Lives beside the
-- 'discovery' component (whose tables hold what the prober found) and shares its scan_id.

CREATE TABLE IF NOT EXISTS schema_version (
    name    VARCHAR PRIMARY KEY,
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO schema_version VALUES ('hitlist', 1);

-- One row per run (shard) of a hitlist scan: what the hitlist held and what became of it.
CREATE TABLE IF NOT EXISTS hitlist_runs (
    scan_id    INTEGER NOT NULL,
    shard      INTEGER NOT NULL,
    hitlist    VARCHAR NOT NULL,   -- the file read
    aliased    VARCHAR,            -- the aliased-prefix file read, if any
    targets    BIGINT NOT NULL,    -- addresses probed by all shards (an aliased prefix once)
    bad_lines  BIGINT NOT NULL,    -- lines that were not an IPv6 address (IPv4 ones included)
    blocked    BIGINT NOT NULL,    -- addresses inside the blocklist
    folded     BIGINT NOT NULL     -- addresses an earlier address of their aliased prefix stood for
);

-- One row per aliased prefix probed: it counts once, through the first hitlist address inside it.
CREATE TABLE IF NOT EXISTS hitlist_aliased (
    scan_id INTEGER NOT NULL,
    prefix  VARCHAR NOT NULL,
    ip      VARCHAR NOT NULL       -- the address probed for it
);
