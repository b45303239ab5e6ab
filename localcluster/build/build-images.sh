#!/usr/bin/env bash
# Build the project's images from its own Dockerfiles, with no registry and no Docker daemon:
# a Debian base made by mmdebstrap from Debian's packages, the Dockerfiles built by buildah.
#
#   bash localcluster/build/build-images.sh [all]   # base, torch tree, operator, probe, example
#   bash localcluster/build/build-images.sh base|operator|probe|example|torch-tree|pause|garbage-probe|alpine|netpol|mesh
#   bash localcluster/build/build-images.sh archives   # docker-archive files the nodes import
#   bash localcluster/build/build-images.sh prune      # remove archives of older builds (all does)
#   bash localcluster/build/build-images.sh buildah ARGS...   # buildah on the project's storage
#   bash localcluster/build/build-images.sh info              # images, sizes, disk used
#
# Outputs, all under $DISTTRAIN_CACHE (default ~/.cache/disttrain):
#   buildah/       buildah's own storage (overlay): --root buildah/root --runroot buildah/run;
#                  nothing is written to /var/lib/containers
#   images:        localhost/disttrain/python:3.11-bookworm   the base (PYTHON_IMAGE, BASE_IMAGE)
#                  localhost/disttrain/disttrain-operator:$VERSION   operator/Dockerfile
#                  localhost/disttrain/disttrain-probe:$VERSION      probe_image/Dockerfile, INSTALL_TORCH=0
#                  localhost/disttrain/examples-digits:$VERSION      examples/Dockerfile
#                  localhost/disttrain/pause:3.10           the pod sandbox (localcluster/images/pause)
#                  localhost/disttrain/garbage-probe:$VERSION  a test probe writing a broken report
#                  localhost/disttrain/alpine:$VERSION     alpine:3.10 for Kubeflow's init container
#                  localhost/disttrain/kube-network-policies:$KNP   the NetworkPolicy enforcer's
#                  DaemonSet image: build-k8s.sh netpol's static binary at /bin/netpol, from scratch
#                  localhost/disttrain/mesh-sidecar:$VERSION   a service-mesh sidecar (istio-init and
#                  istio-proxy's stand-in, localcluster/images/mesh) for scenarios with mesh: istio
#   archives/<name>-c-<key>.tar   each image as a docker-archive, named as the chart and the
#                  example name it (ghcr.io/disttrain/...), which each real node's containerd
#                  imports (localcluster/localcluster/nodeimages/archives.py)
#   torch-tree/torch-<version>-<key>/   torch and what it requires, taken from the project's
#                  venv: the read-only tree nodes share (mounted, on PYTHONPATH) instead of a
#                  6 GB torch layer in every image (see "Images" in localcluster/README.md)
#
# Cached by content: each image is also tagged c-<key>, key = sha256 of its Dockerfile, the
# files its COPY lines name (without __pycache__/*.pyc, as .dockerignore says), its build
# arguments and the base image's ID; the base's key is its suite, package list and dpkg
# options. An image whose key is already in storage is not rebuilt (and buildah's --layers
# cache serves unchanged steps of one that is). Environment:
#   DISTTRAIN_CACHE       cache root
#   IMAGE_VERSION         tag of the images (default: the version in pyproject.toml)
#   TORCH_TREE_PYTHON     Python of the environment the torch tree is taken from (.venv/bin/python)
#   PROBE_INSTALL_TORCH   1: bake torch into the probe image as a user's CI does (default 0)
#   DEBIAN_MIRROR         mirror for mmdebstrap (default http://deb.debian.org/debian)
#   HOST_CA_BUNDLE        CA bundle mounted read-only into RUN steps for pip
#                         (default /etc/ssl/certs/ca-certificates.crt; a TLS-intercepting
#                         proxy's CA is in it here)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
CACHE="${DISTTRAIN_CACHE:-$HOME/.cache/disttrain}"
VERSION="${IMAGE_VERSION:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml" | head -n1)}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CA="${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
TORCH_PY="${TORCH_TREE_PYTHON:-$repo/.venv/bin/python}"
PROBE_INSTALL_TORCH="${PROBE_INSTALL_TORCH:-0}"
PREFIX=localhost/disttrain

# The base: what python:3.11-slim-bookworm gives the Dockerfiles, from Debian's packages.
# python-is-python3: `python` (the slim image has /usr/local/bin/python); passwd: groupadd
# and useradd; iproute2: the probe's `ip -j`; ca-certificates: pip's TLS.
BASE_SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,python-is-python3,iproute2,passwd,ca-certificates
BASE_DPKGOPT='path-exclude=/usr/share/{doc,man,locale,info}/*'
# As Debian's official images do (their docker-clean): apt keeps no package caches, so an
# `apt-get update` in a RUN step does not leave 75 MB of *.bin in a layer.
BASE_APT_CONF='Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";'
BASE_HOOK="rm -f \"\$1\"/var/cache/apt/*.bin; echo '$BASE_APT_CONF' > \"\$1/etc/apt/apt.conf.d/docker-clean\""
BASE_NAME="$PREFIX/python:3.11-$BASE_SUITE"

