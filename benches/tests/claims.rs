//! README's claims about the stamps, checked on this machine, with a
//! negative control where a check could pass by accident:
//! - linearity: chains of 8 to 4096 imul at CPL3, natively and in the
//!   microguest, in phases of eight lengths taken in turn, each phase on its
//!   own line; the user pair's cost a run subtracts (the null pair, or its
//!   short sweep's intercept where the two differ by more than one TSC
//!   quantum) agrees with a longer, independent sweep within the two
//!   sweeps' uncertainty, long chains stay within 2 % of their line, 4096
//!   costs twice 2048 within 2 %; no correction, twice it and chain costs
//!   5 % off fail the same check; corrections one quantum either side fail
//!   it where the sweeps resolve a quantum, and where they do not (a
//!   one-tick counter) the check says it cannot tell;
//! - in the microguest through `xvmm linearity` as a library call (chain
//!   cost timed in the guest at the sweep's CPL); the kernel pair likewise
//!   at CPL0 where CPL0 runs natively (the nested harness makes that check
//!   on L1's KVM); under PVM, which emulates CPL0, that the kernel pair
//!   costs what emulation costs;
//! - xperf's getppid round trip agrees with `perf bench syscall basic`
//!   within 15 % (needs `perf`, from linux-perf: harness/setup.sh installs
//!   it; without it the test fails, unless XVMM_SKIP_PERF=1 says to skip);
//! - attributing 1 M samples against 1 M host exits takes under 2 s;
//! - the binary trace reader reads exits faster than the text reader;
//! - its decode reaches 10 M events/s (the release bench's figure);
//! - 1000 files and 1 M raw samples through the release `xvmm report`, and
//!   `--json --raw` of 1 M samples, stay within their time and memory.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use xvmm::microguest::guest::Kind;
use xvmm::microguest::linearity::{
    check_linearity, Linearity, LinearityOptions, Pair, PairLinearity,
};
use xvmm::microguest::measure::{user_intervals, user_or_kernel_intervals};
use xvmm::microguest::platform::{self, Platform};
use xvmm_benches::linearity::{
    self, check_with_chain, ChainCost, Control, LinearityCheck, Outcome, INTERCEPT_PHASES,
    LONG_PHASE,
};
use xvmm_benches::perf;
use xvmm_host::tsc;
use xvmm_results::{quantum, Stats};

/// Every claim here is a timing: two at once on a 2-CPU machine would time
/// each other (xperf's getppid came out 28 % above perf's while a linearity
/// sweep ran beside it), so they take turns.
static TIMING: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    TIMING.lock().unwrap_or_else(|e| e.into_inner())
}

fn quantum_here() -> f64 {
    quantum::estimate(&tsc::back_to_back(100_000)).expect("the TSC moves")
}

/// Prints a check with its controls and requires what it can say: the
/// right correction passes; no correction, twice it, and chain costs 5 %
/// off fail the same check; corrections exactly one quantum either side
/// are put through it, and the check holds only where both fail, and says
/// it cannot tell where one passes (the sweeps do not resolve a quantum:
/// on a one-tick counter they never do).
fn assert_judged(what: &str, c: &LinearityCheck) {
    println!("{what}: {:?}", c.verdict);
    for k in &c.controls {
        println!(
            "{what}: control {} ({}): {:?}",
            k.what, k.correction, k.refused
        );
    }
    let v = c.verdict.as_ref().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(c.control_step, Some(c.quantum), "{what}: {c:?}");
    let one_quantum = |k: &&Control| k.what.starts_with(linearity::ONE_QUANTUM);
    let coarse: Vec<&Control> = c.controls.iter().filter(|k| !one_quantum(k)).collect();
    assert_eq!((coarse.len(), c.controls.len()), (4, 6), "{what}: {c:?}");
    for k in coarse {
        assert!(
            k.refused.is_some(),
            "{what}: control {} passed ({v:?})",
            k.what
        );
    }
    let resolved = c
        .controls
        .iter()
        .filter(one_quantum)
        .all(|k| k.refused.is_some());
    let want = if resolved {
        Outcome::Holds
    } else {
        Outcome::CannotTell
    };
    assert_eq!(c.outcome(), want, "{what}: {c:?}");
    println!(
        "{what}: {} (quantum {:.2} ticks, the sweeps' tolerance {:.1})",
        c.outcome().describe(),
        c.quantum,
        v.tolerance
    );
}

