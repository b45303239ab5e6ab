#!/usr/bin/env bash
# System tools the project needs, checked before anything long starts; the missing ones are
# installed from Debian's packages with apt-get, each with the reason it is needed.
#
#   bash localcluster/build/system-deps.sh       # every make target that builds or runs the
#                                                # local cluster or its tests, and .ci/run
#   bash localcluster/build/system-deps.sh venv  # only what `python -m venv` needs (make venv)
#   bash localcluster/build/system-deps.sh images  # only what building the images needs
#                                                # (make images: build-images.sh)
#   bash localcluster/build/system-deps.sh nodes   # what real nodes run: containerd, runc,
#                                                # the CNI plugins (localcluster/nodes/realnode/)
#
# Quiet (and about 10 ms) when everything is present. Exits non-zero with the reason and the
# command to run by hand when a tool is missing and this is not root, not Debian, or
# apt-get fails. Environment: PY (the Python that makes the venv, default python3) and
# VENV (default .venv): venv support is only checked while $VENV does not exist yet.
# The tool -> package table below is the list of what the project calls; keep it in step
# with the code (localcluster/ shells out to ip, tc, nft, unshare, umount, sysctl; the
# control plane is built with go, the tests and demo run from make).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

say() { printf 'system-deps: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# tool|Debian package|why the project needs it
TOOLS=(
  "ip|iproute2|network namespaces, veth links and addresses of the simulated nodes (localcluster/network/netns.py)"
  "tc|iproute2|link rates of the simulated NICs (localcluster/network/netns.py)"
  "nft|nftables|scenario firewalls (localcluster/network/firewall.py)"
  "unshare|util-linux|private mount and UTS namespaces of real nodes and agent containers (localcluster/nodes/realnode/, nodeagent/)"
  "umount|mount|unmounting leftovers at localcluster down (localcluster/cli.py)"
  "sysctl|procps|pod-network sysctls inside node namespaces (localcluster/network/podnet.py)"
  "go|golang-go|compiling the control plane from its Go modules (localcluster/build/build-k8s.sh)"
  "make|make|the project's entry points (Makefile)"
)
# Only for `make images` (localcluster/build/build-images.sh): no registry and no Docker
# daemon here, so the base is made from Debian's packages and the Dockerfiles built by buildah.
IMAGE_TOOLS=(
  "mmdebstrap|mmdebstrap|the images' Debian base, made from Debian's packages (no registry to pull python:*-slim from)"
  "buildah|buildah|building the Dockerfiles without a Docker daemon"
  "runc|runc|running the Dockerfiles' RUN steps (buildah only recommends a runtime)"
)
# Only for real nodes (`up --runtime containerd`, make demo, the e2e tests on real nodes):
# each node runs a real kubelet with its own containerd (localcluster/nodes/realnode/).
CNI_DIR="${SYSTEM_DEPS_CNI_DIR:-/usr/lib/cni}"  # Debian's plugin directory; the tests point it elsewhere
NODE_TOOLS=(
  "containerd|containerd|each real node's container runtime (CRI), 1.6 in bookworm"
  "runc|runc|the OCI runtime containerd starts containers with"
  "$CNI_DIR/bridge|containernetworking-plugins|the pod network of real nodes: bridge, host-local, portmap, loopback"
  "iptables|iptables|the portmap CNI plugin's hostPort rules (inside node namespaces only)"
  "nsenter|util-linux|starting each node's containerd and kubelet inside its network namespace"
)
CA_BUNDLE="${SYSTEM_DEPS_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"  # the tests point it elsewhere

# Go: K8S_GO_MIN in versions.env is the go line of k8s.io/kubernetes's go.mod.
# shellcheck source=versions.env
source "$here/versions.env"

declare -a pkgs=() whys=()
want() {  # want PACKAGE WHY: queue a package once, keeping every reason
  local i
  for i in "${!pkgs[@]}"; do
    if [ "${pkgs[$i]}" = "$1" ]; then whys[$i]="${whys[$i]}; $2"; return; fi
  done
  pkgs+=("$1"); whys+=("$2")
}

mode="${1:-all}"
case "$mode" in all|venv|images|nodes) ;; *) die "usage: $0 [all|venv|images|nodes]" ;; esac

