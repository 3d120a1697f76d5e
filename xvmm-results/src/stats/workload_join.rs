//! A VM workload's host exits joined with its guest intervals (issue 38):
//! every exit, placed on the guest's timeline, goes to the innermost
//! interval of its vCPU that holds it, or else to the command's run
//! outside every interval, or outside the run altogether. A task's time
//! off CPU is an interval too, inside the call that blocked: the exits
//! there (another task's user time, the idle vCPU's halts) go to it, not
//! to the call.
//!
//! One sweep, with bounded memory: the intervals come in order of their
//! ends ([`super::interval_log`]) and the exits in the order the trace
//! gave them (each vCPU's in time order, the vCPUs merged by their
//! entries). Before an interval is looked at, every exit back in the
//! guest by its end is handed to its vCPU's [`PendingExits`]; the
//! interval then claims those held at or after its start. An interval
//! nested in another (an interrupt in a system call) ends first, so it
//! takes its exits before the outer one looks. Only the exits no interval
//! has claimed yet are held, a few bytes each.

use super::pending_exits::{Pending, PendingExits};
use super::workload::IntervalKind;
pub use crate::schema::interval_stream::StreamedInterval;
use crate::schema::workload::{ReasonExits, Row, RowExits, WorkloadExits};
use std::collections::{BTreeMap, HashMap};

/// A kind as one number, the same in the guest's stream of intervals and
/// in its report's rows: the family in the high 32 bits (1 system call,
/// 2 fault, 3 interrupt, 4 off CPU), the number, fault kind or vector in
/// the low.
pub fn kind_code(kind: IntervalKind) -> u64 {
    let (family, value) = match kind {
        IntervalKind::Syscall(nr) => (1u64, nr),
        IntervalKind::Fault(f) => (2, f as u32),
        IntervalKind::Interrupt(v) => (3, u32::from(v)),
        IntervalKind::OffCpu => (4, 0),
    };
    (family << 32) + u64::from(value)
}

/// One host exit on the guest's timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestExit {
    pub vcpu: u32,
    /// The guest TSC at the exit.
    pub at: u64,
    /// Its host time (exit to entry) as guest ticks.
    pub ticks: u64,
    /// Index into the trace's reasons.
    pub reason: u16,
}

/// (count, ticks) per reason index.
type ByReason = BTreeMap<u16, (u64, u64)>;

fn add(by: &mut ByReason, reason: u16, count: u64, ticks: u64) {
    let slot = by.entry(reason).or_default();
    slot.0 += count;
    slot.1 = slot.1.saturating_add(ticks);
}

/// What the sweep found, before it is named.
#[derive(Default)]
struct Tally {
    by_code: BTreeMap<u64, ByReason>,
    outside: ByReason,
    outside_window: u64,
    intervals: u64,
    misordered: u64,
}

impl Tally {
    /// An exit no interval claimed: inside the command's run or not.
    fn unclaimed(&mut self, at: u64, ticks: u64, reason: u16, run: (u64, u64)) {
        if (run.0..=run.1).contains(&at) {
            add(&mut self.outside, reason, 1, ticks);
        } else {
            self.outside_window += 1;
        }
    }
}

