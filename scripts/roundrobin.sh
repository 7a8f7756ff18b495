#!/usr/bin/env bash
# Run each condition of a conditions file once per round, REPS rounds (one qreplay run each time), so
# that the shared machine's drift falls on every condition alike even across stacks, which one qreplay
# command (one stack) cannot interleave. Each line of CONDITIONS is a qreplay argument list; '#' lines are
# comments. Every run logs its UTC time and 1-minute load to OUT.log; the results go into OUT (DuckDB).
#   scripts/roundrobin.sh OUT.duckdb REPS CONDITIONS
set -uo pipefail
out=$1; reps=$2; conditions=$3
qreplay=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/qreplay
for r in $(seq 1 "$reps"); do
  while read -r line; do
    [[ -z "$line" || "$line" == \#* ]] && continue
    echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg) round $r: $line" >>"$out.log"
    # shellcheck disable=SC2086  # a line is an argument list
    "$qreplay" $line --reps 1 --out "$out" --json </dev/null >>"$out.stdout" 2>&1
    rc=$?
    [ "$rc" = 0 ] || echo "$(date -u +%FT%TZ) failed (exit $rc): $line" >>"$out.log"
  done <"$conditions"
done
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg) done" >>"$out.log"
