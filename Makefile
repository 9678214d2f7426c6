# stepscope — every target brings up .venv first; binaries are built from Go
# modules into ~/.cache/stepscope (never into the repository).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Re-install only when the dependency pins change.
VENV_STAMP := $(VENV)/.stepscope-installed
UV_VERSION := 0.13.9

.PHONY: venv binaries node-deps node-images browser crds docs-examples docs-trigger-run test test-unit test-realnode demo demo-process bench gpu-check lint clean-instance

venv: $(VENV_STAMP)

$(VENV_STAMP): pyproject.toml dev/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# uv, not pip: it links torch's multi-GB wheels out of its cache (~/.cache/uv) in seconds
	# where pip unpacks them again for every clone (minutes), and it resolves boto3 +
	# kubernetes at once where pip 23.2 backtracks for many minutes. Bytecode is compiled
	# here, as pip did: the node's trainer pods mount this venv read-only, and without .pyc
	# files every trainer process compiled torch's modules again at each start.
	$(PY) -m pip install --quiet "uv==$(UV_VERSION)"
	$(PY) -m uv pip install --quiet --compile-bytecode --python $(PY) -e '.[operator,agent,dev]' -e ./dev
	touch $(VENV_STAMP)

binaries: venv
	$(PY) -m stepscope_dev.cli build

# The real node's Debian packages (containerd, runc, CNI plugins, buildah, mmdebstrap, ...);
# apt-get runs only for what dpkg does not already report installed.
node-deps: venv
	$(PY) -m stepscope_dev.realnode.packages

# Debian's Chromium, headless: the report tests read what a browser shows
# (tests/support/browser.py). apt-get runs only when no chromium is on the PATH.
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

crds: venv
	$(PY) -m stepscope.api.crdgen

# The real node's binaries (kubelet, kube-scheduler, CoreDNS), packages and images: minutes cold,
# built here rather than inside a test's time limit. Fails with the exact error where the
# packages cannot be installed or an image does not build, and when it builds no image;
# STEPSCOPE_E2E_NODE=process (the pod runner asked for by name, no real node) builds none.
node-images: venv binaries
	$(PY) -m stepscope_dev.cli build --node $${STEPSCOPE_E2E_NODE:-real}

# Every tier, the real node's own tests included. The e2e tier runs its pods on the real node
# (tests/e2e/e2e_platform.py; STEPSCOPE_E2E_NODE=process puts them on the process pod runner).
# Side by side on TEST_WORKERS workers: each real-node tier on a worker of its own, in order, the other
# modules spread over the rest (tests/support/parallel.py; its scheduler takes --dist loadscope).
# Three: a fourth (with the e2e tier split over two nodes) ran at a load average of 17-20 here
# (2 cores), where the hostile-tenant test's one-second event-loop bound was missed once and a
# healthy hang check's ranks had not connected within its 75 s watch.
TEST_WORKERS ?= 3
test: venv binaries node-images browser
	$(VENV)/bin/pytest -ra --durations=15 -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

test-unit: venv browser
	$(VENV)/bin/pytest -ra tests/unit

# Pods on a real kubelet + containerd, images built from our Dockerfiles: the node's own tests
# alone (make test runs them too).
test-realnode: venv binaries node-images
	$(VENV)/bin/pytest -ra tests/integration/realnode

# The demo on the real node: pods in containers, the operator from its image through the chart.
demo: venv binaries node-images
	$(PY) -m stepscope_dev.demo

# The same demo with pods as local processes under the pod runner (no images, no kubelet).
demo-process: venv binaries
	$(PY) -m stepscope_dev.demo --node process

bench: venv binaries
	@set -e; for bench in bench/bench_*.py; do echo "== $$bench"; $(PY) $$bench; done

# On a machine with an NVIDIA GPU: counters, kernels, tensor cores and memory events at every
# tier (bench/gpu_check.py; exits 77 and says why on a machine without one).
gpu-check: venv
	$(PY) bench/gpu_check.py

# The README's describe block, from the current analysis through real kubectl (a local control
# plane for the moment it takes); tests/integration/api/test_readme_describe.py checks it.
docs-examples: venv binaries
	$(PY) -m stepscope_dev.describe_example
	$(PY) -m stepscope_dev.hang_example
	$(PY) -m stepscope_dev.diff_example
	$(PY) -m stepscope_dev.report_picture
	$(PY) -m stepscope_dev.schedule_example
	$(PY) -m stepscope_dev.trigger_example
	$(PY) -m stepscope_dev.reference_docs

# The README's trigger section comes from a recorded real run (docs/examples/trigger-run/): a
# ProfileTrigger firing on a 4-rank DDP PyTorchJob on the real node, minutes long. This runs it
# again and renders the section and its plot from the new recording; `make docs-examples`
# renders them from the committed one, and tests/unit/harness/test_trigger_example.py checks it.
docs-trigger-run: venv binaries node-images
	$(PY) -m stepscope_dev.trigger_example --record

lint: venv
	$(VENV)/bin/ruff check stepscope operator agent_image dev tests bench
	$(VENV)/bin/ruff format --check stepscope operator agent_image dev tests bench
	$(PY) -m stepscope.api.crdgen --check
	$(PY) -m stepscope_dev.reference_docs --check
	$(VENV)/bin/lint-imports
