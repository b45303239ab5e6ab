# disttrain-operator: every target does its own set-up and is safe to run twice.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DISTTRAIN_CACHE ?= $(HOME)/.cache/disttrain

.PHONY: prune-images test-scenarios test-in-place test-stall test-regression system-deps venv build-cluster images up down demo lint test test-unit test-probe test-e2e fuzz test-scale bench bench-admission-check bench-diagnosis bench-scale bench-screening crds chart-readme api-docs module-docs clean gpu-check chaos test-corpus test-generated test-generated-direct

# System tools (ip, tc, nft, unshare, go, make, ...): every target that builds or runs the
# local cluster checks them first, so a missing one is installed (Debian packages, with the
# reason) or named before the long builds, never after. Quiet and ~20 ms when all are there.
SYSTEM_DEPS := PY=$(PY) VENV=$(VENV) bash localcluster/build/system-deps.sh

system-deps:
	@$(SYSTEM_DEPS)

$(STAMP): pyproject.toml
	@$(SYSTEM_DEPS) venv
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[train,test]'
	touch $(STAMP)

venv: $(STAMP)

# Control-plane and node binaries (kube-apiserver, controller-manager, scheduler, kubectl,
# kubelet, kube-proxy, etcd, helm),
# CoreDNS, Kubeflow's training operator, Kueue and kube-network-policies built from their Go modules, cached by version
# under $(DISTTRAIN_CACHE).
build-cluster: system-deps
	bash localcluster/build/build-k8s.sh all

# The operator, probe and example images from their Dockerfiles, with no registry and no
# Docker daemon: a Debian base made by mmdebstrap, then buildah (its own storage under
# $(DISTTRAIN_CACHE)/buildah), plus the shared read-only torch tree the images run with
# (taken from the venv); each cached by content. Installs buildah, mmdebstrap and runc
# first if missing. `make images IMAGES=operator` builds one (base|operator|probe|example|torch-tree).
images: venv
	@$(SYSTEM_DEPS) images
	TORCH_TREE_PYTHON=$(abspath $(VPY)) bash localcluster/build/build-images.sh $(or $(IMAGES),all)
	@bash localcluster/build/build-images.sh info

# Remove the docker-archives of older image builds (`make images` does it too; each keeps
# the current archive and the newest other one per image).
prune-images:
	bash localcluster/build/build-images.sh prune

up: system-deps venv build-cluster
	$(VPY) -m localcluster up

down: venv
	-$(VPY) -m localcluster.cluster.operator_install stop
	$(VPY) -m localcluster down

