#!/usr/bin/env bash
# Generates the gRPC/protobuf modules of proto/meshwire.proto into proto/ (they
# are gitignored: generated at build, so they cannot drift from the .proto).
# protoc is pointed at the file as meshwire/proto/meshwire.proto, so the
# generated _grpc module imports `from meshwire.proto import meshwire_pb2`.
set -euo pipefail
src=proto/meshwire.proto
out=proto/meshwire_pb2.py
if [[ -f $out && $out -nt $src && proto/meshwire_pb2_grpc.py -nt $src ]]; then
  exit 0
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/meshwire"
ln -s "$PWD/proto" "$root/meshwire/proto"
python -m grpc_tools.protoc -I "$root" \
  --python_out="$root" --pyi_out="$root" --grpc_python_out="$root" \
  "$root/meshwire/proto/meshwire.proto"