/// Joins `exits` (each vCPU's in time order, the vCPUs merged by their
/// entries, as the trace gives them) with `intervals` (in order of their
/// ends), and names the result: rows from the report's `rows` by code (an
/// unknown code is named as such), the unclaimed exits inside the
/// command's run `[from, to]` (guest TSC) by reason, and the count of
/// those outside it.
pub fn join(
    exits: impl IntoIterator<Item = GuestExit>,
    intervals: impl IntoIterator<Item = StreamedInterval>,
    rows: &[Row],
    reasons: &[String],
    (from, to): (u64, u64),
) -> WorkloadExits {
    let mut tally = Tally::default();
    let mut held: HashMap<u32, PendingExits> = HashMap::new();
    let mut exits = exits.into_iter().peekable();
    for i in intervals {
        tally.intervals += 1;
        // Every exit by the interval's end. The trace orders them by
        // their entries, and the guest cannot stamp inside an exit of its
        // own vCPU, so none of that vCPU's is still to come.
        while let Some(e) = exits.next_if(|e| e.at <= i.end) {
            held.entry(e.vcpu).or_default().push(Pending {
                at: e.at,
                ticks: e.ticks,
                reason: e.reason,
            });
        }
        let Some(cpu) = held.get_mut(&i.cpu) else {
            continue;
        };
        let mut taken = ByReason::new();
        cpu.claim(i.start, i.end, |p| add(&mut taken, p.reason, 1, p.ticks));
        if !taken.is_empty() {
            let row = tally.by_code.entry(i.code).or_default();
            for (reason, (count, ticks)) in taken {
                add(row, reason, count, ticks);
            }
        }
    }
    for e in exits {
        tally.unclaimed(e.at, e.ticks, e.reason, (from, to));
    }
    for cpu in held.values_mut() {
        tally.misordered += cpu.misordered();
        cpu.drain(|p| tally.unclaimed(p.at, p.ticks, p.reason, (from, to)));
    }
    named(tally, rows, reasons)
}