/// Whether a check is taken again: the right correction failed, or a
/// chain-cost control passed and the core changed speed while the chains
/// were timed (`chains`: the fastest and slowest more than three of their
/// combined standard errors apart). A control 5 % off can then pass
/// without the check being wrong: on a fresh clone the chains before and
/// after a sweep came out 1.4 % apart, the slope 2.1 % under their mean,
/// and the control 5 % under passed by 0.001 tick of 0.055. Nor is a slope
/// taken at one speed the chains' cost at another: on the Intel CI machine
/// (a cloud Xeon under PVM) one imul cost 1.91 ticks before a sweep and
/// 2.00 after it, take after take, and a sweep's slope of 1.94 lay
/// between; the native check therefore times its chains inside each phase
/// of the sweep (`native_phases_with_chains`), the microguest's still
/// before and after it. A steady core is the claim's condition; a check
/// that fails on one, or whose core never settles, still fails.
fn take_again(what: &str, c: &LinearityCheck, chains: &[ChainCost]) -> bool {
    // A chain-cost control is one whose chain cost is not the verdict's.
    let right = c.verdict.as_ref().map(|v| v.chain.ticks_per_imul).ok();
    let chain_passed = c
        .passed_controls()
        .any(|k| Some(k.chain.ticks_per_imul) != right);
    let (apart, noise) = ChainCost::spread(chains);
    let failed = c.verdict.is_err();
    // A right correction that fails is taken again even where the chains
    // agree: the core can slow for the sweep alone (one run here: slope
    // 1.8947 against 1.8616 ticks per imul on both sides), and the pair's
    // cost in ticks follows the core's speed, so a correction decided at
    // one speed misses a sweep's intercept at another. A wrong check fails
    // every take, so this hides no bug; a control that passes is taken
    // again only where the speed change explains it.
    let again = failed || (chain_passed && apart > noise);
    if again {
        let which = if failed {
            "the right correction failed"
        } else {
            "a chain-cost control passed"
        };
        let costs: Vec<String> = chains
            .iter()
            .map(|k| format!("{:.4}", k.ticks_per_imul))
            .collect();
        println!(
            "{what}: {which} (chains of {} ticks per imul, {apart:.4} apart, noise \
             {noise:.4}): taken again",
            costs.join(", ")
        );
    }
    again
}

/// How many times a check whose core changed speed is taken again (three,
/// then five, were not enough on this machine on 2026-11-30: chains of
/// 2.23 then 1.91 ticks per imul in the last of four takes; the native
/// check's right correction failing four takes in a row, then chains 2.11
/// then 1.91 in the sixth).
const RETAKES: usize = 8;

#[test]
fn native_stamps_are_linear_and_a_wrong_correction_is_caught() {
    let _turn = one_at_a_time();
    let q = quantum_here();
    let mut all = INTERCEPT_PHASES.to_vec();
    all.push(LONG_PHASE);
    // Each take decides again, as a run would: the pair's cost in TSC
    // ticks follows the core's speed (a fresh clone's take met an
    // intercept of 38.5 against the 40.7 decided before the first).
    let check = || {
        let decided = linearity::native_decision(3, 100_000, Some(q));
        let (phases, chains) = linearity::native_phases_with_chains(&all, 24_000);
        let chain = ChainCost::across_phases(&chains);
        let c = check_with_chain(&phases, &decided, q, chain).unwrap();
        (c, chains, decided.reason)
    };
    let (mut c, mut chains, mut reason) = check();
    for _ in 0..RETAKES {
        if !take_again("native", &c, &chains) {
            break;
        }
        (c, chains, reason) = check();
    }
    println!("native: run's decision: {reason}");
    assert_judged("native", &c);
}

/// `xvmm linearity` as a library call: the user pair at CPL3 always; the
/// kernel pair at CPL0 where CPL0 runs natively (hardware KVM). Taken once
/// for both tests that read it.
fn microguest_linearity() -> Option<&'static Linearity> {
    if !Path::new("/dev/kvm").exists() {
        eprintln!("{}", xvmm_host::skip::record("/dev/kvm does not exist"));
        return None;
    }
    static ONCE: OnceLock<Result<Linearity, String>> = OnceLock::new();
    let l = ONCE.get_or_init(|| {
        let l = check_linearity(&LinearityOptions::default()).map_err(|e| e.to_string())?;
        println!("{}", xvmm_results::render::linearity_table(&l));
        Ok(l)
    });
    Some(l.as_ref().unwrap_or_else(|e| panic!("xvmm linearity: {e}")))
}

