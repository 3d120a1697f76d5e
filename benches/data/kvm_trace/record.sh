#!/bin/bash
# Records the trace in this directory: every KVM event (kvm_exit,
# kvm_entry, kvm_pio, kvm_write_tsc_offset) of the nested harness's L1
# host, a real KVM under QEMU TCG, while `xvmm --kernel --trace` runs
# xperf in an L2 guest, and that run's report with its samples.
#
#     benches/data/kvm_trace/record.sh
#
# It runs the nested xperf test of Linux 6.12 (harness/tests/xperf.rs),
# whose traced step runs under `l1-init --record-trace` (guest/xvmm-init's
# record.rs: a tracefs instance of its own with the x86-tsc clock, read
# after the run, carried out over L1's console as base64 checked by
# SHA-256). The test itself checks that the recording attributes the
# samples exactly as xvmm's live trace did. Written here: events/ (the
# page header and the four events' formats, as tracefs lays them out),
# cpuN.raw (each CPU's trace_pipe_raw pages) and report.json (the run's
# report). Read by xvmm_benches::recorded (the trace_parse and attribution
# benches) and benches/tests/kvm_trace.rs.
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$dir/../../.." && pwd)
cd "$root"
cargo test -q -p xvmm-harness --test xperf -- --nocapture
src=target/harness/xperf-trace
[ -f "$src/cpu0.raw" ] || { echo "record.sh: no recording in $src" >&2; exit 1; }
rm -rf "$dir/events" "$dir"/cpu*.raw
cp -r "$src"/. "$dir/"
cp target/harness/xperf-vm.json "$dir/report.json"
ls -l "$dir" "$dir"/cpu*.raw
