//! One workload on bare metal (L1, `xperf workload`) and in L2 (`xvmm
//! --workload --baseline`), as a person runs the pair, and the checks on
//! what the two runs give: shared by the nested workload tests on the
//! project's kernel (`workload.rs`) and on Debian's 6.1 (`distro.rs`).

use xvmm_harness::workloads::{script, BUSYBOX, SHAPES};
use xvmm_harness::{self as harness, l1, Step};
use xvmm_results::schema::workload::{RowExits, FAMILY_SYSCALL};
use xvmm_results::{Comparison, Report};

/// An L2 run's limit, seconds (TCG: the boot alone takes minutes).
pub const VM_TIMEOUT: u64 = 360;

/// The steps of one workload: `NAME-bm` (xperf workload in L1, to
/// `/NAME-bm.json`), then `NAME-vm` (xvmm --workload in L2 booting
/// `kernel`, with that file as `--baseline`, to `/NAME-vm.json`), and
/// steps that print the three files: `NAME-bm-report`, `NAME-vm-report`,
/// `NAME-vm-compare`.
pub fn workload_steps(name: &str, script: &str, kernel: &str) -> Vec<Step> {
    let (bm, vm) = (format!("/{name}-bm.json"), format!("/{name}-vm.json"));
    vec![
        Step::run(
            &format!("{name}-bm"),
            300,
            &[
                l1::XPERF,
                "workload",
                "--json",
                &bm,
                "--",
                BUSYBOX,
                "sh",
                "-c",
                script,
            ],
        ),
        cat(&format!("{name}-bm-report"), &bm),
        vm_step(&format!("{name}-vm"), script, (kernel, &bm), &vm),
        cat(&format!("{name}-vm-report"), &vm),
        // xvmm writes the comparison beside the report, `.compare.json` added.
        cat(&format!("{name}-vm-compare"), &format!("{vm}.compare.json")),
    ]
}

/// A step that prints a file L1 holds, so that its stdout is the file.
pub fn cat(name: &str, path: &str) -> Step {
    Step::run(name, 30, &[BUSYBOX, "cat", path])
}

/// `xvmm --kernel KERNEL --workload busybox --baseline BM --json VM -- sh
/// -c SCRIPT` in L1, as a person runs it: the report to a file, the tables
/// and the comparison on stdout, L2's console with them.
pub fn vm_step(name: &str, script: &str, (kernel, bm): (&str, &str), vm: &str) -> Step {
    let cmdline = format!(
        "{} quiet no_timer_check",
        xvmm::boot::cmdline::default_cmdline()
    );
    let rest = [
        "--workload",
        BUSYBOX,
        "--json",
        vm,
        "--baseline",
        bm,
        "--",
        "sh",
        "-c",
        script,
    ];
    Step {
        name: name.into(),
        timeout_secs: VM_TIMEOUT + 30,
        marker: None,
        stop_at_marker: false,
        argv: harness::xvmm_kernel_argv(kernel, &cmdline, VM_TIMEOUT, &rest),
    }
}

/// One workload's three files and what its VM run printed.
pub struct Pair {
    pub bm: Report,
    pub vm: Report,
    pub vm_stdout: String,
    pub comparison: Comparison,
}

/// The files of workload `name` ([`workload_steps`]), kept for a person.
pub fn pair(run: &harness::HarnessRun, name: &str) -> Result<Pair, String> {
    run.exited(&format!("{name}-bm"))?;
    run.exited(&format!("{name}-vm"))?;
    let bm = run.exited_report(&format!("{name}-bm-report"))?;
    let vm = run.exited_report(&format!("{name}-vm-report"))?;
    let compare = run.stdout(&format!("{name}-vm-compare")).join("\n");
    let comparison: Comparison =
        serde_json::from_str(&compare).map_err(|e| format!("{name}'s comparison: {e}"))?;
    keep(&[
        (&format!("{name}-bm.json"), &bm),
        (&format!("{name}-vm.json"), &vm),
    ]);
    Ok(Pair {
        bm,
        vm,
        vm_stdout: run.stdout(&format!("{name}-vm")).join("\n"),
        comparison,
    })
}

/// The reports, kept where a person can take them as test data
/// (`xvmm-cli/tests/data/report/`).
pub fn keep(reports: &[(&str, &Report)]) {
    let dir = std::env::temp_dir().join("xvmm-harness-workload");
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    for (name, report) in reports {
        let path = dir.join(name);
        if std::fs::write(&path, report.to_json_pretty()).is_ok() {
            eprintln!("kept {}", path.display());
        }
    }
}