crds: venv
	$(VPY) -m disttrain.crdgen > crds/disttrain.dev_disttrainingjobs.yaml
	cp crds/*.yaml charts/disttrain-operator/crds/

chart-readme: venv
	$(VPY) charts/generate_readme.py > charts/disttrain-operator/README.md

# docs/api.md from the models (through the CRD); a unit test fails when it is stale.
api-docs: venv
	$(VPY) docs/generate_api.py > docs/api.md

# The module tables (docs/generate_modules.py's PACKAGES) from the module docstrings; a unit test fails when one is stale.
module-docs:
	$(PY) docs/generate_modules.py --write

# make demo: real kubelets, each with its own containerd, run the images `make images`
# built; Helm installs the operator from its image; the example validates and trains in
# containers. Builds only what it starts (control plane, kubelet, CoreDNS, Helm: not Kueue or
# Kubeflow's training operator).
# make demo SCENARIO=<name in scenarios/ | path>: build that scenario's cluster, run its job,
# check its expected outcome (DISTTRAIN_CLUSTER_INSTANCE=N picks a separate local cluster).
demo: system-deps venv images
	@$(SYSTEM_DEPS) nodes
ifdef SCENARIO
	bash localcluster/build/build-k8s.sh all
	$(VPY) -m localcluster.scenariorun $(SCENARIO)
else
	bash localcluster/build/build-k8s.sh demo
	$(VPY) -m localcluster.demo
endif

# Import borders (import-linter contracts in pyproject.toml: the operator's layers, the
# local cluster's rooms, the product never importing localcluster, the probe never importing
# the operator), ruff, and mypy on the operator and the probe ([tool.mypy] in pyproject.toml;
# its cache in the venv), and the sizes of the product and the local cluster (issues 17, 32):
# modules <= 450 lines, functions <= 80 (tools/check_sizes.py), at most 6 parameters (ruff's
# PLR0913); no import inside a function of the product without its reason on the line
# (tools/check_imports.py, issue 32).
# The working tree's packages come first on the path, before the venv's editable install.
LINT_PATH := operator:probe_image:localcluster
lint: venv
	PYTHONPATH=$(LINT_PATH) $(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check --no-cache operator probe_image benchmarks docs charts localcluster tests tools
	$(VPY) tools/check_sizes.py
	$(VPY) tools/check_imports.py
	$(VENV)/bin/mypy --cache-dir $(VENV)/.mypy_cache

test: lint system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	$(VPY) -m pytest -q -ra --durations=30

test-unit: venv
	$(VPY) -m pytest -q -ra tests/unit

test-probe: system-deps venv
	$(VPY) -m pytest -q -ra tests/probe

test-e2e: system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	$(VPY) -m pytest -q -ra tests/e2e

# The corpus of real specs (tests/e2e/corpus/: Kubeflow, Trainer, JobSet, torchelastic,
# Volcano and Kubernetes-docs pod templates as DistTrainingJobs), every entry, one at a time,
# each against its expected end (`make test` runs a seeded sample of 5);
# CORPUS=name,name runs those.
test-corpus: system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	DISTTRAIN_CORPUS=$(or $(CORPUS),all) $(VPY) -m pytest -q -ra tests/e2e/test_corpus.py

# The generated suites (tests/fuzz) at length: random seeds, 10,000 generated probe reports
# and manifests, 2,000 reconcile sequences (`make test` runs the same suites derandomized
# with far fewer; tests/conftest.py).
fuzz: venv
	HYPOTHESIS_PROFILE=fuzz $(VPY) -m pytest -q -ra --timeout=3600 --hypothesis-show-statistics tests/fuzz

# Fault injection, the long run (tests/e2e/test_chaos.py; `make test` runs a bounded
# subset): 21 operator kills over 7 jobs, 3 apiserver restarts, a node lost at every probe
# phase; prints a summary table. CHAOS_SEED=<n> replays a run's kill points.
chaos: system-deps venv build-cluster
	DISTTRAIN_CHAOS=long $(if $(CHAOS_SEED),DISTTRAIN_CHAOS_SEED=$(CHAOS_SEED)) $(VPY) -m pytest -q -s -ra tests/e2e/test_chaos.py -k long

# Every scenario in scenarios/ on the real kubelets (`make test` runs healthy, the ordinary-spec
# scenarios and 16 others drawn by the day; DISTTRAIN_SCENARIO_SEED=N picks another draw).
test-scenarios: system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	DISTTRAIN_ALL_SCENARIOS=1 $(VPY) -m pytest -q -ra tests/e2e/test_scenarios.py -k "not regression"

# The scenarios of each kind of cause again with probe.placement InPlace (issue 34; `make
# test` runs healthy and 2 others drawn by the day).
test-in-place: system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	DISTTRAIN_IN_PLACE_ALL=1 $(VPY) -m pytest -q -ra tests/e2e/test_scenarios.py -k "in_place"

# Every generated case kept under scenarios/regression/ (`make test` runs 3 of them, drawn by
# the day; DISTTRAIN_REGRESSION_SEED=N picks another draw).
test-regression: system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	DISTTRAIN_ALL_REGRESSIONS=1 $(VPY) -m pytest -q -ra tests/e2e/test_scenarios.py -k regression

# The stall watch on the real kubelets (issue 33): every culprit (`make test` runs one),
# a frozen rank, a restart that leaves the frozen rank's node out (3 nodes), and a
# checkpoint under the timeout that must stay a wait.
test-stall: system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	DISTTRAIN_STALL_ALL=1 DISTTRAIN_E2E_NODES=3 $(VPY) -m pytest -q -ra tests/e2e/test_stall.py

# Generated faults (issue 31; localcluster/localcluster/faults/): GENERATED_CASES seeded cases
# across every fault class on the direct path (the real probes in the nodes' network
# namespaces, the operator's verdict on their reports: about 15 s a case; NetworkPolicy, mesh
# and pod-network cases are cluster-only and skipped there), then GENERATED_SAMPLE cases of the
# same seed through the whole cluster (1-2 minutes each); each graded against the oracle,
# printing `N cases: P% right, H half, W wrong, S silent passes`, the per-class counts in
# benchmarks/results/generated-direct.md and generated.md; every case not right is kept under
# scenarios/regression/ (`make test-regression`). GENERATED_CLASSES=firewall,names narrows it.
GENERATED_CASES ?= 300
GENERATED_SAMPLE ?= 20
GENERATED_SEED ?= 1
GENERATED_ARGS = --seed $(GENERATED_SEED) $(if $(GENERATED_CLASSES),--classes $(GENERATED_CLASSES))
test-generated: system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	rc=0; \
	$(VPY) -m localcluster.faults run --direct $(GENERATED_ARGS) --cases $(GENERATED_CASES) --out benchmarks/results/generated-direct.md || rc=1; \
	$(VPY) -m localcluster.faults run $(GENERATED_ARGS) --cases $(GENERATED_SAMPLE) --out benchmarks/results/generated.md || rc=1; \
	exit $$rc

test-generated-direct: system-deps venv
	$(VPY) -m localcluster.faults run --direct --seed $(GENERATED_SEED) --cases $(GENERATED_CASES) $(if $(GENERATED_CLASSES),--classes $(GENERATED_CLASSES)) --out benchmarks/results/generated-direct.md

# Scenarios marked `slow: true` (minutes each, e.g. the example at 16 nodes), left out of `make test`.
test-scale: system-deps venv build-cluster
	DISTTRAIN_SLOW_SCENARIOS=1 $(VPY) -m pytest -q -ra tests/e2e/test_scenarios.py -k "$(or $(SCENARIO),16-nodes)"

# Pod start, apply -> training pods Running: real nodes vs the node agent, 2 and 8 nodes,
# probe on vs off, as ratios in one run (benchmarks/results/pod-start.md).
bench: system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	$(VPY) benchmarks/bench_overhead.py $(BENCH_ARGS)

# The admission check's cost: quota reservation -> admission with the check vs the same
# job in a ClusterQueue without it, one run (benchmarks/results/admission-check.md).
bench-admission-check: system-deps venv build-cluster images
	@$(SYSTEM_DEPS) nodes
	$(VPY) benchmarks/bench_admission_check.py $(BENCH_ARGS)

# Time to diagnosis of every failing scenario, probe on vs the same job without probes
# (capped, 300 s by default); e.g. BENCH_ARGS='--cap 60 --scenario firewall-master-drop'.
bench-diagnosis: system-deps venv build-cluster
	$(VPY) benchmarks/bench_diagnosis.py $(BENCH_ARGS)

# Scale: 2, 8, 16, 32 simulated nodes (probe on vs off), the probe planner up to 4096 ranks,
# 100 jobs at once (benchmarks/results/scale.md); e.g. BENCH_ARGS='--nodes 2,8 --jobs 10'.
bench-scale: system-deps venv build-cluster
	$(VPY) benchmarks/bench_scale.py $(BENCH_ARGS)

# Group screening vs today's probe plan beyond the full-mesh limit: a pure simulation at
# 256, 1024, 4096 ranks with injected faults, no cluster (benchmarks/results/screening.md).
bench-screening: venv
	$(VPY) benchmarks/bench_screening.py $(BENCH_ARGS)

# The probe's NCCL path on every local GPU (one process per GPU, NCCL_DEBUG=INFO): init,
# all-reduce correctness, algbw/busbw for a few sizes, versions, the transports NCCL used;
# one JSON summary on stdout (< 5 min). Without a GPU it says so and exits 0.
# GPU_PY=python3: a Python that already has torch (a GPU machine without PyPI), no venv.
GPU_PY ?=
gpu-check: $(if $(GPU_PY),,venv)
	$(if $(GPU_PY),PYTHONPATH=probe_image $(GPU_PY),$(VPY)) -m disttrain_probe.run.gpucheck $(GPU_CHECK_ARGS)

clean: down
	rm -rf $(VENV) .localcluster
