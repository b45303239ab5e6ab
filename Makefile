# disttrain-operator: every target does its own set-up and is safe to run twice.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DISTTRAIN_CACHE ?= $(HOME)/.cache/disttrain

.PHONY: venv build-cluster up down demo test test-unit test-probe test-e2e test-scale bench bench-diagnosis crds chart-readme clean

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[train,test]'
	touch $(STAMP)

venv: $(STAMP)

# Control-plane binaries (kube-apiserver, controller-manager, scheduler, kubectl, etcd, helm)
# built from their Go modules, cached by version under $(DISTTRAIN_CACHE).
build-cluster:
	bash localcluster/build/build-k8s.sh all

up: venv build-cluster
	$(VPY) -m localcluster up

down: venv
	-$(VPY) -m localcluster.operator_install stop
	$(VPY) -m localcluster down

crds: venv
	$(VPY) -m disttrain.crdgen > crds/disttrain.dev_disttrainingjobs.yaml
	cp crds/*.yaml charts/disttrain-operator/crds/

chart-readme: venv
	$(VPY) charts/generate_readme.py > charts/disttrain-operator/README.md

# make demo SCENARIO=<name in scenarios/ | path>: build that scenario's cluster, run its job,
# check its expected outcome (DISTTRAIN_CLUSTER_INSTANCE=N picks a separate local cluster).
demo: venv build-cluster
ifdef SCENARIO
	$(VPY) -m localcluster.scenariorun $(SCENARIO)
else
	$(VPY) -m localcluster.demo
endif

test: venv build-cluster
	$(VPY) -m pytest -q -ra

test-unit: venv
	$(VPY) -m pytest -q -ra tests/unit

test-probe: venv
	$(VPY) -m pytest -q -ra tests/probe

test-e2e: venv build-cluster
	$(VPY) -m pytest -q -ra tests/e2e

# Scenarios marked `slow: true` (minutes each, e.g. the example at 16 nodes), left out of `make test`.
test-scale: venv build-cluster
	DISTTRAIN_SLOW_SCENARIOS=1 $(VPY) -m pytest -q -ra tests/e2e/test_scenarios.py -k "$(or $(SCENARIO),16-nodes)"

bench: venv build-cluster
	$(VPY) benchmarks/bench_overhead.py

# Time to diagnosis of every failing scenario, probe on vs the same job without probes
# (capped, 300 s by default); e.g. BENCH_ARGS='--cap 60 --scenario firewall-master-drop'.
bench-diagnosis: venv build-cluster
	$(VPY) benchmarks/bench_diagnosis.py $(BENCH_ARGS)

clean: down
	rm -rf $(VENV) .localcluster
