#!/usr/bin/env bash
# Skiff against etcd on this machine: a three-member etcd cluster (Debian's etcd-server) and a
# three-member Skiff cluster on loopback, both fsyncing every log append, driven by the same
# `skiff bench kv` runs in turn (etcd, Skiff, etcd, Skiff), then the figures side by side and
# the ratios, and a plot of puts/s against clients for both (puts-vs-clients.svg).
# Usage: bash scripts/race.sh [quick]   (quick: fewer operations per run)
#        bash scripts/race.sh compaction [quick]
#          the longest pause of puts and of watch delivery while each compacts a million stale
#          revisions (`bench kv compaction`), etcd beside Skiff.
#        bash scripts/race.sh stuck-watchers [quick]
#          puts/s and p50/p99 through each leader with 0, 4 and 64 watch streams that never
#          read (`bench kv stuck-watch`), etcd beside Skiff, instead of the whole race.
#        bash scripts/race.sh tls [quick]
#          both clusters on https:// client and peer URLs, client certificates required on
#          both (made by `skiff certs`): puts from 1,000 clients and from one, and
#          linearizable reads, etcd beside Skiff, instead of the whole race.
#        bash scripts/race.sh puts [quick]
#          puts/s and p99 against 1, 10, 100, 300 and 1,000 clients over every member, 1 and
#          10 clients through the leader (`leader-put-*`, no forwarding hop), and the plot.
#          With SKIFF_BASE_BIN=path, a second Skiff cluster from that binary runs beside the
#          other two ("skiff-base"): an A/B of two builds beside etcd in one run.
#        bash scripts/race.sh watch-memory
#          heap and resident memory per watcher, 100,000 watchers on fresh members, etcd
#          beside Skiff, instead of the whole race.
#        bash scripts/race.sh auth [quick]
#          the same three tests with etcd's auth off, then on (each request authenticated
#          by token and permission-checked, as a user with read and write on the keys the
#          tests touch, not root), etcd beside Skiff: what auth costs each.
# SKIFF_BIN=path uses that skiff binary instead of building the release one. The members' data
# directories are removed at the end (KEEP_DATA=1 keeps them); logs and results stay.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

mode=race
if [ "${1:-}" = stuck-watchers ] || [ "${1:-}" = compaction ] || [ "${1:-}" = tls ] ||
  [ "${1:-}" = auth ] || [ "${1:-}" = watch-memory ] || [ "${1:-}" = puts ]; then
  mode=$1
  shift
fi
scale=1
[ "${1:-}" = quick ] && scale=10

if [ -n "${SKIFF_BIN:-}" ]; then
  SKIFF="$SKIFF_BIN"
  ensure_packages etcd-server etcd-client
else
  ensure_packages "${BUILD_PACKAGES[@]}" etcd-server etcd-client
  require_cargo
  cargo build --release --locked -p skiff
  SKIFF="$CARGO_TARGET_DIR/release/skiff"
fi
ETCD="$(command -v etcd || echo /usr/bin/etcd)"

work="$(mktemp -d /tmp/skiff-race.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The members' data is gigabytes a run (four put sweeps filled this VM's free disk); the logs,
  # results and plots stay. KEEP_DATA=1 keeps the data too.
  if [ "${KEEP_DATA:-}" != 1 ]; then
    rm -rf "$work"/etcd-[0-9] "$work"/skiff-[0-9] "$work"/skiff-base-[0-9]
    echo "logs and results in $work (members' data removed; KEEP_DATA=1 keeps it)"
  else
    echo "data, logs and results in $work"
  fi
}
trap cleanup EXIT

# etcd on 40000+, Skiff on 41000+: member i at +10i (client), +1 (peer), +2 (metrics).
# In tls mode every client and peer URL is https://, with client certificates required on
# both, from one CA for both systems.
scheme=http tls_etcd=() tls_skiff=() tls_client=() tls_bench=()
if [ "$mode" = tls ]; then
  scheme=https
  certs="$work/certs"
  "$SKIFF" certs --dir "$certs" --member e0 --member e1 --member e2 --member s0 --member s1 \
    --member s2 --client root --hosts 127.0.0.1,localhost >/dev/null
  tls_client=(--cacert "$certs/ca.pem" --cert "$certs/root.pem" --key "$certs/root-key.pem")
  tls_bench=("${tls_client[@]}")
