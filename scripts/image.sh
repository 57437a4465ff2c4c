#!/usr/bin/env bash
# Builds the DaemonSet's image without docker (`make image`): a single-layer docker-archive at
# build/meshwire-image.tar, tagged meshwire:<version> (pyproject's; IMAGE_TAG overrides the tag),
# that `ctr -n k8s.io images import`, `docker load` and `podman load` take.
#
# Contents, the same as deploy/Dockerfile's: Debian bookworm (minbase) with python3,
# libnghttp2 and libssl3, and /opt/meshwire holding the package installed editable in /opt/meshwire/.venv,
# the generated gRPC modules, the compiled dataplane (dataplane/_wirec.*.so) and the static CNI
# shim (cext/build/meshwire-cni). Everything is compiled inside a bookworm root, so the C parts
# run against the libc and nghttp2 they were built with.
#
# Needs root (debootstrap, chroot) and Debian's archive. The two bookworm roots (runtime, and
# runtime + compiler) are made once and cached under ${MESHWIRE_IMAGE_CACHE:-~/.cache/meshwire/image-bookworm}
# (about 2 minutes the first time); Python packages come as wheels through the host's pip and
# its configuration, installed in the image with --no-index. Files are written with mtime 0 and
# uid 0 in name order, and bytecode is hash-checked (SOURCE_DATE_EPOCH), so the same inputs
# give the same layer.
#
# OUT.tar is rebuilt only when its inputs changed (their digest is kept in OUT.tar.inputs).
#
# Usage: bash scripts/image.sh [OUT.tar]      -> prints OUT.tar and the image's reference
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
log() { echo "image: $*" >&2; }

