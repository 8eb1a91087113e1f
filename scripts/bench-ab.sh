#!/usr/bin/env bash
# Before and after one change: two skiff binaries alternated on fresh clusters in one run.
# Each round starts `BINARY up --nodes NODES` (simulated nodes, free ports, a directory of its
# own) and runs `skiff bench startup --pods PODS` against it with the NEW binary's bench (the
# same measuring client for both), then stops the cluster; a table at the end: store revisions
# per pod, create → Running percentiles and pods/s end to end.
#
# Usage: bash scripts/bench-ab.sh OLD_BINARY NEW_BINARY
#   NODES=100 PODS=1000   simulated nodes, and pods created per round
#   ROUNDS=2              rounds of (old, new)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

[ $# -eq 2 ] || { sed -n '2,12p' "$0"; exit 2; }
OLD=$1
NEW=$2
NODES=${NODES:-100}
PODS=${PODS:-1000}
ROUNDS=${ROUNDS:-2}
for b in "$OLD" "$NEW"; do
  [ -x "$b" ] || { echo "$b is not an executable" >&2; exit 2; }
done

trap stop_up EXIT
results=$(mktemp /tmp/skiff-ab.XXXXXX)
round() {
  local label=$1 bin=$2 work out
  work=$(mktemp -d /tmp/skiff-ab-run.XXXXXX)
  start_up "$bin" "$work" --nodes "$NODES"
  echo "==> $label ($bin): bench startup --pods $PODS on $NODES simulated nodes"
  out=$work/startup.txt
  "$NEW" bench startup --pods "$PODS" 2>&1 | grep -v 'Running after' | tee "$out"
  local revisions p50 p90 p99 rate
  # "  store revisions: 1.4 per pod to the last Running, 1.5 with the next 2 s"
  revisions=$(sed -nE 's/.*store revisions: ([0-9.]+) per pod.*, ([0-9.]+) with.*/\1 (\2)/p' "$out")
  p50=$(awk '/create sent → Running/ {for (i = 1; i <= NF; i++) if ($i == "p50") print $(i+1)}' "$out")
  p90=$(awk '/create sent → Running/ {for (i = 1; i <= NF; i++) if ($i == "p90") print $(i+1)}' "$out")
  p99=$(awk '/create sent → Running/ {for (i = 1; i <= NF; i++) if ($i == "p99") print $(i+1)}' "$out")
  rate=$(sed -nE 's/.*Running in [0-9.]+ s \(([0-9]+) pods\/s end to end\).*/\1/p' "$out")
  echo "$label|${revisions:--}|${p50:--} / ${p90:--} / ${p99:--} ms|${rate:--}" >>"$results"
  stop_up
  rm -rf "$work"
}

for i in $(seq 1 "$ROUNDS"); do
  round "before $i" "$OLD"
  round "after $i" "$NEW"
done

echo
echo "| run | revisions per pod (+2 s) | create → Running p50 / p90 / p99 | pods/s end to end |"
echo "|---|---:|---:|---:|"
while IFS='|' read -r label revisions latency rate; do
  echo "| $label | $revisions | $latency | $rate |"
done <"$results"
rm -f "$results"