fn named(tally: Tally, rows: &[Row], reasons: &[String]) -> WorkloadExits {
    let reason_name = |r: u16| {
        reasons
            .get(usize::from(r))
            .cloned()
            .unwrap_or_else(|| format!("reason {r}"))
    };
    let listed = |by: &ByReason| -> Vec<ReasonExits> {
        let mut out: Vec<ReasonExits> = by
            .iter()
            .map(|(&r, &(count, ticks))| ReasonExits {
                reason: reason_name(r),
                count,
                ticks,
            })
            .collect();
        out.sort_by(|a, b| b.ticks.cmp(&a.ticks).then(a.reason.cmp(&b.reason)));
        out
    };
    let mut out_rows: Vec<RowExits> = tally
        .by_code
        .iter()
        .map(|(&code, by)| {
            let (family, name) = rows.iter().find(|r| r.code == Some(code)).map_or_else(
                || ("unknown".to_string(), format!("code {code:#x}")),
                |r| (r.family.clone(), r.name.clone()),
            );
            RowExits {
                family,
                name,
                reasons: listed(by),
            }
        })
        .collect();
    out_rows.sort_by(|a, b| b.ticks().cmp(&a.ticks()).then(a.name.cmp(&b.name)));
    WorkloadExits {
        intervals: tally.intervals,
        rows: out_rows,
        outside: listed(&tally.outside),
        outside_window: tally.outside_window,
        exits_misordered: tally.misordered,
        ..WorkloadExits::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(vcpu: u32, at: u64, ticks: u64, reason: u16) -> GuestExit {
        GuestExit {
            vcpu,
            at,
            ticks,
            reason,
        }
    }

    fn interval(start: u64, end: u64, code: u64, cpu: u32) -> StreamedInterval {
        StreamedInterval::new(start, end, code, cpu)
    }

    fn row(family: &str, name: &str, code: u64) -> Row {
        Row {
            family: family.into(),
            name: name.into(),
            code: Some(code),
            ..Row::default()
        }
    }

    const READ: u64 = 1 << 32;
    const TIMER: u64 = 3 << 32 | 236;
    const FAULT: u64 = 2 << 32;

    #[test]
    fn kinds_have_codes_of_their_own() {
        use super::super::workload::FaultKind;
        assert_eq!(kind_code(IntervalKind::Syscall(0)), READ);
        assert_eq!(kind_code(IntervalKind::Interrupt(236)), TIMER);
        assert_eq!(kind_code(IntervalKind::Fault(FaultKind::Read)), FAULT);
        assert_eq!(kind_code(IntervalKind::Fault(FaultKind::Write)), FAULT | 1);
        assert_eq!(kind_code(IntervalKind::OffCpu), 4 << 32);
    }

    /// A read holding a timer interrupt, a fault, exits between them, on
    /// two vCPUs, and exits before and after the run.
    #[test]
    fn each_exit_goes_to_the_innermost_interval_of_its_vcpu() {
        let reasons = vec!["hlt".to_string(), "msr".to_string(), "io".to_string()];
        let exits = [
            exit(0, 5, 1, 2),      // before the run
            exit(0, 110, 10, 1),   // in the read
            exit(1, 150, 40, 1),   // another vCPU, same time: not the read's
            exit(0, 150, 5, 1),    // in the timer, inside the read
            exit(0, 160, 25, 0),   // in the timer
            exit(0, 200, 50, 1),   // the read's end: inside (closed interval)
            exit(0, 250, 60, 0),   // between: outside
            exit(0, 300, 70, 2),   // the fault's start
            exit(0, 9_000, 80, 2), // after the run
        ];
        let intervals = [
            interval(120, 130, READ, 7), // a CPU with no exits
            interval(140, 170, TIMER, 0),
            interval(100, 200, READ, 0),
            interval(300, 310, FAULT, 0),
        ];
        let rows = [
            row("syscall", "read", READ),
            row("interrupt", "local_timer", TIMER),
        ];
        let w = join(exits, intervals, &rows, &reasons, (50, 1_000));
        assert_eq!(w.intervals, 4);
        let find = |name: &str| w.rows.iter().find(|r| r.name == name).unwrap();
        let read = find("read");
        assert_eq!((read.count(), read.ticks()), (2, 60));
        assert_eq!(read.reasons[0].reason, "msr");
        let timer = find("local_timer");
        assert_eq!((timer.count(), timer.ticks()), (2, 30));
        assert_eq!(timer.reasons[0].reason, "hlt");
        let unknown = find("code 0x200000000");
        assert_eq!((unknown.family.as_str(), unknown.ticks()), ("unknown", 70));
        let outside: Vec<(&str, u64, u64)> = w
            .outside
            .iter()
            .map(|r| (r.reason.as_str(), r.count, r.ticks))
            .collect();
        assert_eq!(outside, [("hlt", 1, 60), ("msr", 1, 40)]);
        assert_eq!(w.outside_window, 2);
        // Every exit is counted once.
        let total: u64 = w.rows.iter().map(RowExits::count).sum::<u64>()
            + w.outside.iter().map(|r| r.count).sum::<u64>()
            + w.outside_window;
        assert_eq!(total, 9);
    }

    #[test]
    fn a_long_interval_over_many_claimed_exits_takes_only_the_rest() {
        let exits: Vec<GuestExit> = (0..10_000).map(|t| exit(0, t, 1, 0)).collect();
        let mut intervals: Vec<StreamedInterval> = (0..10_000)
            .step_by(2)
            .map(|t| interval(t, t, TIMER, 0))
            .collect();
        intervals.push(interval(0, 10_000, READ, 0));
        let rows = [row("syscall", "read", READ), row("interrupt", "t", TIMER)];
        let w = join(exits, intervals, &rows, &["hlt".into()], (0, 10_000));
        let count = |n: &str| w.rows.iter().find(|r| r.name == n).unwrap().count();
        assert_eq!((count("t"), count("read")), (5_000, 5_000));
        assert!(w.outside.is_empty());
    }

    /// Three vCPUs' intervals, overlapping, some long, some nested, in
    /// order of their ends.
    fn random_intervals(r: &mut fastrand::Rng) -> Vec<StreamedInterval> {
        let mut intervals = Vec::new();
        for cpu in 0..3u32 {
            let mut t = 1_000;
            while t < 3_000_000 {
                let long = r.u64(..50) == 0;
                let length = 1 + r.u64(..if long { 200_000 } else { 3_000 });
                intervals.push(interval(t, t + length, r.u64(..4), cpu));
                if length > 10 && r.u64(..3) == 0 {
                    let inner = t + r.u64(..length / 2);
                    let code = 4 + r.u64(..2);
                    intervals.push(interval(inner, inner + r.u64(..length / 2), code, cpu));
                }
                t += r.u64(..length + 1_500);
            }
        }
        intervals.sort_by_key(|i| i.end);
        intervals
    }

    /// Each vCPU's exits, sometimes bunched, none spanning an end of its
    /// vCPU's intervals (its guest cannot stamp while it is out); in the
    /// trace's order, by entry.
    fn random_exits(r: &mut fastrand::Rng, intervals: &[StreamedInterval]) -> Vec<GuestExit> {
        let mut exits = Vec::new();
        for vcpu in 0..3u32 {
            let mut ends: Vec<u64> = intervals
                .iter()
                .filter(|i| i.cpu == vcpu)
                .map(|i| i.end)
                .collect();
            ends.sort_unstable();
            let mut t = 0;
            while t < 3_100_000 {
                let ticks = 1 + r.u64(..300);
                let first_end = ends[ends.partition_point(|&e| e < t).min(ends.len() - 1)];
                if !(t <= first_end && first_end < t + ticks) {
                    let reason = u16::try_from(r.u64(..3)).unwrap();
                    exits.push(exit(vcpu, t, ticks, reason));
                }
                let bunched = r.u64(..10) == 0;
                t += ticks + 1 + r.u64(..if bunched { 5 } else { 900 });
            }
        }
        exits.sort_by_key(|e| e.at + e.ticks);
        exits
    }

    /// (count, ticks) per code, outside the intervals, and outside the
    /// run, as the join defines them: each exit to the first interval, in
    /// order of their ends, of its vCPU that holds it.
    type Expected = (BTreeMap<u64, (u64, u64)>, (u64, u64), u64);

    fn by_definition(
        exits: &[GuestExit],
        intervals: &[StreamedInterval],
        run: (u64, u64),
    ) -> Expected {
        let (mut rows, mut outside, mut outside_window) = (BTreeMap::new(), (0, 0), 0);
        for e in exits {
            let first = intervals
                .iter()
                .find(|i| i.cpu == e.vcpu && i.start <= e.at && e.at <= i.end);
            match first {
                Some(i) => {
                    let slot: &mut (u64, u64) = rows.entry(i.code).or_default();
                    *slot = (slot.0 + 1, slot.1 + e.ticks);
                }
                None if (run.0..=run.1).contains(&e.at) => {
                    outside = (outside.0 + 1, outside.1 + e.ticks);
                }
                None => outside_window += 1,
            }
        }
        (rows, outside, outside_window)
    }

    /// The sweep against the join's definition, computed the slow way.
    /// Nested and overlapping intervals on three vCPUs, exits bunched so
    /// that hundreds wait sealed under long intervals.
    #[test]
    fn the_sweep_gives_each_exit_where_the_definition_puts_it() {
        let mut r = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        let intervals = random_intervals(&mut r);
        let exits = random_exits(&mut r, &intervals);
        let run = (500, 3_050_000);
        let w = join(exits.clone(), intervals.clone(), &[], &[], run);
        let (want, outside, outside_window) = by_definition(&exits, &intervals, run);
        let got: BTreeMap<u64, (u64, u64)> = w
            .rows
            .iter()
            .map(|r| {
                let code = u64::from_str_radix(r.name.trim_start_matches("code 0x"), 16).unwrap();
                (code, (r.count(), r.ticks()))
            })
            .collect();
        assert_eq!(got, want);
        let out = w
            .outside
            .iter()
            .fold((0, 0), |a, r| (a.0 + r.count, a.1 + r.ticks));
        assert_eq!((out, w.outside_window), (outside, outside_window));
        assert_eq!(w.exits_misordered, 0);
        let inside: u64 = want.values().map(|v| v.0).sum();
        assert!(outside.0 > 1_000 && inside > 10_000, "{outside:?} {inside}");
    }

    /// An exit the trace gave after later ones of its vCPU, below what
    /// the held exits keep plain, is counted as such, and still once.
    #[test]
    fn misordered_exits_are_counted_and_joined_once() {
        let mut exits: Vec<GuestExit> = (0..2_000).map(|t| exit(0, 1_000 + t, 1, 0)).collect();
        exits.push(exit(0, 10, 1, 1));
        exits.push(exit(1, 10, 1, 1)); // another vCPU's first: in order
        let w = join(
            exits,
            [interval(5_000, 5_000, READ, 0)],
            &[],
            &[],
            (0, 10_000),
        );
        assert_eq!(w.exits_misordered, 1);
        let outside: u64 = w.outside.iter().map(|r| r.count).sum();
        assert_eq!(outside, 2_002);
    }
}