#[test]
fn microguest_stamps_are_linear_and_a_wrong_correction_is_caught() {
    let _turn = one_at_a_time();
    let Some(l) = microguest_linearity() else {
        return;
    };
    let user = |l: &Linearity| -> PairLinearity {
        l.pairs
            .iter()
            .find(|p| p.pair == Pair::User)
            .expect("the user pair")
            .clone()
    };
    let mut pair = user(l);
    for _ in 0..RETAKES {
        let chains = [pair.chain_before, pair.chain_after];
        if !take_again("microguest user pair", &pair.check, &chains) {
            break;
        }
        pair = user(&check_linearity(&LinearityOptions::default()).expect("xvmm linearity"));
    }
    assert_judged("microguest user pair", &pair.check);
}

/// The same for the kernel stamp pair at CPL0, where CPL0 runs natively
/// (hardware KVM; the nested harness checks it on L1's KVM,
/// harness/tests/boot.rs). Under PVM, which emulates every CPL0 instruction
/// (README "What runs where"; ENVIRONMENT.md), a sweep of emulated chains
/// says nothing about the stamps, and `xvmm linearity` says so; what is
/// documented there is checked instead: the kernel pair costs what
/// emulation costs, over 20 user pairs.
#[test]
fn microguest_kernel_stamps_are_linear_and_a_wrong_correction_is_caught() {
    let _turn = one_at_a_time();
    let Some(l) = microguest_linearity() else {
        return;
    };
    let here = Platform::probe();
    let kernel = l.pairs.iter().find(|p| p.pair == Pair::Kernel);
    match platform::cpl0_emulated(here.hypervisor) {
        Some(true) => {
            assert!(kernel.is_none(), "{l:?}");
            assert!(l.not_checked.iter().any(|(p, _)| *p == Pair::Kernel));
            let timeout = Duration::from_secs(120);
            let median = |v: Vec<u64>| {
                Stats::from_samples(&v.into_iter().filter(|&t| t > 0).collect::<Vec<_>>()).median
            };
            let plain =
                user_or_kernel_intervals(Kind::KernelNull, 0, 10, 10, timeout, false).is_err();
            let user = median(user_intervals(Kind::Null, 0, 100, 2000, timeout).unwrap());
            let c = median(
                user_or_kernel_intervals(Kind::KernelNull, 0, 10, 200, timeout, plain)
                    .unwrap_or_else(|e| panic!("kernel pair: {e}")),
            );
            println!("{here:?}: kernel pair {c} (plain RDTSC: {plain}), user pair {user}");
            assert!(
                c > 20 * user,
                "{here:?}: CPL0 is documented as emulated, yet the kernel pair ({c}) is not \
                 20 user pairs ({user}): the kernel pair's linearity could be checked here"
            );
        }
        _ => assert_judged(
            "microguest kernel pair",
            &kernel
                .expect("the kernel pair is checked where CPL0 runs natively")
                .check,
        ),
    }
}

/// One round of the getppid comparison, in TSC ticks: xperf's corrected
/// median (this build's library), the bare-`syscall` loop, the glibc
/// `getppid()` loop and perf bench's fastest run.
struct GetppidRound {
    xperf: f64,
    bare: f64,
    wrapped: f64,
    perf: f64,
}

fn getppid_config() -> xperf::measure::Config {
    xperf::measure::Config::native(5_000, 500, 20_000, 1)
}

/// xperf's corrected getppid round-trip median and the TSC rate.
fn xperf_getppid(config: &xperf::measure::Config) -> (f64, u64) {
    // Pins this thread; the loops and perf after it inherit the affinity.
    let report = xperf::measure::run(config).expect("xperf measures");
    let rt = report
        .crossing(xperf::measure::GETPPID)
        .and_then(|c| c.round_trip.as_ref())
        .expect("a getppid round trip");
    (rt.corrected.median as f64, report.host.tsc_khz)
}

/// The median round's difference of `pick`'s pair, and every round's.
fn median_round(rounds: &[GetppidRound], pick: fn(&GetppidRound) -> (f64, f64)) -> (f64, String) {
    let mut diffs: Vec<f64> = rounds
        .iter()
        .map(|r| {
            let (a, b) = pick(r);
            perf::relative(a, b)
        })
        .collect();
    diffs.sort_by(f64::total_cmp);
    let all: Vec<String> = diffs.iter().map(|d| format!("{:+.1}", d * 100.0)).collect();
    (diffs[diffs.len() / 2], all.join(" "))
}

