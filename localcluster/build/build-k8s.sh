#!/usr/bin/env bash
# Build the proving ground's control plane from the official Go modules, once per version.
#
# Outputs (cached outside the work tree, reused by later runs):
#   $DISTTRAIN_CACHE/k8s-$K8S_VERSION/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl,
#     kubelet,kube-proxy}  (the node binaries too: the proving ground's nodes run real kubelets)
#   $DISTTRAIN_CACHE/etcd-$ETCD_VERSION/bin/etcd
#   $DISTTRAIN_CACHE/helm-$HELM_VERSION/bin/helm
#   $DISTTRAIN_CACHE/coredns-$COREDNS_VERSION/bin/coredns  (cluster DNS, a few plugins only)
#   $DISTTRAIN_CACHE/training-operator-$TRAINING_OPERATOR_VERSION/bin/training-operator.v1
#     and .../manifests/ (PyTorchJob CRD, ClusterRole, webhook configuration) from the same
#     module: Kubeflow's training operator, the peer `localcluster up --kubeflow` runs
#   $DISTTRAIN_CACHE/kueue-$KUEUE_VERSION/bin/kueue        (Kueue's manager, cmd/kueue)
#   $DISTTRAIN_CACHE/kueue-$KUEUE_VERSION/config/           (its CRDs, ClusterRole, webhooks)
#   $DISTTRAIN_CACHE/jobset-$JOBSET_VERSION/{bin/jobset,config/}  (JobSet: manager, CRD, ClusterRole, webhooks)
#   $DISTTRAIN_CACHE/trainer-$TRAINER_VERSION/{bin/trainer-controller-manager,config/}  (Trainer v2)
#   $DISTTRAIN_CACHE/kube-network-policies-$KUBE_NETWORK_POLICIES_VERSION/bin/kube-network-policies
#     (sigs.k8s.io/kube-network-policies ./cmd: the NetworkPolicy enforcer scenarios run)
#
# k8s.io/kubernetes cannot be `go get`-ed alone: its go.mod replaces every staging module
# k8s.io/* with ./staging/src/k8s.io/*. We write a throw-away module that requires it and
# maps each of those staging modules to its published v0.x twin (v1.N.M -> v0.N.M).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/versions.env"
CACHE="${DISTTRAIN_CACHE:-$HOME/.cache/disttrain}"
export GOFLAGS="${GOFLAGS:--mod=mod}"
export CGO_ENABLED=0

log() { printf '[build] %s\n' "$*" >&2; }

