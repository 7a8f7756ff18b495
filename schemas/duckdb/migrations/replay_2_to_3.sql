-- qreplay results: a schema version 2 file becomes version 3 (each traced run's limit breakdown), in one
-- transaction run by replay/store.py. Runs stored before have none: the two columns stay NULL (a traced
-- run's trace_points are kept, so its breakdown can still be computed from them: replay.limits).
ALTER TABLE runs ADD COLUMN limited_by VARCHAR;
ALTER TABLE runs ADD COLUMN limits VARCHAR;
UPDATE schema_version SET version = 3 WHERE name = 'replay';
