# configmirror: every command a developer or CI needs. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?=
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml testing/pyproject.toml | sha1sum | cut -c1-12)

# The image deploy/ runs (kustomization.yaml's images: entry); `make image` builds this tag.
# No registry publishes it: build it, then load or push it (README, Deploy).
VERSION      := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' src/configmirror/__init__.py)
IMAGE        ?= configmirror:$(VERSION)
KIND_CLUSTER ?= configmirror
KUBECTL      ?= kubectl
# kind: KIND=/path/to/kind, else the one on PATH, else `make kind` builds the pinned one.
# KIND_NODE_IMAGE: the node image kind-test uses (kind's default when empty; `make
# kind-node-image` builds one here) and cluster-test uses (ours when empty).
KIND         ?=
KIND_NODE_IMAGE ?=
KIND_BINARY  := k='$(KIND)'; [ -n "$$k" ] || k=$$(command -v kind) || k=$$(hack/tools/build.sh kind | tail -n 1); echo "$$k"
# A pinned tool's folder, for the targets that print one (make helm, make kind).
TOOL_FOLDER  = set -o pipefail; tool=$$(hack/tools/build.sh $(1) | tail -n 1) && dirname "$$tool"

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml testing/pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint]' -e ./testing
	@rm -f $(VENV)/.installed-*; touch $@

.PHONY: venv
venv: $(STAMP) ## create .venv: configmirror with its test and lint extras, and testing/

.PHONY: demo
demo: $(STAMP) ## local control plane + operator + deploy/examples; Ctrl-C stops it all
	@$(PY) hack/demo.py

.PHONY: controlplane
controlplane: ## build (once) or find kube-apiserver/etcd/kubectl; prints their folder last
	@hack/controlplane/build.sh

.PHONY: controlplane-oldest
controlplane-oldest: ## build (once) or find kube-apiserver/etcd of the oldest Kubernetes the docs claim; prints their folder last
	@hack/controlplane/build.sh --oldest

.PHONY: node
node: ## build (once) or find the kind node image's binaries too (kubelet, kubeadm, ...; one go build)
	@hack/controlplane/build.sh --node

.PHONY: kind
kind: ## build (once) or find kind (sigs.k8s.io/kind) for kind-test and cluster-test; prints its folder last
	@$(call TOOL_FOLDER,kind)

.PHONY: kind-node-image
kind-node-image: ## build (once) or find a kind node image of our own Kubernetes build; prints its name last
	@hack/kind/node-image.sh

.PHONY: helm
helm: ## build (once) or find helm for the chart tests; prints its folder last
	@$(call TOOL_FOLDER,helm)

.PHONY: cosign
cosign: ## build (once) or find cosign (signs the release); prints its path last
	@hack/tools/build.sh cosign

.PHONY: crane
crane: ## build (once) or find crane (reads a registry back); prints its path last
	@hack/tools/build.sh crane

.PHONY: syft
syft: ## build (once) or find syft (the release's SBOMs); prints its path last
	@hack/tools/build.sh syft

.PHONY: actionlint
actionlint: ## build (once) or find actionlint (checks .github/workflows/); prints its path last
	@hack/tools/build.sh actionlint

.PHONY: promtool
promtool: ## build (once) or find promtool for the alert tests; prints its folder last
	@hack/promtool/build.sh

.PHONY: test
# The real-node tier (`-m node`) is `make cluster-test`, a separate step of .ci/run: with it,
# a fresh machine's `make test` would take 40-50 minutes (the node's Go build alone is 12-25).
# Each tool a test needs (the control plane, helm, promtool, Docker) is found, or built once
# (CONFIGMIRROR_BUILD=1), by configmirror_testing.tools: without it the test skips here and
# fails in CI. hack/test.sh runs tests/integration at full priority and, beside it in two lanes
# at nice 10, tests/release, tests/image, tests/unit and test-integration-oldest (with all in
# one process the suite took 30 minutes warm on this 2-core machine).
test: $(STAMP) ## the suite: unit, a real local control plane, the chart, the alerts, the image, the release, the oldest Kubernetes (not the node: cluster-test)
	@PY=$(PY) OLDEST_TESTS="$(OLDEST_TESTS)" PYTEST_ARGS="$(PYTEST_ARGS)" hack/test.sh

