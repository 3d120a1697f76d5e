#!/usr/bin/env bash
# The whole test suite on a fresh machine: install what is needed, check
# formatting, lints and the API documentation (rustdoc, warnings as errors),
# build the guest and harness kernels (cached in
# $XVMM_CACHE or ~/.cache/xvmm), then run every test: unit tests, the
# /dev/kvm tests, the bad-input corpus and the nested KVM harness (QEMU TCG
# -> L1 -> xvmm -> L2); last, every fuzz target for a few seconds. It
# records the host's tracing state first and fails at the end, naming each
# difference, if the run changed it; it ends with one line counting the tests
# passed, failed and skipped, each skip's reason listed above it.
set -euo pipefail
cd "$(dirname "$0")"
source harness/setup.sh
xvmm_setup_test
step() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

mkdir -p target
# Tests that cannot run here append "SKIPPED <test>: <reason>" to this log
# (xvmm_host::skip); cargo counts them as passed.
export XVMM_SKIP_LOG="$PWD/target/skips.log"
TEST_LOG="$PWD/target/test-output.log"
: >"$XVMM_SKIP_LOG"
: >"$TEST_LOG"

step "host tracing state at the start"
cargo build -q -p xvmm-harness --bin host-state
HOST_STATE="$PWD/target/host-state.start"
./target/debug/host-state record "$HOST_STATE"

summary() {
    local counts passed failed skipped
    counts=$(awk '/^test result:/ {
            for (i = 1; i < NF; i++) {
                if ($(i + 1) ~ /^passed/) p += $i
                if ($(i + 1) ~ /^failed/) f += $i
            }
        } END { print p + 0, f + 0 }' "$TEST_LOG")
    passed=${counts% *}
    failed=${counts#* }
    skipped=$(grep -c '^SKIPPED' "$XVMM_SKIP_LOG" || true)
    [ "$skipped" = 0 ] || grep '^SKIPPED' "$XVMM_SKIP_LOG"
    echo "tests: $((passed - skipped)) passed, $failed failed, $skipped skipped"
}

# CI shows only the end of this output, and libtest prints a failure's panic
# far above it, in its binary's section: repeat each failing test's name and
# the first lines of its panic here, at the end.
failure_digest() {
    awk '
        /^---- .* stdout ----$/ { name = $2; want = 0; next }
        name != "" && /panicked at/ { print "FAILED " name ": " $0; want = 4; next }
        want > 0 && /^note: run with/ { want = 0; name = ""; next }
        want > 0 { print "    " substr($0, 1, 300); want--; if (want == 0) name = "" }
    ' "$TEST_LOG" | head -n 120
}

finish() {
    local status=$?
    trap - EXIT
    step "host tracing state at the end"
    ./target/debug/host-state check "$HOST_STATE" || status=1
    failure_digest
    summary
    exit "$status"
}
trap finish EXIT

step "cargo fmt --check"
cargo fmt --all -- --check
# fuzz/ is a workspace of its own, which the line above does not reach.
(cd fuzz && cargo fmt --all -- --check)
step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
step "cargo doc (warnings as errors: broken links, private items named)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
step "kernels (guest, host; plain and patched; the 6.1 series patched)"
cargo build --release -p xvmm-cli
for flavour in guest host; do
    ./target/release/xvmm kernel build --flavour "$flavour"
    ./target/release/xvmm kernel build --flavour "$flavour" --patched
    ./target/release/xvmm kernel build --flavour "$flavour" --patched --version 6.1
done
step "cargo test (unit, /dev/kvm, nested harness)"
cargo test --workspace --no-fail-fast 2>&1 | tee -a "$TEST_LOG"
grep -h "XVMM-STEP" target/harness/*.log 2>/dev/null || true
step "fuzz targets, a few seconds each (README \"Fuzzing\")"
if [ "${XVMM_SKIP_FUZZ:-0}" = 1 ]; then
    echo "SKIPPED: XVMM_SKIP_FUZZ=1"
elif cargo +nightly --version >/dev/null 2>&1 && command -v cargo-fuzz >/dev/null 2>&1; then
    cargo run -q -p xvmm-benches --bin fuzz -- --seconds "${XVMM_FUZZ_SECONDS:-5}"
else
    # Like the harness: skipped only when asked, never because a tool is missing.
    echo "FAILED: no nightly toolchain or no cargo-fuzz (harness/setup.sh installs them;" \
        "XVMM_SKIP_FUZZ=1 skips this step)" >&2
    exit 1
fi
step "done"
