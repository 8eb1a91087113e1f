#!/usr/bin/env bash
# `kubectl get pods -A` against a Skiff cluster holding many pods (issue 19's figure: 30,000):
# starts `skiff up` with enough simulated nodes in a fresh directory (its own data, client
# configuration and kubeconfig, free ports), creates the pods through both API faces
# (`skiff bench api --keep`, half each), waits for them to run, then times
# `kubectl get pods -A --no-headers | wc -l` a few times while sampling the resident memory of
# the store member that serves the kubeconfig's API, and stops the cluster with Ctrl-C.
#
# Usage: bash scripts/bench-kubectl.sh
#   PODS=30000 NODES=300 MAX_PODS=110   the pods, and the simulated nodes that take them
#   RUNS=3                              timed `kubectl get` runs
#   RUNNING_TIMEOUT=900                 seconds to wait for the pods to be Running (then go on
#                                       and say how many were)
#   SKIFF_BIN=path                      this skiff binary instead of the target directory's
# Skipped (exit 0) when kubectl is not on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

PODS=${PODS:-30000}
NODES=${NODES:-300}
MAX_PODS=${MAX_PODS:-110}
RUNS=${RUNS:-3}
RUNNING_TIMEOUT=${RUNNING_TIMEOUT:-900}

if ! command -v kubectl >/dev/null; then
  echo "kubectl is not on PATH: skipping the kubectl benchmark"
  exit 0
fi
if [ $((NODES * MAX_PODS)) -lt "$PODS" ]; then
  echo "NODES=$NODES x MAX_PODS=$MAX_PODS cannot hold PODS=$PODS" >&2
  exit 1
fi

pick_skiff

work=$(mktemp -d /tmp/skiff-kubectl.XXXXXX)
sampler_pid=""
stop_cluster() {
  [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null || true
  if [ -n "$up_pid" ]; then
    echo "==> stopping the cluster (SIGINT to skiff up)"
    stop_up
  fi
  echo "data and logs in $work"
}
trap stop_cluster EXIT

# --insecure: `skiff bench api` speaks plain HTTP, and the figures stay comparable with
# those taken before clusters were secured.
echo "==> skiff up --insecure --nodes $NODES --max-pods $MAX_PODS (in $work)"
start_up "$SKIFF" "$work" --insecure --nodes "$NODES" --max-pods "$MAX_PODS"
grep '^ready in' "$work/up.log"

server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
port=${server##*:}
# The member that listens on the kubeconfig's port: from ss, else from the command lines.
member=$(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)
if [ -z "$member" ]; then
  for d in /proc/[0-9]*; do
    if tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -q -- "--listen-api-urls[ =]$server\b"; then
      member=${d#/proc/}
      break
    fi
  done
fi
[ -n "$member" ] || { echo "no process serves $server" >&2; exit 1; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$member/status"; }
echo "==> kubeconfig server $server, served by pid $member ($(rss_kib) KiB resident)"

# Seconds since a `date +%s.%N` instant.
since() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN { printf "%.3f", a - b }'; }

half=$((PODS / 2))
echo "==> creating $((half * 2)) pods: skiff bench api --pods $half --keep"
t_create=$(date +%s.%N)
"$SKIFF" bench api --pods "$half" --clients 16 --keep --timeout 5m
create_s=$(since "$t_create")

echo "==> waiting for the pods to be Running (up to ${RUNNING_TIMEOUT} s)"
t_run=$(date +%s)
while :; do
  elapsed=$(($(date +%s) - t_run))
  if out=$(kubectl get pods -A --no-headers --field-selector=status.phase!=Running 2>"$work/kubectl.err"); then
    pending=$(printf '%s' "$out" | grep -c . || true)
    [ "$pending" = 0 ] && break
  else
    pending="? ($(cat "$work/kubectl.err"))"
  fi
  if [ "$elapsed" -ge "$RUNNING_TIMEOUT" ]; then
    echo "   $pending pods not Running after $elapsed s; measuring anyway"
    break
  fi
  echo "   $pending not Running yet ($elapsed s)"
  sleep 10
done
running=$(kubectl get pods -A --no-headers --field-selector=status.phase=Running | wc -l)
echo "   $running pods Running"

# Resident memory of the serving member, every 50 ms, into a file (one KiB figure a line).
sample_rss() {
  while :; do
    rss_kib >>"$1" 2>/dev/null || return 0
    sleep 0.05
  done
}
time_v=""
[ -x /usr/bin/time ] && time_v=/usr/bin/time
results=()
for run in $(seq 1 "$RUNS"); do
  before=$(rss_kib)
  samples=$work/rss-$run.txt
  : >"$samples"
  sample_rss "$samples" &
  sampler_pid=$!
  start=$(date +%s.%N)
  if [ -n "$time_v" ]; then
    lines=$($time_v -v -o "$work/time-$run.txt" kubectl get pods -A --no-headers | wc -l)
  else
    lines=$(kubectl get pods -A --no-headers | wc -l)
  fi
  end=$(date +%s.%N)
  kill "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""
  after=$(rss_kib)
  peak=$(sort -n "$samples" | tail -1)
  [ -n "$peak" ] || peak=$after
  wall=$(awk -v a="$end" -v b="$start" 'BEGIN { printf "%.3f", a - b }')
  kubectl_rss=""
  [ -n "$time_v" ] && kubectl_rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time-$run.txt")
  line=$(printf 'run %d: %d lines in %.2f s; member RSS before %d MiB, peak %d MiB, after %d MiB (%d samples)%s' \
    "$run" "$lines" "$wall" $((before / 1024)) $((peak / 1024)) $((after / 1024)) "$(wc -l <"$samples")" \
    "${kubectl_rss:+; kubectl max RSS $((kubectl_rss / 1024)) MiB}")
  echo "   $line"
  results+=("$line")
done

echo
echo "== kubectl get pods -A --no-headers | wc -l: $((half * 2)) pods ($running Running), $NODES simulated nodes"
echo "   binary: $SKIFF ($build); $(nproc) cores; $(kubectl version --client 2>/dev/null | head -1)"
printf '   pods created through skiff bench api in %.1f s\n' "$create_s"
for r in "${results[@]}"; do echo "   $r"; done