fi
member_tls() { # name → the flags of its certificate, for client and peer URLs
  [ "$mode" = tls ] || return 0
  echo "--cert-file $certs/$1.pem --key-file $certs/$1-key.pem --trusted-ca-file $certs/ca.pem" \
    "--client-cert-auth --peer-cert-file $certs/$1.pem --peer-key-file $certs/$1-key.pem" \
    "--peer-trusted-ca-file $certs/ca.pem --peer-client-cert-auth"
}
etcd_cluster="" skiff_cluster=""
for i in 0 1 2; do
  etcd_cluster+="${etcd_cluster:+,}e$i=$scheme://127.0.0.1:$((40001 + 10 * i))"
  skiff_cluster+="${skiff_cluster:+,}s$i=$scheme://127.0.0.1:$((41001 + 10 * i))"
done
for i in 0 1 2; do
  c=$((40000 + 10 * i))
  # shellcheck disable=SC2046
  "$ETCD" --name "e$i" --data-dir "$work/etcd-$i" \
    --listen-client-urls "$scheme://127.0.0.1:$c" --advertise-client-urls "$scheme://127.0.0.1:$c" \
    --listen-peer-urls "$scheme://127.0.0.1:$((c + 1))" --initial-advertise-peer-urls "$scheme://127.0.0.1:$((c + 1))" \
    --listen-metrics-urls "http://127.0.0.1:$((c + 2))" \
    --initial-cluster "$etcd_cluster" --initial-cluster-state new --initial-cluster-token race \
    --quota-backend-bytes 8589934592 $(member_tls "e$i") 2>"$work/etcd-$i.log" &
  pids+=($!)
  c=$((41000 + 10 * i))
  # shellcheck disable=SC2046
  "$SKIFF" store --name "s$i" --data-dir "$work/skiff-$i" \
    --listen-client-urls "$scheme://127.0.0.1:$c" --listen-peer-urls "$scheme://127.0.0.1:$((c + 1))" \
    --listen-metrics-urls "http://127.0.0.1:$((c + 2))" --listen-api-urls "" \
    --initial-cluster "$skiff_cluster" --quota-backend-bytes 8589934592 $(member_tls "s$i") \
    2>"$work/skiff-$i.log" &
  pids+=($!)
done
base_cluster=""
if [ -n "${SKIFF_BASE_BIN:-}" ]; then
  [ "$mode" = puts ] || { echo "SKIFF_BASE_BIN is for the puts mode" >&2; exit 2; }
  for i in 0 1 2; do base_cluster+="${base_cluster:+,}b$i=http://127.0.0.1:$((42001 + 10 * i))"; done
  for i in 0 1 2; do
    c=$((42000 + 10 * i))
    "$SKIFF_BASE_BIN" store --name "b$i" --data-dir "$work/skiff-base-$i" \
      --listen-client-urls "http://127.0.0.1:$c" --listen-peer-urls "http://127.0.0.1:$((c + 1))" \
      --listen-metrics-urls "http://127.0.0.1:$((c + 2))" --listen-api-urls "" \
      --initial-cluster "$base_cluster" --quota-backend-bytes 8589934592 2>"$work/skiff-base-$i.log" &
    pids+=($!)
  done
fi
prefix=""
[ "$mode" = tls ] && prefix="https://"
etcd_eps="${prefix}127.0.0.1:40000,${prefix}127.0.0.1:40010,${prefix}127.0.0.1:40020"
skiff_eps="${prefix}127.0.0.1:41000,${prefix}127.0.0.1:41010,${prefix}127.0.0.1:41020"
etcd_metrics="http://127.0.0.1:40002/metrics,http://127.0.0.1:40012/metrics,http://127.0.0.1:40022/metrics"
skiff_metrics="http://127.0.0.1:41002/metrics,http://127.0.0.1:41012/metrics,http://127.0.0.1:41022/metrics"
base_eps="127.0.0.1:42000,127.0.0.1:42010,127.0.0.1:42020"
systems=(etcd skiff)
[ -n "$base_cluster" ] && systems+=(skiff-base)
for system in "${systems[@]}"; do
  eps=$etcd_eps
  [ "$system" = skiff ] && eps=$skiff_eps
  [ "$system" = skiff-base ] && eps=$base_eps
  for _ in $(seq 1 200); do
    ETCDCTL_API=3 etcdctl --endpoints="$eps" "${tls_client[@]}" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
  done
  ETCDCTL_API=3 etcdctl --endpoints="$eps" "${tls_client[@]}" endpoint status -w table
