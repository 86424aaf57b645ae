# polyccm developer entry points. `make test` on a fresh clone installs uv if missing, syncs the
# workspace, obtains the control-plane binaries, kustomize and the upstream AWS CCM (building
# them once with Go) and runs every check.

SHELL := /bin/bash
TOOLS := $(CURDIR)/.tools
UV := $(shell command -v uv 2>/dev/null || echo $(TOOLS)/bin/uv)
PYTEST_ARGS ?=
# `make test` runs the test files side by side on this many pytest-xdist workers (one file stays
# on one worker: its module fixtures and emulators are its own; each worker starts its own
# kube-apiserver and etcd). Most tests wait on a server or a lease: three on two cores ran
# 2,375 tests in about 22 minutes (2,336 took 17.4; one at a time, 2,288 took 37.5). PYTEST_WORKERS=0 runs them in
# this process.
PYTEST_WORKERS ?= 3
# `make demo PROVIDER=<name>` runs polyccm_<name>_emulator.demo (each provider's emulator
# distribution, providers/<name>/emulator, has one).
PROVIDER ?= aws
# `make image ARCH=arm64`: the architecture to build for (amd64 or arm64); empty = this machine's.
ARCH ?=
# `make image TAG=0.2.0`: the tag of the local image and of the archive's reference (default dev).
TAG ?= dev

.PHONY: all test lint sync uv binaries peers image sbom image-tools demo clean-state stress-shutdown

all: test

$(TOOLS)/bin/uv:
	@echo "uv not found: installing it into $(TOOLS)"
	python3 -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv

uv:
	@command -v uv >/dev/null 2>&1 || $(MAKE) --no-print-directory $(TOOLS)/bin/uv

sync: uv
	$(UV) sync --locked --all-packages

binaries: sync
	$(UV) run --no-sync python -m polyccm_testing.devenv.binaries

lint: sync
	$(UV) run --no-sync ruff check .
	$(UV) run --no-sync ruff format --check .
	$(UV) run --no-sync mypy
	$(UV) run --no-sync lint-imports

# The upstream CCMs the switch tests run beside polyccm (tests/test_switch_*.py): the AWS one,
# k8s.io/cloud-provider-aws, is built once from the Go module proxy into ~/.cache/polyccm/bin
# (about ten minutes on two cores); without Go this says why and its switch test is skipped.
peers: sync
	$(UV) run --no-sync python -m polyccm_testing.peers.builds

test: lint binaries peers image-tools
	$(UV) run --no-sync pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# `make image PROVIDER=<name>` builds that provider's image with buildah on a local Debian base
# (no Docker engine needed) into dist/polyccm-<name>.oci.tar (-<arch>.oci.tar with ARCH=) and its
# SBOM dist/polyccm-<name>[-<arch>].cdx.json; see deploy/images/README.md and docs/release.md.
# polyccm_testing.images uses the standard library only, so it runs from the test kit's sources
# on any Python 3.11+ uv finds, without syncing the development workspace: the image build
# installs what the image needs, from uv.lock, inside the image.
IMAGE_TOOL = PYTHONPATH=$(CURDIR)/testkit/src $(UV) run --no-project --python '>=3.11' \
	python -m polyccm_testing.images
image: uv
	$(IMAGE_TOOL) build $(PROVIDER) --tag $(TAG) $(if $(ARCH),--arch $(ARCH))

# `make sbom PROVIDER=<name>`: the CycloneDX SBOM of that image's Python packages (uv export from
# uv.lock) into dist/polyccm-<name>[-<arch>].cdx.json, without building the image; `make image`
# writes it too, beside the archive. See docs/release.md.
sbom: uv
	$(IMAGE_TOOL) sbom $(PROVIDER) $(if $(ARCH),--arch $(ARCH))

# buildah and debootstrap, installed with apt-get when missing and we are root; when they cannot
# be, this says why and tests/test_image.py is skipped.
image-tools: uv
	$(IMAGE_TOOL) tools --if-possible

demo: binaries
	$(UV) run --no-sync python -m polyccm_$(PROVIDER)_emulator.demo

# The benchmark of issue 13 (bench/README.md): every provider at 100/10, 1,000/100 and
# 5,000/500 nodes/services, beside each upstream Go CCM this machine has (and, for AWS, the
# framework floor); results in bench/results/. It ends saying how long it took against its
# 30-minute budget; with every peer it is estimated at about 40 minutes on 2 cores
# (bench/results/estimate.md).
# BENCH_ARGS passes more flags (e.g. BENCH_ARGS="--providers aws --scales 1000/100").
BENCH_ARGS ?=
bench: binaries
	$(UV) run --no-sync python -m bench $(BENCH_ARGS)

# The smallest scale only (under 5 minutes); results in bench/results/quick/ (not committed).
bench-quick: binaries
	$(UV) run --no-sync python -m bench --quick $(BENCH_ARGS)

# The shutdown stress test of issue 34 at full size: 40 iterations of each of its seven phases
# (tests/test_shutdown_stress.py; `make test` runs 2 of each). STRESS_SEED repeats a run.
STRESS_ITERATIONS ?= 40
STRESS_SEED ?= 34
stress-shutdown: binaries
	POLYCCM_SHUTDOWN_STRESS_ITERATIONS=$(STRESS_ITERATIONS) POLYCCM_SHUTDOWN_STRESS_SEED=$(STRESS_SEED) \
		$(UV) run --no-sync pytest -s tests/test_shutdown_stress.py

clean-state:
	-$(UV) run --no-sync polyccm-dev down --state-dir .state/dev
	rm -rf .state
