#!/usr/bin/env bash
# Checks the dependency tree with cargo-deny (deny.toml): RustSec advisories, licenses, banned
# or duplicated crates, and sources. Installs cargo-deny with cargo when it is missing.
# Usage: bash scripts/audit.sh [CHECK...]   (default: every check)
# The advisories check fetches RustSec's database from GitHub; where GitHub cannot be reached,
# run `bash scripts/audit.sh licenses bans sources` for the checks that need no network
# beyond crates.io.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
require_cargo

if ! command -v cargo-deny > /dev/null; then
  echo "==> installing cargo-deny"
  cargo install --locked cargo-deny
fi
echo "==> cargo deny check ${*:-(all)}"
cargo deny --locked check "$@"
