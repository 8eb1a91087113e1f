#!/usr/bin/env bash
# Checks the dependency tree with cargo-deny (deny.toml): RustSec advisories, licenses, banned
# or duplicated crates, and sources. Installs cargo-deny with cargo when it is missing.
# Usage: bash scripts/audit.sh          every check; fails if RustSec's database (on GitHub)
#                                       cannot be fetched
#        bash scripts/audit.sh --ci     licenses, bans and sources always; advisories when the
#                                       database can be fetched, else a line saying they were not
#                                       checked (the test suite runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
require_cargo

if ! command -v cargo-deny > /dev/null; then
  echo "==> installing cargo-deny (once per machine)"
  cargo install --locked cargo-deny
fi

checks=(advisories licenses bans sources)
if [ "${1:-}" = --ci ]; then
  if ! timeout 20 git ls-remote --heads https://github.com/RustSec/advisory-db > /dev/null 2>&1; then
    echo "==> advisories NOT checked: RustSec's database (github.com/RustSec/advisory-db) is unreachable from here"
    checks=(licenses bans sources)
  fi
fi
echo "==> cargo deny check ${checks[*]}"
cargo deny --locked check --hide-inclusion-graph "${checks[@]}"
