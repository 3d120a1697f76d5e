//! A VM workload's host exits joined with its guest intervals (issue 38):
//! every exit, placed on the guest's timeline, goes to the innermost
//! interval of its vCPU that holds it, or else to the command's run
//! outside every interval, or outside the run altogether. A task's time
//! off CPU is an interval too, inside the call that blocked: the exits
//! there (another task's user time, the idle vCPU's halts) go to it, not
//! to the call.
//!
//! The intervals arrive as the guest closed them, so in order of their
//! ends: an interval nested in another (an interrupt in a system call)
//! arrives first and takes its exits before the outer one looks. Each
//! vCPU's exits are sorted once; a claimed exit is skipped by a
//! "next unclaimed" forest (path halving), so an interval's exits cost
//! their own number plus its span's lookups, however long it is.

use super::workload::IntervalKind;
use crate::schema::interval_stream::StreamedInterval;
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

struct CpuExits {
    /// Sorted by time.
    exits: Vec<GuestExit>,
    /// `next[i]`: the first unclaimed exit at or after `i` (`len`: none),
    /// once followed to its root.
    next: Vec<u32>,
}

impl CpuExits {
    fn new(mut exits: Vec<GuestExit>) -> CpuExits {
        exits.sort_by_key(|e| e.at);
        let next = (0..=u32::try_from(exits.len()).unwrap_or(u32::MAX)).collect();
        CpuExits { exits, next }
    }

    fn unclaimed_from(&mut self, mut i: usize) -> usize {
        while self.next[i] as usize != i {
            let up = self.next[i] as usize;
            self.next[i] = self.next[up];
            i = up;
        }
        i
    }

    /// Claims the unclaimed exits in `[start, end]`, each into `into`.
    fn claim(&mut self, start: u64, end: u64, mut into: impl FnMut(&GuestExit)) {
        let mut i = self.unclaimed_from(self.exits.partition_point(|e| e.at < start));
        while i < self.exits.len() && self.exits[i].at <= end {
            into(&self.exits[i]);
            // i + 1 <= len, which fits: `new` numbered 0..=len.
            self.next[i] = u32::try_from(i + 1).unwrap_or(u32::MAX);
            // `i` now points past itself.
            i = self.unclaimed_from(i);
        }
    }

    /// The exits no interval claimed.
    fn unclaimed(&mut self) -> Vec<GuestExit> {
        let mut out = Vec::new();
        let mut i = self.unclaimed_from(0);
        while i < self.exits.len() {
            out.push(self.exits[i]);
            i = self.unclaimed_from(i + 1);
        }
        out
    }
}

/// The join in progress.
pub struct Joiner {
    cpus: HashMap<u32, CpuExits>,
    by_code: BTreeMap<u64, ByReason>,
    intervals: u64,
}

impl Joiner {
    /// Over these exits, in any order.
    pub fn new(exits: impl IntoIterator<Item = GuestExit>) -> Joiner {
        let mut per_cpu: HashMap<u32, Vec<GuestExit>> = HashMap::new();
        for e in exits {
            per_cpu.entry(e.vcpu).or_default().push(e);
        }
        Joiner {
            cpus: per_cpu
                .into_iter()
                .map(|(cpu, exits)| (cpu, CpuExits::new(exits)))
                .collect(),
            by_code: BTreeMap::new(),
            intervals: 0,
        }
    }

    /// One interval, in the order the guest closed them.
    pub fn add(&mut self, i: &StreamedInterval) {
        self.intervals += 1;
        let Some(cpu) = self.cpus.get_mut(&i.cpu) else {
            return;
        };
        let mut taken = ByReason::new();
        cpu.claim(i.start, i.end, |e| {
            let slot = taken.entry(e.reason).or_default();
            slot.0 += 1;
            slot.1 = slot.1.saturating_add(e.ticks);
        });
        if !taken.is_empty() {
            let row = self.by_code.entry(i.code).or_default();
            for (reason, (count, ticks)) in taken {
                let slot = row.entry(reason).or_default();
                slot.0 += count;
                slot.1 = slot.1.saturating_add(ticks);
            }
        }
    }

    /// The attribution: rows named from the report's `rows` by code (an
    /// unknown code is named as such), the unclaimed exits inside the
    /// command's run `[from, to]` (guest TSC) by reason, and the count of
    /// those outside it.
    pub fn finish(mut self, rows: &[Row], reasons: &[String], from: u64, to: u64) -> WorkloadExits {
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
        let mut out_rows: Vec<RowExits> = self
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
        let mut outside = ByReason::new();
        let mut outside_window = 0;
        for cpu in self.cpus.values_mut() {
            for e in cpu.unclaimed() {
                if (from..=to).contains(&e.at) {
                    let slot = outside.entry(e.reason).or_default();
                    slot.0 += 1;
                    slot.1 = slot.1.saturating_add(e.ticks);
                } else {
                    outside_window += 1;
                }
            }
        }
        WorkloadExits {
            intervals: self.intervals,
            rows: out_rows,
            outside: listed(&outside),
            outside_window,
            ..WorkloadExits::default()
        }
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
        StreamedInterval {
            start,
            end,
            code,
            cpu,
        }
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
        let mut j = Joiner::new([
            exit(0, 5, 1, 2),      // before the run
            exit(0, 110, 10, 1),   // in the read
            exit(0, 150, 20, 1),   // in the timer, inside the read
            exit(0, 160, 30, 0),   // in the timer
            exit(1, 150, 40, 1),   // another vCPU, same time: not the read's
            exit(0, 200, 50, 1),   // the read's end: inside (closed interval)
            exit(0, 250, 60, 0),   // between: outside
            exit(0, 300, 70, 2),   // the fault's start
            exit(0, 9_000, 80, 2), // after the run
        ]);
        j.add(&interval(140, 170, TIMER, 0));
        j.add(&interval(100, 200, READ, 0));
        j.add(&interval(300, 310, FAULT, 0));
        j.add(&interval(120, 130, READ, 7)); // a CPU with no exits
        let rows = [
            row("syscall", "read", READ),
            row("interrupt", "local_timer", TIMER),
        ];
        let w = j.finish(&rows, &reasons, 50, 1_000);
        assert_eq!(w.intervals, 4);
        let find = |name: &str| w.rows.iter().find(|r| r.name == name).unwrap();
        let read = find("read");
        assert_eq!((read.count(), read.ticks()), (2, 60));
        assert_eq!(read.reasons[0].reason, "msr");
        let timer = find("local_timer");
        assert_eq!((timer.count(), timer.ticks()), (2, 50));
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
        let mut j = Joiner::new(exits);
        for t in (0..10_000).step_by(2) {
            j.add(&interval(t, t, TIMER, 0));
        }
        j.add(&interval(0, 10_000, READ, 0));
        let rows = [row("syscall", "read", READ), row("interrupt", "t", TIMER)];
        let w = j.finish(&rows, &["hlt".into()], 0, 10_000);
        let count = |n: &str| w.rows.iter().find(|r| r.name == n).unwrap().count();
        assert_eq!((count("t"), count("read")), (5_000, 5_000));
        assert!(w.outside.is_empty());
    }
}