# The oldest Kubernetes minor the docs claim (OLDEST_* in hack/controlplane/versions.env) runs
# the integration modules that talk to the API server most directly: replication, both
# admissions, Secrets, the informer, leader election, pulls, source namespaces, the published
# policy. Tests that need a newer API are marked kubernetes(since=...): deselected there and
# listed with their reason at the end of its run.
OLDEST_VERSION := $(shell sed -n 's/^OLDEST_KUBERNETES_VERSION=//p' hack/controlplane/versions.env)
OLDEST_TESTS := $(addprefix tests/integration/test_,$(addsuffix .py,replication admission secrets kustomize_secrets informer leaderelection pull source_namespaces policy))

.PHONY: test-unit test-integration test-integration-oldest test-image test-release test-node
# The tiers as folders, each runnable alone (README, Development). test-unit needs no Go, Docker
# or network; the others find (or build, CONFIGMIRROR_BUILD=1) what they need, and skip without
# it here (in CI they fail).
test-unit: $(STAMP) ## tests/unit: pure logic, in seconds, no Go, Docker or network
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP) ## tests/integration: the real kube-apiserver + etcd, helm, promtool
	CONFIGMIRROR_BUILD=1 $(PY) -m pytest -m "not node" tests/integration $(PYTEST_ARGS)

OLDEST_RUN = CONFIGMIRROR_BUILD=1 CONFIGMIRROR_KUBERNETES=oldest $(PY) -m pytest -m "not node" $(OLDEST_TESTS) $(PYTEST_ARGS)

test-integration-oldest: $(STAMP) ## tests/integration's API-facing modules against the oldest Kubernetes the docs claim (1.32)
	$(OLDEST_RUN)

test-image: $(STAMP) ## tests/image: the image, built and run (Docker)
	CONFIGMIRROR_BUILD=1 $(PY) -m pytest -m "not node" tests/image $(PYTEST_ARGS)

test-release: $(STAMP) ## tests/release: make release into a registry here (root, buildah, qemu)
	CONFIGMIRROR_BUILD=1 $(PY) -m pytest -m "not node" tests/release $(PYTEST_ARGS)

test-node: cluster-test ## tests/node: kind clusters (the same as make cluster-test)

.PHONY: cluster-test
# The node tier (tests marked `node`): a kind cluster of the node image (KIND_NODE_IMAGE, else
# ours from `make kind-node-image`) per session, deploy/ and the chart on it.
cluster-test: $(STAMP) ## only the node tier, on kind: deploy/ and the chart on a node, failover, eviction, namespaces
	@set -euo pipefail; \
	kind=$$(dirname "$$($(KIND_BINARY))"); \
	node_image=$${KIND_NODE_IMAGE:-$$(hack/kind/node-image.sh | tail -n 1)}; \
	echo "cluster-test: building image $(IMAGE)"; hack/image.sh $(IMAGE); \
	echo "cluster-test: kind clusters of $$node_image, deploy/, the chart, and the e2e tests against them"; \
	CONFIGMIRROR_BUILD=1 CONFIGMIRROR_KIND_DIR=$$kind \
	KIND_NODE_IMAGE=$$node_image CONFIGMIRROR_E2E_IMAGE=$(IMAGE) \
	  $(PY) -m pytest -m node tests $(PYTEST_ARGS)

.PHONY: unit
unit: $(STAMP) ## run only the unit tests (no control plane)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

.PHONY: mutate
mutate: $(STAMP) ## mutation check of the queue, controller, planner, replicator, events, kube, transport, status, caches, clusters, tokens (MUTATE_ARGS=--jobs 2, --only REGEX)
	$(PY) hack/mutate.py $(MUTATE_ARGS)

.PHONY: docs
docs: $(STAMP) ## the documentation site (MkDocs, Material) into site/, --strict: a broken link or anchor fails
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

.PHONY: docs-reference
docs-reference: $(STAMP) ## rewrite docs/reference/ from the code and the chart (flags, policy, metrics, Events, values, alerts)
	$(PY) hack/docs_reference.py

.PHONY: fuzz
fuzz: $(STAMP) ## the HTTP parser against h11, longer: 50,000 answers per seed in tests/unit/h11_fuzz_seeds.txt
	@for seed in $$(grep -v '^#' tests/unit/h11_fuzz_seeds.txt); do \
	  echo "make fuzz: --hypothesis-seed=$$seed"; \
	  HYPOTHESIS_PROFILE=h11-fuzz $(PY) -m pytest -q -p no:cacheprovider --timeout=3600 \
	    --hypothesis-seed=$$seed --hypothesis-show-statistics \
	    tests/unit/test_transport_h11.py || exit 1; \
	done

