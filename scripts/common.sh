# Shared by the README's commands: toolchain on PATH, a cargo target directory outside the
# clone (kept across runs and clones, so CI is incremental on a reused machine), and Debian
# packages installed only when missing.

set -euo pipefail

if [ -d "$HOME/.cargo/bin" ]; then
  PATH="$HOME/.cargo/bin:$PATH"
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/skiff-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# ensure_packages PKG...: installs the Debian packages that are not installed yet, without prompts.
ensure_packages() {
  local missing=()
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "==> installing Debian packages: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Build requirements: protoc and the well-known .proto files for the gRPC code, clang/libclang for RocksDB's bindings,
# make for jemalloc (the binary's allocator).
BUILD_PACKAGES=(protobuf-compiler libprotobuf-dev clang libclang-dev make)
# Real peers the tests and the demo talk to: Debian's etcdctl (etcd 3.4); iptables (and
# iproute2's ip, util-linux's unshare) for the Jepsen harness's network namespaces and faults, and
# with conntrack for the agent's Service rules;
# containerd and runc for the node agent's CRI runtime, the CNI plugins for its pods' network, and
# busybox-static for its images;
# curl for the Kubernetes API tests that need a plain HTTPS client (anonymous requests).
PEER_PACKAGES=(etcd-client iptables iproute2 conntrack containerd runc containernetworking-plugins busybox-static curl)

require_cargo() {
  if ! command -v cargo >/dev/null; then
    echo "cargo not found: install a Rust toolchain (rustup) first" >&2
    exit 1
  fi
}

# Picks the skiff binary a benchmark script runs, into SKIFF (and says which in `build`):
# $SKIFF_BIN when set, else the release build in the target directory, else a debug build
# made now.
pick_skiff() {
  if [ -n "${SKIFF_BIN:-}" ]; then
    SKIFF=$SKIFF_BIN
    build="given binary"
  elif [ -x "$CARGO_TARGET_DIR/release/skiff" ]; then
    SKIFF=$CARGO_TARGET_DIR/release/skiff
    build="release build"
  else
    require_cargo
    echo "==> no release binary in $CARGO_TARGET_DIR: building debug"
    cargo build --locked --workspace
    SKIFF=$CARGO_TARGET_DIR/debug/skiff
    build="debug build"
  fi
  echo "==> $SKIFF ($build, built $(date -r "$SKIFF" '+%F %T'))"
}
