//! `xvmm --kernel bzImage --workload PROGRAM [-- ARGS]` (issue 38): the
//! program and its files packed into the built-in initramfs under
//! [`DIR`], the built-in xperf told to run it under `xperf workload` with
//! calibration exits and a run id, and afterwards the guest's intervals
//! joined with the host's exits on the verified timeline
//! (`xvmm_results::stats::workload_join`).
//!
//! Everything is checked before the boot: the program must be a static
//! x86-64 executable (the initramfs has no loader or libraries), every
//! file a regular file, all of it small enough to leave the guest memory
//! to run in, and the arguments representable on the kernel command line
//! (which is how init gets its argv).

use crate::devices::interval_sink::IntervalSink;
use crate::host_trace::TraceSummary;
use crate::{Error, Result};
use std::path::{Path, PathBuf};
use xvmm_results::stats::workload_join::{join, GuestExit};
use xvmm_results::timeline::{Mapping, Timeline};
use xvmm_results::workload::WorkloadExits;
use xvmm_results::Report;

/// Where the program and its files are in the guest.
pub const DIR: &str = "/workload";

/// Most arguments after the program: the kernel hands init at most 32
/// (`CONFIG_INIT_ENV_ARG_LIMIT`), and xperf's own take 9 of them.
pub const MAX_ARGS: usize = 22;

/// The most of guest memory the packed files may take: the initramfs is
/// unpacked into the page cache, so it is held twice while it unpacks.
const MEMORY_SHARE: u64 = 4;

/// What to run in the guest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadSpec {
    pub program: PathBuf,
    /// Copied next to the program.
    pub files: Vec<PathBuf>,
    pub args: Vec<String>,
    /// xperf workload's own `--timeout` in the guest, seconds.
    pub timeout_secs: Option<u64>,
}

/// One file for the initramfs: its path in the guest, data and mode.
pub type Packed = (String, Vec<u8>, u32);

fn base_name(path: &Path) -> Result<String> {
    path.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty() && *n != "." && *n != "..")
        .map(str::to_string)
        .ok_or_else(|| {
            Error::Initrd(format!(
                "{}: needs a file name of UTF-8 to be placed in {DIR}",
                path.display()
            ))
        })
}

/// [`xvmm_host::file::read_bounded`] (a regular file, within `limit`
/// even if it grows), its errors naming the file.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>> {
    xvmm_host::file::read_bounded(path, limit).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::Initrd(format!("{}: no such file", path.display())),
        _ => Error::Initrd(format!("{}: {e}", path.display())),
    })
}

/// Checks that `data` (from `path`) can be the guest's command.
fn check_program(path: &Path, data: &[u8]) -> Result<()> {
    match super::builtin::elf_is_static(data) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::Initrd(format!(
            "{}: dynamically linked; the guest has no loader or libraries: give a static \
             executable (e.g. Debian's busybox-static)",
            path.display()
        ))),
        Err(why) => Err(Error::Initrd(format!(
            "{}: not a program the guest can run: {why}",
            path.display()
        ))),
    }
}

/// An argument as the kernel command line carries it to init: quoted when
/// it holds a space; refused when the kernel could not hand it over intact.
fn cmdline_word(arg: &str) -> Result<String> {
    if arg.is_empty() || arg == "--" || arg.contains('"') || arg.chars().any(|c| c.is_control()) {
        return Err(Error::Initrd(format!(
            "the argument {arg:?} cannot reach the guest: the kernel command line carries no \
             empty argument, `--` (where it ends init's arguments), double quote or control \
             character"
        )));
    }
    Ok(if arg.contains(' ') {
        format!("\"{arg}\"")
    } else {
        arg.to_string()
    })
}

/// The files to pack (program first) and xperf's arguments, for a guest
/// of `mem_bytes`; `run_id` and `calibrations` tie the results to the run.
pub fn pack(
    spec: &WorkloadSpec,
    mem_bytes: u64,
    run_id: &str,
    calibrations: u64,
) -> Result<(Vec<Packed>, Vec<String>)> {
    if spec.args.len() > MAX_ARGS {
        return Err(Error::Initrd(format!(
            "{} arguments for the workload; the kernel hands init at most {MAX_ARGS} of them",
            spec.args.len()
        )));
    }
    let mut budget = mem_bytes / MEMORY_SHARE;
    let mut packed: Vec<Packed> = Vec::new();
    for (i, path) in std::iter::once(&spec.program)
        .chain(&spec.files)
        .enumerate()
    {
        let name = format!("{DIR}/{}", base_name(path)?);
        if packed.iter().any(|(n, _, _)| *n == name) {
            return Err(Error::Initrd(format!(
                "{}: a second file named {name} in the guest",
                path.display()
            )));
        }
        let data = read_bounded(path, budget).map_err(|e| match e {
            Error::Initrd(m) if m.contains("accepted here") => Error::Initrd(format!(
                "{m}: the workload's files may take a quarter of the guest's {} MiB \
                 (--mem)",
                mem_bytes >> 20
            )),
            other => other,
        })?;
        if i == 0 {
            check_program(path, &data)?;
        }
        budget -= data.len() as u64;
        packed.push((name, data, if i == 0 { 0o755 } else { 0o644 }));
    }
    let mut args: Vec<String> = vec![
        "workload".into(),
        "--calibrate".into(),
        calibrations.to_string(),
        "--run-id".into(),
        run_id.into(),
    ];
    if let Some(secs) = spec.timeout_secs {
        args.extend(["--timeout".into(), secs.to_string()]);
    }
    // No `--` before the program: the kernel ends init's arguments at a
    // second one. xperf's command starts at its first word that is not an
    // option, the program's path.
    args.push(packed[0].0.clone());
    for a in &spec.args {
        args.push(cmdline_word(a)?);
    }
    Ok((packed, args))
}

