//! The microguest against its peer, kvm-unit-tests' `x86/vmexit`, in one
//! nested L1 (QEMU TCG -> L1 with kvm_amd): builds `vmexit.flat` from the
//! checkout `XVMM_KVM_UNIT_TESTS` names (skipping, with how to get one,
//! where it is unset), then runs it under QEMU/KVM and the microguest under
//! xvmm alternately, round by round, and prints both figures and their
//! ratio for every kind both time (`xvmm_benches::peer`). TCG-emulated
//! times: the ratios say whether both time the same path, not what
//! hardware costs. Never fails on numbers.
//!
//! `XVMM_KUT_ROUNDS` (default 2) rounds; `XVMM_NESTED_SAMPLES` (default
//! 1000) the microguest's samples per row; `XVMM_KUT_ONLY` (a comma list
//! of kvm-unit-tests names) runs only those kinds.

use std::collections::BTreeMap;
use std::time::Duration;
use xvmm_benches::{env_u64, peer};
use xvmm_harness::{self as harness, l1, HarnessRun, Step};
use xvmm_results::Report;

/// xvmm's --timeout for one microguest run in L1.
const XVMM_TIMEOUT: u64 = 600;

/// The shared kinds to run: `XVMM_KUT_ONLY`'s, else all.
fn kinds() -> Vec<peer::Shared> {
    let only = std::env::var("XVMM_KUT_ONLY").unwrap_or_default();
    let wanted: Vec<&str> = only.split(',').filter(|s| !s.is_empty()).collect();
    peer::SHARED
        .iter()
        .filter(|s| wanted.is_empty() || wanted.contains(&s.kut))
        .copied()
        .collect()
}

fn steps(kinds: &[peer::Shared], rounds: u64, samples: u64) -> Vec<Step> {
    let warmup = (samples / 10).max(1).to_string();
    let samples = samples.to_string();
    let timeout = XVMM_TIMEOUT.to_string();
    let mut steps = Vec::new();
    for round in 0..rounds {
        for shared in kinds {
            steps.push(Step {
                name: format!("kut-{round}-{}", shared.kut),
                timeout_secs: 60,
                marker: None,
                stop_at_marker: false,
                argv: peer::qemu_argv(shared.kut),
            });
        }
        let xvmm = [
            l1::XVMM,
            "--samples",
            &samples,
            "--warmup",
            &warmup,
            "--timeout",
            &timeout,
            "--quiet",
            "--json",
            "-",
        ];
        steps.push(Step {
            name: format!("xvmm-{round}"),
            timeout_secs: XVMM_TIMEOUT + 60,
            marker: None,
            stop_at_marker: false,
            argv: xvmm.iter().map(|s| s.to_string()).collect(),
        });
    }
    steps
}

/// Builds vmexit.flat and runs every round in one L1 boot; `Err` says why
/// the bench did not run.
fn run(kinds: &[peer::Shared], rounds: u64, samples: u64) -> Result<HarnessRun, String> {
    let checkout = peer::checkout()?;
    let cache = xvmm_kernel::cache::root(None).map_err(|e| e.to_string())?;
    let flat = peer::build(&checkout, &cache)?;
    println!(
        "kvm-unit-tests: {} (built from {})",
        flat.display(),
        checkout.display()
    );
    let artifacts = harness::prepare().map_err(|e| format!("nested harness: {e}"))?;
    let steps = steps(kinds, rounds, samples);
    let mut initrd = harness::l1_initramfs(&artifacts, &steps, true).map_err(|e| e.to_string())?;
    harness::append_files(&mut initrd, &[(peer::FLAT_IN_L1, &flat, 0o644)])
        .map_err(|e| e.to_string())?;
    let kut_secs = 60 * kinds.len() as u64;
    let limit = Duration::from_secs(rounds * (XVMM_TIMEOUT + 60 + kut_secs) + 300);
    harness::run_l1(&artifacts, &initrd, "kvm-unit-tests", limit).map_err(|e| e.to_string())
}

fn main() {
    let rounds = env_u64("XVMM_KUT_ROUNDS", 2).max(1);
    let samples = env_u64("XVMM_NESTED_SAMPLES", 1000).max(1);
    let kinds = kinds();
    let run = match run(&kinds, rounds, samples) {
        Ok(run) => run,
        Err(why) => {
            println!("kvm-unit-tests peer bench skipped: {why}");
            return;
        }
    };
    for line in xvmm_benches::l1_run_lines(&run) {
        println!("{line}");
    }
    // Each round: one step per kind, then the microguest.
    let planned = usize::try_from(rounds).unwrap_or(usize::MAX) * (kinds.len() + 1);
    if run.steps.len() < planned {
        println!(
            "{} of {planned} steps ran; L1's console ends:\n{}",
            run.steps.len(),
            run.tail(40)
        );
    }
    let mut kut_runs: Vec<BTreeMap<String, peer::KutFigure>> = Vec::new();
    let mut reports = Vec::new();
    for round in 0..rounds {
        let mut figures = BTreeMap::new();
        for shared in &kinds {
            let lines = run.output(&format!("kut-{round}-{}", shared.kut));
            figures.extend(peer::parse(&lines));
        }
        kut_runs.push(figures);
        let name = format!("xvmm-{round}");
        match Report::from_json(&run.output(&name).join("\n")) {
            Ok(r) => reports.push(r),
            Err(e) => println!("{name}: no report ({e})"),
        }
    }
    println!(
        "\n{rounds} rounds; kvm-unit-tests: mean ticks per iteration of a timed loop; \
         microguest: median corrected round trip of {samples} samples; ratio = microguest / \
         kvm-unit-tests (TCG-emulated)\n"
    );
    print!("{}", peer::table(&peer::rows(&kinds, &kut_runs, &reports)));
}
