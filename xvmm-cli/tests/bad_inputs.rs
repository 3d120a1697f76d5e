//! The bad-input corpus (issue 16): ONE table, [`CASES`], of bad files,
//! options, output destinations and signals, run against the built `xvmm`
//! and `xperf`. New bad inputs are added to the table.
//!
//! Every case must end with its exit status (README "Exit status"), a stderr
//! of one line naming the problem (clap's usage errors: clap's whole message),
//! no panic, a peak RSS under 512 MiB (the child's own, from `wait4`), within
//! its time limit, and no host state left behind: the fixture directory (where
//! every output path points) holds exactly what it held before, files
//! outside it that a case aims at are unchanged, and no tracefs instance,
//! journal of host changes or tracefs mount of the child remains. The corpus
//! runs in a private mount namespace where tracefs starts unmounted, as on a
//! freshly booted machine; an instance that an earlier, killed run left is
//! named as such, not blamed on the case (xvmm and xperf remove it on their
//! next start).
//!
//! Single cases with more to check stay where they are: errors.rs
//! (`--kernel`/KVM device), cli_policy.rs (failing stdout, fallback files,
//! escaping), report_cli.rs, kernel_cli.rs, linux_xperf.rs, vm_boot.rs
//! (guest results, signals with `--trace` and the global trace clock).

mod vm_support;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};
use vm_support::*;

/// Which binary a case runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Prog {
    Xvmm,
    Xperf,
}

