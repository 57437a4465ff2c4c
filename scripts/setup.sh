#!/usr/bin/env bash
# Installs everything meshwire needs on a fresh Debian machine, idempotently:
# system tools (as root, through apt-get), the virtualenv with meshwire and its
# dev tools, the generated gRPC code and the C CNI shim.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v ip >/dev/null || need_apt+=(iproute2)
command -v gcc >/dev/null || need_apt+=(gcc)
command -v make >/dev/null || need_apt+=(make)
command -v iperf3 >/dev/null || need_apt+=(iperf3)
command -v ping >/dev/null || need_apt+=(iputils-ping)
# The tests' kube-apiserver PKI (tests/kube_cluster.py); the binaries come from scripts/kube-assets.sh.
command -v openssl >/dev/null || need_apt+=(openssl)
[[ -e /usr/include/ffi.h || -e /usr/include/x86_64-linux-gnu/ffi.h || -e /usr/include/aarch64-linux-gnu/ffi.h ]] || need_apt+=(libffi-dev)
# HTTP/2 for the dataplane workers' gRPC wire stream (cext/h2*.c).
[[ -e /usr/include/nghttp2/nghttp2.h ]] || need_apt+=(libnghttp2-dev)
# `lab graph` lays its pictures out with Graphviz; the tests look at them in headless Chromium.
command -v dot >/dev/null || need_apt+=(graphviz)
command -v chromium >/dev/null || need_apt+=(chromium)
# The real node of tests/kube_node.py (kubelet from scripts/kube-assets.sh): its runtime,
# the CNI plugins it chains, busybox for its pods; `make image` builds in a debootstrap root.
command -v containerd >/dev/null || need_apt+=(containerd)
command -v runc >/dev/null || need_apt+=(runc)
[[ -x /usr/lib/cni/bridge ]] || need_apt+=(containernetworking-plugins)
[[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 || need_apt+=(busybox-static)
command -v iptables >/dev/null || need_apt+=(iptables)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
if ((${#need_apt[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing ${need_apt[*]}; run as root or install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.meshwire-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp || setup.py -nt $stamp ]]; then
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'
  touch "$stamp"
fi
if [[ -f scripts/build.sh ]]; then
  bash scripts/build.sh
fi