# module_dir MOD@VERSION: download the module (module cache) and print its directory.
module_dir() {
  (cd /tmp && go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
}

# staged TOP FILE...: true when TOP/config holds a crd/*.yaml and each FILE (relative to
# TOP/config), i.e. stage_config ran to the end for this build.
staged() {
  local top="$1" f
  shift
  ls "$top"/config/crd/*.yaml >/dev/null 2>&1 || return 1
  for f in "$@"; do [ -f "$top/config/$f" ] || return 1; done
}

build_k8s() {
  local out="$CACHE/k8s-$K8S_VERSION/bin"
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
  local missing=0
  for b in "${want[@]}"; do [ -x "$out/$b" ] || missing=1; done
  if [ "$missing" = 0 ]; then log "kubernetes $K8S_VERSION: cached in $out"; return; fi
  local staging_version="v0.${K8S_VERSION#v1.}"
  local mod="$CACHE/k8s-$K8S_VERSION/src"
  mkdir -p "$mod" "$out"
  log "kubernetes $K8S_VERSION: downloading module"
  local dir
  dir="$(module_dir "k8s.io/kubernetes@$K8S_VERSION")"
  {
    echo "module disttrain.dev/localcluster/k8sbuild"
    echo
    grep -E '^go [0-9.]+$' "$dir/go.mod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    grep -E '^\s+k8s.io/[a-z0-9-]+ => ./staging/src/' "$dir/go.mod" \
      | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > "$mod/go.mod"
  cat > "$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
  (cd "$mod" && go mod tidy -e >/dev/null 2>&1 || true)
  for b in "${want[@]}"; do
    if [ ! -x "$out/$b" ]; then
      log "kubernetes $K8S_VERSION: go build $b"
      (cd "$mod" && go build -trimpath -ldflags "-s -w \
        -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
        -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION" \
        -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b") && mv "$out/$b.tmp" "$out/$b"
    fi
  done
}

build_etcd() {
  # etcd's server module carries replace directives (to ../api etc.), so `go install m@v`
  # refuses it; a wrapper module that requires it resolves each to its published twin.
  local out="$CACHE/etcd-$ETCD_VERSION/bin"
  if [ -x "$out/etcd" ]; then log "etcd $ETCD_VERSION: cached"; return; fi
  local mod="$CACHE/etcd-$ETCD_VERSION/src"
  mkdir -p "$out" "$mod"
  printf 'module disttrain.dev/localcluster/etcdbuild\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > "$mod/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > "$mod/tools.go"
  (cd "$mod" && go mod tidy -e >/dev/null 2>&1 || true)
  log "etcd $ETCD_VERSION: go build"
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3) && mv "$out/etcd.tmp" "$out/etcd"
}

build_helm() {
  local out="$CACHE/helm-$HELM_VERSION/bin"
  if [ -x "$out/helm" ]; then log "helm $HELM_VERSION: cached"; return; fi
  mkdir -p "$out"
  log "helm $HELM_VERSION: go install"
  GOBIN="$out" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

# CoreDNS the way its docs describe external builds: a main package that imports
# core/dnsserver, coremain and only the plugins we use, and sets dnsserver.Directives to
# them in CoreDNS's own order (plugin.cfg). Linking 12 plugins instead of ~60 keeps the
# build small (no cloud SDKs). Keep COREDNS_DIRECTIVES in that order. A cached binary
# that lacks one of them (the list grew) is rebuilt. bind and forward serve a
# node-local DNS (nodedns.py), the rest cluster DNS (dns.py).
COREDNS_DIRECTIVES=(bind ready health errors log loadbalance cache template kubernetes loop forward whoami)

build_coredns() {
  local out="$CACHE/coredns-$COREDNS_VERSION/bin"
  if [ -x "$out/coredns" ]; then
    local have p missing=0
    have="$("$out/coredns" -plugins 2>/dev/null || true)"
    for p in "${COREDNS_DIRECTIVES[@]}"; do grep -qx "$p" <<<"$have" || missing=1; done
    if [ "$missing" = 0 ]; then log "coredns $COREDNS_VERSION: cached"; return; fi
    log "coredns $COREDNS_VERSION: cached binary lacks a plugin; rebuilding"
  fi
  local mod="$CACHE/coredns-$COREDNS_VERSION/src"
  mkdir -p "$out" "$mod"
  local dir
  dir="$(module_dir "github.com/coredns/coredns@$COREDNS_VERSION")"
  {
    echo "module disttrain.dev/localcluster/corednsbuild"
    echo
    grep -E '^go [0-9.]+$' "$dir/go.mod"
    echo
    echo "require github.com/coredns/coredns $COREDNS_VERSION"
  } > "$mod/go.mod"
  {
    echo "// Generated by localcluster/build/build-k8s.sh: CoreDNS with a few plugins."
    echo "package main"
    echo
    echo "import ("
    echo "	\"github.com/coredns/coredns/core/dnsserver\""
    echo "	\"github.com/coredns/coredns/coremain\""
    echo
    for p in "${COREDNS_DIRECTIVES[@]}"; do echo "	_ \"github.com/coredns/coredns/plugin/$p\""; done
    echo ")"
    echo
    echo "func init() {"
    echo "	dnsserver.Directives = []string{"
    for p in "${COREDNS_DIRECTIVES[@]}"; do echo "		\"$p\","; done
    echo "	}"
    echo "}"
    echo
    echo "func main() { coremain.Run() }"
  } > "$mod/main.go"
  (cd "$mod" && go mod tidy >/dev/null)
  log "coredns $COREDNS_VERSION: go build"
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out/coredns.tmp" .) && mv "$out/coredns.tmp" "$out/coredns"
}

# Kubeflow's training operator (the peer the benchmarks compare with): its v1 command from
# the Go module proxy (the module has no replace directives, so `go install m@v` works),
# plus the manifests `localcluster up --kubeflow` applies, copied from the same module
# (never into the work tree). A cache missing any of them is completed.
TRAINING_OPERATOR_MANIFESTS=(crds/kubeflow.org_pytorchjobs.yaml rbac/role.yaml webhook/manifests.yaml)

build_training_operator() {
  local root="$CACHE/training-operator-$TRAINING_OPERATOR_VERSION"
  local out="$root/bin" man="$root/manifests" missing=0 f
  for f in "${TRAINING_OPERATOR_MANIFESTS[@]}"; do [ -s "$man/$f" ] || missing=1; done
  if [ -x "$out/training-operator.v1" ] && [ "$missing" = 0 ]; then
    log "training-operator $TRAINING_OPERATOR_VERSION: cached"; return
  fi
  local mod="github.com/kubeflow/training-operator"
  mkdir -p "$out"
  if [ ! -x "$out/training-operator.v1" ]; then
    log "training-operator $TRAINING_OPERATOR_VERSION: go install"
    GOBIN="$out" go install -trimpath -ldflags "-s -w" \
      "$mod/cmd/training-operator.v1@$TRAINING_OPERATOR_VERSION"
  fi
  local dir
  dir="$(module_dir "$mod@$TRAINING_OPERATOR_VERSION")"
  for f in "${TRAINING_OPERATOR_MANIFESTS[@]}"; do
    mkdir -p "$man/$(dirname "$f")"
    install -m 0644 "$dir/manifests/base/$f" "$man/$f"
  done
}

# stage_config TOP SRC DEST:REL...: copy each SRC/REL (a glob) into TOP/config/DEST/,
# replacing TOP/config at once (a cache is never half-written).
stage_config() {
  local top="$1" src="$2" pair dest rel
  shift 2
  rm -rf "$top/config.tmp"
  for pair in "$@"; do
    dest="${pair%%:*}" rel="${pair#*:}"
    mkdir -p "$top/config.tmp/$dest"
    cp $src/$rel "$top/config.tmp/$dest/"
  done
  chmod -R u+w "$top/config.tmp"
  rm -rf "$top/config" && mv "$top/config.tmp" "$top/config"
}

# Kueue (sigs.k8s.io/kueue) has no replace directives, so `go install m@v` builds its own
# cmd/kueue main. The manifests `localcluster/cluster/kueue.py` applies come from the same module
# version: the CRDs (config/components/crd/bases), the manager's ClusterRole
# (config/components/rbac/role.yaml) and the webhooks (config/components/webhook/manifests.yaml).
build_kueue() {
  local top="$CACHE/kueue-$KUEUE_VERSION"
  local out="$top/bin"
  if [ -x "$out/kueue" ] && staged "$top" webhook/manifests.yaml rbac/role.yaml; then
    log "kueue $KUEUE_VERSION: cached"; return
  fi
  mkdir -p "$out"
  local dir
  dir="$(module_dir "sigs.k8s.io/kueue@$KUEUE_VERSION")"
  stage_config "$top" "$dir/config/components" "crd:crd/bases/*.yaml" "rbac:rbac/role.yaml" \
    "webhook:webhook/manifests.yaml"
  if [ ! -x "$out/kueue" ]; then
    log "kueue $KUEUE_VERSION: go install sigs.k8s.io/kueue/cmd/kueue"
    local tmpbin="$top/bin.tmp"
    rm -rf "$tmpbin" && mkdir -p "$tmpbin"
    (cd /tmp && GOBIN="$tmpbin" go install -trimpath -ldflags "-s -w \
      -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
      "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION") && mv "$tmpbin/kueue" "$out/kueue"
    rm -rf "$tmpbin"
  fi
}

# JobSet (sigs.k8s.io/jobset): its main package is the module root. `go install m@v` fails
# here (it reads the module's version list, which the proxy refuses for jobset), so the
# module's source is downloaded and built in a writable copy. The manifests
# `localcluster/cluster/jobset.py` applies come from the same module version: the CRD
# (config/components/crd/bases), the manager's ClusterRole (config/components/rbac/role.yaml)
# and the webhooks (config/components/webhook/manifests.yaml and its patches).
build_jobset() {
  local top="$CACHE/jobset-$JOBSET_VERSION"
  local out="$top/bin"
  if [ -x "$out/jobset" ] && staged "$top" webhook/manifests.yaml rbac/role.yaml; then
    log "jobset $JOBSET_VERSION: cached"; return
  fi
  mkdir -p "$out"
  local dir t0=$SECONDS
  dir="$(module_dir "sigs.k8s.io/jobset@$JOBSET_VERSION")"
  stage_config "$top" "$dir/config/components" "crd:crd/bases/*.yaml" "rbac:rbac/role.yaml" \
    "webhook:webhook/manifests.yaml"
  if [ ! -x "$out/jobset" ]; then
    log "jobset $JOBSET_VERSION: go build (module root)"
    local src="$top/src"
    rm -rf "$src" && cp -r "$dir" "$src" && chmod -R u+w "$src"
    (cd "$src" && go build -trimpath -ldflags "-s -w \
      -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" -o "$out/jobset.tmp" .) \
      && mv "$out/jobset.tmp" "$out/jobset"
    rm -rf "$src"
    log "jobset $JOBSET_VERSION: built in $((SECONDS - t0)) s"
  fi
}

# Kubeflow Trainer v2 (github.com/kubeflow/trainer/v2): `go install` builds its
# cmd/trainer-controller-manager (no replace directives). The manifests
# `localcluster/cluster/trainer.py` applies come from the same module version: the CRDs
# (manifests/base/crds), the ClusterRole (manifests/base/rbac/role.yaml), the webhooks
# (manifests/base/webhook/manifests.yaml) and the torch runtime
# (manifests/base/runtimes/torch_distributed.yaml).
build_trainer() {
  local top="$CACHE/trainer-$TRAINER_VERSION"
  local out="$top/bin" mod="github.com/kubeflow/trainer/v2"
  if [ -x "$out/trainer-controller-manager" ] \
      && staged "$top" webhook/manifests.yaml rbac/role.yaml runtimes/torch_distributed.yaml; then
    log "trainer $TRAINER_VERSION: cached"; return
  fi
  mkdir -p "$out"
  local dir t0=$SECONDS
  dir="$(module_dir "$mod@$TRAINER_VERSION")"
  stage_config "$top" "$dir/manifests/base" "crd:crds/trainer.kubeflow.org_*.yaml" \
    "rbac:rbac/role.yaml" "webhook:webhook/manifests.yaml" "runtimes:runtimes/torch_distributed.yaml"
  if [ ! -x "$out/trainer-controller-manager" ]; then
    log "trainer $TRAINER_VERSION: go install $mod/cmd/trainer-controller-manager"
    local tmpbin="$top/bin.tmp"
    rm -rf "$tmpbin" && mkdir -p "$tmpbin"
    (cd /tmp && GOBIN="$tmpbin" go install -trimpath -ldflags "-s -w" \
      "$mod/cmd/trainer-controller-manager@$TRAINER_VERSION") \
      && mv "$tmpbin/trainer-controller-manager" "$out/trainer-controller-manager"
    rm -rf "$tmpbin"
    log "trainer $TRAINER_VERSION: built in $((SECONDS - t0)) s"
  fi
}

# kube-network-policies (sigs.k8s.io/kube-network-policies): no replace directives, so
# `go install m/cmd@v` builds its main package; the binary (named cmd by go install) is
# renamed. Its image (build-images.sh netpol) copies it into an image from scratch.
build_kube_network_policies() {
  local top="$CACHE/kube-network-policies-$KUBE_NETWORK_POLICIES_VERSION"
  local out="$top/bin"
  if [ -x "$out/kube-network-policies" ]; then log "kube-network-policies $KUBE_NETWORK_POLICIES_VERSION: cached"; return; fi
  mkdir -p "$out"
  local tmpbin="$top/bin.tmp" t0=$SECONDS
  rm -rf "$tmpbin" && mkdir -p "$tmpbin"
  log "kube-network-policies $KUBE_NETWORK_POLICIES_VERSION: go install sigs.k8s.io/kube-network-policies/cmd"
  (cd /tmp && GOBIN="$tmpbin" go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kube-network-policies/cmd@$KUBE_NETWORK_POLICIES_VERSION") \
    && mv "$tmpbin/cmd" "$out/kube-network-policies"
  rm -rf "$tmpbin"
  log "kube-network-policies $KUBE_NETWORK_POLICIES_VERSION: built in $((SECONDS - t0)) s"
}

what="${1:-all}"
case "$what" in
  k8s) build_k8s ;;
  etcd) build_etcd ;;
  helm) build_helm ;;
  coredns) build_coredns ;;
  kubeflow) build_training_operator ;;
  kueue) build_kueue ;;
  jobset) build_jobset ;;
  trainer) build_trainer ;;
  netpol) build_kube_network_policies ;;
  # what `make demo` starts: no Kueue, no Kubeflow training operator (their targets build them)
  demo) build_etcd; build_k8s; build_helm; build_coredns ;;
  all) build_etcd; build_k8s; build_helm; build_coredns; build_training_operator; build_kueue
       build_jobset; build_trainer; build_kube_network_policies ;;
  *) echo "usage: $0 [all|demo|k8s|etcd|helm|coredns|kubeflow|kueue|jobset|trainer|netpol]" >&2; exit 2 ;;
esac
