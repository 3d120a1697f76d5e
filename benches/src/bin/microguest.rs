//! Microguest benchmark: the cost of the stamps themselves (natively in this
//! process and at CPL3 inside the microguest), and the wall time of a full
//! default run (100k samples per row, every row, 3 rounds) as xvmm runs it
//! (one VM reused by the phases) against its peer in the same process, a
//! fresh VM per phase (the run before reuse), alternating, the median of 5
//! runs each and the ratio; then where one run of each spent its time
//! (`xvmm::microguest::profile`). Prints figures; never fails on numbers.
//!
//! `XVMM_BENCH_SAMPLES` overrides the 100k samples per row, `XVMM_BENCH_RUNS`
//! the 5 runs of each.

use std::time::{Duration, Instant};
use xvmm::microguest::guest::Kind;
use xvmm::microguest::machine::VmPolicy;
use xvmm::microguest::profile::{ticks_as_duration, Profile};
use xvmm::microguest::{measure, Options};
use xvmm_results::{Report, Stats, Status};

/// The stamp pair with nothing between (xperf's null measurement).
fn native_null() -> u64 {
    let s = xperf::stamp::null_pair();
    s.close - s.open
}

fn show(label: &str, s: &Stats) {
    println!(
        "{label:<34} min {:>6}  median {:>6}  p99 {:>6}  mean {:>8.1}  stddev {:>7.1}  (n={})",
        s.min, s.median, s.p99, s.mean, s.stddev, s.count
    );
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn policy_name(p: VmPolicy) -> &'static str {
    match p {
        VmPolicy::Reuse => "reused VM",
        VmPolicy::FreshPerPhase => "fresh VM per phase",
    }
}

/// One full run: its wall time, its report and profile.
struct Run {
    wall: Duration,
    report: Report,
    profile: Profile,
}

fn full_run(opts: &Options) -> Result<Run, String> {
    let start = Instant::now();
    let m = measure::measure(opts, Duration::from_secs(1800), &xvmm::progress::Silent)
        .map_err(|e| format!("failed after {:.2} s: {e}", start.elapsed().as_secs_f64()))?;
    let wall = start.elapsed();
    if let Some(e) = m.stopped {
        return Err(format!("stopped early: {e}"));
    }
    Ok(Run {
        wall,
        report: m.report,
        profile: m.profile,
    })
}

/// Each row's name and whether it was measured: the peers must agree.
fn row_statuses(r: &Report) -> Vec<(String, bool)> {
    let crossings = r
        .crossings
        .iter()
        .map(|c| (c.name.clone(), c.status == Status::Measured));
    let exits = r
        .exits
        .iter()
        .map(|e| (e.name.clone(), e.status == Status::Measured));
    crossings.chain(exits).collect()
}

fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Where a run's time went: the totals, then one line per kind.
fn show_profile(label: &str, p: &Profile, tsc_khz: u64) {
    let all = p.phases_total();
    let per_exit = |ticks: u64, n: u64| {
        ticks_as_duration(ticks / n.max(1), tsc_khz).map_or_else(
            || format!("{} ticks", ticks / n.max(1)),
            |d| format!("{} ns", d.as_nanos()),
        )
    };
    println!(
        "profile, {label}: {:.2} s; {} phases ({} in a reused VM): VM creation {:.3} s, loading {:.3} s, \
         KVM_RUN loop {:.2} s (guest warm-up ~{:.2} s), collecting and teardown {:.3} s; report {:.3} s; \
         between phases {:.3} s; {} exits, {} on the measured path, xvmm {} per measured exit",
        seconds(p.total),
        p.phases.len(),
        p.reused(),
        seconds(all.create),
        seconds(all.load),
        seconds(all.run),
        seconds(p.warmup_estimate()),
        seconds(all.collect),
        seconds(p.assemble),
        seconds(p.between()),
        all.exits,
        all.measured_exits,
        per_exit(all.vmm_ticks, all.measured_exits),
    );
    println!(
        "  {:<16} {:>6} {:>6} {:>9} {:>10} {:>9} {:>9} {:>9} {:>11} {:>10}",
        "kind",
        "phases",
        "reused",
        "samples",
        "create ms",
        "load ms",
        "run s",
        "exits",
        "xvmm/exit",
        "collect ms"
    );
    for k in p.by_kind() {
        let t = k.times;
        println!(
            "  {:<16} {:>6} {:>6} {:>9} {:>10.1} {:>9.1} {:>9.3} {:>9} {:>11} {:>10.1}",
            format!("{:?}", k.kind),
            k.phases,
            k.reused,
            k.samples,
            t.create.as_secs_f64() * 1e3,
            t.load.as_secs_f64() * 1e3,
            seconds(t.run),
            t.exits,
            if t.measured_exits == 0 {
                "-".to_string()
            } else {
                per_exit(t.vmm_ticks, t.measured_exits)
            },
            t.collect.as_secs_f64() * 1e3,
        );
    }
}

