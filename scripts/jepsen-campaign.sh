#!/usr/bin/env bash
# The long Jepsen campaign: every workload under every nemesis, RUNS seeded runs of TIME
# seconds per nemesis, the four workloads together in each run (each owns its key prefix and
# has its own checker, so a run is one trial of every workload × that nemesis). Then the table
# of runs, operations (ok / info / fail) and results per workload × nemesis, as in
# docs/jepsen.md.
#
#   bash scripts/jepsen-campaign.sh [RUNS] [TIME] [REPORT_DIR]     defaults: 20 60 jepsen-campaign
#   JOBS=2 bash scripts/jepsen-campaign.sh …                        nemeses run JOBS at a time
#   bash scripts/jepsen-campaign.sh --table REPORT_DIR              only the table, from reports
#   SKIFF_BIN=path bash scripts/jepsen-campaign.sh …                that binary, not a release build
#
# Each nemesis's runs use seeds from its own base (partition 5000, kill 5100, pause 5200,
# member 5300, loss 5400, compact 5500), so a run is reproduced with its seed alone. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

nemeses=(partition kill pause member loss compact)
declare -A base=([partition]=5000 [kill]=5100 [pause]=5200 [member]=5300 [loss]=5400 [compact]=5500)

table() {
  python3 - "$1" "${nemeses[@]}" <<'PY'
import json, os, sys
root, nemeses = sys.argv[1], sys.argv[2:]
workloads = {"r/": "register", "s/": "set", "w/": "watch", "l/": "lease"}
checker_of = {"register": "linearizable", "set": "set", "watch": "watch", "lease": "lease"}
rows, kills, other = {}, [], []
for nem in nemeses:
    d = os.path.join(root, nem)
    if not os.path.isdir(d):
        continue
    for run in sorted(os.listdir(d)):
        res = os.path.join(d, run, "results.json")
        if not os.path.exists(res):
            continue
        r = json.load(open(res))
        kills += r.get("leader_kill_unavailability_s", [])
        verdict = {c["checker"]: c["valid"] for c in r["checkers"]}
        # Checkers that belong to no workload (recovery after the heal).
        for c in r["checkers"]:
            if c["checker"] not in ("linearizable", "set", "watch", "lease", "revision-order") and c["valid"] is not True:
                other.append(f'{nem} seed {r["seed"]}: {c["checker"]} {c["valid"]}: {c.get("summary", "")}')
        counts = {w: {"ok": 0, "info": 0, "fail": 0} for w in workloads.values()}
        for line in open(os.path.join(d, run, "history.jsonl")):
            op = json.loads(line)
            if op["type"] == "invoke":
                continue
            v = op.get("value")
            w = workloads.get((v.get("key") or "")[:2]) if isinstance(v, dict) else None
            if w:
                counts[w][op["type"]] += 1
        for w in workloads.values():
            row = rows.setdefault((w, nem), {"runs": 0, "faults": 0, "ok": 0, "info": 0, "fail": 0, "valid": 0, "other": []})
            row["runs"] += 1
            row["faults"] += len(r["faults"])
            for t in ("ok", "info", "fail"):
                row[t] += counts[w][t]
            ok = verdict.get(checker_of[w]) is True and verdict.get("revision-order") is True
            row["valid"] += ok
            if not ok:
                row["other"].append(f'seed {r["seed"]}: {verdict.get(checker_of[w])}')
print("| workload | nemesis | runs | faults | ops | ok | info | fail | result |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|")
for (w, nem), x in sorted(rows.items(), key=lambda i: (list(workloads.values()).index(i[0][0]), nemeses.index(i[0][1]))):
    ops = x["ok"] + x["info"] + x["fail"]
    result = f'{x["valid"]} × valid' + (f' ({", ".join(x["other"])})' if x["other"] else "")
    print(f'| {w} | {nem} | {x["runs"]} | {x["faults"]} | {ops:,} | {x["ok"]:,} | {x["info"]:,} | {x["fail"]:,} | {result} |')
for o in other:
    print(f"\nnot valid: {o}")
if kills:
    kills.sort()
    print(f"\nwrite unavailability after {len(kills)} leader kills: median {kills[len(kills) // 2]:.2f} s, "
          f"min {kills[0]:.2f} s, p90 {kills[len(kills) * 9 // 10]:.2f} s, max {kills[-1]:.2f} s")
PY
}

if [ "${1:-}" = --table ]; then
  table "${2:?usage: $0 --table REPORT_DIR}"
  exit 0
fi

runs=${1:-20} time_limit=${2:-60} dir=${3:-jepsen-campaign} jobs=${JOBS:-1}
if [ -n "${SKIFF_BIN:-}" ]; then
  ensure_packages iptables iproute2 util-linux
  SKIFF=$SKIFF_BIN
else
  ensure_packages "${BUILD_PACKAGES[@]}" iptables iproute2 util-linux
  require_cargo
  cargo build --release --locked -p skiff
  SKIFF="$CARGO_TARGET_DIR/release/skiff"
fi
mkdir -p "$dir"
for nem in "${nemeses[@]}"; do
  # Wait for a free slot.
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "==> $nem: $runs runs from seed ${base[$nem]}"
  "$SKIFF" jepsen --workload register,set,watch,lease --nemesis "$nem" --time-limit "$time_limit" \
    --seed "${base[$nem]}" --runs "$runs" --report-dir "$dir/$nem" >"$dir/$nem.log" 2>&1 &
done
wait
status=0
for nem in "${nemeses[@]}"; do
  # The campaign's last line: "N runs, M ops: valid" (the kill nemesis adds "; write
  # unavailability …") only when every checker of every run said valid.
  grep -E '^seed|runs,' "$dir/$nem.log" || true
  grep -qE '^[0-9]+ runs, [0-9]+ ops: valid($|;)' "$dir/$nem.log" || status=1
done
table "$dir"
exit $status
