#!/usr/bin/env bash
# Prints a folder holding a real `kube-apiserver` and `etcd` for the tests' control plane
# (tests/kube_cluster.py), following the envtest convention, plus the node's binaries
# (`kubelet`, `kube-scheduler`, `kube-controller-manager`) for the real-node tests
# (tests/kube_node.py, marker `realnode`):
#   - KUBEBUILDER_ASSETS naming a folder with kube-apiserver and etcd wins, nothing is built
#     (the real-node tests then look for the node's binaries in the same folder);
#   - otherwise all four are built once from Debian's archive into
#     ${MESHWIRE_KUBE_CACHE:-~/.cache/meshwire/kube-v1.20.2} and reused afterwards.
#
# The build uses only Debian's archive: the Kubernetes source (bookworm's `kubernetes` source
# package, 1.20.5+really1.20.2, which carries upstream's vendor/ tree) and Go 1.15 (bullseye's
# golang-1.15 .debs, unpacked under the cache, not installed). Go 1.15 is v1.20's own toolchain:
# a Go >= 1.18 build crashes on the first custom-resource write (vendored modern-go/reflect2).
# etcd 3.4 comes from bookworm's etcd-server package. Needs root for apt-get on a fresh machine.
# ~5 minutes on 2 cores, ~2.6 GB of build tree (removed after a successful build).
#
# Usage: bash scripts/kube-assets.sh          -> prints the folder on stdout (progress on stderr)
set -euo pipefail

log() { echo "kube-assets: $*" >&2; }

if [[ -n ${KUBEBUILDER_ASSETS:-} ]]; then
  if [[ -x $KUBEBUILDER_ASSETS/kube-apiserver && -x $KUBEBUILDER_ASSETS/etcd ]]; then
    echo "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks kube-apiserver or etcd"
  exit 1
fi

CACHE=${MESHWIRE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshwire/kube-v1.20.2}
BIN=$CACHE/bin
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
works() {
  local b
  for b in "${KUBE_BINS[@]}"; do "$BIN/$b" --version 2>/dev/null | grep -q 'v1.20' || return 1; done
  "$BIN/etcd" --version >/dev/null 2>&1
}
if works; then
  echo "$BIN"
  exit 0
fi
# One build at a time per cache (parallel test workers may all ask): the others wait, then reuse it.
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if works; then
  echo "$BIN"
  exit 0
fi

T0=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
apt_install() {
  local miss=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || miss+=("$p"); done
  ((${#miss[@]})) || return 0
  [[ $(id -u) -eq 0 ]] || { log "missing ${miss[*]}; run as root or install them"; exit 1; }
  apt-get install -y -qq "${miss[@]}" >/dev/null 2>&1 || { apt-get update -qq; apt-get install -y -qq "${miss[@]}" >/dev/null; }
}
apt_install make rsync dpkg-dev etcd-server openssl ca-certificates

mkdir -p "$BIN"
ln -sf "$(command -v etcd || echo /usr/bin/etcd)" "$BIN/etcd"

# Private apt configuration: deb-src for bookworm (the image ships binary lines only) and bullseye
# for Go 1.15. The system's apt lists and sources stay untouched.
WORK=$CACHE/build
rm -rf "$WORK"
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/dl"
cat >"$WORK/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
EOF
APT=(-o Dir::Etc::sourcelist="$WORK/sources.list" -o Dir::Etc::sourceparts=/nonexistent
     -o Dir::State::Lists="$WORK/lists" -o Dir::Cache="$WORK/cache" -o APT::Sandbox::User=root)
apt-get "${APT[@]}" update -qq
(cd "$WORK/dl" && apt-get "${APT[@]}" download -qq golang-1.15-go golang-1.15-src \
   && apt-get "${APT[@]}" source --download-only -qq kubernetes)

GO=$WORK/go1.15
for f in "$WORK"/dl/golang-*.deb; do dpkg-deb -x "$f" "$GO"; done
GOROOT=$GO/usr/lib/go-1.15
ln -sfn ../../share/go-1.15/src "$GOROOT/src"   # the .deb's link is absolute
export GOROOT PATH=$GOROOT/bin:$PATH
go version | grep -q go1.15 || { log "Go 1.15 unpack failed"; exit 1; }

(cd "$WORK/dl" && dpkg-source -x --no-check ./kubernetes_*.dsc "$WORK/tree" >/dev/null)
cd "$WORK/tree"
mkdir -p .go/src/k8s.io && ln -sfn ../../.. .go/src/k8s.io/kubernetes
export GOPATH=$PWD/.go GOPROXY=off GOFLAGS=-mod=vendor CGO_ENABLED=0 HOME=$WORK/home GOCACHE=$WORK/gocache
mkdir -p "$HOME"
log "compiling ${KUBE_BINS[*]} (a few minutes; log $WORK/build.log)"
if ! make WHAT="$(printf 'cmd/%s ' "${KUBE_BINS[@]}")" >"$WORK/build.log" 2>&1; then
  tail -30 "$WORK/build.log" >&2
  log "make failed (log $WORK/build.log)"
  exit 1
fi
for b in "${KUBE_BINS[@]}"; do install -m 0755 "_output/bin/$b" "$BIN/$b"; done
cd /
rm -rf "$WORK"
works || { log "built binaries do not run"; exit 1; }
log "built $("$BIN/kube-apiserver" --version) in $(( $(date +%s) - T0 ))s"
echo "$BIN"
