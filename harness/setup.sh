#!/usr/bin/env bash
# Installs what xvmm needs on a Debian 12 machine, in two parts:
#
# - xvmm_setup_run (../run.sh, the main job): the Rust toolchain (rustup,
#   minimal profile, if cargo is missing) and what a static xperf links with
#   (gcc, libc6-dev), nothing more;
# - xvmm_setup_test (../test.sh): that, plus the test lab: rustfmt and
#   clippy, the kernel build tools, Debian's linux-source-6.12 and
#   linux-source-6.1 (the patch series' bases), QEMU (the nested harness),
#   perf (the xperf cross-check bench), Chromium with a font (the `xvmm
#   report` browser test) and the Python modules checkpatch.pl uses for its
#   SPDX check (the series' style test), Prometheus and node_exporter (the
#   OpenMetrics test starts its own, on loopback), crun and
#   containers-common's seccomp.json (the container test,
#   harness/tests/container.rs), systemd-analyze (the units' security
#   exposure, harness/tests/deploy.rs), man-db (`man -w` on the Debian
#   package's pages, harness/tests/deb.rs), rt-tests (cyclictest, the
#   timer wake-up's peer in harness/tests/characterize.rs), strace (the
#   system call counts `xperf workload` must agree with,
#   guest/xperf/tests/workload.rs and harness/tests/workload.rs),
#   busybox-static (the workload commands L1 runs), the nightly toolchain and
#   cargo-fuzz (xvmm_setup_fuzz), cargo-mutants (xvmm_setup_mutants) and
#   mdBook (xvmm_setup_mdbook, the book under docs/).
#
# Idempotent: asks apt only for what is missing. Sourced by ../run.sh and
# ../test.sh; run it directly to set up a machine (`harness/setup.sh run`
# for the main job only; the default is everything). The only place that
# installs packages: xvmm itself (`xvmm kernel build`) only checks and names
# what is missing.
set -euo pipefail

# What building and running xvmm and the static xperf needs (run.sh).
XVMM_RUN_PACKAGES=(gcc libc6-dev curl ca-certificates)
# The rest, for the test suite (test.sh).
XVMM_TEST_PACKAGES=(make flex bison bc cpio patch xz-utils perl libelf-dev libssl-dev
                    linux-source-6.12 linux-source-6.1 qemu-system-x86 linux-perf
                    chromium fonts-dejavu-core trace-cmd python3-ply python3-git
                    prometheus prometheus-node-exporter crun golang-github-containers-common systemd
                    man-db rt-tests strace busybox-static)

xvmm_as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Debian's bookworm-backports, for QEMU only (see xvmm_qemu_release).
XVMM_BACKPORTS_LIST=/etc/apt/sources.list.d/xvmm-bookworm-backports.sources

xvmm_apt() {
    xvmm_as_root env DEBIAN_FRONTEND=noninteractive apt-get "$@"
}

# QEMU's Debian packages must all have one version: qemu-utils 10 from
# bookworm-backports (on the stock cloud image) Breaks bookworm's
# qemu-system-common 7.2, so apt would remove qemu-utils to install
# qemu-system-x86. Where a QEMU package from backports is installed, take
# qemu-system-x86 from backports too (adding that apt source if absent).
# Prints the apt release to take it from ("bookworm-backports" or nothing).
xvmm_qemu_release() {
    local installed
    installed=$(dpkg-query -W -f='${Version}\n' 'qemu-*' 2>/dev/null | grep '~bpo' | head -n1 || true)
    [ -n "$installed" ] || return 0
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "setup: adding Debian's bookworm-backports ($XVMM_BACKPORTS_LIST): the installed" \
            "QEMU packages ($installed) come from there and qemu-system-x86 must match" >&2
        printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' \
            'Suites: bookworm-backports' 'Components: main' \
            'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
            | xvmm_as_root tee "$XVMM_BACKPORTS_LIST" >/dev/null
    fi
    echo bookworm-backports
}

