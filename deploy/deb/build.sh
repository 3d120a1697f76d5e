#!/usr/bin/env bash
# Builds the Debian package xvmm_<version>_amd64.deb with dpkg-deb:
#   deploy/deb/build.sh [OUT_DIR]     (default: target/deb; prints the .deb's path)
# It holds the static xvmm and xperf in /usr/bin (xvmm looks for xperf next
# to itself for --kernel runs), the man pages (gzipped) and completions that
# xvmm-dist generates, the systemd units of deploy/systemd and the
# Prometheus rules of deploy/prometheus. Both binaries are static, so the
# package depends on nothing. No maintainer scripts: the timer is not
# enabled on installation (`systemctl enable --now xperf-characterize.timer`).
# DEB_MAINTAINER overrides the Maintainer field.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:-target/deb}")
triple=x86_64-unknown-linux-gnu
bin=${CARGO_TARGET_DIR:-target}/$triple/release
maintainer=${DEB_MAINTAINER:-xvmm maintainers <maintainers@users.noreply.a-seed-520abd38.example>}

# Static, as the harness builds xvmm (harness/src/build.rs): the package then
# runs on any amd64 glibc system.
RUSTFLAGS="-C target-feature=+crt-static" \
    "${CARGO:-cargo}" build --release --target "$triple" -p xvmm-cli -p xperf
for b in xvmm xperf; do
    if readelf -l "$bin/$b" | grep -q 'Requesting program interpreter'; then
        echo "deb: $bin/$b is not static" >&2
        exit 1
    fi
done
# The workspace's version ([workspace.package] in Cargo.toml).
version=$(awk -F'"' '/^\[/ { s = ($0 == "[workspace.package]") }
                     s && /^version *=/ { print $2; exit }' Cargo.toml)
[ -n "$version" ] || { echo "deb: no version in Cargo.toml [workspace.package]" >&2; exit 1; }

umask 022
root=$out/root
gen=$out/generated
rm -rf "$root" "$gen"
mkdir -p "$root/DEBIAN" "$gen"
"$bin/xvmm-dist" "$gen" "$bin/xperf"

install -D -m 0755 "$bin/xvmm" "$root/usr/bin/xvmm"
install -D -m 0755 "$bin/xperf" "$root/usr/bin/xperf"

man=$root/usr/share/man/man1
mkdir -p "$man"
for page in "$gen"/man1/*.1; do
    # -n: no name or time stamp in the gzip header (reproducible; Debian policy 12.1).
    gzip -9n <"$page" >"$man/$(basename "$page").gz"
done
install -D -m 0644 "$gen/completions/bash/xvmm" "$root/usr/share/bash-completion/completions/xvmm"
install -D -m 0644 "$gen/completions/zsh/_xvmm" "$root/usr/share/zsh/vendor-completions/_xvmm"
install -D -m 0644 "$gen/completions/fish/xvmm.fish" \
    "$root/usr/share/fish/vendor_completions.d/xvmm.fish"

# Packages install outside /usr/local (Debian policy 9.1.2): the unit runs
# the packaged xperf.
units=$root/usr/lib/systemd/system
mkdir -p "$units"
for unit in deploy/systemd/*.service deploy/systemd/*.timer; do
    sed 's|/usr/local/bin/xperf|/usr/bin/xperf|g' "$unit" >"$units/$(basename "$unit")"
done
rules=$root/usr/share/xvmm/prometheus
mkdir -p "$rules"
install -m 0644 deploy/prometheus/* "$rules/"

doc=$root/usr/share/doc/xvmm
mkdir -p "$doc"
cat >"$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: xvmm

Files: *
Copyright: xvmm authors
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 can
 be found in /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
# The commit's date keeps the file the same for the same sources.
date=$(git log -1 --format=%aD 2>/dev/null || date -R -d @0)
printf 'xvmm (%s) unstable; urgency=medium\n\n  * Built from the xvmm repository.\n\n -- %s  %s\n' \
    "$version" "$maintainer" "$date" | gzip -9n >"$doc/changelog.gz"

(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
cat >"$root/DEBIAN/control" <<CONTROL
Package: xvmm
Version: $version
Architecture: amd64
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Section: devel
Priority: optional
Suggests: prometheus-node-exporter
Description: measure user<->kernel crossing costs on bare metal and under KVM
 xvmm boots a bare-metal microguest or a Linux guest under KVM and measures
 what a page fault, a system call and a VM exit cost, split into the
 user-to-kernel and kernel-to-user halves with the xperf kernel hooks.
 xperf measures the same inside Linux; \`xperf characterize\` describes a
 machine for Prometheus (systemd timer and alerting rules included).
 Both binaries are static.
CONTROL

deb=$out/xvmm_${version}_amd64.deb
dpkg-deb --root-owner-group --build "$root" "$deb" >&2
echo "$deb"
