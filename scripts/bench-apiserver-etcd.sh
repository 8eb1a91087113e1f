#!/usr/bin/env bash
# The API server in a member's process beside `skiff apiserver` over Debian's etcd 3.4, in one
# run with one binary: `skiff bench api` (creates/s and watch delivery through both faces) on
# `skiff up --insecure --nodes 10`, then on `skiff up --insecure --nodes 10 --etcd-servers` over
# a one-member etcd started here. Usage: bash scripts/bench-apiserver-etcd.sh [PODS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
ensure_packages etcd-server
pick_skiff
pods=${1:-2000}
work=$(mktemp -d)
etcd_pid=""
cleanup() {
  [ -n "$etcd_pid" ] && kill "$etcd_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export KUBECONFIG=$work/kubeconfig

# run NAME UP-ARGS...: a cluster, the benchmark against it, the cluster stopped.
run() {
  local name=$1
  shift
  export SKIFF_CONFIG=$work/$name.config
  "$SKIFF" up --insecure --nodes 10 --data-dir "$work/$name" "$@" >"$work/$name-up.log" 2>&1 &
  local up=$!
  for _ in $(seq 1 240); do
    grep -q "^ready in" "$work/$name-up.log" && break
    kill -0 "$up" 2>/dev/null || { cat "$work/$name-up.log"; exit 1; }
    sleep 0.5
  done
  echo "== $name: $(grep '^ready in' "$work/$name-up.log")"
  "$SKIFF" bench api --pods "$pods" --clients 16
  kill -INT "$up"
  wait "$up" || true
}

echo "==> $build: $SKIFF"
run members --base-port 35000
etcd --name bench --data-dir "$work/etcd" \
  --listen-client-urls http://127.0.0.1:36379 --advertise-client-urls http://127.0.0.1:36379 \
  --listen-peer-urls http://127.0.0.1:36380 --initial-advertise-peer-urls http://127.0.0.1:36380 \
  --initial-cluster bench=http://127.0.0.1:36380 >"$work/etcd.log" 2>&1 &
etcd_pid=$!
run etcd --base-port 37000 --etcd-servers http://127.0.0.1:36379