log() { printf '[images] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$CACHE/buildah"
B=(buildah --root "$CACHE/buildah/root" --runroot "$CACHE/buildah/run" --storage-driver overlay)

sha() { sha256sum | cut -c1-64; }
image_id() { "${B[@]}" inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null; }
have_image() { "${B[@]}" inspect --type image "$1" >/dev/null 2>&1; }
# The tag of a key: c- and the first 16 hex digits.
ctag() { echo "c-${1:0:16}"; }

build_base() {
  local key tagged tar c t0=$SECONDS
  key="$(printf '%s\n' "$BASE_SUITE" "$BASE_PACKAGES" "$BASE_DPKGOPT" "$BASE_HOOK" minbase | sha)"
  tagged="$BASE_NAME-$(ctag "$key")"
  if have_image "$tagged"; then
    "${B[@]}" tag "$tagged" "$BASE_NAME"
    log "base: cached ($tagged)"
    return
  fi
  # A tarball (mmdebstrap picks the format by the name), so owners and modes survive `add`.
  tar="$CACHE/buildah/base-$BASE_SUITE.partial.tar"
  rm -rf "$tar"
  log "base: mmdebstrap $BASE_SUITE ($BASE_PACKAGES) from $MIRROR"
  mmdebstrap --quiet --mode=root --variant=minbase --include="$BASE_PACKAGES" \
    --dpkgopt="$BASE_DPKGOPT" --aptopt='Acquire::Retries "3"' \
    --customize-hook="$BASE_HOOK" \
    "$BASE_SUITE" "$tar" "$MIRROR" >&2
  c="$("${B[@]}" from scratch)"
  "${B[@]}" add --quiet "$c" "$tar" / >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 \
    --label "disttrain.dev/base-packages=$BASE_PACKAGES" --label "disttrain.dev/content-key=$key" "$c"
  "${B[@]}" commit --quiet --rm "$c" "$tagged" >/dev/null
  "${B[@]}" tag "$tagged" "$BASE_NAME"
  rm -f "$tar"
  log "base: built $tagged in $((SECONDS - t0)) s"
}

# The files a Dockerfile's COPY lines (not COPY --from) take from the context, as
# "sha256  path" lines, sorted; __pycache__ and *.pyc left out, as the .dockerignore files do.
copied_files() {  # copied_files DOCKERFILE CONTEXT
  local src
  awk '$1 == "COPY" { from = 0; n = 0
         for (i = 2; i <= NF; i++) { if ($i ~ /^--from=/) from = 1; else if ($i !~ /^--/) a[++n] = $i }
         if (!from) for (i = 1; i < n; i++) print a[i] }' "$1" |
  while read -r src; do
    (cd "$2" && find "$src" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 -r sha256sum)
  done
}

# build_image NAME DOCKERFILE CONTEXT [BUILD_ARG=VALUE ...]
build_image() {
  local short="$1" file="$2" name="$PREFIX/$1" dockerfile="$repo/$2" context="$repo/$3" key tagged t0=$SECONDS
  shift 3
  local -a args=()
  local a
  for a in "$@"; do args+=(--build-arg "$a"); done
  key="$( { cat "$dockerfile"; copied_files "$dockerfile" "$context"; printf '%s\n' "$@"; image_id "$BASE_NAME"; } | sha)"
  tagged="$name:$(ctag "$key")"
  if have_image "$tagged"; then
    "${B[@]}" tag "$tagged" "$name:$VERSION"
    log "$short: cached ($tagged)"
    return
  fi
  log "$short: building $file ($*)"
  [ -s "$CA" ] || die "no CA bundle at $CA (HOST_CA_BUNDLE): pip inside the build needs one"
  # --network host: no CNI bridge or iptables rule on the host; the CA bundle read-only so
  # pip trusts what the host trusts. --pull=never: the base is local, nothing is pulled.
  "${B[@]}" bud --quiet --layers --network host --pull=never \
    -v "$CA:/etc/ssl/certs/ca-certificates.crt:ro" \
    --label "disttrain.dev/content-key=$key" \
    "${args[@]}" -f "$dockerfile" -t "$tagged" "$context" >/dev/null
  "${B[@]}" tag "$tagged" "$name:$VERSION"
  log "$short: built $tagged in $((SECONDS - t0)) s"
}

