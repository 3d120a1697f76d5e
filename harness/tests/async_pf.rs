//! KVM asynchronous page faults, made to happen and measured, in ONE nested
//! run: QEMU TCG boots the patched L1 kernel (KVM host with userfaultfd),
//! which runs `xvmm --kernel /l2/bzImage --host-fault-delay` twice:
//! - step `apf-on`: async PF offered in CPUID (`--async-pf on`);
//! - step `apf-off`: not offered (`--async-pf off`);
//! - step `apf-both`: `--async-pf both` with few samples, for its table.
//!
//! In each, the patched L2 kernel's xperf asks xvmm to drop pages on the
//! host and touches them (`pf-host-miss`) while a SCHED_IDLE spinner shares
//! its CPU. With async PF on, L1's KVM must deliver async "page not present"
//! faults (host `kvm_async_pf_not_present`, guest `pf_async`), and the
//! spinner must get more done per touch than with it off, where the vCPU
//! halts in the host until the page is there.
//!
//! Times under TCG are emulated: only directions and counts are asserted.
//! Console: target/harness/async-pf.log; reports:
//! target/harness/async-pf-{on,off}.json.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;
use xvmm_harness::{self as harness, l1, Outcome, Step};
use xvmm_results::async_pf::{AsyncPf, PF_HOST_MISS};
use xvmm_results::Report;

/// Samples of the other crossings (few: TCG) and pf-host-miss pages per round.
const SAMPLES: u64 = 100;
const ROUNDS: u64 = 3;
/// Long against TCG's own slowness, so that the wait is what a touch meets.
const DELAY: &str = "2ms";
const VM_TIMEOUT: u64 = 300;

fn l2_cmdline() -> String {
    format!(
        "{} xperf_stamps=1 quiet no_timer_check -- --null-samples 2000",
        xvmm::boot::cmdline::default_cmdline()
    )
}

fn step(name: &str, async_pf: &str, samples: u64, json: &str) -> Step {
    let n = samples.to_string();
    let rest = [
        "--samples",
        &n,
        "--warmup",
        "20",
        "--async-pf",
        async_pf,
        "--host-fault-delay",
        DELAY,
        "--json",
        json,
    ];
    let argv = harness::xvmm_l2_argv(&l2_cmdline(), VM_TIMEOUT, &rest);
    Step {
        name: name.into(),
        timeout_secs: VM_TIMEOUT * 2 + 30,
        marker: None,
        stop_at_marker: false,
        argv,
    }
}

fn plan() -> Vec<Step> {
    vec![
        step("apf-on", "on", SAMPLES, "-"),
        step("apf-off", "off", SAMPLES, "-"),
        step("apf-both", "both", 20, "/tmp/apf.json"),
    ]
}

struct AsyncPfRun {
    on: Report,
    off: Report,
    /// What `--async-pf both` printed (stdout and stderr) and how it ended
    /// (None: it did not run).
    both: Vec<String>,
    both_outcome: Option<Outcome>,
}

fn skipped() -> bool {
    harness::skipped("nested async PF harness test")
}

/// The one L1 boot, shared by the tests below.
fn run() -> &'static AsyncPfRun {
    static RUN: OnceLock<Result<AsyncPfRun, String>> = OnceLock::new();
    let result = RUN.get_or_init(|| {
        let (artifacts, xperf) =
            harness::prepare_patched_with_xperf(Default::default()).map_err(|e| e.to_string())?;
        let mut initramfs =
            harness::l1_initramfs(&artifacts, &plan(), false).map_err(|e| e.to_string())?;
        harness::append_files(&mut initramfs, &[(l1::XPERF, xperf.as_path(), 0o755)])
            .map_err(|e| e.to_string())?;
        let run = harness::run_l1(
            &artifacts,
            &initramfs,
            "async-pf",
            Duration::from_secs(30 * 60),
        )
        .map_err(|e| e.to_string())?;
        eprintln!("{}", run.summary("nested async PF harness"));
        let on = run.exited_report("apf-on")?;
        let off = run.exited_report("apf-off")?;
        let dir = run.log.parent().map(Path::to_path_buf).unwrap_or_default();
        for (name, r) in [("on", &on), ("off", &off)] {
            let path = dir.join(format!("async-pf-{name}.json"));
            std::fs::write(&path, r.to_json_pretty()).map_err(|e| e.to_string())?;
        }
        let both_outcome = run.step("apf-both").map(|s| s.outcome.clone());
        Ok(AsyncPfRun {
            both: run
                .output("apf-both")
                .iter()
                .map(|l| l.to_string())
                .collect(),
            both_outcome,
            on,
            off,
        })
    });
    match result {
        Ok(r) => r,
        Err(e) => panic!("nested async PF harness failed: {e}"),
    }
}