/// What stderr must say.
#[derive(Clone, Copy, Debug)]
enum Says {
    /// One line, `<prog>: ...` containing this.
    Line(&'static str),
    /// clap's whole usage message containing this (and its `--help` hint).
    Clap(&'static str),
    /// Tables of what was done first (a stopped `--trace` run prints its
    /// host-exit table; `--json -` puts the tables on stderr), then one
    /// error line containing this.
    LastLine(&'static str),
    /// Anything: the process was killed (SIGKILL leaves no last word).
    Nothing,
}

/// Where stdout goes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Out {
    Pipe,
    DevFull,
    /// No descriptor 1 at all (`>&-`).
    Closed,
}

/// How the process must end.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    Status(i32),
    Signal(i32),
}

struct Case {
    name: &'static str,
    prog: Prog,
    /// `{F}` is the fixture directory.
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    stdout: Out,
    /// Sent 1.5 s after the start, 100 ms apart.
    signals: &'static [i32],
    /// Runs a guest (skipped without /dev/kvm).
    needs_kvm: bool,
    end: End,
    says: Says,
    /// Must save its results to a fallback file in the working directory
    /// and name it (README: a measurement is never lost).
    saves: bool,
}

const fn case(name: &'static str, args: &'static [&'static str], code: i32, says: Says) -> Case {
    Case {
        name,
        prog: Prog::Xvmm,
        args,
        env: &[],
        stdout: Out::Pipe,
        signals: &[],
        needs_kvm: false,
        end: End::Status(code),
        says,
        saves: false,
    }
}

const fn xperf(name: &'static str, args: &'static [&'static str], code: i32, says: Says) -> Case {
    Case {
        prog: Prog::Xperf,
        ..case(name, args, code, says)
    }
}

const fn with_env(c: Case, env: &'static [(&'static str, &'static str)]) -> Case {
    Case { env, ..c }
}

const fn to_full(c: Case) -> Case {
    Case {
        stdout: Out::DevFull,
        ..c
    }
}

const fn closed(c: Case) -> Case {
    Case {
        stdout: Out::Closed,
        ..c
    }
}

const fn saving(c: Case) -> Case {
    Case { saves: true, ..c }
}

const fn guest(c: Case) -> Case {
    Case {
        needs_kvm: true,
        ..c
    }
}

const fn signalled(c: Case, signals: &'static [i32], end: End) -> Case {
    Case {
        signals,
        end,
        needs_kvm: true,
        ..c
    }
}

use Says::{Clap, LastLine, Line, Nothing};

/// The corpus: one case a line.
#[rustfmt::skip]
const CASES: &[Case] = &[
    // --- result files: show, compare ---
    case("show: missing", &["show", "{F}/missing.json"], 1, Line("report {F}/missing.json: no such file")),
    case("show: empty", &["show", "{F}/empty"], 1, Line("results are not valid JSON: EOF while parsing")),
    case("show: truncated", &["show", "{F}/truncated.json"], 1, Line("results are not valid JSON: EOF while parsing")),
    case("show: /dev/zero", &["show", "/dev/zero"], 1, Line("report /dev/zero: not a regular file")),
    case("show: FIFO", &["show", "{F}/fifo"], 1, Line("fifo: not a regular file")),
    case("show: directory", &["show", "{F}/dir"], 1, Line("dir: not a regular file")),
    case("show: symlink loop", &["show", "{F}/loop-a"], 1, Line("Too many levels of symbolic links")),
    case("show: 10 GiB sparse", &["show", "{F}/sparse-10g"], 1, Line("10240.0 MiB is more than the 256.0 MiB accepted here")),
    case("show: 200 MiB of NULs", &["show", "{F}/nul-200m"], 1, Line("results are not valid JSON: expected value at line 1 column 1")),
    case("show: not UTF-8", &["show", "{F}/latin1.json"], 1, Line("not UTF-8 text")),
    case("show: nested 100k deep", &["show", "{F}/nested.json"], 1, Line("missing field `schema` at line 1 column 600001")),
    case("show: JSON null", &["show", "{F}/null.json"], 1, Line("invalid type: null, expected struct Report")),
    case("show: wrong schema", &["show", "{F}/schema.json"], 1, Line("results have schema \"not-xvmm\", expected \"xvmm-results\"")),
    case("show: wrong version", &["show", "{F}/version.json"], 1, Line("results have schema version 2, expected 1")),
    case("show: number out of range", &["show", "{F}/overflow.json"], 1, Line("invalid value: integer `-1`, expected u64")),
    case("show: an ELF file", &["show", "{F}/bzImage"], 1, Line("not UTF-8 text")),
    case("show: unknown option", &["show", "{F}/report.json", "--bogus"], 2, Clap("unexpected argument '--bogus'")),
    case("show: control characters in a bad value", &["show", "{F}/evil.json"], 1, Line("unknown variant `bare-m\\tal\\x7f\\x1b[2J`")),
    case("show: a 4 MB crossing name", &["show", "{F}/long-name.json"], 1, Line("a crossing name of 4194304 bytes, more than the 256 accepted")),
    case("show: 2000 crossings", &["show", "{F}/many.json"], 1, Line("more than 1024 crossings in one report")),
    case("compare: a 4 MB crossing name", &["compare", "{F}/long-name.json", "{F}/report.json"], 1, Line("a crossing name of 4194304 bytes")),
    case("compare: 2000 crossings each", &["compare", "{F}/many.json", "{F}/many.json"], 1, Line("VM report {F}/many.json: results are not valid JSON: more than 1024 crossings in one report")),
    case("compare: control characters in a bad value", &["compare", "{F}/report.json", "{F}/evil.json"], 1, Line("unknown variant `bare-m\\tal\\x7f\\x1b[2J`")),
    case("baseline: control characters in a bad value", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--baseline", "{F}/evil.json"], 1, Line("unknown variant `bare-m\\tal\\x7f\\x1b[2J`")),
    to_full(case("show: stdout /dev/full", &["show", "{F}/report.json"], 1, Line("cannot write to stdout: No space left on device"))),
    case("show: no file", &["show"], 2, Clap("the following required arguments were not provided")),
    case("compare: missing bare", &["compare", "{F}/report.json", "{F}/missing.json"], 1, Line("bare-metal report {F}/missing.json: no such file")),
    case("compare: /dev/zero", &["compare", "/dev/zero", "{F}/report.json"], 1, Line("VM report /dev/zero: not a regular file")),
    case("compare: wrong schema", &["compare", "{F}/report.json", "{F}/schema.json"], 1, Line("results have schema \"not-xvmm\"")),
    case("compare: one report", &["compare", "{F}/report.json"], 2, Clap("<BARE_METAL>")),
    case("compare: --samples", &["--samples", "5", "compare", "{F}/report.json", "{F}/report.json"], 2, Clap("cannot be used with")),
    saving(case("compare: --json /dev/full", &["compare", "{F}/report.json", "{F}/report.json", "--json", "/dev/full"], 1, Line("No space left on device"))),
    case("compare: --json in a missing directory", &["compare", "{F}/report.json", "{F}/report.json", "--json", "{F}/nodir/out.json"], 1, Line("cannot write {F}/nodir/out.json: No such file or directory")),
    case("compare: --json an existing directory", &["compare", "{F}/report.json", "{F}/report.json", "--json", "{F}/dir"], 1, Line("cannot write {F}/dir: is a directory")),
    case("compare: --json a dangling symlink", &["compare", "{F}/report.json", "{F}/report.json", "--json", "{F}/dangling"], 1, Line("is a dangling symbolic link")),
    case("compare: --json a symlink out of its directory", &["compare", "{F}/report.json", "{F}/report.json", "--json", "{F}/link-out"], 1, Line("is a symbolic link out of its directory")),
    case("compare: --json under /proc", &["compare", "{F}/report.json", "{F}/report.json", "--json", "/proc/xvmm.json"], 1, Line("cannot write /proc/xvmm.json")),
    case("compare: --json a FIFO nothing reads", &["compare", "{F}/report.json", "{F}/report.json", "--json", "{F}/fifo"], 1, Line("cannot write {F}/fifo: is a FIFO that nothing reads")),
    // --- xvmm report ---
    case("report: /dev/zero", &["report", "/dev/zero", "-o", "{F}/out.html"], 1, Line("result file /dev/zero: not a regular file")),
    case("report: FIFO", &["report", "{F}/fifo", "-o", "{F}/out.html"], 1, Line("fifo: not a regular file")),
    case("report: not JSON", &["report", "{F}/text", "-o", "{F}/out.html"], 1, Line("results are not valid JSON: expected value")),
    case("report: one good file, one missing", &["report", "{F}/report.json", "{F}/missing.json", "-o", "{F}/out.html"], 1, Line("result file {F}/missing.json: no such file")),
    case("report: control characters in a bad value", &["report", "{F}/evil.json", "-o", "{F}/out.html"], 1, Line("unknown variant `bare-m\\tal\\x7f\\x1b[2J`")),
    case("report: a 4 MB crossing name", &["report", "{F}/long-name.json", "-o", "{F}/out.html"], 1, Line("a crossing name of 4194304 bytes")),
    case("report: 10 GiB sparse", &["report", "{F}/sparse-10g", "-o", "{F}/out.html"], 1, Line("is more than the")),
    case("report: no file", &["report", "-o", "{F}/out.html"], 2, Clap("<FILES>...")),
    case("report: -o a dangling symlink", &["report", "{F}/report.json", "-o", "{F}/dangling"], 1, Line("is a dangling symbolic link")),
    case("report: -o a symlink out of its directory", &["report", "{F}/report.json", "-o", "{F}/link-out"], 1, Line("is a symbolic link out of its directory")),
    case("report: -o an existing directory", &["report", "{F}/report.json", "-o", "{F}/dir"], 1, Line("is a directory")),
    case("report: -o /dev/full", &["report", "{F}/report.json", "-o", "/dev/full"], 1, Line("No space left on device")),
    case("report: -o a FIFO nothing reads", &["report", "{F}/report.json", "-o", "{F}/fifo"], 1, Line("cannot write {F}/fifo: is a FIFO that nothing reads")),
    // --- kernel hooks ---
    case("hooks: missing", &["kernel", "hooks", "{F}/missing"], 1, Line("no such file")),
    case("hooks: /dev/zero", &["kernel", "hooks", "/dev/zero"], 1, Line("not a regular file")),
    case("hooks: FIFO", &["kernel", "hooks", "{F}/fifo"], 1, Line("not a regular file")),
    case("hooks: empty", &["kernel", "hooks", "{F}/empty"], 1, Line("not a usable vmlinux: not an ELF file")),
    case("hooks: text", &["kernel", "hooks", "{F}/text"], 1, Line("not a usable vmlinux: not an ELF file")),
    case("hooks: no sections", &["kernel", "hooks", "{F}/pvh.elf"], 1, Line("not a usable vmlinux: no section headers")),
    case("hooks: 2 GiB sparse", &["kernel", "hooks", "{F}/sparse-2g"], 1, Line("2048.0 MiB is more than the 1024.0 MiB accepted here")),
    case("hooks: 1 TiB symbol table", &["kernel", "hooks", "{F}/huge-symtab.elf"], 1, Line("corrupt ELF: symbol table")),
    case("hooks: no file", &["kernel", "hooks"], 2, Clap("<VMLINUX>")),
    case("kernel: unknown command", &["kernel", "frobnicate"], 2, Clap("unrecognized subcommand 'frobnicate'")),
    case("kernel build: --jobs not a number", &["kernel", "build", "--jobs", "many"], 2, Clap("invalid value 'many' for '--jobs <JOBS>'")),
    case("kernel build: --jobs 0", &["kernel", "build", "--jobs", "0"], 2, Clap("invalid value '0' for '--jobs <JOBS>'")),
    case("kernel build: unknown flavour", &["kernel", "build", "--flavour", "l3"], 2, Clap("invalid value 'l3' for '--flavour <FLAVOUR>'")),
    case("kernel build: missing source", &["kernel", "build", "--source", "{F}/missing", "--cache", "{F}/nodir"], 1, Line("{F}/missing")),
    // --- initramfs ---
    case("initramfs: missing host file", &["initramfs", "-o", "{F}/out.cpio", "/init={F}/missing"], 1, Line("reading {F}/missing: No such file or directory")),
    case("initramfs: /dev/zero", &["initramfs", "-o", "{F}/out.cpio", "/init=/dev/zero"], 1, Line("initramfs file /dev/zero: not a regular file")),
    case("initramfs: FIFO", &["initramfs", "-o", "{F}/out.cpio", "/init={F}/fifo"], 1, Line("not a regular file")),
    case("initramfs: file/dir clash", &["initramfs", "-o", "{F}/out.cpio", "/a={F}/text", "/a/b={F}/text"], 2, Line("initramfs entries /a/b and /a clash")),
    case("initramfs: '..' in a guest path", &["initramfs", "-o", "{F}/out.cpio", "/../etc/x={F}/text"], 2, Line("has an empty, '.' or '..' component")),
    case("initramfs: the cpio end marker as a name", &["initramfs", "-o", "{F}/out.cpio", "/TRAILER!!!={F}/text", "/init={F}/text"], 2, Line("starts with the cpio end marker")),
    case("initramfs: the end marker as a directory", &["initramfs", "-o", "{F}/out.cpio", "/TRAILER!!!/x={F}/text"], 2, Line("starts with the cpio end marker")),
    case("initramfs: entry without '='", &["initramfs", "-o", "{F}/out.cpio", "/init"], 2, Line("is not GUEST_PATH=HOST_FILE")),
    case("initramfs: -o an existing directory", &["initramfs", "-o", "{F}/dir", "/init={F}/text"], 1, Line("is a directory")),
    case("initramfs: -o /dev/full", &["initramfs", "-o", "/dev/full", "/init={F}/text"], 1, Line("No space left on device")),
    case("initramfs: -o in a missing directory", &["initramfs", "-o", "{F}/nodir/x.cpio", "/init={F}/text"], 1, Line("No such file or directory")),
    case("initramfs: -o a dangling symlink", &["initramfs", "-o", "{F}/dangling", "/init={F}/text"], 1, Line("is a dangling symbolic link")),
    case("initramfs: -o a FIFO nothing reads", &["initramfs", "-o", "{F}/fifo", "/init={F}/text"], 1, Line("is a FIFO that nothing reads")),
    case("initramfs: no -o", &["initramfs", "/init={F}/text"], 2, Clap("--output <OUTPUT>")),
    // --- --kernel, --initrd, --baseline and the run's options ---
    case("kernel: missing", &["--kernel", "{F}/missing"], 1, Line("kernel: {F}/missing: no such file")),
    case("kernel: directory", &["--kernel", "{F}/dir"], 1, Line("not a regular file")),
    case("kernel: empty", &["--kernel", "{F}/empty"], 1, Line("file is empty")),
    case("kernel: /dev/zero", &["--kernel", "/dev/zero"], 1, Line("not a regular file")),
    case("kernel: FIFO", &["--kernel", "{F}/fifo"], 1, Line("not a regular file")),
    case("kernel: symlink loop", &["--kernel", "{F}/loop-a"], 1, Line("Too many levels of symbolic links")),
    case("kernel: text", &["--kernel", "{F}/text"], 1, Line("not a Linux kernel")),
    case("kernel: 10 GiB sparse", &["--kernel", "{F}/sparse-10g"], 1, Line("not a Linux kernel")),
    case("kernel: truncated bzImage", &["--kernel", "{F}/bzImage-cut"], 1, Line("truncated bzImage")),
    case("kernel: ELF for AArch64", &["--kernel", "{F}/arm.elf"], 1, Line("ELF for AArch64 (e_machine 183)")),
    case("kernel: ELF without PVH note", &["--kernel", "{F}/nopvh.elf"], 1, Line("no PVH entry note")),
    case("initrd: missing", &["--kernel", "{F}/bzImage", "--initrd", "{F}/missing"], 1, Line("no such file")),
    case("initrd: /dev/zero", &["--kernel", "{F}/bzImage", "--initrd", "/dev/zero"], 1, Line("not a regular file")),
    case("initrd: directory", &["--kernel", "{F}/bzImage", "--initrd", "{F}/dir"], 1, Line("not a regular file")),
    case("initrd: bigger than --mem", &["--kernel", "{F}/bzImage", "--initrd", "{F}/sparse-2g", "--mem", "64"], 1, Line("does not fit")),
    case("initrd: without --kernel", &["--initrd", "{F}/text"], 2, Clap("--kernel <KERNEL>")),
    case("baseline: /dev/zero", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--baseline", "/dev/zero"], 1, Line("not a regular file")),
    case("baseline: wrong schema", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--baseline", "{F}/schema.json"], 1, Line("results have schema \"not-xvmm\"")),
    case("baseline: 2000 crossings", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--baseline", "{F}/many.json"], 1, Line("more than 1024 crossings in one report")),
    case("mem: 0", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--mem", "0"], 1, Line("too small")),
    case("mem: more than the host has", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--mem", "99999999"], 1, Line("more than the host can give")),
    case("mem: overflowing", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--mem", "18446744073709551615"], 1, Line("--mem")),
    case("mem: negative", &["--kernel", "{F}/bzImage", "--mem", "-1"], 2, Clap("unexpected argument '-1'")),
    case("cpus: 0", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--cpus", "0"], 2, Line("--cpus 0: a guest needs at least one vCPU")),
    case("cpus: more than the MP table holds", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--cpus", "255"], 2, Line("--cpus 255: at most 254")),
    case("cpus: past 8 bits", &["--kernel", "{F}/bzImage", "--cpus", "300"], 2, Clap("invalid value '300'")),
    case("cpus: without --kernel", &["--cpus", "2"], 2, Clap("--kernel <KERNEL>")),
    case("pin: fewer CPUs than vCPUs", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--cpus", "2", "--pin", "0"], 2, Line("--pin names 1 host CPU for 2 vCPUs")),
    case("pin: a CPU the host lacks", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--cpus", "2", "--pin", "0,4000"], 2, Line("--pin 4000: no such CPU")),
    case("pin: a backwards range", &["--kernel", "{F}/bzImage", "--pin", "3-1"], 2, Clap("runs backwards")),
    case("pin: a receiver CPU the host lacks", &["--pin", "0,4095"], 2, Line("--pin 4095: xvmm may not run on that host CPU (it may use 0-")),
    case("pin: three CPUs for the microguest", &["--pin", "0,1,0"], 2, Line("the built-in microguest runs at most two vCPUs")),
    case("cmdline: too long", &["--kernel", "{F}/bzImage", "--initrd", "{F}/text", "--cmdline", "{LONG}"], 1, Line("at most 2047")),
    case("samples: 0 with --kernel", &["--kernel", "{F}/bzImage", "--samples", "0"], 2, Line("out of range")),
    case("samples: too many with --kernel", &["--kernel", "{F}/bzImage", "--samples", "1000001"], 2, Line("out of range")),
    case("samples: not a number", &["--samples", "many"], 2, Clap("invalid value 'many' for '--samples <SAMPLES>'")),
    case("samples: negative", &["--samples", "-1"], 2, Clap("unexpected argument '-1'")),
    case("samples: missing value", &["--samples"], 2, Clap("a value is required for '--samples <SAMPLES>'")),
    case("timeout: 0", &["--timeout", "0"], 2, Clap("0 is not in 1..=1000000")),
    case("timeout: too long", &["--timeout", "10000000"], 2, Clap("10000000 is not in 1..=1000000")),
    case("async-pf on: without --kernel", &["--async-pf", "on"], 2, Clap("--kernel <KERNEL>")),
    case("async-pf: bad value", &["--async-pf", "maybe"], 2, Clap("invalid value 'maybe' for '--async-pf <ASYNC_PF>'")),
    case("async-pf both: without --kernel", &["--async-pf", "both"], 2, Clap("--kernel <KERNEL>")),
    case("async-pf both: without a delay", &["--kernel", "{F}/bzImage", "--async-pf", "both"], 2, Clap("--host-fault-delay <HOST_FAULT_DELAY>")),
    case("async-pf both: --json -", &["--kernel", "{F}/bzImage", "--async-pf", "both", "--host-fault-delay", "1ms", "--json", "-"], 2, Line("cannot send them to stdout")),
    case("async-pf both: --json in a missing directory", &["--kernel", "{F}/bzImage", "--async-pf", "both", "--host-fault-delay", "1ms", "--json", "{F}/nodir/x.json"], 1, Line("cannot write {F}/nodir/x.json.on.json: No such file or directory")),
    case("host-fault-delay: without --kernel", &["--host-fault-delay", "1ms"], 2, Clap("--kernel <KERNEL>")),
    case("host-fault-delay: no unit", &["--kernel", "{F}/bzImage", "--host-fault-delay", "200"], 2, Clap("needs a unit")),
    case("host-fault-delay: bad unit", &["--kernel", "{F}/bzImage", "--host-fault-delay", "2h"], 2, Clap("unknown unit \"h\"")),
    case("host-fault-delay: zero", &["--kernel", "{F}/bzImage", "--host-fault-delay", "0us"], 2, Line("--host-fault-delay 0ns is out of range: 1us to 1s")),
    case("host-fault-delay: too long", &["--kernel", "{F}/bzImage", "--host-fault-delay", "2s"], 2, Line("is out of range: 1us to 1s")),
    case("host-fault-delay: overflow", &["--kernel", "{F}/bzImage", "--host-fault-delay", "99999999999999999999s"], 2, Clap("does not start with a whole number")),
    case("tsc-khz: not a number", &["--tsc-khz", "fast"], 2, Clap("invalid value 'fast' for '--tsc-khz <TSC_KHZ>'")),
    case("unknown option", &["--frobnicate"], 2, Clap("unexpected argument '--frobnicate'")),
    case("unknown subcommand", &["frobnicate"], 2, Clap("unrecognized subcommand 'frobnicate'")),
    case("non-UTF-8 argument", &["show", "{NONUTF8}"], 1, Line("no such file")),
    with_env(case("kvm device: /dev/null", &["--samples", "10"], 1, Line("kvm: /dev/null is not a KVM device")), &[("XVMM_KVM_DEVICE", "/dev/null")]),
    with_env(case("kvm device: missing", &["--samples", "10"], 1, Line("does not exist")), &[("XVMM_KVM_DEVICE", "{F}/missing")]),
    with_env(case("xperf: dynamic binary", &["--kernel", "{F}/bzImage"], 1, Line("XVMM_XPERF=/bin/true is dynamically linked (has PT_INTERP)")), &[("XVMM_XPERF", "/bin/true")]),
    with_env(case("xperf: directory", &["--kernel", "{F}/bzImage"], 1, Line("not a regular file")), &[("XVMM_XPERF", "{F}/dir")]),
    with_env(case("xperf: /dev/zero", &["--kernel", "{F}/bzImage"], 1, Line("not a regular file")), &[("XVMM_XPERF", "/dev/zero")]),
    with_env(case("xperf: not an ELF", &["--kernel", "{F}/bzImage"], 1, Line("not an ELF file")), &[("XVMM_XPERF", "{F}/text")]),
    // --- output destinations of a run and of `machine` ---
    case("json: existing directory", &["--samples", "10", "--json", "{F}/dir"], 1, Line("cannot write {F}/dir: is a directory")),
    case("json: dangling symlink", &["--samples", "10", "--json", "{F}/dangling"], 1, Line("is a dangling symbolic link")),
    case("json: symlink out of its directory", &["--samples", "10", "--json", "{F}/link-out"], 1, Line("out of its directory")),
    case("json: missing directory", &["--samples", "10", "--json", "{F}/nodir/r.json"], 1, Line("No such file or directory")),
    case("json: /proc", &["--samples", "10", "--json", "/proc/r.json"], 1, Line("cannot write /proc/r.json")),
    case("json: a FIFO nothing reads", &["--samples", "10", "--json", "{F}/fifo"], 1, Line("cannot write {F}/fifo: is a FIFO that nothing reads")),
    saving(guest(case("json: /dev/full after a run", &["--samples", "10", "--warmup", "0", "--json", "/dev/full"], 1, Line("No space left on device")))),
    saving(case("machine: --json /dev/full", &["machine", "--json", "/dev/full"], 1, Line("No space left on device"))),
    case("machine: --json /", &["machine", "--json", "/"], 1, Line("is a directory")),
    case("linearity: --json /", &["linearity", "--json", "/"], 1, Line("is a directory")),
    case("linearity: --json a FIFO nothing reads", &["linearity", "--json", "{F}/fifo"], 1, Line("cannot write {F}/fifo: is a FIFO that nothing reads")),
    case("linearity: too few samples", &["linearity", "--samples", "5"], 2, Clap("invalid value '5' for '--samples <SAMPLES>'")),
    case("linearity: --kernel", &["linearity", "--kernel", "{F}/x"], 2, Clap("unexpected argument '--kernel'")),
    case("linearity: --samples before it", &["--samples", "5", "linearity"], 2, Clap("cannot be used with")),
    to_full(guest(case("linearity: stdout /dev/full", &["linearity", "--samples", "200"], 1, Line("cannot write to stdout: No space left on device")))),
    saving(guest(case("linearity: --json /dev/full after the check", &["linearity", "--samples", "200", "--json", "/dev/full"], 1, Line("No space left on device")))),
    case("machine: --json a FIFO nothing reads", &["machine", "--json", "{F}/fifo"], 1, Line("cannot write {F}/fifo: is a FIFO that nothing reads")),
    to_full(case("machine: stdout /dev/full", &["machine"], 1, Line("cannot write to stdout: No space left on device"))),
    to_full(case("help: stdout /dev/full", &["--help"], 1, Line("cannot write to stdout"))),
    // --- a stdout closed at start (`>&-`): as /dev/full, never a silent success ---
    closed(case("help: stdout closed", &["--help"], 1, Line("cannot write to stdout: Bad file descriptor"))),
    closed(case("version: stdout closed", &["--version"], 1, Line("cannot write to stdout: Bad file descriptor"))),
    closed(case("show: stdout closed", &["show", "{F}/report.json"], 1, Line("cannot write to stdout: Bad file descriptor"))),
    closed(case("compare: stdout closed", &["compare", "{F}/report.json", "{F}/report.json"], 1, Line("cannot write to stdout: Bad file descriptor"))),
    saving(closed(case("compare: --json - with stdout closed", &["compare", "{F}/report.json", "{F}/report.json", "--json", "-"], 1, LastLine("cannot write the results to stdout")))),
    closed(case("machine: stdout closed", &["machine"], 1, Line("cannot write to stdout: Bad file descriptor"))),
    closed(case("json: /dev/stdout with stdout closed", &["machine", "--json", "/dev/stdout"], 1, Line("cannot write /dev/stdout: is a symbolic link to a directory"))),
    guest(closed(case("run: stdout closed", &["--samples", "10", "--warmup", "0"], 1, Line("cannot write to stdout: Bad file descriptor")))),
    saving(guest(closed(case("run: --json - with stdout closed", &["--samples", "10", "--warmup", "0", "--json", "-"], 1, LastLine("cannot write the results to stdout"))))),
    // --- guests that misbehave ---
    guest(case("guest: malformed results", &["--kernel", "{F}/bad-results", "--initrd", "{F}/text"], 1, Line("guest: malformed results: "))),
    guest(case("guest: results longer than the slot", &["--kernel", "{F}/huge-results", "--initrd", "{F}/text"], 1, Line("exceeds the results slot"))),
    guest(case("guest: triple fault", &["--kernel", "{F}/triple", "--initrd", "{F}/text"], 1, Line("triple fault"))),
    guest(case("guest: spins past --timeout", &["--kernel", "{F}/spin", "--initrd", "{F}/text", "--timeout", "1"], 124, Line("timeout"))),
    // --- signals during a run ---
    signalled(case("SIGINT", &["--kernel", "{F}/spin", "--initrd", "{F}/text", "--timeout", "60"], 0, Line("interrupted by SIGINT")), &[libc::SIGINT], End::Status(130)),
    signalled(case("SIGINT twice", &["--kernel", "{F}/spin", "--initrd", "{F}/text", "--timeout", "60"], 0, Line("interrupted by SIGINT")), &[libc::SIGINT, libc::SIGINT], End::Status(130)),
    signalled(case("SIGTERM twice", &["--kernel", "{F}/spin", "--initrd", "{F}/text", "--timeout", "60"], 0, Line("interrupted by SIGTERM")), &[libc::SIGTERM, libc::SIGTERM], End::Status(143)),
    signalled(case("SIGHUP", &["--kernel", "{F}/spin", "--initrd", "{F}/text", "--timeout", "60"], 0, Line("interrupted by SIGHUP")), &[libc::SIGHUP], End::Status(129)),
    signalled(case("SIGTERM twice, traced", &["--kernel", "{F}/spin", "--initrd", "{F}/text", "--timeout", "60", "--trace"], 0, LastLine("interrupted by SIGTERM")), &[libc::SIGTERM, libc::SIGTERM], End::Status(143)),
    signalled(case("SIGTERM twice, traced microguest", &["--trace", "--samples", "400000"], 0, LastLine("interrupted by SIGTERM")), &[libc::SIGTERM, libc::SIGTERM], End::Status(143)),
    signalled(case("SIGINT, microguest with --json", &["--samples", "400000", "--json", "{F}/run.json"], 0, Line("interrupted by SIGINT")), &[libc::SIGINT], End::Status(130)),
    signalled(case("SIGKILL with --json", &["--kernel", "{F}/spin", "--initrd", "{F}/text", "--timeout", "60", "--json", "{F}/killed.json"], 0, Nothing), &[libc::SIGKILL], End::Signal(libc::SIGKILL)),
    // --- xperf ---
    xperf("xperf: --samples 0", &["--samples", "0"], 2, Line("usage: --samples must be between 1 and 1000000, got 0")),
    xperf("xperf: --samples not a number", &["--samples", "many"], 2, Line("usage: --samples needs a whole number, got \"many\"")),
    xperf("xperf: --samples missing value", &["--samples"], 2, Line("usage: --samples needs a value")),
    xperf("xperf: --warmup too many", &["--warmup", "1000001"], 2, Line("usage: --warmup must be between 0 and 1000000")),
    xperf("xperf: --cpu not a number", &["--cpu", "-1"], 2, Line("usage: --cpu needs a CPU number, got \"-1\"")),
    xperf("xperf: --raw with a value", &["--raw=1"], 2, Line("usage: --raw takes no value")),
    xperf("xperf: --json empty", &["--json", ""], 2, Line("usage: --json needs a file name")),
    xperf("xperf: unknown option", &["--frobnicate"], 2, Line("usage: unknown argument \"--frobnicate\" (try --help)")),
    xperf("xperf: escape sequence argument", &["\x1b[2J\u{202e}"], 2, Line("usage: unknown argument \"\\u{1b}[2J\\u{202e}\"")),
    xperf("xperf: non-UTF-8 argument", &["{NONUTF8}"], 2, Line("usage: unknown argument")),
    xperf("xperf: --json existing directory", &["--json", "{F}/dir"], 1, Line("output: cannot write {F}/dir: is a directory")),
    xperf("xperf: --json dangling symlink", &["--json", "{F}/dangling"], 1, Line("is a dangling symbolic link")),
    xperf("xperf: --json symlink out of its directory", &["--json", "{F}/link-out"], 1, Line("out of its directory")),
    xperf("xperf: --json missing directory", &["--json", "{F}/nodir/x.json"], 1, Line("No such file or directory")),
    xperf("xperf: --json a FIFO nothing reads", &["--json", "{F}/fifo", "--samples", "2", "--warmup", "0", "--null-samples", "2"], 1, Line("output: cannot write {F}/fifo: is a FIFO that nothing reads")),
    xperf("xperf: --cpu beyond CPU_SETSIZE", &["--cpu", "4000"], 2, Line("usage: --cpu 4000 is beyond CPU_SETSIZE")),
    xperf("xperf: --cpu that does not exist", &["--cpu", "1000", "--json", "-", "--samples", "2", "--warmup", "0", "--null-samples", "2"], 1, Line("1000")),
    saving(xperf("xperf: --json /dev/full", &["--json", "/dev/full", "--samples", "2", "--warmup", "0", "--null-samples", "2"], 1, Line("No space left on device"))),
    xperf("xperf characterize: --samples 0", &["characterize", "--samples", "0"], 2, Line("usage: --samples must be between 1 and 1000000, got 0")),
    xperf("xperf characterize: --samples missing value", &["characterize", "--samples"], 2, Line("usage: characterize --samples needs a value")),
    xperf("xperf characterize: --cpu not a number", &["characterize", "--cpu", "x"], 2, Line("usage: --cpu needs a CPU number, got \"x\"")),
    xperf("xperf characterize: --json empty", &["characterize", "--json="], 2, Line("usage: --json needs a file name")),
    xperf("xperf characterize: --json a FIFO nothing reads", &["characterize", "--json", "{F}/fifo"], 1, Line("output: cannot write {F}/fifo: is a FIFO that nothing reads")),
    xperf("xperf characterize: escape sequence argument", &["characterize", "\x1b[2J\u{202e}"], 2, Line("usage: characterize: unknown argument \"\\u{1b}[2J\\u{202e}\"")),
    saving(to_full(xperf("xperf: stdout /dev/full", &["--json", "-", "--samples", "2", "--warmup", "0", "--null-samples", "2"], 1, LastLine("cannot write to stdout: No space left on device")))),
    closed(xperf("xperf: --help with stdout closed", &["--help"], 1, Line("cannot write to stdout: Bad file descriptor"))),
    closed(xperf("xperf: --version with stdout closed", &["--version"], 1, Line("cannot write to stdout: Bad file descriptor"))),
    closed(xperf("xperf characterize: --help with stdout closed", &["characterize", "--help"], 1, Line("cannot write to stdout: Bad file descriptor"))),
    closed(xperf("xperf: stdout closed", &["--json", "/dev/null", "--samples", "2", "--warmup", "0", "--null-samples", "2"], 1, Line("cannot write to stdout: Bad file descriptor"))),
    saving(closed(xperf("xperf: --json - with stdout closed", &["--json", "-", "--samples", "2", "--warmup", "0", "--null-samples", "2"], 1, LastLine("cannot write to stdout: Bad file descriptor")))),
];

/// Peak RSS allowed to a child.
const MAX_RSS_KIB: i64 = 512 << 10;
/// Time allowed to a case (signal cases: after the last signal).
const MAX_TIME: Duration = Duration::from_secs(20);

/// The files the cases point at, made once.
fn fixtures() -> PathBuf {
    let f = scratch("bad-inputs");
    report_fixtures(&f);
    special_file_fixtures(&f);
    guest_fixtures(&f);
    f
}

/// Reports and files that are no report: empty, text, cut, mis-encoded,
/// too deep, of another schema or version, out of range, with escapes,
/// with a huge name or too many crossings.
fn report_fixtures(f: &Path) {
    let report = sample_report().to_json_pretty();
    file(f, "report.json", report.as_bytes());
    file(f, "empty", b"");
    file(f, "text", b"hello, I am a text file\n");
    file(f, "truncated.json", &report.as_bytes()[..report.len() / 2]);
    file(f, "latin1.json", b"{\"schema\": \"caf\xe9\"}");
    file(
        f,
        "nested.json",
        format!("{}1{}", "{\"x\":".repeat(100_000), "}".repeat(100_000)).as_bytes(),
    );
    file(f, "null.json", b"null");
    file(
        f,
        "schema.json",
        report
            .replace("\"xvmm-results\"", "\"not-xvmm\"")
            .as_bytes(),
    );
    file(
        f,
        "version.json",
        report
            .replace("\"schema_version\": 1", "\"schema_version\": 2")
            .as_bytes(),
    );
    file(
        f,
        "overflow.json",
        report
            .replacen("\"warmup\": 0", "\"warmup\": -1", 1)
            .as_bytes(),
    );
    // JSON escapes for a tab and ESC, and a raw DEL, in an enum value that
    // serde_json quotes in its error.
    file(
        f,
        "evil.json",
        report
            .replace("\"bare-metal\"", "\"bare-m\\tal\u{7f}\\u001b[2J\"")
            .as_bytes(),
    );
    // A 4 MB crossing name; more crossings than a report may hold.
    let mut long = sample_report();
    long.crossings[0].name = "x".repeat(4 << 20);
    file(f, "long-name.json", long.to_json_pretty().as_bytes());
    let mut many = sample_report();
    many.crossings = (0..2000)
        .map(|i| xvmm_results::Crossing {
            name: format!("c{i}"),
            ..many.crossings[0].clone()
        })
        .collect();
    file(f, "many.json", many.to_json_pretty().as_bytes());
}

/// What is no regular file, or is one of an absurd size: a directory, a
/// FIFO, looping, dangling and escaping symlinks, sparse files.
fn special_file_fixtures(f: &Path) {
    std::fs::create_dir(f.join("dir")).unwrap();
    let mkfifo = Command::new("mkfifo").arg(f.join("fifo")).status();
    assert!(mkfifo.is_ok_and(|s| s.success()), "mkfifo");
    std::os::unix::fs::symlink("loop-b", f.join("loop-a")).unwrap();
    std::os::unix::fs::symlink("loop-a", f.join("loop-b")).unwrap();
    std::os::unix::fs::symlink(f.join("nowhere"), f.join("dangling")).unwrap();
    // A file outside the fixture directory that a link points at.
    let victim =
        std::env::temp_dir().join(format!("xvmm-bad-inputs-victim-{}", std::process::id()));
    std::fs::write(&victim, b"precious").unwrap();
    std::os::unix::fs::symlink(&victim, f.join("link-out")).unwrap();
    for (name, size) in [
        ("sparse-10g", 10u64 << 30),
        ("sparse-2g", 2 << 30),
        ("nul-200m", 200 << 20),
    ] {
        std::fs::File::create(f.join(name))
            .unwrap()
            .set_len(size)
            .unwrap();
    }
}

/// Kernels and ELF images: cut, for another machine, without a PVH note,
/// with huge symbol tables, and guests that spin, triple-fault or send bad
/// or huge results.
fn guest_fixtures(f: &Path) {
    let kernel = bzimage(&linux64_echo_and_exit(0));
    file(f, "bzImage", &kernel);
    file(f, "bzImage-cut", &kernel[..kernel.len() - 100]);
    file(f, "arm.elf", &pvh_elf(183, 0x4008_0000, &[0; 16], true));
    file(f, "nopvh.elf", &pvh_elf(62, 0x100_0000, &[0; 16], false));
    file(f, "pvh.elf", &pvh_elf(62, 0x100_0000, &[0; 16], true));
    file(
        f,
        "huge-symtab.elf",
        &elf_fixture::crafted_symbol_tables(true),
    );
    file(f, "spin", &bzimage(SPIN));
    file(f, "triple", &bzimage(TRIPLE_FAULT));
    file(
        f,
        "bad-results",
        &bzimage(&linux64_send_results(b"{\"schema\": 1", 12)),
    );
    file(
        f,
        "huge-results",
        &bzimage(&linux64_send_results(b"{}", 0x0100_0001)),
    );
}

fn victim() -> PathBuf {
    std::env::temp_dir().join(format!("xvmm-bad-inputs-victim-{}", std::process::id()))
}

fn sample_report() -> xvmm_results::Report {
    let mut r = xvmm_results::Report::new(
        "xperf test".into(),
        xvmm_results::Environment::BareMetal,
        Default::default(),
        xvmm_results::Method::standard(0, 2),
    );
    r.null_overhead = xvmm_results::Stats::from_samples(&[10, 10]);
    let sample = xvmm_results::Sample {
        u2k_u: 0,
        u2k_k: 100,
        k2u_k: 200,
        k2u_u: 300,
        ..Default::default()
    };
    r.crossings.push(xvmm_results::Crossing::from_samples(
        "getppid",
        2,
        &[sample; 2],
        &Default::default(),
        false,
    ));
    r
}

/// Name, kind, size and modification time of everything in `dir`.
fn snapshot(dir: &Path) -> BTreeMap<String, (String, u64, Option<SystemTime>)> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let kind = format!("{:?}", m.file_type());
            let mtime = if m.file_type().is_fifo() {
                None
            } else {
                m.modified().ok()
            };
            (
                e.file_name().to_string_lossy().into_owned(),
                (kind, m.size(), mtime),
            )
        })
        .collect()
}

fn expand(arg: &str, f: &Path) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    match arg {
        "{LONG}" => "x".repeat(5000).into(),
        "{NONUTF8}" => std::ffi::OsString::from_vec(b"caf\xe9.json".to_vec()),
        _ => arg.replace("{F}", f.to_str().unwrap()).into(),
    }
}

/// What a finished child left: status, stdout, stderr, peak RSS (KiB) and time.
struct Ran {
    pid: u32,
    status: std::process::ExitStatus,
    stderr: String,
    max_rss_kib: i64,
    elapsed: Duration,
    timed_out: bool,
    /// `NoNewPrivs` of a signalled child while it ran.
    no_new_privs: Option<bool>,
}

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

// The child is reaped by wait4 (for its rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn run(c: &Case, f: &Path, xperf: &Path) -> Ran {
    let program = match c.prog {
        Prog::Xvmm => PathBuf::from(env!("CARGO_BIN_EXE_xvmm")),
        Prog::Xperf => xperf.to_path_buf(),
    };
    let mut cmd = Command::new(program);
    cmd.args(c.args.iter().map(|a| expand(a, f)))
        .current_dir(f)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in c.env {
        cmd.env(k, expand(v, f));
    }
    match c.stdout {
        Out::Pipe => cmd.stdout(Stdio::piped()),
        Out::DevFull => cmd.stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        ),
        Out::Closed => {
            use std::os::unix::process::CommandExt;
            // SAFETY: close(2) only, between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    libc::close(1);
                    Ok(())
                })
            };
            cmd.stdout(Stdio::null())
        }
    };
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn");
    let id = child.id();
    let pid = libc::pid_t::try_from(id).unwrap();
    let out = child.stdout.take().map(drain);
    let err = drain(child.stderr.take().unwrap());
    let mut deadline = start + MAX_TIME;
    let mut no_new_privs = None;
    for (i, &signal) in c.signals.iter().enumerate() {
        std::thread::sleep(Duration::from_millis(if i == 0 { 1500 } else { 100 }));
        if i == 0 {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            no_new_privs = Some(status.lines().any(|l| l == "NoNewPrivs:\t1"));
        }
        // SAFETY: signalling our own child, which has not been reaped yet.
        unsafe { libc::kill(pid, signal) };
        deadline = Instant::now() + MAX_TIME;
    }
    let mut timed_out = false;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; wait4 fills it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: reaping our own child without blocking.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            if let Some(out) = out {
                let _ = out.join();
            }
            return Ran {
                pid: id,
                status: std::process::ExitStatus::from_raw(status),
                stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
                max_rss_kib: usage.ru_maxrss,
                elapsed: start.elapsed(),
                timed_out,
                no_new_privs,
            };
        }
        if Instant::now() > deadline && !timed_out {
            timed_out = true;
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Everything wrong with one case's run (empty: clean).
fn problems(c: &Case, ran: &Ran, f: &Path) -> Vec<String> {
    let mut p = Vec::new();
    let prog = match c.prog {
        Prog::Xvmm => "xvmm",
        Prog::Xperf => "xperf",
    };
    let ended = match (ran.status.code(), ran.status.signal()) {
        (Some(code), _) => End::Status(code),
        (None, Some(sig)) => End::Signal(sig),
        _ => End::Status(-1),
    };
    if ended != c.end {
        p.push(format!("ended {ended:?}, expected {:?}", c.end));
    }
    let err = &ran.stderr;
    if err.contains("panicked") || err.contains("RUST_BACKTRACE") {
        p.push("panicked".into());
    }
    let f = f.to_str().unwrap();
    match c.says {
        Says::Line(needle) => {
            let needle = needle.replace("{F}", f);
            if err.lines().count() != 1 || !err.ends_with('\n') {
                p.push("stderr is not one line".into());
            }
            if !err.starts_with(&format!("{prog}: ")) || !err.contains(&needle) {
                p.push(format!("stderr does not say {needle:?}"));
            }
            if err.chars().any(|c| c.is_control() && c != '\n') {
                p.push("stderr holds control characters".into());
            }
        }
        Says::Clap(needle) => {
            if !err.starts_with(&format!("{prog}: usage: ")) || !err.contains(needle) {
                p.push(format!("stderr does not say {needle:?}"));
            }
            if !err.contains("--help") {
                p.push("clap's message is not whole (no --help hint)".into());
            }
        }
        Says::LastLine(needle) => {
            let last = err.lines().last().unwrap_or("");
            if !last.starts_with(&format!("{prog}: ")) || !last.contains(needle) {
                p.push(format!("stderr does not end saying {needle:?}"));
            }
        }
        Says::Nothing => {}
    }
    if ran.max_rss_kib > MAX_RSS_KIB {
        p.push(format!("peak RSS {} MiB", ran.max_rss_kib >> 10));
    }
    if c.prog == Prog::Xvmm && ran.no_new_privs == Some(false) {
        p.push("ran without no_new_privs".into());
    }
    if ran.timed_out {
        p.push(format!("did not end within {MAX_TIME:?}"));
    }
    p
}

/// The fallback file the error line names: in the working directory, a
/// whole JSON document; removed once checked.
fn check_fallback(stderr: &str, f: &Path) -> Option<String> {
    let Some(saved) = stderr.trim_end().split("saved to ").nth(1) else {
        return Some("no fallback file named".into());
    };
    let saved = Path::new(saved);
    let json = std::fs::read_to_string(saved).unwrap_or_default();
    let _ = std::fs::remove_file(saved);
    if saved.parent() != Some(f) {
        return Some(format!(
            "fallback {} is not in the working directory",
            saved.display()
        ));
    }
    serde_json::from_str::<serde_json::Value>(&json)
        .err()
        .map(|e| format!("fallback {} is not JSON: {e}", saved.display()))
}

/// What a case's child left on the host: its tracefs instances (named by
/// its pid), its journal of host changes, a tracefs mount in this test's
/// namespace. Instances of other processes that no longer exist are named
/// as an earlier run's, not the case's.
fn host_leftovers(pid: u32) -> Vec<String> {
    use xvmm_host::host_state::{journal, mounts, snapshot};
    let mut p = Vec::new();
    for name in snapshot::instance_names().unwrap_or_default() {
        match journal::instance_pid(&name) {
            Some(owner) if owner == pid => p.push(format!("left the tracefs instance {name}")),
            Some(owner) if !Path::new("/proc").join(owner.to_string()).exists() => {
                eprintln!("tracefs instance {name}: left by an earlier run (pid {owner}, dead)");
            }
            _ => {}
        }
    }
    if journal::dir().join(format!("journal-{pid}.json")).exists() {
        p.push("left a journal of host changes it did not undo".into());
    }
    if mounts::mount_table()
        .unwrap_or_default()
        .iter()
        .any(|m| m.fstype == "tracefs")
    {
        p.push("left tracefs mounted".into());
    }
    p
}

#[test]
fn the_bad_input_corpus() {
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } == 0 {
        xvmm_host::host_state::namespace::enter_private_mount_namespace()
            .expect("root makes a private mount namespace");
    }
    let f = fixtures();
    let xperf = xperf_binary();
    let kvm = have_kvm();
    let (mut clean, mut skipped, mut failures) = (0, 0, Vec::new());
    for c in CASES {
        if c.needs_kvm && !kvm {
            skipped += 1;
            continue;
        }
        let before = snapshot(&f);
        let ran = run(c, &f, &xperf);
        let mut p = problems(c, &ran, &f);
        if c.saves {
            p.extend(check_fallback(&ran.stderr, &f));
        }
        let after = snapshot(&f);
        if after != before {
            let changed: Vec<_> = after
                .iter()
                .filter(|(k, v)| before.get(*k) != Some(v))
                .map(|(k, _)| k.as_str())
                .chain(
                    before
                        .keys()
                        .filter(|k| !after.contains_key(*k))
                        .map(String::as_str),
                )
                .collect();
            p.push(format!("left the fixture directory changed: {changed:?}"));
            // Put it back for the next cases.
            for name in changed {
                if !before.contains_key(name) {
                    let _ = std::fs::remove_file(f.join(name));
                }
            }
        }
        if std::fs::read(victim()).ok().as_deref() != Some(b"precious".as_slice()) {
            p.push("wrote through a symlink out of its directory".into());
            std::fs::write(victim(), b"precious").unwrap();
        }
        p.extend(host_leftovers(ran.pid));
        eprintln!(
            "{:<48} {:>6} ms {:>7} KiB  {}",
            c.name,
            ran.elapsed.as_millis(),
            ran.max_rss_kib,
            if p.is_empty() {
                "clean".to_string()
            } else {
                p.join("; ")
            }
        );
        if p.is_empty() {
            clean += 1;
        } else {
            failures.push(format!(
                "{}: {} (stderr: {:?})",
                c.name,
                p.join("; "),
                ran.stderr
            ));
        }
    }
    eprintln!(
        "bad-input corpus: {} cases, {clean} clean, {} not, {skipped} skipped (no /dev/kvm)",
        CASES.len(),
        failures.len()
    );
    let _ = std::fs::remove_dir_all(&f);
    let _ = std::fs::remove_file(victim());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