build_operator() { build_image disttrain-operator operator/Dockerfile . "PYTHON_IMAGE=$BASE_NAME"; }
build_probe() {
  build_image disttrain-probe probe_image/Dockerfile probe_image "PYTHON_IMAGE=$BASE_NAME" \
    "INSTALL_TORCH=$PROBE_INSTALL_TORCH"
}
build_example() { build_image examples-digits examples/Dockerfile examples "BASE_IMAGE=$BASE_NAME"; }
# alpine:3.10 for Kubeflow's PyTorch init container on real nodes (localcluster/images/alpine).
build_alpine() { build_image alpine localcluster/images/alpine/Dockerfile localcluster/images/alpine "PYTHON_IMAGE=$BASE_NAME"; }
# Istio's sidecar for scenarios with `mesh: istio` (localcluster/images/mesh, localcluster/cluster/mesh.py).
build_mesh() { build_image mesh-sidecar localcluster/images/mesh/Dockerfile localcluster/images/mesh "PYTHON_IMAGE=$BASE_NAME"; }
# A test image: a probe that writes a broken report (tests/e2e/test_operator.py).
build_garbage_probe() {
  build_image garbage-probe tests/e2e/images/garbage-probe/Dockerfile tests/e2e/images/garbage-probe \
    "PYTHON_IMAGE=$BASE_NAME"
}

# The pod sandbox image: a static Go pause (no registry serves registry.k8s.io/pause here),
# in an image from scratch. Cached by the source's content.
PAUSE_NAME="$PREFIX/pause:3.10"
build_pause() {
  local src="$repo/localcluster/images/pause" key tagged c m t0=$SECONDS
  key="$(cat "$src/main.go" "$src/go.mod" | sha)"
  tagged="$PREFIX/pause:$(ctag "$key")"
  if have_image "$tagged"; then "${B[@]}" tag "$tagged" "$PAUSE_NAME"; log "pause: cached ($tagged)"; return; fi
  mkdir -p "$CACHE/buildah/pause"
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$CACHE/buildah/pause/pause" .)
  c="$("${B[@]}" from scratch)"
  "${B[@]}" copy --quiet "$c" "$CACHE/buildah/pause/pause" /pause >/dev/null
  "${B[@]}" config --entrypoint '["/pause"]' --user 65535:65535 --label "disttrain.dev/content-key=$key" "$c"
  "${B[@]}" commit --quiet --rm "$c" "$tagged" >/dev/null
  "${B[@]}" tag "$tagged" "$PAUSE_NAME"
  log "pause: built $tagged in $((SECONDS - t0)) s"
}

# The NetworkPolicy enforcer (kube-network-policies, built by build-k8s.sh netpol, which runs
# here when the binary is not cached): its static binary at /bin/netpol (CMD, no ENTRYPOINT: the
# DaemonSet's args start with /bin/netpol), as upstream's image
# has it, in an image from scratch (it speaks netlink itself: no nft, no shell needed).
# Cached by the binary's content. Scenarios with networkPolicies: run it as a DaemonSet.
KNP_VERSION="$(sed -n 's/^KUBE_NETWORK_POLICIES_VERSION=//p' "$here/versions.env")"
NETPOL_NAME="$PREFIX/kube-network-policies:$KNP_VERSION"
build_netpol() {
  local bin="$CACHE/kube-network-policies-$KNP_VERSION/bin/kube-network-policies" key tagged c t0=$SECONDS
  [ -x "$bin" ] || bash "$here/build-k8s.sh" netpol
  key="$( { sha256sum < "$bin"; echo "$KNP_VERSION cmd"; } | sha)"
  tagged="$PREFIX/kube-network-policies:$(ctag "$key")"
  if have_image "$tagged"; then "${B[@]}" tag "$tagged" "$NETPOL_NAME"; log "netpol: cached ($tagged)"; return; fi
  c="$("${B[@]}" from scratch)"
  "${B[@]}" copy --quiet "$c" "$bin" /bin/netpol >/dev/null
  "${B[@]}" config --cmd '["/bin/netpol"]' --label "disttrain.dev/content-key=$key" "$c"
  "${B[@]}" commit --quiet --rm "$c" "$tagged" >/dev/null
  "${B[@]}" tag "$tagged" "$NETPOL_NAME"
  log "netpol: built $tagged in $((SECONDS - t0)) s"
}