/// `runs` runs of each policy, alternating (which goes first swaps every
/// pair, so a drift in the machine's speed hits both alike).
fn compare(samples: u64, runs: u64) -> Result<(), String> {
    let opts = |vms| -> Result<Options, String> {
        let mut o = Options::new(samples, 1_000).map_err(|e| e.to_string())?;
        o.vms = vms;
        Ok(o)
    };
    let (reuse, fresh) = (opts(VmPolicy::Reuse)?, opts(VmPolicy::FreshPerPhase)?);
    let (mut new, mut old, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut last: Option<(Run, Run)> = None;
    for i in 0..runs {
        let order = if i % 2 == 0 {
            [&reuse, &fresh]
        } else {
            [&fresh, &reuse]
        };
        let mut pair = Vec::new();
        for o in order {
            let run = full_run(o).map_err(|e| format!("{}: {e}", policy_name(o.vms)))?;
            println!(
                "full run {}/{runs}, {}: {:.2} s",
                i + 1,
                policy_name(o.vms),
                seconds(run.wall)
            );
            pair.push((o.vms, run));
        }
        let (a, b) = (pair.remove(0), pair.remove(0));
        let (n, f) = if a.0 == VmPolicy::Reuse {
            (a.1, b.1)
        } else {
            (b.1, a.1)
        };
        if row_statuses(&n.report) != row_statuses(&f.report) {
            return Err(format!(
                "the peers measured different rows: {:?} vs {:?}",
                row_statuses(&n.report),
                row_statuses(&f.report)
            ));
        }
        new.push(seconds(n.wall));
        old.push(seconds(f.wall));
        ratios.push(seconds(n.wall) / seconds(f.wall));
        last = Some((n, f));
    }
    let Some((n, f)) = last else {
        return Err("no runs (XVMM_BENCH_RUNS=0)".into());
    };
    summarise(samples, &n, &new, &old, &ratios);
    let khz = n.report.host.tsc_khz;
    show_profile(
        &format!("{} (last run)", policy_name(VmPolicy::Reuse)),
        &n.profile,
        khz,
    );
    show_profile(
        &format!("{} (last run)", policy_name(VmPolicy::FreshPerPhase)),
        &f.profile,
        khz,
    );
    print!("{}", xvmm_results::render::report(&n.report));
    Ok(())
}

fn summarise(samples: u64, n: &Run, new: &[f64], old: &[f64], ratios: &[f64]) {
    let rows = row_statuses(&n.report);
    let measured = rows.iter().filter(|r| r.1).count();
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{lo:.2}..{hi:.2}")
    };
    println!(
        "full run, {samples} samples per row, {} rounds, {} rows ({measured} measured, {} unsupported; \
         the same in every run of both): {} median {:.2} s ({} s), {} median {:.2} s ({} s)",
        n.report.method.rounds,
        rows.len(),
        rows.len() - measured,
        policy_name(VmPolicy::Reuse),
        median_f64(new.to_vec()),
        range(new),
        policy_name(VmPolicy::FreshPerPhase),
        median_f64(old.to_vec()),
        range(old),
    );
    println!(
        "full run ratio reused/fresh: {:.3} (median of {} alternating pairs; pairs {})",
        median_f64(ratios.to_vec()),
        ratios.len(),
        range(ratios),
    );
}

fn main() {
    let samples = env_number("XVMM_BENCH_SAMPLES", 100_000);
    let runs = env_number("XVMM_BENCH_RUNS", 5);

    for _ in 0..10_000 {
        native_null();
    }
    let native: Vec<u64> = (0..100_000).map(|_| native_null()).collect();
    show("stamp pair, native (ticks)", &Stats::from_samples(&native));

    match measure::user_intervals(Kind::Null, 0, 10_000, 100_000, Duration::from_secs(60)) {
        Ok(guest) => show(
            "stamp pair, microguest CPL3 (ticks)",
            &Stats::from_samples(&guest),
        ),
        Err(e) => println!("stamp pair, microguest CPL3: failed: {e}"),
    }

    if let Err(e) = compare(samples, runs) {
        println!("full run, {samples} samples per row: {e}");
    }
}
