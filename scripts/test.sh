#!/usr/bin/env bash
# Runs the whole default test suite: formatting, lints, unit, property and multi-process tests.
# Long runs (full Jepsen campaigns, big benchmarks) have their own commands; see the README.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

ensure_packages "${BUILD_PACKAGES[@]}" "${PEER_PACKAGES[@]}"
require_cargo

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
bash scripts/audit.sh --ci
echo "==> cargo test"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# The cluster API and REST suites again, on `skiff apiserver` over Debian's etcd 3.4.
echo "==> cargo test: the cluster API and the Kubernetes API over etcd (SKIFF_TEST_STORE=etcd)"
SKIFF_TEST_STORE=etcd cargo test --locked -p skiff --test cluster_api --test kube_api 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
set -e
# One closing line over every test binary and doc-test run.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1); if ($i ~ /^ignored/) s += $(i-1) } }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
