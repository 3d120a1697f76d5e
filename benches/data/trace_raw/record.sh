#!/bin/bash
# Records the trace in this directory, which benches/tests/trace_raw_oracle.rs
# decodes with xvmm's trace_pipe_raw reader and compares, event by event,
# with what trace-cmd (libtraceevent) reads from the same pages.
#
#     sudo benches/data/trace_raw/record.sh [XVMM_BINARY]
#
# As root. It works in a private mount namespace (tracefs is mounted there
# only if it is not already), in a tracefs instance of its own that it
# removes, so the host's mounts and instances are left as they were. The
# trace clock is x86-tsc, as xvmm's; each CPU's buffer is 32 KiB with
# overwrite on, so the oldest pages are dropped and the kernel notes the
# loss on the pages that follow. Events: raw_syscalls filtered to getppid
# (the kernel discards the others after writing them: padding in the
# pages), sched_switch of python and xvmm, and the kvm events that fire under
# this machine's PVM during a short microguest run (kvm_pio,
# kvm_write_tsc_offset; kvm_exit and kvm_entry never fire here, their
# formats are kept for the reader). Written: cpuN.raw (each CPU's pages,
# read as xvmm reads them), header_page, header_event, events/SYS/EVENT/format,
# and report.txt: what trace-cmd (libtraceevent) reads from the pages, made
# by trace-cmd alone (`trace-cmd restore -c` takes the formats from tracefs,
# `restore -i` adds the pages, then `trace-cmd report -N -R -t`: no plugins,
# raw field values, full timestamps).
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
xvmm=$(realpath "${1:-target/release/xvmm}")
[ -x "$xvmm" ] || { echo "record.sh: no xvmm binary at $xvmm" >&2; exit 1; }
exec unshare -m --propagation private bash -s "$dir" "$xvmm" <<'INNER'
set -euo pipefail
dir=$1 xvmm=$2
T=/sys/kernel/tracing
mountpoint -q "$T" || mount -t tracefs nodev "$T"
I=$T/instances/xvmm-trace-oracle
mkdir "$I"
cleanup() { echo 0 > "$I/tracing_on"; echo 0 > "$I/events/enable"; rmdir "$I"; }
trap cleanup EXIT
echo x86-tsc > "$I/trace_clock"
echo 32 > "$I/buffer_size_kb"
echo 'id == 110' > "$I/events/raw_syscalls/filter"
events="raw_syscalls/sys_enter raw_syscalls/sys_exit sched/sched_switch kvm/kvm_pio kvm/kvm_write_tsc_offset"
for e in $events; do echo 1 > "$I/events/$e/enable"; done
echo 'prev_comm ~ "xvmm*" || next_comm ~ "xvmm*" || prev_comm ~ "python*" || next_comm ~ "python*"' \
    > "$I/events/sched/sched_switch/filter"
# A burst of getppid that overflows the buffers (the pages left after it
# note the loss), getppid with pauses (time extends between events), then
# the microguest (kvm events, context switches).
python3 -c 'import os
for i in range(3000):
    os.getppid()'
python3 -c 'import os, time
for i in range(30):
    os.getppid(); os.getppid()
    time.sleep(0.01)'
"$xvmm" --samples 20 --rounds 1 --quiet > /dev/null
echo 0 > "$I/tracing_on"
rm -f "$dir"/cpu*.raw
rm -rf "$dir/events"
for c in "$I"/per_cpu/cpu*; do
    python3 - "$c/trace_pipe_raw" "$dir/$(basename "$c").raw" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
with open(sys.argv[2], "wb") as out:
    while True:
        try:
            page = os.read(fd, 4096)
        except BlockingIOError:
            break
        if not page:
            break
        out.write(page)
PY
done
cp "$T/events/header_page" "$T/events/header_event" "$dir/"
for e in $events kvm/kvm_exit kvm/kvm_entry; do
    mkdir -p "$dir/events/$e"
    cp "$T/events/$e/format" "$dir/events/$e/format"
done
chmod 644 "$dir"/header_* "$dir"/events/*/*/format
tmp=$(mktemp -d)
trace-cmd restore -c -o "$tmp/head.dat"
n=$(ls -d "$I"/per_cpu/cpu* | wc -l)
raw=()
for ((c = 0; c < n; c++)); do raw+=("$dir/cpu$c.raw"); done
trace-cmd restore -i "$tmp/head.dat" -o "$tmp/trace.dat" "${raw[@]}"
trace-cmd report -N -R -t -i "$tmp/trace.dat" > "$dir/report.txt"
rm -rf "$tmp"
INNER
