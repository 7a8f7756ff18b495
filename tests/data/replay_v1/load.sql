COPY experiments FROM 'tests/data/replay_v1/experiments.csv' (FORMAT 'CSV');
COPY profiles FROM 'tests/data/replay_v1/profiles.csv' (FORMAT 'CSV');
COPY profile_stacks FROM 'tests/data/replay_v1/profile_stacks.csv' (FORMAT 'CSV');
COPY runs FROM 'tests/data/replay_v1/runs.csv' (FORMAT 'CSV');
COPY schema_version FROM 'tests/data/replay_v1/schema_version.csv' (FORMAT 'CSV');
COPY traces FROM 'tests/data/replay_v1/traces.csv' (FORMAT 'CSV');
COPY trace_points FROM 'tests/data/replay_v1/trace_points.csv' (FORMAT 'CSV');