/// README "xperf against perf": xperf's getppid against a peer whose loop is
/// known (a loop of the same bare `syscall`), and perf bench against the
/// same loop as its own (glibc's `getppid()`), so that neither comparison
/// holds a loop's overhead on one side only. Seven short rounds, each
/// everything back to back: the host's load drifts over seconds (perf's
/// fastest moved from 456 to 584 ticks between runs on an idle guest), so
/// only back-to-back figures see the same host; the median round decides.
#[test]
fn xperf_getppid_agrees_with_its_peers_like_for_like() {
    let _turn = one_at_a_time();
    if std::env::var("XVMM_SKIP_PERF").is_ok_and(|v| v == "1") {
        eprintln!(
            "{}",
            xvmm_host::skip::record("XVMM_SKIP_PERF=1: xperf against perf skipped")
        );
        return;
    }
    let config = getppid_config();
    let rounds: Vec<GetppidRound> = (0..7)
        .map(|_| {
            let (xperf, khz) = xperf_getppid(&config);
            GetppidRound {
                xperf,
                bare: perf::loop_ticks(perf::raw_getppid, 30, perf::CHECK_LOOPS) as f64,
                wrapped: perf::loop_ticks(perf::wrapped_getppid, 30, perf::CHECK_LOOPS) as f64,
                perf: perf::perf_fastest_ticks(20, perf::CHECK_LOOPS, khz)
                    .unwrap_or_else(|e| panic!("{e}; set XVMM_SKIP_PERF=1 to skip this check")),
            }
        })
        .collect();
    let (to_bare, all_bare) = median_round(&rounds, |r| (r.xperf, r.bare));
    let (to_perf, all_perf) = median_round(&rounds, |r| (r.wrapped, r.perf));
    let mid = &rounds[rounds.len() / 2];
    println!(
        "xperf getppid {:.0} ticks (stamps subtracted) against the bare-syscall loop's {:.0}: \
         {:+.1} % in the median round (rounds {all_bare} %); glibc getppid() loop {:.0} against \
         perf bench's fastest {:.0}: {:+.1} % (rounds {all_perf} %)",
        mid.xperf,
        mid.bare,
        to_bare * 100.0,
        mid.wrapped,
        mid.perf,
        to_perf * 100.0
    );
    assert!(
        to_bare.abs() <= perf::TOLERANCE,
        "xperf against the bare-syscall loop: {:+.1} % in the median of 7 rounds",
        to_bare * 100.0
    );
    assert!(
        to_perf.abs() <= perf::TOLERANCE,
        "the glibc loop against perf bench: {:+.1} % in the median of 7 rounds",
        to_perf * 100.0
    );
}

