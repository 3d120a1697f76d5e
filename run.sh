#!/usr/bin/env bash
# Main job on a fresh machine: install what is needed, build xvmm, and run it
# (without arguments: the built-in microguest measurement on /dev/kvm).
# Arguments are passed to xvmm, e.g. ./run.sh --json results.json
set -euo pipefail
cd "$(dirname "$0")"
source harness/setup.sh
xvmm_setup
cargo build --release -p xvmm
exec ./target/release/xvmm "$@"