# Installs "$@" only when apt would neither remove nor downgrade anything:
# otherwise stops before changing the machine and names the packages.
xvmm_apt_install_safely() {
    local plan changes
    if ! plan=$(xvmm_apt install -s -q --no-install-recommends "$@" 2>&1); then
        echo "setup: apt cannot install $*:" >&2
        printf '%s\n' "$plan" | grep -E '^(E:| )' >&2 || printf '%s\n' "$plan" >&2
        return 1
    fi
    changes=$(printf '%s\n' "$plan" | awk '
        /^Remv / { print "  remove " $2 " " $3; next }
        /^Inst [^ ]+ \[/ {
            old = $3; gsub(/[][]/, "", old); new = $4; gsub(/[(]/, "", new)
            cmd = "dpkg --compare-versions \"" new "\" lt \"" old "\""
            if (system(cmd) == 0) print "  downgrade " $2 " from " old " to " new
        }')
    if [ -n "$changes" ]; then
        echo "setup: stopped before changing the machine: installing $* would" >&2
        printf '%s\n' "$changes" >&2
        echo "setup: install those packages yourself in a way that keeps what you need, then run again" >&2
        return 1
    fi
    xvmm_apt install -y -q --no-remove --no-install-recommends "$@"
}

# Installs those of "$@" (Debian packages) that are missing.
xvmm_apt_ensure() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$pkg")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    echo "setup: installing ${missing[*]}" >&2
    local others=() qemu=()
    for pkg in "${missing[@]}"; do
        if [ "$pkg" = qemu-system-x86 ]; then qemu=("$pkg"); else others+=("$pkg"); fi
    done
    local qemu_release=""
    [ ${#qemu[@]} -eq 0 ] || qemu_release=$(xvmm_qemu_release)
    xvmm_apt update -q
    [ ${#others[@]} -eq 0 ] || xvmm_apt_install_safely "${others[@]}"
    if [ ${#qemu[@]} -gt 0 ]; then
        # -t: QEMU's own dependencies (qemu-system-common, -data, seabios)
        # come from the same release.
        xvmm_apt_install_safely ${qemu_release:+-t "$qemu_release"} "${qemu[@]}"
    fi
}

# The main job's set-up (../run.sh): apt packages and the Rust toolchain.
xvmm_setup_run() {
    xvmm_apt_ensure "${XVMM_RUN_PACKAGES[@]}"
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        xvmm_install_rustup
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
}

# rustup-init from static.rust-lang.org, checked against its published
# SHA-256, then run (what https://sh.rustup.rs's script does, in one host
# fewer: a network that serves the toolchain's host serves the installer).
xvmm_install_rustup() {
    local url=https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init
    local dir want got
    dir=$(mktemp -d)
    echo "setup: installing the Rust toolchain with rustup ($url)" >&2
    curl --proto '=https' --tlsv1.2 -sSf -o "$dir/rustup-init" "$url"
    want=$(curl --proto '=https' --tlsv1.2 -sSf "$url.sha256" | cut -c1-64)
    got=$(sha256sum "$dir/rustup-init" | cut -c1-64)
    if [ "$want" != "$got" ]; then
        echo "setup: rustup-init's SHA-256 is $got, $url.sha256 says $want" >&2
        rm -rf "$dir"
        return 1
    fi
    chmod +x "$dir/rustup-init"
    "$dir/rustup-init" -y --profile minimal
    rm -rf "$dir"
}

# The test suite's set-up (../test.sh): the main job's, then the test lab.
xvmm_setup_test() {
    xvmm_apt_ensure "${XVMM_RUN_PACKAGES[@]}" "${XVMM_TEST_PACKAGES[@]}"
    xvmm_setup_run
    if command -v rustup >/dev/null 2>&1; then
        for comp in rustfmt clippy; do
            rustup component list --installed 2>/dev/null | grep -q "^$comp" \
                || rustup component add "$comp"
        done
    fi
    xvmm_setup_fuzz
    xvmm_setup_mutants
    xvmm_setup_mdbook
}

# The fuzzers (fuzz/, README "Fuzzing"): a nightly toolchain and cargo-fuzz.
# Not fatal here; ./test.sh's fuzz step then fails and says why, unless
# XVMM_SKIP_FUZZ=1.
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

# Mutation testing (benches/src/bin/mutants.rs, README "Mutation testing") and
# the suite's check that README's equivalent mutants still exist. Pinned:
# the mutants' descriptions README quotes are cargo-mutants' own wording.
XVMM_MUTANTS_VERSION=27.1.0
xvmm_setup_mutants() {
    command -v cargo >/dev/null 2>&1 || return 0
    if ! cargo mutants --version 2>/dev/null | grep -qx "cargo-mutants $XVMM_MUTANTS_VERSION"; then
        echo "setup: installing cargo-mutants $XVMM_MUTANTS_VERSION" >&2
        cargo install --locked "cargo-mutants@$XVMM_MUTANTS_VERSION" \
            || echo "setup: cargo-mutants did not install: the equivalent-mutants test will fail" >&2
    fi
}

# The book (docs/, mdBook). Pinned: the book's test builds it with this
# version's warnings. Not fatal here: that test then fails and says why.
XVMM_MDBOOK_VERSION=0.4.52
xvmm_setup_mdbook() {
    command -v cargo >/dev/null 2>&1 || return 0
    if ! mdbook --version 2>/dev/null | grep -q "v$XVMM_MDBOOK_VERSION\$"; then
        echo "setup: installing mdbook $XVMM_MDBOOK_VERSION" >&2
        cargo install mdbook --locked --version "$XVMM_MDBOOK_VERSION" \
            || echo "setup: mdbook did not install: the book's test will fail" >&2
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case "${1:-test}" in
        run) xvmm_setup_run ;;
        test) xvmm_setup_test ;;
        *) echo "usage: harness/setup.sh [run|test]  (default: test, everything)" >&2; exit 2 ;;
    esac
fi
