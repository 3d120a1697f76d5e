//! kvm-unit-tests' `x86/vmexit` as the microguest's peer: the exit kinds
//! both time, their figures side by side and the ratio.
//!
//! kvm-unit-tests is in no package registry, so the bench takes a checkout
//! from [`CHECKOUT_VAR`] and says how to get one where it is unset. It builds
//! `x86/vmexit.flat` out of tree in the cache (keyed by the checkout's
//! commit), runs it under QEMU/KVM in the nested harness's L1 and the
//! microguest beside it, round by round, and pairs the rows in [`SHARED`].
//!
//! The two figures are not the same statistic, and the table says so:
//! kvm-unit-tests prints the mean TSC ticks per iteration of a loop timed
//! as a whole (loop overhead included, rdtsc at its two ends only); the
//! microguest prints the median of per-sample round trips with its stamps'
//! cost subtracted. A ratio near 1 says both time the same path.

use crate::median;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use xvmm_results::{Report, Status};

/// The environment variable naming a kvm-unit-tests checkout.
pub const CHECKOUT_VAR: &str = "XVMM_KVM_UNIT_TESTS";

/// What to do where [`CHECKOUT_VAR`] is unset.
pub const HOW_TO_GET: &str = "kvm-unit-tests is in no package registry: \
     git clone https://gitlab.com/kvm-unit-tests/kvm-unit-tests and set XVMM_KVM_UNIT_TESTS to the checkout";

/// Where vmexit.flat goes in L1.
pub const FLAT_IN_L1: &str = "/kut/vmexit.flat";

/// One kind both time: kvm-unit-tests' test name, the microguest rows
/// that time the same exit (the first of them the microguest measured is
/// taken), and what differs between the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shared {
    pub kut: &'static str,
    pub xvmm: &'static [&'static str],
    pub differs: &'static str,
}

