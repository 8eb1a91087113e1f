#!/usr/bin/env bash
# Builds Skiff and runs the local demo: a three-member store quorum driven by Debian's etcdctl
# (a small workload, a watch, a lease expiring, kill -9 of the leader and its return), then the
# scheduler and three simulated node agents running the pods of examples/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

ensure_packages "${BUILD_PACKAGES[@]}" "${PEER_PACKAGES[@]}"
require_cargo

echo "==> building skiff (release)"
cargo build --release --locked -p skiff
SKIFF="$CARGO_TARGET_DIR/release/skiff"
"$SKIFF" version

echo "==> checking the demo manifests"
"$SKIFF" validate -f examples/ >/dev/null && echo "examples/: valid"

if "$SKIFF" help up >/dev/null 2>&1; then
  exec "$SKIFF" up --demo "$@"
fi

work="$(mktemp -d /tmp/skiff-demo.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "==> stopped; data and logs in $work"
}
trap cleanup EXIT

names=(a b c)
cluster=""
for i in 0 1 2; do
  cluster+="${cluster:+,}${names[$i]}=http://127.0.0.1:$((22380 + i))"
done
start_member() {
  local i=$1
  "$SKIFF" store --name "${names[$i]}" --data-dir "$work/${names[$i]}" \
    --listen-client-urls "http://127.0.0.1:$((22379 + 10 * i))" \
    --listen-peer-urls "http://127.0.0.1:$((22380 + i))" \
    --listen-metrics-urls "http://127.0.0.1:$((22390 + i))" \
    --initial-cluster "$cluster" 2>>"$work/${names[$i]}.log" &
  pids[$i]=$!
}
echo "==> starting a three-member store quorum in $work"
for i in 0 1 2; do start_member "$i"; done
endpoints="127.0.0.1:22379,127.0.0.1:22389,127.0.0.1:22399"
ctl() { ETCDCTL_API=3 etcdctl --endpoints="$endpoints" --command-timeout=10s "$@"; }

for _ in $(seq 1 100); do
  ctl endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
ctl member list -w table
ctl endpoint status -w table

echo "==> a small workload through etcdctl"
# A watcher through every endpoint: it resumes on another member if its own is killed.
ETCDCTL_API=3 timeout 15 etcdctl --endpoints="$endpoints" watch --prefix /demo/ >"$work/watch.out" 2>&1 &
watch_pid=$!
sleep 0.5
for i in $(seq 1 20); do ctl put "/demo/key-$i" "value-$i" >/dev/null; done
ctl txn <<'TXN'
value("/demo/key-1") = "value-1"

put /demo/txn committed

put /demo/txn refused

TXN
lease=$(ctl lease grant 2 | awk '{print $2}')
ctl put --lease="$lease" /demo/ephemeral "gone in two seconds" >/dev/null
echo "keys under /demo/: $(ctl get --prefix /demo/ --keys-only | grep -c demo)"

echo "==> kill -9 of the leader"
leader_ep=$(ctl endpoint status | awk -F', ' '$5 == "true" {print $1}')
for i in 0 1 2; do
  if [ "127.0.0.1:$((22379 + 10 * i))" = "$leader_ep" ]; then victim=$i; fi
done
kill -9 "${pids[$victim]}"
{ wait "${pids[$victim]}"; } 2>/dev/null || true
start=$(date +%s%N)
survivors=()
for i in 0 1 2; do [ "$i" != "$victim" ] && survivors+=("127.0.0.1:$((22379 + 10 * i))"); done
until ETCDCTL_API=3 etcdctl --endpoints="$(IFS=,; echo "${survivors[*]}")" --command-timeout=2s put /demo/after-kill ok >/dev/null 2>&1; do
  sleep 0.05
done
echo "member ${names[$victim]} killed; writes accepted again after $(( ($(date +%s%N) - start) / 1000000 )) ms"
start_member "$victim"
sleep 3
echo "member ${names[$victim]} restarted on its data directory:"
ctl endpoint status -w table
echo "/demo/after-kill on the restarted member: $(ETCDCTL_API=3 etcdctl --endpoints="$leader_ep" get /demo/after-kill --print-value-only --consistency=s)"
echo "/demo/ephemeral after its lease expired: '$(ctl get /demo/ephemeral --print-value-only)'"
wait "$watch_pid" 2>/dev/null || true
echo "==> the watcher saw $(grep -c '^PUT' "$work/watch.out") puts and $(grep -c '^DELETE' "$work/watch.out") delete (the lease expiry)"

echo "==> two schedulers (one leads, one stands by) and three simulated node agents"
"$SKIFF" scheduler --endpoints "$endpoints" --metrics-addr 127.0.0.1:22400 2>>"$work/scheduler-1.log" &
pids+=($!)
"$SKIFF" scheduler --endpoints "$endpoints" --metrics-addr 127.0.0.1:22401 2>>"$work/scheduler-2.log" &
pids+=($!)
"$SKIFF" node --runtime sim --count 3 --name-prefix demo- --cpu 2 --memory 4Gi \
  --labels kubernetes.io/os=linux,node.skiff.dev/cpus=2 --logs-address 127.0.0.1:0 \
  --heartbeat-interval 2s --endpoints "$endpoints" 2>>"$work/nodes.log" &
pids+=($!)
export SKIFF_ENDPOINTS="$endpoints"
for _ in $(seq 1 100); do
  [ "$("$SKIFF" get nodes 2>/dev/null | grep -c ' Ready ')" -ge 3 ] && break
  sleep 0.2
done
"$SKIFF" get nodes

# examples/node.yaml is a node without an agent (for scheduler experiments): left out here.
echo "==> skiff apply: a namespace with its quota, and the example pods"
"$SKIFF" apply -f examples/namespace-policy.yaml -f examples/pod.yaml -f examples/pod-web.yaml \
  -f examples/pod-placement.yaml
echo "==> waiting for the pods to run"
for _ in $(seq 1 150); do
  pending=$("$SKIFF" get pods -A 2>/dev/null | awk 'NR > 1 && $4 != "Running" && $4 != "Completed" && $4 != "Succeeded"' | wc -l)
  [ "$pending" -eq 0 ] && break
  sleep 0.2
done
"$SKIFF" get pods -A -o wide
echo
for port in 22400 22401; do
  echo "scheduler metrics at http://127.0.0.1:$port/metrics:"
  curl -s "http://127.0.0.1:$port/metrics" 2>/dev/null | grep -E '^skiff_scheduler_binds_total' || echo "  (standing by)"
done
echo
echo "'skiff up' (one command for all of this, with Ctrl-C to stop) is not in this build yet; see the README."
