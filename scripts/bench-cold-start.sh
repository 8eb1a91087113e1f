#!/usr/bin/env bash
# A loaded cluster stopped and started again: `skiff up --nodes N` in a fresh directory, one
# Deployment of many replicas (`skiff bench deployment --keep`), Ctrl-C, then `skiff up` again
# on the same directory. Every agent, the scheduler and the controller manager list what they
# hold at once; this prints how the restarted cluster serves meanwhile (one put a second
# through etcdctl, each with a 5 s deadline) and the warnings its processes logged.
#
# Usage: bash scripts/bench-cold-start.sh
#   NODES=1000 REPLICAS=30000   the simulated nodes and the Deployment's replicas
#   PROBES=40                   puts after the restart, one a second
#   SKIFF_BIN=path              this skiff binary instead of the target directory's
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

NODES=${NODES:-1000}
REPLICAS=${REPLICAS:-30000}
PROBES=${PROBES:-40}

ensure_packages etcd-client
pick_skiff

work=$(mktemp -d /tmp/skiff-cold-start.XXXXXX)
up_pid=""
trap 'stop_up; echo "data and logs in $work"' EXIT

echo "==> skiff up --nodes $NODES (in $work), a Deployment of $REPLICAS"
start_up "$SKIFF" "$work" --nodes "$NODES"
"$SKIFF" bench deployment --replicas "$REPLICAS" --keep | tail -2
echo "==> stopping the cluster (SIGINT to skiff up) and starting it again"
stop_up
mv "$work/up.log" "$work/up-first.log"
for f in "$work"/up/logs/*.log; do mv "$f" "$f.first"; done
resume_up "$SKIFF" "$work" --nodes "$NODES"
grep '^ready in' "$work/up.log"

endpoints=$(sed -n 's/^ *etcd v3 + cluster API *//p' "$work/up.log" | tr -d ' ')
certs=$work/up/certs
ok=0
failed=0
ms=()
for i in $(seq 1 "$PROBES"); do
  start=$(date +%s%N)
  if ETCDCTL_API=3 etcdctl --command-timeout=5s --endpoints="$endpoints" --cacert "$certs/ca.pem" \
    --cert "$certs/admin.pem" --key "$certs/admin-key.pem" put "/cold-start/probe/$i" x >/dev/null 2>&1; then
    ok=$((ok + 1))
  else
    failed=$((failed + 1))
  fi
  took=$((($(date +%s%N) - start) / 1000000))
  ms+=("$took")
  [ "$took" -lt 1000 ] && sleep "$(awk -v t="$took" 'BEGIN { printf "%.3f", (1000 - t) / 1000 }')"
done
sorted=$(printf '%s\n' "${ms[@]}" | sort -n)
pct() { printf '%s\n' "$sorted" | awk -v p="$1" '{ a[NR] = $1 } END { i = int(NR * p + 0.999); if (i < 1) i = 1; print a[i] }'; }

echo
echo "== after the restart: $ok of $PROBES puts answered ($failed failed or timed out)"
echo "   put latency p50 $(pct 0.5) ms, p90 $(pct 0.9) ms, max $(pct 1) ms"
echo "   warnings, by kind (store members; then the node agents):"
count() { grep -h ' WARN \| ERROR ' "$@" 2>/dev/null | sed -E 's/^[^ ]+ +//; s/ node=[^ ]+//' | cut -c1-100 | sort | uniq -c | sort -rn | head -5 || true; }
count "$work"/up/logs/store-*.log | sed 's/^/     /'
count "$work"/up/logs/nodes.log | sed 's/^/     /'
echo "   binary: $SKIFF ($build); $(nproc) cores"
