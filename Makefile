# The two commands a newcomer needs (README.md): `make lab` and `make test`.
# Both install what they need first (scripts/setup.sh), so a fresh machine works.
LAB_FILE ?= examples/lab.yml
NODES ?= 2
MW := .venv/bin/meshwire

.PHONY: setup lab test lint down bench-micro image

setup:
	bash scripts/setup.sh

lab: setup
	$(MW) lab up $(LAB_FILE) --nodes $(NODES)
	$(MW) lab check

down: setup
	$(MW) lab down

test: setup
	# A real kube-apiserver + etcd for tests/kube_cluster.py: built once, cached (or KUBEBUILDER_ASSETS).
	bash scripts/kube-assets.sh >/dev/null
	# Two workers, a file's tests in order on one of them (tests/conftest.py).
	.venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=25 -m "not scale"
	# The 1,500-link labs alone: their check fills the machine's one ARP table.
	.venv/bin/python -m pytest -q --durations=5 -m scale

# The DaemonSet's image without docker: build/meshwire-image.tar (docker-archive,
# meshwire:<version>), for `ctr -n k8s.io images import` on a node (scripts/image.sh).
image: setup
	bash scripts/image.sh

lint: setup
	bash scripts/lint.sh

# Micro benchmarks (pytest-benchmark), saved under .benchmarks/ for --benchmark-compare.
bench-micro: setup
	.venv/bin/python -m pytest -q bench/micro --benchmark-only --benchmark-autosave
