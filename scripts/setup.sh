#!/usr/bin/env bash
# Installs what meshwire needs on a fresh Debian machine, idempotently: system tools (as root,
# through apt-get, without recommends), the virtualenv with meshwire and its dev tools, the
# generated gRPC code and the compiled C parts.
#
# Usage: bash scripts/setup.sh [lab|test] [--packages]
#   lab   (default, `make lab`): what a lab needs: ip, a C compiler, ping, the headers the C parts
#         build against, and Graphviz for `lab graph`.
#   test  (`make test`): the lab's set plus what the suite drives: iperf3, openssl, headless
#         Chromium, containerd/runc/CNI plugins/busybox for the real node, debootstrap for the
#         image, FRR for the routing tests, clang for the fuzz targets.
#   --packages: print the Debian packages the mode would install on a bare machine, and stop.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=lab
list_only=0
for arg in "$@"; do
  case $arg in
    lab | test) mode=$arg ;;
    --packages) list_only=1 ;;
    *) echo "setup: unknown argument '$arg' (want lab, test, --packages)" >&2; exit 2 ;;
  esac
done

# One line per need: the Debian package, then a shell test that is true when the need is met.
lab_needs=(
  "iproute2|command -v ip"
  "gcc|command -v gcc"
  "make|command -v make"
  "iputils-ping|command -v ping"
  "libffi-dev|[[ -e /usr/include/ffi.h || -e /usr/include/x86_64-linux-gnu/ffi.h || -e /usr/include/aarch64-linux-gnu/ffi.h ]]"
  "libnghttp2-dev|[[ -e /usr/include/nghttp2/nghttp2.h ]]"
  "libssl-dev|[[ -e /usr/include/openssl/evp.h ]]"
  "graphviz|command -v dot"
)
test_needs=(
  "iperf3|command -v iperf3"
  "openssl|command -v openssl"
  "chromium|command -v chromium"
  "containerd|command -v containerd"
  "runc|command -v runc"
  "containernetworking-plugins|[[ -x /usr/lib/cni/bridge ]]"
  "busybox-static|[[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1"
  "iptables|command -v iptables"
  "debootstrap|command -v debootstrap"
  "frr|[[ -x /usr/lib/frr/zebra ]]"
  "lldpd|command -v lldpd"
  "clang|command -v clang"
  "libclang-rt-14-dev|compgen -G '/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a' >/dev/null"
)
needs=("${lab_needs[@]}")
[[ $mode == test ]] && needs+=("${test_needs[@]}")

if ((list_only)); then
  for need in "${needs[@]}"; do echo "${need%%|*}"; done
  exit 0
fi

missing=()
for need in "${needs[@]}"; do
  bash -c "${need#*|}" >/dev/null 2>&1 || missing+=("${need%%|*}")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Debian's maintainer scripts start the services they install (frr, containerd): a
  # policy-rc.d that refuses keeps them stopped. An existing one is left as it is.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
  fi
  trap '((own_policy)) && rm -f "$policy"' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.meshwire-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp || setup.py -nt $stamp ]]; then
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 | { grep -v "^WARNING: Location" >&2 || true; }
  touch "$stamp"
fi
if [[ -f scripts/build.sh ]]; then
  bash scripts/build.sh
fi
