#!/usr/bin/env bash
# Builds Skiff and runs the local demo: `skiff up --demo` starts a three-member store quorum,
# the scheduler and three simulated node agents, applies the pods of examples/, shows them
# running with their events, kills the store leader with SIGKILL and measures how long writes
# are refused, deletes the pods gracefully, and stops everything.
# Extra arguments go to `skiff up` (e.g. --nodes 10, or --runtime cri --nodes 1 for containerd).
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

# The demo's cluster lives in a fresh directory and writes its client configuration there,
# so it neither resumes nor replaces a cluster of yours (~/.skiff).
work="$(mktemp -d /tmp/skiff-demo.XXXXXX)"
echo "==> skiff up --demo (data and logs in $work)"
SKIFF_CONFIG="$work/config" exec "$SKIFF" up --demo --data-dir "$work" "$@"