/// xperf's corrected getppid median from the release binary users run
/// (the static build the image ships), `--json -` on stdout.
fn release_xperf_getppid(binary: &Path) -> f64 {
    let out = std::process::Command::new(binary)
        .args([
            "--samples",
            "5000",
            "--warmup",
            "500",
            "--null-samples",
            "20000",
        ])
        .args(["--rounds", "1", "--json", "-"])
        .output()
        .expect("the release xperf runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = xvmm_results::Report::from_json(&String::from_utf8_lossy(&out.stdout))
        .expect("its JSON report");
    let rt = report
        .crossing(xperf::measure::GETPPID)
        .and_then(|c| c.round_trip.as_ref())
        .expect("a getppid round trip");
    rt.corrected.median as f64
}

/// The figure a test sees is the figure a user gets: this build's xperf
/// library (the test profile) and the release binary time getppid alike,
/// in alternating rounds, the median round within 10 %. An unoptimised
/// xperf fails it (~100 ticks slower on a ~350-tick round trip).
#[test]
fn the_test_build_measures_what_the_release_binary_does() {
    let _turn = one_at_a_time();
    let binary = xvmm_harness::build::build_static(&["xperf"])
        .unwrap_or_else(|e| panic!("building the static release xperf: {e}"))
        .join("xperf");
    let config = getppid_config();
    let mut diffs: Vec<(f64, f64, f64)> = (0..5)
        .map(|_| {
            let (here, _) = xperf_getppid(&config);
            let release = release_xperf_getppid(&binary);
            (perf::relative(release, here), here, release)
        })
        .collect();
    diffs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (diff, here, release) = diffs[diffs.len() / 2];
    println!(
        "getppid: this build's xperf {here:.0} ticks, the release binary {release:.0} \
         ({:+.1} % in the median of 5 alternating rounds)",
        diff * 100.0
    );
    assert!(
        diff.abs() <= 0.10,
        "this build's xperf {here:.0} against the release binary's {release:.0}: {:+.1} %",
        diff * 100.0
    );
}

/// README (issue 25's trace ingestion): attributing 1 M samples against
/// 1 M exits takes under 0.5 s of one core's time, on the recorded real
/// trace (`benches/data/kvm_trace` tiled to 1 M of each) and on the
/// synthetic run. The figures are the release `attribution` bench's,
/// median of 5 (CPU time of the attributing thread: a busy neighbour adds
/// wall time, not work); 0.28 s on the recording and 0.17-0.39 s on the
/// synthetic run were measured. The debug build's run checks what the
/// bench counts.
#[test]
fn attribution_of_a_million_samples_and_exits_takes_under_half_a_second() {
    let _turn = one_at_a_time();
    {
        use xvmm_benches::attribution::{synthetic, time_attribution};
        let (mut report, trace) = synthetic(100_000);
        time_attribution(&mut report, &trace);
        let rt = report.crossings[0].round_trip.as_ref().unwrap();
        let host = rt.host.as_ref().expect("attributed");
        assert_eq!(host.samples, 100_000);
        assert_eq!(host.samples_with_exits + host.exit_free.count, host.samples);
        assert!(host.samples_with_exits > 0 && host.exit_free.count > 0);
    }
    let text = release_bench("attribution", &[("XVMM_ATTRIBUTION_RUNS", "5")]);
    for start in ["attribution: ", "attribution on the recorded trace: "] {
        let line = text
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no {start:?} line in {text}"));
        // "N samples x M exits": at least a million of each.
        let words: Vec<&str> = line[start.len()..]
            .split_whitespace()
            .map(|w| w.trim_end_matches(','))
            .collect();
        let count = |i: usize| words[i].parse::<u64>().expect(line);
        assert!(words[1] == "samples" && words[4] == "exits", "{line}");
        assert!(count(0) >= 1_000_000 && count(3) >= 1_000_000, "{line}");
        let (before, _) = line.split_once(" s of CPU").expect(line);
        let cpu: f64 = before.rsplit(' ').next().unwrap().parse().expect(line);
        assert!(cpu < 0.5, "{start}: {cpu} s of CPU");
    }
}

/// README (issue 25's trace ingestion): the host side of a traced run with
/// 10 M exits (pages decoded as they come, aggregated, then the join of
/// 100 k samples) grows the process by at most 64 MiB. The release
/// `trace_memory` bench's figure (peak resident memory over the run minus
/// the memory before); it measured 55.6-56.1 MiB, of which the exit log is
/// 48 MiB. A growth below the log's own size would mean the figure is not
/// the run's.
#[test]
fn a_traced_run_of_ten_million_exits_grows_by_at_most_64_mib() {
    let _turn = one_at_a_time();
    let text = release_bench(
        "trace_memory",
        &[
            ("XVMM_TRACE_EXITS", "10000000"),
            ("XVMM_TRACE_SAMPLES", "100000"),
        ],
    );
    let figure = |after: &str, before: &str| figure_in(&text, after, before);
    assert!(text.starts_with("traced run, 10000000 exits"), "{text}");
    let growth = figure("RSS growth", "MiB");
    let log = figure("exit log", "MiB");
    assert!(growth <= 64.0, "grew {growth} MiB");
    assert!(
        growth >= log && log > 30.0,
        "growth {growth} MiB, log {log} MiB"
    );
}

/// The guide (xperf workload, issue 38's scale target): the reader takes a
/// trace of 10.5 M intervals (21 M events of two CPUs: calls, faults,
/// interrupts, times off CPU) within 10 s on one core and grows the
/// process by at most 16 MiB: it keeps the open intervals and bucketed
/// figures, not the events. The release `workload` bench's figures (1.9-2.2
/// s and 0.1-0.2 MiB on the Intel CI machine, 2026-11-29); a reader that
/// kept each interval would need over 300 MiB.
#[test]
fn the_workload_reader_takes_ten_million_intervals_in_bounded_memory() {
    let _turn = one_at_a_time();
    let text = release_bench("workload", &[("XVMM_WORKLOAD_ROUNDS", "700000")]);
    let figure = |after: &str, before: &str| figure_in(&text, after, before);
    assert!(
        text.starts_with("workload trace, 10500000 intervals from 21000007 events"),
        "{text}"
    );
    let secs = figure("events: ", " s,");
    let growth = figure("RSS growth", "MiB");
    assert!(secs <= 10.0, "{secs} s");
    assert!(growth <= 16.0, "grew {growth} MiB");
}

/// The number in `text` between `after` and the next `before`.
fn figure_in(text: &str, after: &str, before: &str) -> f64 {
    let (_, rest) = text.split_once(after).unwrap_or_else(|| panic!("{text}"));
    let (number, _) = rest.split_once(before).unwrap_or_else(|| panic!("{text}"));
    number.trim().parse().unwrap_or_else(|_| panic!("{text}"))
}

/// docs/results/benchmarks.md (issue 38's scale target for `xvmm
/// --workload`): 10 M guest intervals joined with 10 M host exits (the
/// recorded trace's, tiled) within 256 MiB and 10 s on one core, counting
/// the exit log, the interval log and the join. The release
/// `workload_join` bench's figures (1.3-1.5 s and 166 MiB on the Intel CI
/// machine, 2026-11-30; the join that held every interval and exit took
/// 839 MiB). Every interval and exit must be accounted for, and the logs
/// must be inside the growth, or the figure is not the run's.
#[test]
fn a_workload_join_of_ten_million_by_ten_million_fits_256_mib_and_10_s() {
    let _turn = one_at_a_time();
    let text = release_bench(
        "workload_join",
        &[
            ("XVMM_JOIN_INTERVALS", "10000000"),
            ("XVMM_JOIN_EXITS", "10000000"),
        ],
    );
    let figure = |after: &str, before: &str| figure_in(&text, after, before);
    assert!(
        text.starts_with("workload join, 10000000 intervals x 100"),
        "{text}"
    );
    let exits = figure(" x ", " exits");
    let (inside, outside) = (figure("(", " inside"), figure("inside, ", " outside"));
    assert!(exits >= 1e7 && inside + outside == exits, "{text}");
    assert!(inside > 1e6 && outside > 1e6, "both kinds of exit: {text}");
    assert_eq!(figure("outside, ", " late"), 0.0, "{text}");
    let secs = figure("join ", " s on one core");
    let growth = figure("RSS growth", "MiB");
    let logs = figure("); exit log ", " MiB,") + figure("MiB, interval log ", " MiB;");
    assert!(secs <= 10.0, "{secs} s");
    assert!(growth <= 256.0, "grew {growth} MiB");
    assert!(
        growth >= logs && logs > 60.0,
        "growth {growth} MiB, logs {logs} MiB"
    );
}

/// README: the binary trace reader (trace_pipe_raw pages) reads exits
/// faster than the text reader (2.6x in release builds, measured by the
/// `trace_parse` bench); claimed here with a generous margin, at least
/// 1.5x, in whatever profile the tests run. The best of three runs of each.
#[test]
fn binary_trace_reader_beats_the_text_reader() {
    let _turn = one_at_a_time();
    use xvmm_benches::trace::{read_pages, read_text, synthetic_pages, synthetic_text};
    let n = 200_000;
    let decoder = xvmm::host_trace::example_decoder().unwrap();
    let (text, pages) = (synthetic_text(n), synthetic_pages(&decoder, n));
    let (mut text_best, mut raw_best) = (0f64, 0f64);
    for _ in 0..3 {
        let t = read_text(&text);
        let r = read_pages(&decoder, &pages);
        assert_eq!(
            (t.exits, r.exits),
            (
                xvmm_results::num::usize_from(n),
                xvmm_results::num::usize_from(n)
            )
        );
        text_best = text_best.max(t.exits_per_sec());
        raw_best = raw_best.max(r.exits_per_sec());
    }
    println!(
        "text {:.2} M exits/s, binary {:.2} M exits/s",
        text_best / 1e6,
        raw_best / 1e6
    );
    assert!(
        raw_best >= 1.5 * text_best,
        "binary {raw_best:.0}/s vs text {text_best:.0}/s"
    );
}

/// README (issue 25's results at scale): the release `xvmm report` on 1000
/// characterisation files and on one file of 1 M raw samples each takes at
/// most 5 s and 512 MiB, and `--json --raw` with 1 M samples writes in at
/// most 2 s. One run each (the figures sit far below the targets: 0.2-0.5 s
/// and 58-171 MiB in the `report_scale` bench); the release binary is built
/// by `./test.sh` before the tests.
#[test]
fn reports_at_scale_stay_within_their_time_and_memory() {
    let _turn = one_at_a_time();
    use xvmm_benches::scale::{
        fleet_files, raw_report, release_xvmm, time_json_write, time_report,
    };
    let xvmm = release_xvmm().expect("no release xvmm: cargo build --release -p xvmm-cli");
    let dir = std::env::temp_dir().join(format!("xvmm-claims-scale-{}", std::process::id()));
    let real = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/instances/2026-11-27-pvm-epyc-build-machine/characterize.json");
    let files = fleet_files(&dir.join("fleet"), &real, 1000);
    let out = dir.join("report.html");
    let fleet = time_report(&xvmm, &files, &out);
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains("1000 result file(s)"), "not the fleet's page");
    let report = raw_report(1_000_000);
    let raw = dir.join("raw.json");
    let (write, bytes) = time_json_write(&report, &raw);
    drop(report);
    let one = time_report(&xvmm, std::slice::from_ref(&raw), &out);
    println!("fleet {fleet:?}; --json --raw {write:?} ({bytes} bytes); one file {one:?}");
    const MIB: u64 = 1 << 20;
    for (what, run) in [("1000 files", fleet), ("1 M samples", one)] {
        assert!(run.wall <= Duration::from_secs(5), "{what}: {:?}", run.wall);
        assert!(
            run.max_rss_bytes <= 512 * MIB,
            "{what}: {} bytes",
            run.max_rss_bytes
        );
        // A peak below the data itself would mean the figure is not the child's.
        assert!(
            run.max_rss_bytes > 4 * MIB,
            "{what}: {} bytes",
            run.max_rss_bytes
        );
    }
    assert!(
        write <= Duration::from_secs(2),
        "--json --raw took {write:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// README (issue 25's trace ingestion): the binary reader decodes at least
/// 10 M events/s on one core, on the recorded real trace
/// (`benches/data/kvm_trace`) and on the synthetic run; and (issue 38) as a
/// whole (decode, merge, pair, summary) it reads at least 5 M exits/s on
/// one run of the recorded trace repeated. The figures are the release
/// `trace_parse` bench's (the reader lives in xvmm, which the test profile
/// does not optimise), built here as CI builds it and run with 2 M
/// recorded events and 300 k synthetic exits, median of 5; the machine gave
/// 13-34 M events/s and 6.7-7.5 M exits/s (2026-11-30).
#[test]
fn binary_reader_decodes_ten_million_events_and_pairs_five_million_exits_per_second() {
    let _turn = one_at_a_time();
    // A shared machine swings between the two paths' runs (fresh-clone run
    // 26: fast 27.0 against general 34.3 on the synthetic run, where the
    // fast path led in every run before): a failed comparison is taken
    // again, at most twice, and every take is printed; a decoder that is
    // really slower fails all three.
    let mut failures = Vec::new();
    for take in 0..3 {
        let text = release_bench(
            "trace_parse",
            &[
                ("XVMM_TRACE_EXITS", "300000"),
                ("XVMM_TRACE_EVENTS", "2000000"),
                ("XVMM_TRACE_RUNS", "5"),
            ],
        );
        match reader_rates_hold(&text) {
            Ok(()) => return,
            Err(why) => {
                eprintln!("take {take}: {why}");
                failures.push(why);
            }
        }
    }
    panic!("in every take: {failures:?}");
}

/// The reader claims on one `trace_parse` output: 10 M events/s on the
/// fast path, the general path no more than the noise ahead of it, and
/// 5 M exits/s for the whole reader on one long run.
fn reader_rates_hold(text: &str) -> Result<(), String> {
    let rate = |line_start: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(line_start))
            .unwrap_or_else(|| panic!("no {line_start:?} line in {text}"));
        let (_, after) = line.split_once(" s, ").expect(line);
        after
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .expect(line)
    };
    for on in ["recorded ", ""] {
        let fast = rate(&format!("{on}binary decode alone, fast path"));
        let general = rate(&format!("{on}binary decode alone, general path"));
        if fast < 10.0 {
            return Err(format!("{on}decode {fast} M events/s"));
        }
        // The general path is the same decoder without its two shortcuts:
        // it must not come out ahead by more than the noise.
        if fast < 0.8 * general {
            return Err(format!("{on}fast {fast} vs general {general}"));
        }
    }
    let whole = rate("recorded binary reader, one run of");
    if whole < 5.0 {
        return Err(format!("the whole reader {whole} M exits/s"));
    }
    Ok(())
}

