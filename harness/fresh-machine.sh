#!/usr/bin/env bash
# ./run.sh as a new user meets it: on a fresh Debian bookworm root
# (debootstrap minbase: no compiler, no Rust, no test tools) holding a clean
# clone of this checkout's HEAD, with the host's /dev/kvm. Prints how long
# the cold ./run.sh took, then fails if it left any test tool installed
# (the test lab is ./test.sh's: harness/setup.sh). Needs root and the
# network (Debian's mirror, rustup, crates.io); takes several minutes.
#
#   harness/fresh-machine.sh [XVMM_ARGS...]     (default: --samples 1000 --rounds 1)
#
# The root is built under $XVMM_FRESH_ROOT (default /var/tmp/xvmm-fresh-root)
# and removed afterwards unless XVMM_FRESH_KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "fresh-machine: needs root (debootstrap, chroot, mounts)" >&2
    exit 1
fi
[ -e /dev/kvm ] || { echo "fresh-machine: no /dev/kvm here" >&2; exit 1; }
source harness/setup.sh
xvmm_apt_ensure debootstrap

root=${XVMM_FRESH_ROOT:-/var/tmp/xvmm-fresh-root}
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--samples 1000 --rounds 1)

mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -l "${mounted[i]}" 2>/dev/null || true
    done
    if [ "${XVMM_FRESH_KEEP:-0}" != 1 ]; then
        rm -rf --one-file-system "$root"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf --one-file-system "$root"
echo "fresh-machine: debootstrap bookworm (minbase) into $root" >&2
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
git clone -q "$PWD" "$root/xvmm"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The host's own certificate authorities (a TLS-intercepting proxy's, on a
# network that has one): the root's ca-certificates adds them when
# ./run.sh installs it, as it does the host's.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
for fs in proc sys dev dev/pts; do
    case $fs in
        proc) mount -t proc proc "$root/proc" ;;
        sys) mount -t sysfs sysfs "$root/sys" ;;
        dev) mount --bind /dev "$root/dev" ;;
        dev/pts) mount -t devpts devpts "$root/dev/pts" ;;
    esac
    mounted+=("$root/$fs")
done

start=$(date +%s)
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c 'cd /xvmm && ./run.sh "$@"' run.sh "${args[@]}"
end=$(date +%s)
echo "fresh-machine: cold ./run.sh took $((end - start)) s" \
    "(apt, rustup, two release builds and the run)"

# What the test lab would have installed must be absent.
lab=()
for pkg in "${XVMM_TEST_PACKAGES[@]}"; do
    if chroot "$root" dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null \
        | grep -q "install ok installed"; then
        lab+=("$pkg")
    fi
done
for tool in cargo-fuzz cargo-mutants mdbook; do
    [ ! -e "$root/root/.cargo/bin/$tool" ] || lab+=("$tool")
done
# rustup puts proxies for rustfmt and clippy in ~/.cargo/bin either way:
# ask which components are installed.
lab+=($(chroot "$root" /root/.cargo/bin/rustup component list --installed 2>/dev/null \
    | grep -oE '^(rustfmt|clippy)' || true))
if [ ${#lab[@]} -gt 0 ]; then
    echo "fresh-machine: ./run.sh installed test tools: ${lab[*]}" >&2
    exit 1
fi
echo "fresh-machine: no test tool installed"