/// The mapping a report's timeline records ([`super::add_timeline`]).
fn recorded_mapping(t: &Timeline) -> Mapping {
    let mut m = Mapping::unscaled(t.offset);
    if let (Some(ratio), Some(bits)) = (t.ratio_fixed, t.ratio_frac_bits) {
        (m.ratio_fixed, m.frac_bits) = (ratio, bits);
    }
    m.changes = t.offset_changes.clone();
    m
}

/// Joins the guest's intervals with the host's exits on the timeline
/// [`super::add_timeline`] wrote, and writes the attribution into the
/// report's workload block: nothing when the report has no workload or
/// timeline, or is not this run's (`run_id`).
pub fn add_workload_exits(
    report: &mut Report,
    trace: &TraceSummary,
    run_id: &str,
    sink: &IntervalSink,
) {
    if report.run_id.as_deref() != Some(run_id) {
        return;
    }
    let Some(t) = report.timeline.as_ref() else {
        return;
    };
    let (verified, mapping) = (t.verified, recorded_mapping(t));
    let mapping = &mapping;
    let Some(w) = report.workload.as_mut() else {
        return;
    };
    let exits = trace.trace.exits.iter().map(|e| GuestExit {
        vcpu: e.vcpu,
        // Modulo 2^64 as the guest reads its TSC.
        at: u64::try_from(mapping.to_guest(e.exit)).unwrap_or(u64::MAX),
        ticks: mapping.scale_duration(e.entry.saturating_sub(e.exit)),
        reason: e.reason,
    });
    let end = w.start_tsc.saturating_add(w.wall_ticks);
    let joined = join(
        exits,
        sink.intervals(),
        &w.rows,
        &trace.trace.reasons,
        (w.start_tsc, end),
    );
    w.exits = Some(WorkloadExits {
        chunks_refused: sink.refused,
        refused_because: sink.refused_because.clone(),
        timeline_verified: verified,
        intervals_late: sink.late(),
        ..joined
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(program: &Path) -> WorkloadSpec {
        WorkloadSpec {
            program: program.to_path_buf(),
            ..WorkloadSpec::default()
        }
    }

    /// A directory of the test's own, removed on drop.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("xvmm-workload-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn err(spec: &WorkloadSpec, mem: u64) -> String {
        pack(spec, mem, "id", 8).unwrap_err().to_string()
    }

    #[test]
    fn a_static_program_is_packed_with_its_files_and_xperfs_arguments() {
        let dir = Scratch::new("pack");
        let data = dir.path().join("in.txt");
        std::fs::write(&data, b"hello").unwrap();
        let mut s = spec(Path::new("/bin/busybox"));
        s.files = vec![data];
        s.args = vec!["sha256sum".into(), "/workload/in.txt".into(), "a b".into()];
        s.timeout_secs = Some(30);
        let (packed, args) = pack(&s, 512 << 20, "ab12", 8).unwrap();
        let names: Vec<&str> = packed.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(names, ["/workload/busybox", "/workload/in.txt"]);
        assert_eq!((packed[0].2, packed[1].2), (0o755, 0o644));
        assert_eq!(packed[1].1, b"hello");
        assert_eq!(
            args,
            [
                "workload",
                "--calibrate",
                "8",
                "--run-id",
                "ab12",
                "--timeout",
                "30",
                "/workload/busybox",
                "sha256sum",
                "/workload/in.txt",
                "\"a b\""
            ]
        );
    }

    #[test]
    fn what_the_guest_cannot_run_is_refused_in_one_line_before_the_boot() {
        let dir = Scratch::new("refuse");
        let text = dir.path().join("script");
        std::fs::write(&text, b"#!/bin/sh\necho hi\n").unwrap();
        let missing = dir.path().join("nothing");
        let cases = [
            (spec(&missing), "no such file"),
            (spec(&text), "not a program the guest can run"),
            (spec(Path::new("/bin/true")), "dynamically linked"),
            (spec(dir.path()), "not a regular file"),
        ];
        for (s, want) in cases {
            let e = err(&s, 512 << 20);
            assert!(e.contains(want), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // A quarter of 4 MiB is less than busybox.
        let e = err(&spec(Path::new("/bin/busybox")), 4 << 20);
        assert!(e.contains("a quarter of the guest's 4 MiB"), "{e}");
        let mut quoted = spec(Path::new("/bin/busybox"));
        quoted.args = vec!["say \"hi\"".into()];
        assert!(err(&quoted, 512 << 20).contains("double quote"));
        quoted.args = vec!["sh".into(), "--".into()];
        assert!(err(&quoted, 512 << 20).contains("`--`"));
        let mut many = spec(Path::new("/bin/busybox"));
        many.args = vec!["x".into(); MAX_ARGS + 1];
        assert!(err(&many, 512 << 20).contains("at most 22"));
        let mut twice = spec(Path::new("/bin/busybox"));
        twice.files = vec![PathBuf::from("/usr/bin/busybox")];
        assert!(err(&twice, 512 << 20).contains("a second file named /workload/busybox"));
    }
}
