# Shared by the README's commands: toolchain on PATH, a cargo target directory outside the
# clone (kept across runs and clones, so CI is incremental on a reused machine), and Debian
# packages installed only when missing.

set -euo pipefail

if [ -d "$HOME/.cargo/bin" ]; then
  PATH="$HOME/.cargo/bin:$PATH"
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/skiff-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# Incremental compilation keeps its state per clone path: CI builds a fresh clone each run, so
# that state (gigabytes of a debug build) would pile up in the shared target directory and
# never be read again. A build from scratch is also faster without it.
if [ "${CI:-}" = true ]; then
  export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi

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
# Real peers the tests and the demo talk to: Debian's etcdctl and etcd (3.4: the API server runs on it); iptables (and
# iproute2's ip, util-linux's unshare) for the Jepsen harness's network namespaces and faults, and
# with conntrack for the agent's Service rules;
# containerd and runc for the node agent's CRI runtime, the CNI plugins for its pods' network, and
# busybox-static for its images;
# curl for the Kubernetes API tests that need a plain HTTPS client (anonymous requests).
PEER_PACKAGES=(etcd-client etcd-server iptables iproute2 conntrack containerd runc containernetworking-plugins busybox-static curl)

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

# The benchmarks' clusters: each a `skiff up` of its own, on free ports, in a directory of its own.

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_base: a base port whose cluster ports (member i: base+10i .. +3; base+30 .. +33) are all free.
free_base() {
  local b off ok
  for b in $(seq 43000 100 47900); do
    ok=1
    for off in 0 1 2 3 10 11 12 13 20 21 22 23 30 31 32 33; do
      port_free $((b + off)) || { ok=0; break; }
    done
    if [ $ok = 1 ]; then echo "$b"; return; fi
  done
  echo "no free port range in 43000..47999" >&2
  return 1
}

# start_up BIN WORK [FLAG...]: starts `BIN up` on WORK/up (its log WORK/up.log) on free ports,
# with its own client configuration and kubeconfig under WORK (exported for what follows),
# in the background (its pid in $up_pid), and waits for it to be ready (600 s at most).
up_pid=""
start_up() {
  local bin=$1 work=$2
  shift 2
  resume_up "$bin" "$work" --base-port "$(free_base)" "$@"
}

# resume_up BIN WORK [FLAG...]: as start_up, for WORK/up's cluster stopped earlier (it keeps
# the ports it was created with).
resume_up() {
  local bin=$1 work=$2 t0
  shift 2
  export SKIFF_CONFIG=$work/config KUBECONFIG=$work/kubeconfig
  "$bin" up --data-dir "$work/up" --kubeconfig "$KUBECONFIG" "$@" \
    >"$work/up.log" 2>&1 &
  up_pid=$!
  t0=$(date +%s)
  until grep -q '^ready in' "$work/up.log"; do
    if ! kill -0 "$up_pid" 2>/dev/null; then
      cat "$work/up.log"
      echo "skiff up exited before the cluster was ready" >&2
      return 1
    fi
    if [ $(($(date +%s) - t0)) -gt 600 ]; then
      cat "$work/up.log"
      echo "the cluster was not ready within 600 s" >&2
      return 1
    fi
    sleep 0.2
  done
}

# stop_up: stops the cluster start_up started (SIGINT, as Ctrl-C; SIGKILL after 60 s).
stop_up() {
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -INT "$up_pid"
    for _ in $(seq 1 600); do
      kill -0 "$up_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$up_pid" 2>/dev/null && { echo "skiff up still running after 60 s: SIGKILL"; kill -KILL "$up_pid"; }
    wait "$up_pid" 2>/dev/null || true
  fi
  up_pid=""
}
