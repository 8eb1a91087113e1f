#!/usr/bin/env bash
# Where a put's CPU goes: three Skiff members on loopback (fsync on), `skiff bench kv put` from
# 1,000 clients over all of them, and `perf record` with DWARF call graphs on the leader, then
# on a follower, a few seconds each while the puts run. Prints, per member, the functions with
# the most samples, the first Skiff (or openraft) frame of every sample, and who calls
# memmove. Usage: bash scripts/profile-puts.sh [SECONDS]   (default 8 per member)
# SKIFF_BIN=path profiles that binary instead of the release build (which has line tables
# but no frame pointers: DWARF unwinding needs no more). The perf data and reports stay in the
# directory printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
ensure_packages linux-perf etcd-client
pick_skiff
secs=${1:-8}
work=$(mktemp -d /tmp/skiff-profile.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"/s[0-9]
  echo "perf data and reports in $work"
}
trap cleanup EXIT

base=24000
port_free "$base" || { echo "port $base is taken" >&2; exit 1; }
cluster=""
for i in 0 1 2; do cluster+="${cluster:+,}s$i=http://127.0.0.1:$((base + 1 + 10 * i))"; done
for i in 0 1 2; do
  c=$((base + 10 * i))
  "$SKIFF" store --name "s$i" --data-dir "$work/s$i" --listen-client-urls "http://127.0.0.1:$c" \
    --listen-peer-urls "http://127.0.0.1:$((c + 1))" --initial-cluster "$cluster" \
    --quota-backend-bytes 8589934592 2>"$work/s$i.log" &
  pids+=($!)
done
eps="127.0.0.1:$base,127.0.0.1:$((base + 10)),127.0.0.1:$((base + 20))"
leader=""
for _ in $(seq 1 200); do
  leader=$(ETCDCTL_API=3 etcdctl --endpoints="$eps" endpoint status -w json 2>/dev/null | python3 -c '
import json, sys
for e in json.load(sys.stdin):
    if e["Status"]["leader"] == e["Status"]["header"]["member_id"]:
        print(e["Endpoint"]); break' || true)
  [ -n "$leader" ] && break
  sleep 0.1
done
[ -n "$leader" ] || { echo "no leader" >&2; exit 1; }
# The member index of the leader, and a follower's.
li=$(((${leader##*:} - base) / 10))
fi=$(((li + 1) % 3))
echo "==> leader s$li (pid ${pids[$li]}), follower s$fi (pid ${pids[$fi]})"

# About enough puts for both recordings at this machine's ~20,000/s (more wait at the end).
"$SKIFF" bench kv --endpoints "$eps" --conns 100 --clients 1000 put --total $((25000 * (2 * secs + 4))) \
  --key-size 8 --val-size 256 >"$work/bench.txt" 2>&1 &
bench=$!
sleep 2
for who in "leader:$li" "follower:$fi"; do
  name=${who%%:*} i=${who##*:}
  echo "==> perf record on the $name for $secs s"
  perf record -q -F 199 --call-graph dwarf,16384 -p "${pids[$i]}" -o "$work/$name.data" -- sleep "$secs" 2>/dev/null
done
wait "$bench" || true

for name in leader follower; do
  perf report -i "$work/$name.data" --no-children --sort dso,symbol --percent-limit 1 --stdio -g none \
    2>/dev/null >"$work/$name-flat.txt"
  perf script -i "$work/$name.data" 2>/dev/null >"$work/$name-script.txt"
  echo
  echo "== $name: functions with the most samples"
  grep '%' "$work/$name-flat.txt" | sed 's/  */ /g' | cut -c1-140 | head -20
  python3 - "$work/$name-script.txt" <<'PY'
import collections, re, sys
first, parents, n = collections.Counter(), collections.Counter(), 0
for sample in open(sys.argv[1]).read().split("\n\n"):
    frames = [re.sub(r"^[0-9a-f]+ ", "", l.strip()).rsplit(" (", 1)[0]
              for l in sample.strip().split("\n")[1:] if l.strip()]
    if not frames:
        continue
    n += 1
    mine = next((f for f in frames if "skiff_store" in f or "openraft" in f), "(no Skiff frame)")
    first[re.sub(r"\+0x[0-9a-f]+$", "", mine)[:110]] += 1
    if "memmove" in frames[0] or "memcpy" in frames[0]:
        caller = next((f for f in frames[1:] if "memmove" not in f and "memcpy" not in f), "?")
        parents[re.sub(r"\+0x[0-9a-f]+$", "", caller)[:110]] += 1
print(f"-- the first Skiff or openraft frame of each of {n} samples")
for k, c in first.most_common(15):
    print(f"{100 * c / n:5.1f} %  {k}")
print("-- memmove's callers")
for k, c in parents.most_common(8):
    print(f"{100 * c / n:5.1f} %  {k}")
PY
done
echo
grep -E '^put:' "$work/bench.txt" || true
