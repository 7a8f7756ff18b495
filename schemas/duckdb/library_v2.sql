-- Server-library identification (qscan targets --identify; scanner/identify.py).
-- One row per target and identification run. `library` is a library name of
-- datasets/library_signatures.json, the libraries no habit tells apart joined by
-- '|' (e.g. 'aioquic|kwik' from the h3 handshake alone), or 'unknown'; `library_evidence` says in
-- words which traits led there (tparams.library). The order signature and the
-- invalid-ALPN refusal are kept beside the scan's own handshakes (whose raw transport
-- parameters and Retry carry the other traits) so that a later signatures file can
-- re-classify without sending a packet (all but a Retry token's letters: the token is
-- not stored). Applied through scanner.store.ScanStore.apply_schema.
-- v2: the libraries that fit every trait, the whole refusal (frame type, silence) and Retry.
INSERT OR IGNORE INTO schema_version VALUES ('library', 2);

CREATE TABLE IF NOT EXISTS server_library (
    ip                    VARCHAR NOT NULL,
    port                  INTEGER NOT NULL,
    sni                   VARCHAR,
    identified_at         TIMESTAMP WITH TIME ZONE NOT NULL,
    library               VARCHAR NOT NULL,
    library_evidence      VARCHAR NOT NULL,
    candidates            VARCHAR[],        -- libraries that fit every habit (one: named)
    order_signature       VARCHAR,          -- tparams.paramset.order_signature of the h3 handshake
    order_fingerprint     VARCHAR,
    alpn_refusal          VARCHAR,          -- AlpnRefusal.describe(): close ..., silence, completed, other
    close_error_code      BIGINT,           -- CONNECTION_CLOSE answering ALPN 'invalid'
    close_frame_type      BIGINT,           -- its Frame Type field; NULL for an application close
    close_reason_phrase   VARCHAR,
    retry                 BOOLEAN,          -- the h3 handshake met a Retry
    signatures_date       VARCHAR           -- provenance date of the signatures used
);

CREATE OR REPLACE VIEW libraries AS
SELECT library, count(*) AS targets,
       round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS share_pct
FROM (SELECT DISTINCT ON (ip, port) * FROM server_library ORDER BY ip, port, identified_at DESC)
GROUP BY library
ORDER BY targets DESC, library;