done
"$ETCD" --version | sed -n 1p
"$SKIFF" version | sed -n 1p
[ -z "$base_cluster" ] || echo "skiff-base: $("$SKIFF_BASE_BIN" version | sed -n 1p)"

# The client endpoint of the member that leads (from `etcdctl endpoint status`).
leader_of() {
  ETCDCTL_API=3 etcdctl --endpoints="$1" endpoint status -w json | python3 -c '
import json, sys
for e in json.load(sys.stdin):
    if e["Status"]["leader"] == e["Status"]["header"]["member_id"]:
        print(e["Endpoint"]); break'
}

if [ "$mode" = compaction ]; then
  results="$work/compaction.jsonl"
  for system in etcd skiff; do
    eps=$etcd_eps
    [ "$system" = skiff ] && eps=$skiff_eps
    leader=$(leader_of "$eps")
    echo "==> $system: $((1000000 / scale)) stale revisions, then a compaction under a probe put and its watch, through the leader $leader"
    line=$("$SKIFF" bench kv --endpoints "$leader" --conns 16 --clients 64 --json compaction \
      --revisions $((1000000 / scale)) --keys 1000 --val-size 64 || true)
    echo "$line"
    [ -n "$line" ] && echo "{\"system\": \"$system\", \"report\": $line}" >>"$results"
  done
  python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print()
print(f"{'system':<8}{'revisions':>10}{'compact s':>10}{'put pause ms':>13}{'watch pause ms':>15}{'before: put':>12}{'watch':>7}{'p99 ms':>8}")
for r in rows:
    rep = r["report"]; x = dict(rep["extra"])
    print(f"{r['system']:<8}{x['stale revisions']:>10.0f}{x['compaction request s']:>10.2f}"
          f"{x['longest put pause ms']:>13.0f}{x['longest watch pause ms']:>15.0f}"
          f"{x['longest put pause before ms']:>12.0f}{x['longest watch pause before ms']:>7.0f}{rep['latency_ms']['p99']:>8.1f}")
PY
  exit 0
fi

if [ "$mode" = stuck-watchers ]; then
  results="$work/stuck-watchers.jsonl"
  for round in 1 2; do
    for system in etcd skiff; do
      eps=$etcd_eps
      [ "$system" = skiff ] && eps=$skiff_eps
      leader=$(leader_of "$eps")
      echo "==> round $round, $system: puts through the leader $leader with 0, 4, 64 stuck watch streams"
      "$SKIFF" bench kv --endpoints "$leader" --conns 16 --clients 64 --json stuck-watch \
        --stuck 0,4,64 --total $((40000 / scale)) --key-size 8 --val-size 256 | tee -a "$work/$system.jsonl" |
        while read -r line; do echo "{\"round\": $round, \"system\": \"$system\", \"report\": $line}" >>"$results"; echo "$line"; done || true
    done
  done
  python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print()