const fn shared(kut: &'static str, xvmm: &'static [&'static str], differs: &'static str) -> Shared {
    Shared { kut, xvmm, differs }
}

/// Every kvm-unit-tests vmexit kind with a microguest row timing the same
/// exit.
pub const SHARED: &[Shared] = &[
    shared("cpuid", &["cpuid"], ""),
    shared(
        "vmcall",
        &["vmmcall", "vmcall"],
        "KVM patches VMCALL to the vendor's hypercall; the microguest runs the vendor's own",
    ),
    shared("wbinvd", &["wbinvd"], ""),
    shared("invd", &["invd"], ""),
    shared(
        "mov_from_cr8",
        &["mov-from-cr8"],
        "no exit under SVM (the virtual TPR): both figures are the instruction and the timing around it",
    ),
    shared(
        "mov_to_cr8",
        &["mov-to-cr8"],
        "the microguest's VM for this row has no in-kernel LAPIC, so KVM intercepts every CR8 write; QEMU's has one, and SVM's virtual TPR takes the write without an exit",
    ),
    shared(
        "inl_from_qemu",
        &["pio-in"],
        "a port read served in user space: QEMU's test device against xvmm's port",
    ),
    shared(
        "inl_from_pmtimer",
        &["pio-in-pmtimer"],
        "QEMU's ACPI PM timer against xvmm's, each served in user space from the host clock; QEMU's port dispatch is the longer",
    ),
    shared("inl_from_kernel", &["pio-in-kernel"], ""),
    shared("outl_to_kernel", &["pio-out-kernel"], ""),
    shared(
        "mov_dr",
        &["mov-to-dr7"],
        "no exit under SVM once the guest uses DR7: the instruction and the timing around it",
    ),
    shared("tscdeadline_immed", &["tscdeadline-immed"], ""),
    shared(
        "tscdeadline",
        &["tscdeadline"],
        "kvm-unit-tests arms the deadline at the current TSC, the microguest 3000 ticks ahead",
    ),
    // kvm-unit-tests turns the x2APIC on where the vCPU has one: its
    // self_ipi_* rows then write the ICR (MSR 0x830), as the microguest's
    // x2apic-self-ipi* rows do; its x2apic_self_ipi_* rows write the SELF
    // IPI register (MSR 0x83f), as the -msr rows do.
    shared("self_ipi_sti_nop", &["x2apic-self-ipi"], ""),
    shared("self_ipi_sti_hlt", &["x2apic-self-ipi-hlt"], ""),
    shared("self_ipi_tpr", &["x2apic-self-ipi-tpr"], ""),
    shared("self_ipi_tpr_sti_nop", &["x2apic-self-ipi-tpr-sti-nop"], ""),
    shared("self_ipi_tpr_sti_hlt", &["x2apic-self-ipi-tpr-sti-hlt"], ""),
    shared("x2apic_self_ipi_sti_nop", &["x2apic-self-ipi-msr"], ""),
    shared("x2apic_self_ipi_sti_hlt", &["x2apic-self-ipi-msr-hlt"], ""),
    shared("x2apic_self_ipi_tpr", &["x2apic-self-ipi-msr-tpr"], ""),
    shared(
        "x2apic_self_ipi_tpr_sti_nop",
        &["x2apic-self-ipi-msr-tpr-sti-nop"],
        "",
    ),
    shared(
        "x2apic_self_ipi_tpr_sti_hlt",
        &["x2apic-self-ipi-msr-tpr-sti-hlt"],
        "",
    ),
    shared(
        "ipi",
        &["ipi"],
        "two vCPUs: kvm-unit-tests times its loop whole (its IPI lock included) and sends the next IPI while the receiver may still be in its EOI; the microguest waits for the EOI outside its samples: expect under 1",
    ),
    shared(
        "ipi_halt",
        &["ipi-halt"],
        "kvm-unit-tests' figure is its whole loop, the 2000-tick wait after each IPI included; the microguest waits outside its samples: expect under 1",
    ),
    shared(
        "ple_round_robin",
        &["ple-round-robin"],
        "two vCPUs pass a token both ways, a round an iteration in both; kvm-unit-tests' hand-off is C (the next CPU's number, two counters), the microguest's four instructions: expect under 1",
    ),
    shared(
        "wr_kernel_gs_base",
        &["wr-kernel-gs-base"],
        "SVM passes KERNEL_GS_BASE through: no exit, the instruction and the timing around it",
    ),
    shared("wr_tsx_ctrl_msr", &["wr-tsx-ctrl"], ""),
    shared("wr_ibrs_msr", &["wr-ibrs"], ""),
    shared("wr_ibpb_msr", &["wr-ibpb"], ""),
    shared("wr_tsc_adjust_msr", &["wr-tsc-adjust"], ""),
    shared("rd_tsc_adjust_msr", &["rd-tsc-adjust"], ""),
    shared(
        "toggle_cr0_wp",
        &["toggle-cr0-wp"],
        "kvm-unit-tests writes CR0 twice an iteration, the microguest once a sample: expect 0.5",
    ),
    shared(
        "toggle_cr4_pge",
        &["toggle-cr4-pge"],
        "kvm-unit-tests writes CR4 twice an iteration, the microguest once a sample: expect 0.5",
    ),
];

/// The checkout [`CHECKOUT_VAR`] names: `Err` says why there is none to
/// use (unset: [`HOW_TO_GET`]).
pub fn checkout() -> Result<PathBuf, String> {
    let dir = std::env::var_os(CHECKOUT_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| format!("{CHECKOUT_VAR} is unset. {HOW_TO_GET}"))?;
    if !dir.join("x86/vmexit.c").is_file() || !dir.join("configure").is_file() {
        return Err(format!(
            "{CHECKOUT_VAR}={} is not a kvm-unit-tests checkout (no x86/vmexit.c or configure)",
            dir.display()
        ));
    }
    Ok(dir)
}

/// The checkout's commit, "-dirty" when its tree has changes; `None`
/// when git cannot say (then nothing is reused).
fn revision(checkout: &Path) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(checkout)
        .args(["describe", "--always", "--dirty", "--abbrev=40"])
        .output()
        .ok()?;
    let rev = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !rev.is_empty()).then_some(rev)
}

