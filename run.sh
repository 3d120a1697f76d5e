#!/usr/bin/env bash
# Main job on a fresh machine: install what is needed, build xvmm, and run it
# (without arguments: the built-in microguest measurement on /dev/kvm).
# Arguments are passed to xvmm, e.g. ./run.sh --json results.json
set -euo pipefail
cd "$(dirname "$0")"
source harness/setup.sh
xvmm_setup
cargo build --release -p xvmm-cli
# The guest-side tool, static so it can be a Linux guest's /init; xvmm finds it
# under target/x86_64-unknown-linux-gnu/release for `--kernel` runs.
RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --target x86_64-unknown-linux-gnu -p xperf
exec ./target/release/xvmm "$@"
