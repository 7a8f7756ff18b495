#!/usr/bin/env bash
# Issue 27's "what must hold": the reproduce campaign's small windows and the pairs table, before
# (a worktree of the commit before issue 27's work) and after (this tree), alternated round by round on
# the same conditions, who goes first alternating, so the machine's drift falls on both alike. Each round logs date and 1-minute load.
#   git worktree add /tmp/wt27 4712518 && ln -s "$PWD/build" /tmp/wt27/build
#   scripts/before_after.sh /tmp/wt27 OUTDIR ROUNDS [PAIRS_STACKS]   (REPRODUCE=0: the pairs table only)
set -euo pipefail
before=$1; out=$2; rounds=${3:-3}; pairs_stacks=${4:-ngtcp2,aioquic}
after=$(cd "$(dirname "$0")/.." && pwd)
py=$after/.venv/bin/python
mkdir -p "$out"
qreplay() {  # run qreplay from a tree: its own code first on sys.path
  local tree=$1; shift
  (cd "$tree" && "$py" -c "import sys; sys.path.insert(0, '.'); sys.argv = ['qreplay'] + sys.argv[1:]; from replay.cli import app; app()" "$@")
}
for r in $(seq 1 "$rounds"); do
  order="before after"; [ $((r % 2)) = 0 ] && order="after before"  # who goes first alternates
  for which in $order; do
    tree=$([ "$which" = before ] && echo "$before" || echo "$after")
    if [ "${REPRODUCE:-1}" != 0 ]; then
      echo "round $r $which reproduce $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/log.txt"
      qreplay "$tree" reproduce --stack ngtcp2 --quick --figures 5.4,5.6 --size 10MB --reps 3 \
        --out-dir "$out/$which/reproduce" >>"$out/$which.stdout" 2>&1
    fi
    echo "round $r $which pairs $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/log.txt"
    qreplay "$tree" pairs --stacks "$pairs_stacks" --delays 0,30 --size 10MB --reps 2 \
      --out-dir "$out/$which/pairs" >>"$out/$which.stdout" 2>&1
  done
done
echo "done $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/log.txt"
