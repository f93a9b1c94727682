# gpuplan — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
KUBECONFIG_LOCAL := $(CURDIR)/.cluster/kubeconfig
# real-kubelet nodes beside the kwok ones (make cluster-up KUBELETS=2); 0 leaves them as they are
KUBELETS ?= 0
export PATH := $(CURDIR)/$(BIN):$(PATH)

.DEFAULT_GOAL := help
.PHONY: help install lock test unit view e2e chaos kubelet lint bench bench-planner bench-packing bench-operator bench-loadtest golden helm \
	image cluster-up cluster-down demo loop kind-e2e clean

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python ## create .venv and install gpuplan with its test and lint tools (versions pinned by constraints.txt)
	$(BIN)/pip install -q -c constraints.txt -e '.[operator,loadtest,test,lint]'

lock: $(BIN)/python ## rewrite constraints.txt from the newest versions pyproject.toml allows (review the diff)
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv && .lock-venv/bin/pip install -q --upgrade pip
	.lock-venv/bin/pip install -q '.[operator,loadtest,test,lint]'
	{ echo '# Every version CI installs (make install). Rewritten by make lock; edit pyproject.toml, not this.'; \
	  .lock-venv/bin/pip freeze --exclude gpuplan --disable-pip-version-check; } >constraints.txt
	rm -rf .lock-venv

test: unit view e2e chaos kubelet kind-e2e ## run every test: unit, property, loadtest, chart, the plan page in a browser, then e2e, the fault suite, the real-kubelet suite and the demo on kind

unit: ## unit and property tests (no cluster needed)
	$(BIN)/pytest -q tests --ignore=tests/view

view: ## the plan page in headless Chromium: sample, DRA and 5,000-node pages (bash hack/install-browser.sh first)
	$(BIN)/pytest -q tests/view

e2e: ## end-to-end tests against a real local control plane (starts it; clears the demo first)
	bash hack/cluster-up.sh
	bash hack/demo.sh --clean
	KUBECONFIG=$(KUBECONFIG_LOCAL) $(BIN)/pytest -q e2e --ignore=e2e/chaos --ignore=e2e/kubelet --ignore=e2e/kind

chaos: ## the fault suite on the local cluster: concurrency, freshness, API faults, churn, peering, fuzz (~10 min)
	bash hack/cluster-up.sh
	bash hack/demo.sh --clean
	KUBECONFIG=$(KUBECONFIG_LOCAL) $(BIN)/pytest -q e2e/chaos

kubelet: ## the real-kubelet suite: 2 real nodes (podman, containerd, kubelet, fake GPU plugin) and a DRA node run plans, and the loop, small
	KUBELETS=2 KUBELET_DRA_NODES=1 bash hack/cluster-up.sh
	KUBECONFIG=$(KUBECONFIG_LOCAL) $(BIN)/pytest -q e2e/kubelet

loop: install ## the product's loop on real pods: measure, classify, plan, deploy, compare with the naive splits (~10 min)
	KUBELETS=2 KUBELET_GPUS=12 bash hack/cluster-up.sh
	$(BIN)/python -m e2e.kubelet.run_loop

lint: ## ruff, mypy --strict, layer contracts (import-linter), chart CRD and dashboard drift, doc references
	$(BIN)/ruff check planner gpuplan operator loadtest tests bench e2e hack/dashboard.py
	$(BIN)/ruff format --check planner gpuplan operator loadtest tests bench e2e hack/dashboard.py
	$(BIN)/mypy
	$(BIN)/lint-imports
	bash hack/check-crd-drift.sh
	$(BIN)/python hack/dashboard.py --check
	bash hack/check-doc-references.sh

bench: bench-planner bench-packing bench-operator bench-loadtest ## every benchmark: planner scale, packings, operator end to end, load tester vs vegeta

bench-planner: ## the planner's scale curve (100-5,000 nodes) against the previous release and brute force
	$(BIN)/python bench/run.py

bench-packing: ## 22 classic bin-packing instances at their optimum and one node fewer, beside plain CP-SAT (~15 min)
	$(BIN)/python bench/binpack.py --check-minimal

bench-operator: ## kubectl apply to every pod Running, 100 and 1,000 kwok nodes (starts the local cluster)
	bash hack/cluster-up.sh
	$(BIN)/python bench/cache_memory.py
	$(BIN)/python bench/cache_memory.py --page 0
	KUBECONFIG=$(KUBECONFIG_LOCAL) $(BIN)/python bench/operator_bench.py

bench-loadtest: ## gpuplan loadtest vs vegeta on a loopback nginx, knees, shards (installs nginx-light, vegeta)
	$(BIN)/python bench/loadtest_bench.py

golden: ## rewrite tests/data/*/values.yaml from the current renderer (review the diff; CI never runs this)
	$(BIN)/python -m tests.golden

helm: ## build (once) and print the helm binary used by the chart tests
	@bash hack/install-helm.sh

image: install ## build the operator image with podman, offline from wheels (hack/build-image.sh)
	bash hack/build-image.sh

cluster-up: ## start the local kube-apiserver/scheduler/controller-manager + kwok nodes (KUBELETS=N: N real nodes too)
	KUBELETS=$(KUBELETS) bash hack/cluster-up.sh

cluster-down: ## stop the demo operator (if running) and the local cluster (CLUSTER=kind: the kind one)
	-@[ -f .cluster/operator.pid ] && kill $$(cat .cluster/operator.pid) 2>/dev/null; rm -f .cluster/operator.pid
	$(if $(filter kind,$(CLUSTER)),bash hack/kind/down.sh,bash hack/cluster-down.sh)

demo: install ## local cluster + CRD + operator + the sample plan (CLUSTER=kind: on kind, with Docker or podman)
	CLUSTER=$(or $(CLUSTER),local) bash hack/demo.sh

kind-e2e: install ## make demo CLUSTER=kind on a kind cluster made here (podman, a node image from the harness's binaries), checked, deleted (~2.5 min warm)
	bash hack/install-image-tools.sh --kind
	@if [ -f .cluster/operator.pid ] && kill -0 $$(cat .cluster/operator.pid) 2>/dev/null; then \
	  echo "a demo operator is running (make cluster-down stops it): kind-e2e starts its own" >&2; exit 1; fi
	trap '[ -f .cluster/operator.pid ] && kill $$(cat .cluster/operator.pid) 2>/dev/null; rm -f .cluster/operator.pid; bash hack/kind/down.sh' EXIT; \
	  CLUSTER=kind bash hack/demo.sh && KUBECONFIG=$(CURDIR)/.cluster/kind-kubeconfig $(BIN)/pytest -q e2e/kind

clean: ## remove build and cache files
	rm -rf build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
