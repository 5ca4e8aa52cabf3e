# configmirror: every command a developer or CI needs. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?=
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

# The folder with kube-apiserver, etcd, etcdctl and kubectl (built once, cached outside the repo).
CONTROLPLANE = $(shell hack/controlplane/build.sh | tail -n 1)

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint]'
	@rm -f $(VENV)/.installed-*; touch $@

.PHONY: venv
venv: $(STAMP) ## create .venv and install configmirror with its test and lint extras

.PHONY: demo
demo: $(STAMP) ## local control plane + operator + deploy/examples; Ctrl-C stops it all
	@$(PY) hack/demo.py

.PHONY: controlplane
controlplane: ## build (once) or find kube-apiserver/etcd/kubectl; prints their folder last
	@hack/controlplane/build.sh

.PHONY: test
test: $(STAMP) ## run the whole test suite (unit + against a real local control plane)
	@set -o pipefail; \
	if assets=$$(hack/controlplane/build.sh | tail -n 1); then \
	  export CONFIGMIRROR_CONTROLPLANE_ASSETS=$$assets; \
	elif [ "$${CI:-}" = true ]; then \
	  echo "make test: the control plane could not be built, and CI needs it" >&2; exit 1; \
	else \
	  echo "make test: no control plane (needs Go; or set KUBEBUILDER_ASSETS); integration tests will skip" >&2; \
	fi; \
	$(PY) -m pytest $(PYTEST_ARGS)

.PHONY: unit
unit: $(STAMP) ## run only the unit tests (no control plane)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

.PHONY: lint
lint: $(STAMP) ## ruff + mypy --strict
	$(VENV)/bin/ruff check src tests bench hack
	$(VENV)/bin/mypy --strict src

.PHONY: bench
bench: $(STAMP) ## benchmarks; each prints ratios against a baseline measured in the same run
	$(PY) bench/bench_workqueue.py

.PHONY: clean
clean: ## remove the venv and caches in the repo (the control-plane cache is kept)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist src/*.egg-info