/// Builds the release bench `name` as CI builds it, runs it with `env` and
/// returns (and prints) its stdout; fails when either does.
fn release_bench(name: &str, env: &[(&str, &str)]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let built = std::process::Command::new(&cargo)
        .current_dir(&root)
        .args([
            "build",
            "-q",
            "--release",
            "-p",
            "xvmm-benches",
            "--bin",
            name,
        ])
        .status()
        .expect("cargo runs");
    assert!(built.success(), "the release {name} bench does not build");
    let out =
        std::process::Command::new(xvmm_benches::scale::target_dir().join("release").join(name))
            .envs(env.iter().copied())
            .output()
            .unwrap_or_else(|e| panic!("{name} does not run: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{text}");
    text
}

/// The first number after `after` on the line that starts with `line_start`.
fn figure(text: &str, line_start: &str, after: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(line_start))
        .unwrap_or_else(|| panic!("no {line_start:?} line in {text}"));
    let (_, rest) = line
        .split_once(after)
        .unwrap_or_else(|| panic!("no {after:?} in {line}"));
    let number: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    number.parse().unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// README (issue 25, the microguest's own speed): a default run reusing
/// one VM for its phases against the same run with a fresh VM per phase,
/// in the release `microguest` bench (alternating, median of 5 pairs). The
/// guest's own samples in KVM_RUN are nearly all of a run's time on this
/// PVM machine, so the ratio is near 1: at 100 k samples per row 0.914
/// and 0.833 in two sessions (pairs 0.75-1.18, the machine's swings);
/// here, for time, 2000 samples per row (0.914, pairs 0.74-1.08). The
/// claims: reuse is no slower than that noise allows (at most 1.10), and
/// the VM work it removes (creation, loading, collection and teardown,
/// from the bench's profile) is under half the peer's (0.03 s vs 0.17 s
/// at 2000 samples, 0.18 s vs 0.47 s at 100 k).
#[test]
fn microguest_run_reusing_its_vm_is_no_slower_than_fresh_vms() {
    let _turn = one_at_a_time();
    if !Path::new("/dev/kvm").exists() {
        eprintln!("{}", xvmm_host::skip::record("/dev/kvm does not exist"));
        return;
    }
    let text = release_bench(
        "microguest",
        &[("XVMM_BENCH_SAMPLES", "2000"), ("XVMM_BENCH_RUNS", "5")],
    );
    let ratio = figure(&text, "full run ratio reused/fresh:", ":");
    assert!(ratio <= 1.10, "reused/fresh {ratio}");
    let vm_work = |peer: &str| {
        let line = format!("profile, {peer} (last run)");
        ["VM creation", "loading", "collecting and teardown"]
            .iter()
            .map(|part| figure(&text, &line, part))
            .sum::<f64>()
    };
    let (new, old) = (vm_work("reused VM"), vm_work("fresh VM per phase"));
    assert!(new * 2.0 < old, "VM work {new} s reused vs {old} s fresh");
}

/// The reader check's control: outputs in the bench's own line format where
/// the fast path is under 10 M events/s, or trails the general path by more
/// than the noise, or the whole reader is under 5 M exits/s, fail it; one
/// where all hold passes.
#[test]
fn the_reader_check_fails_a_slow_or_trailing_fast_path_or_a_slow_reader() {
    let with = |whole: f64, rec_fast: f64, rec_gen: f64, fast: f64, gen: f64| {
        format!(
            "  recorded binary reader, one run of 81 copies (decode + merge + pair + summary): 0.100 s, {whole:.2} M exits/s (target 5)\n\
             \x20 recorded binary reader, 81 runs (decode + merge + pair + summary each): 0.100 s, 9.00 M exits/s (3.6x the text reader)\n\
             \x20 recorded binary decode alone, fast path: 0.100 s, {rec_fast:.2} M events/s (CPU time; target 10)\n\
             \x20 recorded binary decode alone, general path: 0.100 s, {rec_gen:.2} M events/s (CPU time; fast path 1.0x)\n\
             \x20 binary decode alone, fast path:  0.100 s, {fast:.2} M events/s (CPU time; target 10)\n\
             \x20 binary decode alone, general path: 0.100 s, {gen:.2} M events/s (CPU time)\n"
        )
    };
    let text = |rec_fast, rec_gen, fast, gen| with(6.7, rec_fast, rec_gen, fast, gen);
    assert_eq!(reader_rates_hold(&text(24.6, 18.2, 20.0, 15.0)), Ok(()));
    let trailing = reader_rates_hold(&text(24.6, 18.2, 27.01, 34.31)).unwrap_err();
    assert!(
        trailing.contains("fast 27.01 vs general 34.31"),
        "{trailing}"
    );
    assert!(reader_rates_hold(&text(9.0, 8.0, 20.0, 15.0)).is_err());
    assert!(reader_rates_hold(&text(24.6, 40.0, 20.0, 15.0)).is_err());
    // The separate runs' 9.00 is not the figure: the one run's is.
    let slow = reader_rates_hold(&with(4.99, 24.6, 18.2, 20.0, 15.0)).unwrap_err();
    assert_eq!(slow, "the whole reader 4.99 M exits/s");
    assert_eq!(
        reader_rates_hold(&with(5.0, 24.6, 18.2, 20.0, 15.0)),
        Ok(())
    );
}