check() {
  local entry tool pkg why
  local -a tools=()
  case "$mode" in all) tools=("${TOOLS[@]}") ;; images) tools=("${IMAGE_TOOLS[@]}") ;;
    nodes) tools=("${NODE_TOOLS[@]}") ;; esac
  for entry in ${tools[@]+"${tools[@]}"}; do
    IFS='|' read -r tool pkg why <<<"$entry"
    if [ "${tool#/}" != "$tool" ]; then [ -e "$tool" ] || want "$pkg" "$tool: $why"; continue; fi
    command -v "$tool" >/dev/null 2>&1 || want "$pkg" "$tool: $why"
  done
  case "$mode" in
    all) [ -s "$CA_BUNDLE" ] || want ca-certificates "TLS to PyPI and the Go module proxy on the first build" ;;
    images) [ -s "$CA_BUNDLE" ] || want ca-certificates "TLS to PyPI from the images' pip steps (the bundle is mounted into the build)" ;;
  esac
  local py="${PY:-python3}" venv="${VENV:-.venv}"
  if [ "$mode" != images ] && [ "$mode" != nodes ] && [ ! -x "$venv/bin/python" ]; then
    if ! command -v "$py" >/dev/null 2>&1; then
      want python3 "$py: the operator, the probe and the local cluster are Python (>= 3.11)"
    elif ! "$py" -c 'import ensurepip, venv' >/dev/null 2>&1; then
      want python3-venv "$py -m venv: the project's virtual environment ($venv)"
    fi
  fi
}

go_version_ok() {  # 0 when go is at least $K8S_GO_MIN, or can switch to it by itself
  local have toolchain
  read -r have toolchain < <(go env GOVERSION GOTOOLCHAIN 2>/dev/null | paste -sd' ') || return 1
  have="${have#go}"
  ver_ge "$have" "$K8S_GO_MIN" && return 0
  # Go >= 1.21 fetches the toolchain a go.mod asks for, unless GOTOOLCHAIN=local.
  if ver_ge "$have" 1.21 && [ "${toolchain%%+*}" != local ]; then
    say "go $have < $K8S_GO_MIN: go will fetch toolchain go$K8S_GO_MIN from the Go module proxy on the first build"
    return 0
  fi
  die "Kubernetes $K8S_VERSION needs Go >= $K8S_GO_MIN to compile; $(command -v go) is go $have (GOTOOLCHAIN=${toolchain:-unset}). Put a Go >= $K8S_GO_MIN first on PATH, or with Go >= 1.21 set GOTOOLCHAIN=auto so it fetches go$K8S_GO_MIN from the Go module proxy."
}

ver_ge() {  # ver_ge A B: A >= B for dotted versions (1.26.8 >= 1.26)
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

check
if [ "${#pkgs[@]}" -gt 0 ]; then
  cmd="apt-get install -y --no-install-recommends ${pkgs[*]}"
  command -v apt-get >/dev/null 2>&1 \
    || die "missing: ${pkgs[*]} (not a Debian machine: no apt-get); install the tools that provide: ${whys[*]}"
  [ "$(id -u)" = 0 ] \
    || die "missing: ${pkgs[*]}; run as root (the local cluster needs root anyway) or install them: sudo $cmd"
  for i in "${!pkgs[@]}"; do say "installing ${pkgs[$i]}: ${whys[$i]}"; done
  export DEBIAN_FRONTEND=noninteractive
  apt=(apt-get -q -o DPkg::Lock::Timeout=300)
  log="$(mktemp)"
  trap 'rm -f "$log"' EXIT
  if ! "${apt[@]}" update >"$log" 2>&1; then
    tail -n 15 "$log" >&2
    die "apt-get update failed (output above); fix the package sources, then: $cmd"
  fi
  if ! "${apt[@]}" install -y --no-install-recommends "${pkgs[@]}" >"$log" 2>&1; then
    tail -n 15 "$log" >&2
    die "apt-get install failed (output above); run by hand: $cmd"
  fi
  pkgs=(); whys=()
  hash -r
  check
  [ "${#pkgs[@]}" -eq 0 ] || die "still missing after apt-get install: $(IFS=';'; echo "${whys[*]}")"
  say "installed; all system tools present"
fi
[ "$mode" != all ] || go_version_ok
