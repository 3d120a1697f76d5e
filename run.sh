#!/usr/bin/env bash
# Main job on a fresh machine: install what it needs (the Rust toolchain and
# a C toolchain for the static xperf: harness/setup.sh's xvmm_setup_run,
# nothing of the test lab), build xvmm and xperf, and run xvmm (without
# arguments: the built-in microguest measurement on /dev/kvm). Arguments
# go to xvmm; `./run.sh --help` prints this script's usage instead.
set -euo pipefail
cd "$(dirname "$0")"

usage() {
    cat <<'EOF'
usage: ./run.sh [--] [XVMM_ARGS...]

Installs the Rust toolchain and a C toolchain if missing (harness/setup.sh
run), builds xvmm and the static xperf, then runs ./target/release/xvmm with
XVMM_ARGS. Without arguments: the built-in microguest measurement on
/dev/kvm. Every argument goes to xvmm; `--` first is dropped, so that xvmm
gets a --help or -h of its own. Examples:

  ./run.sh                          the microguest measurement
  ./run.sh --json out.json          the same, also written as JSON
  ./run.sh --kernel bzImage         a Linux guest running xperf
  ./run.sh machine                  characterise this machine
  ./run.sh -- --help                xvmm's own options and subcommands

xvmm's options: ./run.sh -- --help, `xvmm --help`, or `man xvmm` where the
Debian package (deploy/deb/build.sh) is installed. ./test.sh installs the
test tools and runs the suite.
EOF
}

case "${1-}" in
    -h | --help) usage; exit 0 ;;
    --) shift ;;
esac

source harness/setup.sh
xvmm_setup_run
cargo build --release -p xvmm-cli --bin xvmm
# The guest-side tool, static so it can be a Linux guest's /init; xvmm finds it
# under target/x86_64-unknown-linux-gnu/release for `--kernel` runs.
RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --target x86_64-unknown-linux-gnu -p xperf
exec ./target/release/xvmm "$@"