.PHONY: lint
lint: $(STAMP) ## ruff + mypy --strict + the layers (lint-imports) + hadolint (Dockerfile) + actionlint (.github/workflows/) + make docs
	$(VENV)/bin/ruff check src testing tests bench hack
	$(VENV)/bin/mypy --strict src testing
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/hadolint Dockerfile
	@# With shellcheck on PATH (.ci/run installs it), actionlint checks every run: script too.
	@set -o pipefail; actionlint=$$(hack/tools/build.sh actionlint | tail -n 1) && \
	  echo "$$actionlint .github/workflows/*.yml" && $$actionlint .github/workflows/*.yml
	@$(MAKE) --no-print-directory docs

# Each benchmark starts its own control plane and prints ratios against baselines measured in
# the same run: the Go client-go writer (bench/gowriter, built once into the cache beside the
# control plane) and the Python bare client. Operators run with --kube-api-qps 0.
# `make bench BENCH_QUICK=1` runs every script at a tenth of the sizes. PEERS='--peer NAME=BINARY
# --peer-crds NAME=PATH ...' adds peer operators the user built to bench_peers.py.
SHAPE_NS   := $(if $(BENCH_QUICK),500,5000)
WIDE_NS    := $(if $(BENCH_QUICK),100,1000)
.PHONY: bench
bench: $(STAMP) ## benchmarks; each prints ratios against baselines measured in the same run
	$(PY) -m pip install --quiet -e '.[bench]'
	@bench/gowriter/build.sh >/dev/null
	$(PY) bench/bench_workqueue.py
	cd bench && ../$(PY) bench_convergence.py --sources 1 --namespaces $(SHAPE_NS) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_convergence.py --sources 200 --namespaces $(if $(BENCH_QUICK),5,50) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_convergence.py --sources 20 --namespaces $(if $(BENCH_QUICK),50,500) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_convergence.py --clusters 3 --namespaces $(if $(BENCH_QUICK),100,1000) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_scale.py $(if $(BENCH_QUICK),--points 100,1000,10000 --namespaces 100 --edits 5 --new-namespaces 5 --idle 10) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_storm.py --namespaces $(WIDE_NS) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_latency.py $(BENCH_ARGS)
	cd bench && ../$(PY) bench_latency.py --namespaces $(SHAPE_NS) --edits 5 $(BENCH_ARGS)
	cd bench && ../$(PY) bench_churn.py $(BENCH_ARGS)
	cd bench && ../$(PY) bench_restart.py --sources 20 --namespaces $(if $(BENCH_QUICK),50,500) $(if $(BENCH_QUICK),--rounds 1 --cycles 1 --resync 10) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_workers.py --namespaces $(SHAPE_NS) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_workers.py --sources 200 --namespaces $(if $(BENCH_QUICK),5,50) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_peers.py --namespaces $(if $(BENCH_QUICK),100,1000) $(PEERS) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_kopf.py --sources 200 --namespaces $(if $(BENCH_QUICK),5,50) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_memory.py $(if $(BENCH_QUICK),--configmaps 1000 --namespaces 10 --wide-namespaces 500) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_secret_memory.py $(BENCH_ARGS)
	cd bench && ../$(PY) bench_kinds.py --namespaces $(WIDE_NS) $(if $(BENCH_QUICK),--objects 30 --runs 1 --idle-seconds 10) $(BENCH_ARGS)
	cd bench && ../$(PY) bench_faults.py $(if $(BENCH_QUICK),--namespaces 20 --repeats 1 --quiet-minutes 2 --storm-namespaces 100) $(BENCH_ARGS)
	$(MAKE) --no-print-directory bench-plot
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory image && \
	  cd bench && ../$(PY) bench_pod.py; else echo "bench: no Docker daemon; skipping bench_pod.py"; fi

.PHONY: bench-plot
bench-plot: $(STAMP) ## docs/scale.png and docs/convergence.png from the benchmarks' saved results
	$(PY) -m pip install --quiet -e '.[bench]'
	cd bench && ../$(PY) plot.py

.PHONY: run
run: $(STAMP) ## run the operator on the current kubeconfig context (Ctrl-C stops it)
	$(PY) -m configmirror run

.PHONY: image
# No dev venv: hack/wheels.sh builds the wheels with any python3 that has pip, and the image
# holds configmirror and its run-time dependencies only.
image: ## build the image $(IMAGE) (on python:3.11-slim; on a Debian-built base if that cannot be pulled)
	hack/image.sh $(IMAGE)

.PHONY: dist
# `pip install dist/configmirror-$(VERSION)-py3-none-any.whl` (or `pip install .` in a clone):
# the commands configmirror and kubectl-configmirror with the run-time dependencies only.
dist: ## configmirror's wheel into dist/ (no dev venv: any python3 with pip, PYTHON=...)
	@hack/release/wheel.sh dist

# `make release REGISTRY=ghcr.io/you VERSION=0.1.0`: REGISTRY is yours (no default: we publish
# nowhere); VERSION must be configmirror's own. COSIGN_KEY (+ COSIGN_PASSWORD) signs, else
# UNSIGNED=1 is needed. hack/release/release.sh says the rest.
.PHONY: release
release: $(STAMP) ## multi-arch image index, signed; the chart as OCI; dist/ (REGISTRY=... VERSION=...)
	@REGISTRY='$(REGISTRY)' VERSION='$(VERSION)' PYTHON=$(PY) hack/release/release.sh

.PHONY: deploy
deploy: ## kubectl apply -k deploy/ (RBAC, Deployment, PDB, metrics Service)
	$(KUBECTL) apply -k deploy/

.PHONY: undeploy
undeploy: ## kubectl delete -k deploy/
	$(KUBECTL) delete -k deploy/ --ignore-not-found

.PHONY: kind-test
# kubectl: KUBECTL=... when given, else the test control plane's (when built: version-matched
# to our node image), else kubectl on PATH. The nodes run in Docker, or in Podman where Docker
# cannot start a privileged container (configmirror_testing.kind; KIND_EXPERIMENTAL_PROVIDER
# chooses).
kind-test: $(STAMP) ## kind cluster (KIND_NODE_IMAGE=..., default kind's) + image + deploy/ + the e2e tests (KEEP_CLUSTER=1 keeps it)
	@set -euo pipefail; \
	kind=$$($(KIND_BINARY)); kubectl='$(KUBECTL)'; \
	if [ '$(origin KUBECTL)' = file ] && cp=$$(CONFIGMIRROR_FIND_ONLY=1 hack/controlplane/build.sh 2>/dev/null | tail -n 1); then \
	  kubectl=$$cp/kubectl; fi; \
	kubeconfig=$$(mktemp); \
	cleanup() { status=$$?; \
	  if [ $$status != 0 ] && logs=$$(mktemp -d --suffix=.kind-logs) \
	     && "$$kind" export logs "$$logs" --name $(KIND_CLUSTER) >/dev/null 2>&1; then \
	    echo "kind-test: failed; the nodes' logs are in $$logs"; fi; \
	  if [ "$${KEEP_CLUSTER:-}" = 1 ]; then \
	  echo "kind-test: keeping cluster $(KIND_CLUSTER) (kind export kubeconfig --name $(KIND_CLUSTER) to use it)"; \
	  else echo "kind-test: deleting cluster $(KIND_CLUSTER)"; \
	  "$$kind" delete cluster --name $(KIND_CLUSTER) --kubeconfig $$kubeconfig; fi; rm -f $$kubeconfig; }; \
	trap cleanup EXIT; \
	provider=$$($(PY) -m configmirror_testing.kind env "$${KIND_NODE_IMAGE:-}"); eval "$$provider"; \
	echo "kind-test: creating cluster $(KIND_CLUSTER) with $$("$$kind" version) ($${KIND_NODE_IMAGE:-the default node image of kind}, $${KIND_EXPERIMENTAL_PROVIDER:-docker})"; \
	"$$kind" create cluster --name $(KIND_CLUSTER) --config hack/kind/cluster.yaml \
	  $${KIND_NODE_IMAGE:+--image "$$KIND_NODE_IMAGE"} --kubeconfig $$kubeconfig --wait 180s; \
	echo "kind-test: building image $(IMAGE)"; hack/image.sh $(IMAGE); \
	echo "kind-test: loading the image into the cluster's nodes"; \
	"$$kind" load docker-image $(IMAGE) --name $(KIND_CLUSTER); \
	echo "kind-test: applying deploy/"; "$$kubectl" --kubeconfig $$kubeconfig apply -k deploy/; \
	echo "kind-test: waiting for the rollout"; \
	"$$kubectl" --kubeconfig $$kubeconfig -n configmirror rollout status deployment/configmirror --timeout=180s; \
	echo "kind-test: running the end-to-end tests against the in-cluster operator"; \
	CONFIGMIRROR_E2E_KUBECONFIG=$$kubeconfig CONFIGMIRROR_E2E_OPERATOR=in-cluster \
	  $(PY) -m pytest tests/integration/test_replication.py $(PYTEST_ARGS)

.PHONY: clean
clean: ## remove the venv and caches in the repo (the control-plane cache is kept)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist site src/*.egg-info