print(f"{'system':<8}{'stuck':>6}{'round':>6}{'puts/s':>10}{'vs 0':>7}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
base = {}
for r in rows:
    rep = r["report"]
    n = int(dict(rep["extra"])["stuck watch streams"])
    if n == 0:
        base[(r["system"], r["round"])] = rep["per_second"]
    b = base.get((r["system"], r["round"]))
    ratio = f"{rep['per_second'] / b:.2f}" if b else "-"
    print(f"{r['system']:<8}{n:>6}{r['round']:>6}{rep['per_second']:>10.0f}{ratio:>7}"
          f"{rep['latency_ms']['p50']:>9.2f}{rep['latency_ms']['p99']:>9.2f}{rep['errors']:>8}")
PY
  exit 0
fi

# name | global flags | test and its flags (the same for both systems). Memory per watcher
# first, while the members' heaps hold nothing the earlier tests left to free.
if [ "$mode" = auth ]; then
  # Auth is turned on after the `off-` tests and off again after the `on-` ones (below).
  auth_user=(--user bench:benchpw)
  tests=(
    "off-put-1000-clients|--conns 100 --clients 1000|put --total $((200000 / scale)) --key-size 8 --val-size 256"
    "off-put-1-client|--conns 1 --clients 1|put --total $((5000 / scale)) --key-size 8 --val-size 256"
    "off-range-linearizable|--conns 100 --clients 1000|range foo --consistency l --total $((200000 / scale))"
    "on-put-1000-clients|--conns 100 --clients 1000 ${auth_user[*]}|put --total $((200000 / scale)) --key-size 8 --val-size 256"
    "on-put-1-client|--conns 1 --clients 1 ${auth_user[*]}|put --total $((5000 / scale)) --key-size 8 --val-size 256"
    "on-range-linearizable|--conns 100 --clients 1000 ${auth_user[*]}|range foo --consistency l --total $((200000 / scale))"
  )
elif [ "$mode" = watch-memory ]; then
  tests=(
    "watch-memory|--conns 10 --clients 1|watch --watchers 100000 --streams 100 --puts 10 --put-rate 100"
  )
elif [ "$mode" = puts ]; then
  tests=(
    "sweep-put-c1|--conns 1 --clients 1|put --total $((5000 / scale)) --key-size 8 --val-size 256"
    "sweep-put-c10|--conns 10 --clients 10|put --total $((20000 / scale)) --key-size 8 --val-size 256"
    "sweep-put-c100|--conns 100 --clients 100|put --total $((100000 / scale)) --key-size 8 --val-size 256"
    "sweep-put-c300|--conns 100 --clients 300|put --total $((100000 / scale)) --key-size 8 --val-size 256"
    "sweep-put-c1000|--conns 100 --clients 1000|put --total $((200000 / scale)) --key-size 8 --val-size 256"
    "leader-put-c1|--conns 1 --clients 1|put --total $((5000 / scale)) --key-size 8 --val-size 256"
    "leader-put-c10|--conns 10 --clients 10|put --total $((20000 / scale)) --key-size 8 --val-size 256"
  )
elif [ "$mode" = tls ]; then
  tests=(
    "put-1000-clients|--conns 100 --clients 1000|put --total $((200000 / scale)) --key-size 8 --val-size 256"
    "put-1-client|--conns 1 --clients 1|put --total $((5000 / scale)) --key-size 8 --val-size 256"
    "range-linearizable|--conns 100 --clients 1000|range foo --consistency l --total $((200000 / scale))"
  )
else
tests=(
  "watch-memory|--conns 10 --clients 1|watch --watchers 100000 --streams 100 --puts 10 --put-rate 100"
  "put-1000-clients|--conns 100 --clients 1000|put --total $((200000 / scale)) --key-size 8 --val-size 256"
  "put-1-client|--conns 1 --clients 1|put --total $((5000 / scale)) --key-size 8 --val-size 256"
  "range-linearizable|--conns 100 --clients 1000|range foo --consistency l --total $((200000 / scale))"
  "range-serializable|--conns 100 --clients 1000|range foo --consistency s --total $((200000 / scale))"
  "txn-put|--conns 100 --clients 1000|txn-put --total $((100000 / scale)) --key-size 8 --val-size 256"
  "lease-keepalive|--conns 10 --clients 100|lease-keepalive --total $((100000 / scale))"
  "watch-10000|--conns 10 --clients 1|watch --watchers 10000 --streams 10 --puts $((10000 / scale)) --put-rate 1000"
  "watch-1000-rate|--conns 10 --clients 1|watch --watchers 1000 --streams 10 --puts $((10000 / scale)) --put-rate 1000 --put-clients 20"
  "watch-10000-rate|--conns 10 --clients 1|watch --watchers 10000 --streams 10 --puts $((10000 / scale)) --put-rate 1000 --put-clients 20"
  "sweep-put-c1|--conns 1 --clients 1|put --total $((5000 / scale)) --key-size 8 --val-size 256"
  "sweep-put-c10|--conns 10 --clients 10|put --total $((20000 / scale)) --key-size 8 --val-size 256"
  "sweep-put-c100|--conns 100 --clients 100|put --total $((100000 / scale)) --key-size 8 --val-size 256"
  "sweep-put-c300|--conns 100 --clients 300|put --total $((100000 / scale)) --key-size 8 --val-size 256"
  "sweep-put-c1000|--conns 100 --clients 1000|put --total $((200000 / scale)) --key-size 8 --val-size 256"
)
fi
results="$work/results.jsonl"
for round in 1 2; do
  for system in "${systems[@]}"; do
    eps=$etcd_eps metrics=$etcd_metrics
    [ "$system" = skiff ] && eps=$skiff_eps metrics=$skiff_metrics
    [ "$system" = skiff-base ] && eps=$base_eps metrics=""
    for t in "${tests[@]}"; do
      IFS='|' read -r name global test <<<"$t"
      if [ "$mode" = auth ] && [[ $name == on-put-1000-clients ]]; then
        # Root, and a user with read and write from "0" on (the benchmark's keys and "foo").
        ctl=(env ETCDCTL_API=3 etcdctl --endpoints="$eps")
        "${ctl[@]}" user add root:rootpw >/dev/null
        "${ctl[@]}" user add bench:benchpw >/dev/null
        "${ctl[@]}" role add bench >/dev/null
        "${ctl[@]}" role grant-permission bench readwrite 0 --from-key >/dev/null
        "${ctl[@]}" user grant-role bench bench >/dev/null
        "${ctl[@]}" auth enable >/dev/null
      fi
      extra=()
      [[ $test == watch* ]] && extra=(--metrics-urls "$metrics")
      # The sweep goes round-robin over every member (a follower forwards); a `leader-` test
      # goes to the member that leads, the path without the forwarding hop.
      run_eps=$eps
      [[ $name == leader-* ]] && run_eps=$(leader_of "$eps")
      echo "==> round $round, $system: $name ($run_eps)"
      # shellcheck disable=SC2086
      line=$("$SKIFF" bench kv --endpoints "$run_eps" "${tls_bench[@]}" $global --json $test "${extra[@]}" || true)
      echo "$line"
      echo "{\"round\": $round, \"system\": \"$system\", \"name\": \"$name\", \"report\": ${line:-null}}" >>"$results"
    done
    if [ "$mode" = auth ]; then
      # Back to where the round began: no users or roles (etcdctl's `auth enable` added the
      # root role), so the next round sets them up the same way.
      ctl=(env ETCDCTL_API=3 etcdctl --endpoints="$eps")
      "${ctl[@]}" --user root:rootpw auth disable >/dev/null
      for u in bench root; do "${ctl[@]}" user delete "$u" >/dev/null; done
      for r in bench root; do "${ctl[@]}" role delete "$r" >/dev/null; done
    fi
  done
done

[ "$mode" = tls ] || [ "$mode" = auth ] || [ "$mode" = watch-memory ] || "$SKIFF" bench plot --results "$results" --prefix sweep-put --out "$work/puts-vs-clients.svg"

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
names = []
for r in rows:
    if r["name"] not in names:
        names.append(r["name"])
def mean(system, name, f):
    v = [f(r["report"]) for r in rows if r["system"] == system and r["name"] == name and r["report"]]
    return sum(v) / len(v) if v else float("nan")
print()
base = any(r["system"] == "skiff-base" for r in rows)
head = f"{'test':<22}{'etcd ops/s':>12}{'skiff ops/s':>13}{'ratio':>8}{'etcd p99 ms':>13}{'skiff p99 ms':>14}"
if base:
    head += f"{'base ops/s':>12}{'base ratio':>12}{'base p99 ms':>13}"
print(head)
for n in names:
    e = mean("etcd", n, lambda r: r["per_second"])
    s = mean("skiff", n, lambda r: r["per_second"])
    ep = mean("etcd", n, lambda r: r["latency_ms"]["p99"])
    sp = mean("skiff", n, lambda r: r["latency_ms"]["p99"])
    line = f"{n:<22}{e:>12.0f}{s:>13.0f}{s / e if e else float('nan'):>8.2f}{ep:>13.2f}{sp:>14.2f}"
    if base:
        b = mean("skiff-base", n, lambda r: r["per_second"])
        bp = mean("skiff-base", n, lambda r: r["latency_ms"]["p99"])
        line += f"{b:>12.0f}{b / e if e else float('nan'):>12.2f}{bp:>13.2f}"
    print(line)
for n in names:
    if n == "watch-memory":
        for system in ("etcd", "skiff"):
            m = [dict(r["report"]["extra"]) for r in rows if r["system"] == system and r["name"] == n and r["report"]]
            for x in m:
                for k in ("server heap per watcher B (all members)",
                          "server resident memory per watcher B (all members)"):
                    if k in x:
                        print(f"{system}: {k}: {x[k]:.0f}")
PY