/// The VM run of `name`: the command succeeded with its script whole; the
/// guest's intervals arrived whole; the timeline they are placed on is
/// verified; and every exit the host traced is counted once: inside an
/// interval, outside every interval in the command's run, or outside the
/// run.
pub fn assert_joined_whole(name: &str, script: &str, r: &Report) {
    let w = r.workload.as_ref().expect("a workload block");
    assert!(w.ended.succeeded(), "{name}: {:?}", w.ended);
    assert_eq!(w.command[0], BUSYBOX);
    assert_eq!(
        w.command[3], script,
        "{name}: an argument with spaces arrives whole"
    );
    let t = r.timeline.as_ref().expect("a timeline");
    assert!(t.verified, "{name}: timeline: {:?}", t.reason);
    let x = w.exits.as_ref().expect("the exits joined");
    assert!(x.timeline_verified);
    assert_eq!(w.streamed, Some(x.intervals), "{name}: sent against joined");
    assert_eq!((x.chunks_refused, w.stream_stopped.as_deref()), (0, None));
    // As many intervals as the rows count.
    let timed: u64 = w.rows.iter().map(|row| row.length.count).sum();
    assert_eq!(x.intervals, timed, "{name}");
    assert!(x.rows.iter().any(|row| row.count() > 0), "{name}: {x:?}");
    assert!(x.rows.iter().all(|row| row.family != "unknown"), "{x:?}");
    let joined: u64 = x.rows.iter().map(RowExits::count).sum::<u64>()
        + x.outside.iter().map(|o| o.count).sum::<u64>()
        + x.outside_window;
    let traced: u64 = r.host_exits.iter().map(|e| e.exit_to_entry.count).sum();
    if t.lost_events == 0 {
        assert_eq!(joined, traced, "{name}: every traced exit counted once");
    }
    eprintln!(
        "{name}:\n{}",
        xvmm_results::render::workload_table(w, r.host.tsc_khz)
    );
}

/// `--baseline`: the L2 run of `name` set against the same command on
/// bare metal (L1) splits each kind's extra time into more intervals, the
/// exits inside them and the rest; each kind's exits are those the VM's
/// report joined with it; and the run says so on its stdout.
pub fn assert_decomposed(name: &str, p: &Pair) {
    let c = &p.comparison;
    let w = c.workload.as_ref().expect("a workload comparison");
    assert!(
        c.rows.is_empty(),
        "{name}: no crossings in a workload's files"
    );
    assert!(
        w.exits_joined && w.timeline_verified == Some(true),
        "{name}: {w:?}"
    );
    // L1 calibrates its TSC under TCG, within a few tenths of a per cent
    // of L2's rate: then the times are ns, and a note says so. No other.
    let warned: Vec<&String> = w
        .notes
        .iter()
        .filter(|n| !n.contains("the TSC rates differ"))
        .collect();
    assert!(warned.is_empty(), "{name}: {warned:?}");
    let x =
        p.vm.workload
            .as_ref()
            .and_then(|w| w.exits.as_ref())
            .unwrap();
    for k in &w.rows {
        let sum = k.count_part + k.exits_part + k.rest;
        assert!(
            (sum - k.diff).abs() <= 1e-6 * k.diff.abs().max(1.0),
            "{name}: {k:?}"
        );
        let joined = x
            .rows
            .iter()
            .find(|e| e.family == k.family && e.name == k.name)
            .map_or(0, RowExits::count);
        assert_eq!(k.vm_exits, joined, "{name}: {}", k.label());
    }
    let exits: f64 = w.rows.iter().map(|k| k.exits_part).sum();
    assert!(
        exits > 0.0 && exits <= w.vm_exit_time,
        "{name}: {exits} of {}",
        w.vm_exit_time
    );
    let out = &p.vm_stdout;
    for expected in [
        "by family:",
        "diff = VM time - bare-metal time",
        "comparison written to",
    ] {
        assert!(out.contains(expected), "{name}: no {expected:?} in:\n{out}");
    }
    eprintln!("{name}:\n{}", xvmm_results::render::comparison_table(c));
}

/// A system call's intervals timed on each side: (VM, bare metal).
pub fn calls(p: &Pair, call: &str) -> (u64, u64) {
    let w = p.comparison.workload.as_ref().unwrap();
    w.rows
        .iter()
        .find(|k| k.family == FAMILY_SYSCALL && k.name == call)
        .map_or((0, 0), |k| (k.vm_count, k.bare_count))
}

/// The real workloads' pairs (issue 38 item 4): each joined whole and
/// decomposed, and each making its script's own system calls at least as
/// often as its shape says, as often on both sides.
pub fn assert_real_pairs(real: &[(&'static str, Result<Pair, String>)]) {
    let mut failed = Vec::new();
    for (name, pair) in real {
        match pair {
            Ok(p) => {
                assert_joined_whole(name, script(name).unwrap(), &p.vm);
                assert_decomposed(name, p);
            }
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    let real = |name: &str| {
        let pair = &real.iter().find(|r| r.0 == name).unwrap().1;
        pair.as_ref().unwrap()
    };
    for (name, call, least) in SHAPES {
        let (vm, bare) = calls(real(name), call);
        assert!(
            vm >= least && bare >= least,
            "{name} {call}: {vm} and {bare}"
        );
        if call != "read" {
            // The script's own calls; the hash's reads follow the page cache.
            assert_eq!(vm, bare, "{name} {call}");
        }
    }
}
