#!/usr/bin/env bash
# Builds the static xperf, checks it is static, builds the image from
# deploy/Containerfile with podman (or docker) and pushes it.
#   deploy/build-image.sh registry.example.com/xperf:0.1.0
set -euo pipefail
image=${1:?usage: deploy/build-image.sh IMAGE (e.g. registry.example.com/xperf:0.1.0)}
cd "$(dirname "$0")/.."
RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --target x86_64-unknown-linux-gnu -p xperf
binary=target/x86_64-unknown-linux-gnu/release/xperf
# A dynamic binary would not start in an empty image.
if readelf -l "$binary" | grep -q 'Requesting program interpreter'; then
    echo "build-image: $binary is not static" >&2
    exit 1
fi
engine=$(command -v podman || command -v docker || true)
[ -n "$engine" ] || { echo "build-image: needs podman or docker" >&2; exit 1; }
"$engine" build -f deploy/Containerfile -t "$image" .
"$engine" push "$image"