# Every image as a docker-archive under the name pods use: the chart's and the example's
# defaults (ghcr.io/disttrain/<name>:<version>) and the sandbox image. One file per content
# key (kept), so a node imports an image only when it changed. Prints "<name> <file>" lines.
ARCHIVE_NAMES=("disttrain-operator ghcr.io/disttrain/disttrain-operator:$VERSION"
               "disttrain-probe ghcr.io/disttrain/disttrain-probe:$VERSION"
               "examples-digits ghcr.io/disttrain/examples-digits:$VERSION"
               "pause localhost/disttrain/pause:3.10"
               "garbage-probe disttrain.dev/test/garbage-probe:v1"
               "alpine docker.io/library/alpine:3.10"
               "mesh-sidecar disttrain.dev/test/mesh-sidecar:v1"
               "kube-network-policies registry.k8s.io/networking/kube-network-policies:$KNP_VERSION")
archives() {
  local entry short ref src key file
  mkdir -p "$CACHE/archives"
  for entry in "${ARCHIVE_NAMES[@]}"; do
    read -r short ref <<<"$entry"
    case "$short" in
      pause) src="$PAUSE_NAME" ;;
      mesh-sidecar) src="$PREFIX/mesh-sidecar:$VERSION"
        have_image "$src" || { log "archive: $src not built (make images): skipped"; continue; } ;;
      kube-network-policies) src="$NETPOL_NAME"
        # optional: built by `make images`; a cache from before it simply lacks the enforcer
        have_image "$src" || { log "archive: $src not built (make images): skipped"; continue; } ;;
      *) src="$PREFIX/$short:$VERSION" ;;
    esac
    key="$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$src")" \
      || die "$src is not built: run make images"
    file="$CACHE/archives/$short-${key:0:16}.tar"
    if [ ! -s "$file" ]; then
      rm -f "$file.tmp"
      "${B[@]}" push --quiet "$src" "docker-archive:$file.tmp:$ref" >/dev/null
      mv "$file.tmp" "$file"
      log "archive: $ref -> $file"
    fi
    printf '%s %s\n' "$ref" "$file"
  done
}

# Bound the archives: every change to an image's inputs writes a new docker-archive (the
# operator's is 420 MB) and the old ones were kept for good. Keep, per image, the archive
# `archives` lists now and the newest other one (a branch switched back imports it
# again without a rebuild); remove the rest. Prints what it removed. Nodes re-import what
# they lack by digest (archives.py), so a removed archive is never assumed present.
ARCHIVES_KEPT_OLDER=1
prune() {
  local current entry short f older
  current="$(archives)"
  for entry in "${ARCHIVE_NAMES[@]}"; do
    read -r short _ <<<"$entry"
    older=0
    while IFS= read -r f; do
      [[ "$(basename "$f")" =~ ^$short-[0-9a-f]{16}\.tar$ ]] || continue
      grep -qF " $f" <<<"$current" && continue
      older=$((older + 1))
      [ "$older" -le "$ARCHIVES_KEPT_OLDER" ] && continue
      rm -f "$f"
      log "prune: removed $f"
    done < <(ls -t "$CACHE/archives/$short-"*.tar 2>/dev/null)
  done
}

torch_tree() {
  [ -x "$TORCH_PY" ] || die "no Python at $TORCH_PY (TORCH_TREE_PYTHON): make venv installs torch there"
  "$TORCH_PY" "$here/torch_tree.py" "$CACHE/torch-tree"
}

info() {
  # The version tags (c-<key> tags of earlier inputs and untagged build stages omitted).
  "${B[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep -v -E -e '(:|-)c-[0-9a-f]{16} ' -e '^<none>' || true
  printf '%s buildah storage (%s)\n' "$(du -sh "$CACHE/buildah" 2>/dev/null | cut -f1)" "$CACHE/buildah"
  local t
  for t in "$CACHE"/torch-tree/torch-*/; do
    [ -e "$t/.complete" ] || continue
    printf '%s %s (apparent; files are hard links into the venv where the filesystem allows)\n' \
      "$(du -sh --apparent-size "$t" | cut -f1)" "$t"
  done
}

what="${1:-all}"
case "$what" in
  all) build_base; torch_tree; build_operator; build_probe; build_example; build_pause; build_garbage_probe; build_alpine
       build_netpol; build_mesh; prune >/dev/null ;;
  prune) prune >/dev/null ;;
  pause) build_pause ;;
  netpol) build_netpol ;;
  garbage-probe) build_base; build_garbage_probe ;;
  alpine) build_base; build_alpine ;;
  mesh) build_base; build_mesh ;;
  archives) archives ;;
  base) build_base ;;
  operator|probe|example) build_base; "build_$what" ;;
  torch-tree) torch_tree ;;
  buildah) shift; exec "${B[@]}" "$@" ;;
  info) info ;;
  *) die "usage: $0 [all|base|operator|probe|example|torch-tree|pause|garbage-probe|alpine|netpol|mesh|archives|prune|info|buildah ARGS...]" ;;
esac
