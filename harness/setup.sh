#!/usr/bin/env bash
# Installs what building and testing xvmm needs on a fresh Debian 12 machine:
# the Rust toolchain (rustup, if cargo is missing), the kernel build tools,
# Debian's linux-source-6.12, QEMU (the nested harness), perf (the xperf
# cross-check bench) and Chromium with a font (the `xvmm report` browser
# test). Idempotent: asks apt only for what is missing. Sourced
# by ../run.sh and ../test.sh; run it directly to set up a machine. Also the
# nightly toolchain and cargo-fuzz for the fuzz targets (xvmm_setup_fuzz). The only
# place that installs packages: xvmm itself (`xvmm kernel build`) only checks
# and names what is missing.
set -euo pipefail

# The one package list.
XVMM_PACKAGES=(make gcc flex bison bc cpio patch xz-utils perl libelf-dev libssl-dev
               linux-source-6.12 qemu-system-x86 linux-perf curl ca-certificates
               chromium fonts-dejavu-core)

xvmm_as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

xvmm_setup() {
    local missing=()
    for pkg in "${XVMM_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$pkg")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "setup: installing ${missing[*]}" >&2
        xvmm_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
        xvmm_as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        echo "setup: installing the Rust toolchain with rustup" >&2
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
            | sh -s -- -y --profile minimal --component rustfmt,clippy
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if command -v rustup >/dev/null 2>&1; then
        for comp in rustfmt clippy; do
            rustup component list --installed 2>/dev/null | grep -q "^$comp" \
                || rustup component add "$comp"
        done
    fi
    xvmm_setup_fuzz
}

# The fuzzers (fuzz/, README "Fuzzing"): a nightly toolchain and cargo-fuzz.
# Not fatal here (the main job does not need them); ./test.sh's fuzz step
# then fails and says why, unless XVMM_SKIP_FUZZ=1.
xvmm_setup_fuzz() {
    command -v rustup >/dev/null 2>&1 || return 0
    if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
        echo "setup: installing the nightly toolchain for cargo fuzz" >&2
        rustup toolchain install nightly --profile minimal \
            || echo "setup: no nightly toolchain: the fuzz targets will not run" >&2
    fi
    if ! command -v cargo-fuzz >/dev/null 2>&1; then
        echo "setup: installing cargo-fuzz" >&2
        cargo install --locked cargo-fuzz \
            || echo "setup: cargo-fuzz did not install: the fuzz targets will not run" >&2
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    xvmm_setup
fi