fn async_pf(report: &Report, side: &str) -> AsyncPf {
    report
        .async_pf
        .clone()
        .unwrap_or_else(|| panic!("{side}: no async_pf section"))
}

/// Every requested touch was made and timed, every dropped page was served
/// by the fault server, and nothing was refused.
fn assert_touches_complete(report: &Report, side: &str) {
    let c = report
        .crossing(PF_HOST_MISS)
        .unwrap_or_else(|| panic!("{side}: no {PF_HOST_MISS} crossing"));
    assert_eq!(c.samples_valid, SAMPLES * ROUNDS, "{side}: {c:?}");
    let a = async_pf(report, side);
    assert_eq!(a.guest.touches, SAMPLES * ROUNDS, "{side}");
    assert_eq!(a.host.pages_dropped, SAMPLES * ROUNDS, "{side}");
    assert_eq!(a.host.drop_requests_refused, 0, "{side}: {:?}", a.host);
    // A touched page faults once; the guest kernel may touch a dropped page
    // itself too (never less).
    assert!(
        a.host.uffd_faults_served >= SAMPLES * ROUNDS,
        "{side}: {:?}",
        a.host
    );
    assert_eq!(a.host.failure, None, "{side}");
    assert_eq!(a.host_fault_delay_ns, 2_000_000, "{side}");
}

#[test]
fn with_async_pf_on_the_guest_gets_async_faults_the_host_traced() {
    if skipped() {
        return;
    }
    let r = run();
    assert_touches_complete(&r.on, "on");
    let a = async_pf(&r.on, "on");
    assert!(a.offered && a.enabled_by_guest == Some(true), "{a:?}");
    let not_present = a.host.not_present.expect("async PF tracepoints on L1");
    assert!(not_present > 0, "{:?}", a.host);
    assert!(a.host.try_async_get_page.unwrap_or(0) >= not_present);
    let received = a.guest.async_pf_received.expect("pf_async from the hooks");
    // Every touch is of a page the host dropped, with interrupts on at
    // CPL3: each one goes async.
    assert_eq!(received, SAMPLES * ROUNDS, "{:?}", a.guest);
    assert!(a.guest.page_ready.unwrap_or(0) > 0, "{:?}", a.guest);
    // Joined per sample on the verified timeline: every touch the guest
    // saw go async holds the host's "not present" in its own window.
    let timeline = r.on.timeline.as_ref().expect("timeline");
    assert!(timeline.verified, "{timeline:?}");
    let guest_async = a.guest.sample_async.iter().filter(|&&g| g == 1).count() as u64;
    assert!(guest_async > 0, "{:?}", a.guest);
    let agreeing = a.host.samples_async_agreeing.expect("joined");
    assert_eq!(
        agreeing, guest_async,
        "the host traced {agreeing} of the {guest_async} touches the guest saw go async"
    );
}

#[test]
fn with_async_pf_off_the_same_touches_complete_synchronously() {
    if skipped() {
        return;
    }
    let r = run();
    assert_touches_complete(&r.off, "off");
    let a = async_pf(&r.off, "off");
    assert!(!a.offered && a.enabled_by_guest == Some(false), "{a:?}");
    assert_eq!(a.guest.async_pf_received, Some(0), "{:?}", a.guest);
    // No page-ready vector is installed (no HYP row) or none fired.
    assert!(
        matches!(a.guest.page_ready, None | Some(0)),
        "{:?}",
        a.guest
    );
    // Nothing to agree on: the guest never turned async PF on.
    assert_eq!(a.host.samples_agreeing, None, "{:?}", a.host);
    // KVM still fetches the page in its async worker, but halts the vCPU
    // instead of telling the guest: the host traces it, the guest sees none.
    assert!(a.host.try_async_get_page.unwrap_or(0) > 0, "{:?}", a.host);
}

#[test]
fn the_spinner_gets_more_done_per_touch_with_async_pf_on() {
    if skipped() {
        return;
    }
    let r = run();
    let spin = |rep: &Report, side| async_pf(rep, side).spinner.expect("spinner").per_touch;
    let (on, off) = (spin(&r.on, "on"), spin(&r.off, "off"));
    assert!(
        on.mean > off.mean,
        "spinner iterations per touch: on {on:?}, off {off:?}"
    );
    let c = xvmm_results::async_pf::compare_on_off(&r.on, &r.off).expect("both sides");
    eprintln!("{}", xvmm_results::render::on_off_table(&c));
}

#[test]
fn async_pf_both_prints_the_two_runs_side_by_side() {
    if skipped() {
        return;
    }
    let r = run();
    let out = r.both.join("\n");
    assert_eq!(r.both_outcome, Some(Outcome::Exited(0)), "{out}");
    for row in ["async PF on", "async PF off", "on - off"] {
        assert!(
            r.both.iter().any(|l| l.starts_with(row)),
            "no {row:?} row:\n{out}"
        );
    }
}