[[ $(id -u) -eq 0 ]] || { log "needs root (debootstrap and chroot)"; exit 1; }
[[ -x .venv/bin/pip ]] || { log ".venv missing: run make setup"; exit 1; }
VERSION=$(.venv/bin/python -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
REF=${IMAGE_TAG:-meshwire:$VERSION}
OUT=${1:-build/meshwire-image.tar}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
RUNTIME_PKGS=python3,python3-venv,libnghttp2-14,libssl3,ca-certificates
BUILD_PKGS=(gcc libc6-dev libffi-dev libnghttp2-dev libssl-dev python3-dev)
# The folders deploy/Dockerfile copies.
SOURCES=(pyproject.toml setup.py README.md base control dataplane proto tools cext scripts)
T0=$(date +%s)

# -- the image is rebuilt only when what goes into it changed -------------------------------
# OUT.inputs records the digest of the sources, this script, the packages and the tag.
inputs_digest() {
  { echo "$REF $SUITE $RUNTIME_PKGS ${BUILD_PKGS[*]}"
    git ls-files -z -co --exclude-standard -- "${SOURCES[@]}" scripts/image.sh scripts/mkimage.py \
      | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -d' ' -f1
}
DIGEST=$(inputs_digest)
if [[ -s $OUT && $(cat "$OUT.inputs" 2>/dev/null) == "$DIGEST" ]]; then
  log "$REF up to date in $OUT"
  echo "$OUT $REF"
  exit 0
fi

rm -f "$OUT.inputs"

export DEBIAN_FRONTEND=noninteractive
command -v debootstrap >/dev/null || { apt-get install -y -qq debootstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq debootstrap >/dev/null; }; }

in_root() {  # ROOT CMD...: run CMD chrooted in ROOT, with /proc and /dev mounted in a private mount namespace
  local root=$1; shift
  unshare -m --propagation private bash -c '
    root=$1; shift
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      SOURCE_DATE_EPOCH=0 "$@"
  ' in_root "$root" "$@"
}

trim() {  # ROOT: drop what a running image never reads
  rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/usr/share/doc/* \
    "$1"/usr/share/man/* "$1"/usr/share/locale/* "$1"/var/log/* "$1"/tmp/* "$1"/root/.cache
  : >"$1/etc/resolv.conf"
}

# -- the cached bookworm roots -----------------------------------------------------------
CACHE=${MESHWIRE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshwire/image-$SUITE}
mkdir -p "$CACHE"
if [[ $(cat "$CACHE/runtime.stamp" 2>/dev/null) != "$SUITE $RUNTIME_PKGS" ]]; then
  log "making the $SUITE runtime root once (debootstrap, about 90 s) in $CACHE"
  rm -rf "$CACHE/runtime" "$CACHE/runtime.new" "$CACHE/build" "$CACHE"/*.stamp
  debootstrap --variant=minbase --include="$RUNTIME_PKGS" "$SUITE" "$CACHE/runtime.new" "$MIRROR" \
    >"$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
  trim "$CACHE/runtime.new"
  mv "$CACHE/runtime.new" "$CACHE/runtime"
  echo "$SUITE $RUNTIME_PKGS" >"$CACHE/runtime.stamp"
fi
if [[ $(cat "$CACHE/build.stamp" 2>/dev/null) != "${BUILD_PKGS[*]}" ]]; then
  log "adding a compiler to a copy of it, once"
  rm -rf "$CACHE/build" "$CACHE/build.new"
  cp -a "$CACHE/runtime" "$CACHE/build.new"
  in_root "$CACHE/build.new" sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${BUILD_PKGS[*]} >/dev/null"
  trim "$CACHE/build.new"
  mv "$CACHE/build.new" "$CACHE/build"
  echo "${BUILD_PKGS[*]}" >"$CACHE/build.stamp"
fi

WORK=$(mktemp -d /tmp/meshwire-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# -- wheels, fetched by the host's pip (its indexes and constraints) -----------------------
log "wheels"
mkdir -p "$WORK/wheels"
.venv/bin/python - >"$WORK/requirements.txt" <<'EOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))
for line in project["build-system"]["requires"] + project["project"]["dependencies"]:
    print(line)
print("grpcio-tools>=1.60")
EOF
# pip warns about every configured index folder a package is not in: only errors matter.
.venv/bin/pip wheel -q --disable-pip-version-check -w "$WORK/wheels" -r "$WORK/requirements.txt" 2>&1 \
  | { grep -v "^WARNING: Location" >&2 || true; }

# -- compile in the build root -------------------------------------------------------------
log "compiling in a $SUITE root"
cp -a "$CACHE/build" "$WORK/build"
APP=$WORK/build/opt/meshwire
mkdir -p "$APP"
git ls-files -z -co --exclude-standard -- "${SOURCES[@]}" | (cd "$REPO" && xargs -0 cp --parents -t "$APP")
cp -a "$WORK/wheels" "$WORK/build/wheels"
in_root "$WORK/build" bash -euc '
  cd /opt/meshwire
  python3 -m venv .venv
  pip=".venv/bin/pip install -q --disable-pip-version-check --no-index --find-links /wheels"
  $pip -e . grpcio-tools
  PATH=/opt/meshwire/.venv/bin:$PATH bash scripts/build.sh
  .venv/bin/pip uninstall -q -y grpcio-tools
  test -x cext/build/meshwire-cni
  find /opt/meshwire -path /opt/meshwire/.venv -prune -o -name __pycache__ -prune -exec rm -rf {} +
'

# -- the runtime root: the base plus /opt/meshwire -----------------------------------------
cp -a "$CACHE/runtime" "$WORK/root"
cp -a "$APP" "$WORK/root/opt/meshwire"
mkdir -p "$(dirname "$OUT")"
.venv/bin/python scripts/mkimage.py "$WORK/root" "$OUT" "$REF" \
  --env PATH=/opt/meshwire/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env PYTHONUNBUFFERED=1 \
  --workdir /opt/meshwire \
  --cmd meshwire daemon --config /etc/meshwire/config.yaml
echo "$DIGEST" >"$OUT.inputs"
log "$REF in $(( $(date +%s) - T0 ))s"
echo "$OUT $REF"