/// Builds `x86/vmexit.flat` out of tree under `cache/kvm-unit-tests/REV`
/// (kept and reused for a clean commit) and returns its path.
pub fn build(checkout: &Path, cache: &Path) -> Result<PathBuf, String> {
    let rev = revision(checkout);
    let key = match &rev {
        Some(r) if !r.ends_with("-dirty") => r.clone(),
        _ => format!("uncached-{}", std::process::id()),
    };
    let dir = cache.join("kvm-unit-tests").join(&key);
    let flat = dir.join("x86/vmexit.flat");
    if flat.is_file() && !key.starts_with("uncached") {
        return Ok(flat);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut make = Command::new("make");
    make.args(["-j2", "x86/vmexit.flat"]);
    for (what, mut cmd) in [
        ("configure", Command::new(checkout.join("configure"))),
        ("make", make),
    ] {
        let out = cmd
            .current_dir(&dir)
            .output()
            .map_err(|e| format!("cannot run {what} in {}: {e}", dir.display()))?;
        if !out.status.success() {
            let log = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            return Err(format!(
                "{what} of kvm-unit-tests failed ({}):\n{}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
    }
    if flat.is_file() {
        Ok(flat)
    } else {
        Err(format!("make left no {}", flat.display()))
    }
}

/// The vCPUs a vmexit test runs on: two for the IPI tests, which need a
/// receiver (as `unittests.cfg` has it), and for the round robin; one for
/// the rest.
pub fn qemu_cpus(test: &str) -> &'static str {
    match test {
        "ipi" | "ipi_halt" => "2",
        // unittests.cfg gives it one, where the token never waits: two
        // make it the round robin the microguest's row times.
        "ple_round_robin" => "2",
        _ => "1",
    }
}

/// QEMU/KVM in L1 running vmexit's test `test` alone, as kvm-unit-tests'
/// own runner does (`unittests.cfg`: one test a QEMU): the vCPUs it gives
/// the test ([`qemu_cpus`], as the microguest's row has), QEMU's ISA test
/// device (`inl_from_qemu`), and the debug-exit port the test's end writes.
pub fn qemu_argv(test: &str) -> Vec<String> {
    let mut argv = xvmm_harness::l1_qemu_kvm();
    argv.extend(
        [
            "-cpu",
            "host",
            "-smp",
            qemu_cpus(test),
            "-m",
            "256",
            "-nodefaults",
            "-display",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
            "-device",
            "pc-testdev",
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=0x4",
            "-kernel",
            FLAT_IN_L1,
            "-append",
            test,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    argv
}

/// What vmexit printed for one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KutFigure {
    /// Mean TSC ticks per iteration.
    Ticks(u64),
    Skipped,
}

/// vmexit's `NAME TICKS` and `NAME (skipped)` lines; anything else (its
/// banner, the indented ipi/eoi split, a console's noise) is passed over.
pub fn parse(lines: &[&str]) -> BTreeMap<String, KutFigure> {
    let mut out = BTreeMap::new();
    for line in lines {
        if line.starts_with(char::is_whitespace) {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(name), Some(value), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let named = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !named {
            continue;
        }
        let figure = match value {
            "(skipped)" => KutFigure::Skipped,
            v => match v.parse::<u64>() {
                Ok(ticks) => KutFigure::Ticks(ticks),
                Err(_) => continue,
            },
        };
        out.insert(name.to_string(), figure);
    }
    out
}

/// One shared kind over every round.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub shared: Shared,
    /// The microguest row that gave the figures.
    pub xvmm_row: Option<String>,
    /// kvm-unit-tests' mean ticks per iteration, one per round it ran.
    pub kut: Vec<u64>,
    /// The microguest's corrected median round trip, one per round.
    pub xvmm: Vec<f64>,
    /// Why a side has no figure.
    pub missing: Vec<String>,
}

impl Row {
    /// The median over rounds of each side's figure, and their ratio
    /// (microguest over kvm-unit-tests).
    pub fn ratio(&self) -> Option<(f64, f64, f64)> {
        let kut: Vec<f64> = self.kut.iter().map(|&t| t as f64).collect();
        let (k, x) = (median(kut)?, median(self.xvmm.clone())?);
        (k > 0.0).then_some((k, x, x / k))
    }
}

/// The microguest's corrected median for the first of `names` it
/// measured, with that row's name; else why not.
fn microguest_figure(report: &Report, names: &[&str]) -> Result<(String, f64), String> {
    let mut why = Vec::new();
    for name in names {
        match report.exits.iter().find(|e| e.name == *name) {
            Some(e) if e.status == Status::Measured => {
                if let Some(rt) = &e.round_trip {
                    return Ok((name.to_string(), rt.corrected.median as f64));
                }
                why.push(format!("{name}: no round trip"));
            }
            Some(e) => why.push(format!(
                "{name}: {}",
                e.status.why_not().unwrap_or_else(|| "not measured".into())
            )),
            None => why.push(format!("{name}: no such row")),
        }
    }
    Err(why.join("; "))
}

/// Pairs every round's vmexit output with the microguest's reports, for
/// the `kinds` run (all of [`SHARED`] or some).
pub fn rows(
    kinds: &[Shared],
    kut_runs: &[BTreeMap<String, KutFigure>],
    reports: &[Report],
) -> Vec<Row> {
    kinds
        .iter()
        .map(|s| {
            let mut row = Row {
                shared: *s,
                xvmm_row: None,
                kut: Vec::new(),
                xvmm: Vec::new(),
                missing: Vec::new(),
            };
            for run in kut_runs {
                match run.get(s.kut) {
                    Some(KutFigure::Ticks(t)) => row.kut.push(*t),
                    Some(KutFigure::Skipped) => row.missing.push("kvm-unit-tests: skipped".into()),
                    None => row.missing.push("kvm-unit-tests: no line".into()),
                }
            }
            for report in reports {
                match microguest_figure(report, s.xvmm) {
                    Ok((name, median)) => {
                        row.xvmm.push(median);
                        row.xvmm_row = Some(name);
                    }
                    Err(why) => row.missing.push(format!("microguest: {why}")),
                }
            }
            row.missing.sort();
            row.missing.dedup();
            row
        })
        .collect()
}

/// The table the bench prints: one line per shared kind.
pub fn table(rows: &[Row]) -> String {
    let mut t = xvmm_results::document::Table::new(&[
        "kvm-unit-tests",
        "microguest",
        "kut mean",
        "xvmm median",
        "ratio",
    ]);
    for r in rows {
        let xvmm = r.xvmm_row.as_deref().unwrap_or(r.shared.xvmm[0]);
        let (figures, note) = match r.ratio() {
            Some((k, x, ratio)) => (
                [format!("{k:.0}"), format!("{x:.0}"), format!("{ratio:.2}")],
                r.shared.differs.to_string(),
            ),
            None => (["-".into(), "-".into(), "-".into()], r.missing.join("; ")),
        };
        let mut cells = vec![r.shared.kut.to_string(), xvmm.to_string()];
        cells.extend(figures);
        t.row(cells);
        if !note.is_empty() {
            t.note(format!("({note})"));
        }
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::{Environment, ExitTiming, Interval, Method, Stats};

    #[test]
    fn the_ipi_tests_get_a_receiver_vcpu_and_the_rest_one() {
        let smp = |test: &str| {
            let argv = qemu_argv(test);
            let at = argv.iter().position(|a| a == "-smp").expect("-smp");
            argv[at + 1].clone()
        };
        assert_eq!((smp("ipi"), smp("ipi_halt")), ("2".into(), "2".into()));
        assert_eq!(
            (smp("cpuid"), smp("self_ipi_sti_hlt")),
            ("1".into(), "1".into())
        );
        let ipi = SHARED.iter().find(|s| s.kut == "ipi_halt").expect("paired");
        assert_eq!(ipi.xvmm, ["ipi-halt"]);
    }

    #[test]
    fn vmexit_lines_are_read_and_noise_is_passed_over() {
        let lines = [
            "enabling apic",
            "cpuid 1452",
            "vmcall 2210",
            "  ipi ipi 900",
            "wr_tsx_ctrl_msr (skipped)",
            "PM timer port is 608",
            "garbage line with many words",
            "inl_from_qemu x1",
            "\u{1b}[0mtoggle_cr0_wp 300",
        ];
        let got = parse(&lines);
        assert_eq!(got.get("cpuid"), Some(&KutFigure::Ticks(1452)));
        assert_eq!(got.get("vmcall"), Some(&KutFigure::Ticks(2210)));
        assert_eq!(got.get("wr_tsx_ctrl_msr"), Some(&KutFigure::Skipped));
        assert_eq!(got.get("ipi"), None, "the indented split is not a test");
        assert_eq!(got.get("inl_from_qemu"), None);
        assert_eq!(got.len(), 3, "{got:?}");
    }

    fn report_with(rows: &[(&str, Option<u64>)]) -> Report {
        let mut r = Report::new(
            "xvmm-microguest".into(),
            Environment::Microguest,
            Default::default(),
            Method::standard(0, 10),
        );
        for (name, median) in rows {
            let status = match median {
                Some(_) => Status::Measured,
                None => Status::Unsupported {
                    reason: "no bit".into(),
                },
            };
            let round_trip = median.map(|m| {
                let stats = Stats {
                    median: m,
                    ..Stats::from_samples(&[1, 2, 3])
                };
                Interval {
                    raw: stats.clone(),
                    corrected: stats,
                    correction: None,
                    clamped: 0,
                    median_ci: None,
                    rounds: Vec::new(),
                    host: None,
                }
            });
            r.exits
                .push(ExitTiming::new(name, None, status, (10, 10), round_trip));
        }
        r
    }

    #[test]
    fn rows_pair_the_rounds_and_say_why_a_side_is_missing() {
        let kut = |cpuid: u64| {
            BTreeMap::from([
                ("cpuid".to_string(), KutFigure::Ticks(cpuid)),
                ("vmcall".to_string(), KutFigure::Ticks(1000)),
                ("wr_ibpb_msr".to_string(), KutFigure::Skipped),
            ])
        };
        let reports = [
            report_with(&[
                ("cpuid", Some(150)),
                ("vmmcall", Some(2000)),
                ("wr-ibpb", None),
            ]),
            report_with(&[
                ("cpuid", Some(250)),
                ("vmmcall", Some(2000)),
                ("wr-ibpb", None),
            ]),
        ];
        let rows = rows(SHARED, &[kut(100), kut(100)], &reports);
        let cpuid = rows.iter().find(|r| r.shared.kut == "cpuid").unwrap();
        assert_eq!(cpuid.ratio(), Some((100.0, 200.0, 2.0)));
        let vmcall = rows.iter().find(|r| r.shared.kut == "vmcall").unwrap();
        assert_eq!(vmcall.xvmm_row.as_deref(), Some("vmmcall"));
        assert_eq!(vmcall.ratio().map(|r| r.2), Some(2.0));
        let ibpb = rows.iter().find(|r| r.shared.kut == "wr_ibpb_msr").unwrap();
        assert_eq!(ibpb.ratio(), None);
        assert!(ibpb.missing.iter().any(|m| m == "kvm-unit-tests: skipped"));
        assert!(ibpb
            .missing
            .iter()
            .any(|m| m.contains("unsupported: no bit")));
        let text = table(&rows);
        assert!(
            text.lines()
                .any(|l| l.starts_with("cpuid") && l.ends_with(" 2.00")),
            "{text}"
        );
        assert!(text.contains("wr_ibpb_msr"), "{text}");
    }

    #[test]
    fn every_shared_row_names_a_microguest_row_that_exists() {
        let kinds: Vec<&str> = [true, false]
            .into_iter()
            .flat_map(xvmm::microguest::kinds::exit_rows)
            .map(|(name, _)| name)
            .collect();
        for s in SHARED {
            assert!(s.xvmm.iter().all(|x| kinds.contains(x)), "{s:?}");
        }
    }

    #[test]
    fn a_missing_checkout_says_how_to_get_one() {
        // Only the case that needs no environment change: a path with no
        // checkout in it.
        std::env::set_var(CHECKOUT_VAR, "/nonexistent-kvm-unit-tests");
        let why = checkout().unwrap_err();
        assert!(why.contains("not a kvm-unit-tests checkout"), "{why}");
        std::env::remove_var(CHECKOUT_VAR);
        let why = checkout().unwrap_err();
        assert!(why.contains("gitlab.com/kvm-unit-tests"), "{why}");
    }
}
