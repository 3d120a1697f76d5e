#!/bin/bash
# Boot a kernel built from this series under QEMU TCG with xperf-selftest as
# /init, once per command line below, and print the test output.
#   run-qemu.sh KSRC BUILD   (BUILD: the O= directory holding bzImage)
set -euo pipefail
ksrc=$(realpath "$1"); build=$(realpath "$2")
here=$(dirname "$(realpath "$0")")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cp "$ksrc/include/uapi/linux/xperf.h" "$work/xperf.h"
cp "$here/xperf-selftest.c" "$work/"
gcc -O2 -static -Wall -o "$work/init" "$work/xperf-selftest.c"
cat > "$work/list" <<LIST
dir /dev 0755 0 0
nod /dev/console 0600 0 0 c 5 1
dir /proc 0755 0 0
file /init $work/init 0755 0 0
LIST
"$build/usr/gen_init_cpio" "$work/list" > "$work/initramfs.cpio"

for args in "xperf_stamps pti=on" "xperf_stamps pti=off" ""; do
	echo "##### cmdline extra: '$args'"
	timeout 600 qemu-system-x86_64 -accel tcg -cpu EPYC -m 512 -nographic \
		-no-reboot -kernel "$build/arch/x86/boot/bzImage" \
		-initrd "$work/initramfs.cpio" \
		-append "console=ttyS0 panic=-1 $args" 2>&1 |
		sed -n '/=== xperf test/,/Kernel panic/p' | grep -v '^input:' || true
done
