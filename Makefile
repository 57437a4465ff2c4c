# The two commands a newcomer needs (README.md): `make lab` and `make test`.
# Both install what they need first (scripts/setup.sh), so a fresh machine works.
LAB_FILE ?= examples/lab.yml
NODES ?= 2
MW := .venv/bin/meshwire

.PHONY: setup setup-test lab test lint down bench-micro image

STEP := bash scripts/step.sh
IMAGE_TAR := build/meshwire-image.tar

# What a lab needs (scripts/setup.sh lab); `make test` adds what the suite drives.
setup:
	$(STEP) setup bash scripts/setup.sh lab

setup-test:
	$(STEP) setup bash scripts/setup.sh test

lab: setup
	$(MW) lab up $(LAB_FILE) --nodes $(NODES)
	$(MW) lab check

down: setup
	$(MW) lab down

# Every one-off build runs before pytest, timed, so no test waits on a cold cache:
# the Kubernetes binaries (tests/kube_cluster.py, tests/kube_node.py) and the DaemonSet's
# image (tests/test_realnode_deploy.py), both cached and rebuilt only when their inputs change.
test: setup-test
	$(STEP) kube-binaries bash scripts/kube-assets.sh >/dev/null
	$(STEP) image bash scripts/image.sh $(IMAGE_TAR) >/dev/null
	# Two workers, a file's tests in order on one of them (tests/conftest.py). The image's
	# variable is not MESHWIRE_*: the daemons the tests start read those as config keys.
	MW_TEST_IMAGE=$(IMAGE_TAR) $(STEP) tests .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=25 -m "not scale"
	# The 1,500-link labs alone: their check fills the machine's one ARP table.
	$(STEP) scale-tests .venv/bin/python -m pytest -q --durations=5 -m scale

# The DaemonSet's image without docker: build/meshwire-image.tar (docker-archive,
# meshwire:<version>), for `ctr -n k8s.io images import` on a node (scripts/image.sh).
image: setup
	bash scripts/image.sh $(IMAGE_TAR)

lint: setup
	bash scripts/lint.sh

# Micro benchmarks (pytest-benchmark), saved under .benchmarks/ for --benchmark-compare.
bench-micro: setup
	.venv/bin/python -m pytest -q bench/micro --benchmark-only --benchmark-autosave
