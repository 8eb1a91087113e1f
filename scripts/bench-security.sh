#!/usr/bin/env bash
# What security costs: the same cluster and load, secured (TLS on every URL, client
# certificates, Node+RBAC authorization, the audit log; `skiff up`'s default) and not
# (`skiff up --insecure`), alternated in one run. For each, on a fresh `skiff up` with
# simulated nodes: `skiff bench startup` (pods created through the cluster API: creates/s and
# create → Running percentiles), then `kubectl get pods -A` timed RUNS times over those pods
# (the REST API's list latency).
#
# Usage: bash scripts/bench-security.sh
#   PODS=3000 NODES=100    pods created per round, and the simulated nodes that take them
#   ROUNDS=2               rounds of (insecure, secure)
#   RUNS=10                timed `kubectl get` runs per round
#   SKIFF_BIN=path         this skiff binary instead of the target directory's
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

PODS=${PODS:-3000}
NODES=${NODES:-100}
ROUNDS=${ROUNDS:-2}
RUNS=${RUNS:-10}

pick_skiff
have_kubectl=1
command -v kubectl >/dev/null || { have_kubectl=0; echo "kubectl is not on PATH: list latency not measured"; }

trap stop_up EXIT

results=$(mktemp /tmp/skiff-security.XXXXXX)
# One round: MODE is "insecure" or "secure".
round() {
  local mode=$1 work flags=()
  work=$(mktemp -d /tmp/skiff-security-run.XXXXXX)
  [ "$mode" = insecure ] && flags=(--insecure)
  start_up "$SKIFF" "$work" "${flags[@]}" --nodes "$NODES"
  echo "==> $mode: skiff bench startup --pods $PODS ($NODES simulated nodes)"
  "$SKIFF" bench startup --pods "$PODS" --keep | tee "$work/startup.txt"
  local creates p50 p99 list="-"
  # startup: N of N pods Running in T s (R pods/s end to end); created in T s (C/s), …
  creates=$(sed -nE 's/.*created in [0-9.]+ s \(([0-9]+)\/s\).*/\1/p' "$work/startup.txt" | head -1)
  # "  create sent → Running  p50  X ms   p90  Y ms   p99  Z ms   max  W ms"
  p50=$(awk '/create sent → Running/ {for (i = 1; i <= NF; i++) if ($i == "p50") print $(i+1)" ms"}' "$work/startup.txt")
  p99=$(awk '/create sent → Running/ {for (i = 1; i <= NF; i++) if ($i == "p99") print $(i+1)" ms"}' "$work/startup.txt")
  if [ $have_kubectl = 1 ]; then
    local times=()
    for _ in $(seq 1 "$RUNS"); do
      local t0 t1
      t0=$(date +%s%N)
      kubectl get pods -A --no-headers >/dev/null
      t1=$(date +%s%N)
      times+=($(((t1 - t0) / 1000000)))
    done
    list=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]" ms"}')
  fi
  echo "$mode|$creates|${p50:--}|${p99:--}|$list" >>"$results"
  stop_up
  rm -rf "$work"
}

for _ in $(seq 1 "$ROUNDS"); do
  round insecure
  round secure
done

echo
echo "| cluster | creates/s | create → Running p50 | p99 | kubectl get pods -A ($PODS pods), median of $RUNS |"
echo "|---|---|---|---|---|"
while IFS='|' read -r mode creates p50 p99 list; do
  echo "| $mode | $creates | $p50 | $p99 | $list |"
done <"$results"
rm -f "$results"
