//! A workload's kernel intervals from its trace events (issue 38, the first
//! part: [`docs/design/workload.md`](../../../docs/design/workload.md)):
//! system calls, user page faults, interrupts and time off CPU, per task,
//! from events fed in time order. Each closed interval goes to a sink (the
//! VM join consumes them one by one) and into per-kind statistics kept in
//! bounded memory ([`ValueCounts`]). Memory is the open intervals: a few
//! per task and an interrupt stack per CPU, whatever the trace's length.
//!
//! Events that cannot be paired are counted, never guessed at: an exit with
//! no entry (tracing began inside the call), an entry whose interval never
//! closed (`exit_group`, the end of the trace), and intervals a lost-events
//! mark cut.

use super::value_counts::ValueCounts;
use super::Stats;
pub use crate::schema::workload::Unpaired;
use std::collections::{BTreeMap, HashMap};

/// What a user page fault was, from its error code (x86: bit 0 protection
/// violation, bit 1 write, bit 4 instruction fetch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// A read of a page not present.
    Read,
    /// A write to a page not present.
    Write,
    /// A write to a present page that forbids it (copy on write).
    WriteProtect,
    /// An instruction fetch.
    Exec,
    /// Any other protection violation.
    Protection,
}

impl FaultKind {
    pub fn from_error_code(code: u64) -> FaultKind {
        let (present, write, fetch) = (code & 1 != 0, code & 2 != 0, code & 16 != 0);
        match (present, write, fetch) {
            (_, _, true) => FaultKind::Exec,
            (false, false, false) => FaultKind::Read,
            (false, true, false) => FaultKind::Write,
            (true, true, false) => FaultKind::WriteProtect,
            (true, false, false) => FaultKind::Protection,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Read => "read",
            FaultKind::Write => "write",
            FaultKind::WriteProtect => "write-protect",
            FaultKind::Exec => "exec",
            FaultKind::Protection => "protection",
        }
    }
}

/// The kind of a kernel interval: the row it is summed into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IntervalKind {
    /// A system call, by number.
    Syscall(u32),
    /// A user page fault.
    Fault(FaultKind),
    /// An interrupt, by vector.
    Interrupt(u8),
    /// A task off CPU (switched out until switched in again).
    OffCpu,
}

/// The number a `sys_exit` carries when the call reset it: `rt_sigreturn`
/// sets the task's `orig_ax` to -1 (no restart into the interrupted call),
/// and `sys_exit` reports that. Such an exit closes the task's open call,
/// whichever it is.
pub const RESET_NR: u32 = u32::MAX;

/// One trace event of the workload, as the reader decoded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `raw_syscalls:sys_enter`.
    SysEnter { nr: u32 },
    /// `raw_syscalls:sys_exit`.
    SysExit { nr: u32 },
    /// `exceptions:page_fault_user`.
    FaultUser { error_code: u64 },
    /// The fault's handling returned (a return probe on `handle_mm_fault`).
    FaultDone,
    /// An `irq_vectors:*_entry`, on the CPU it names.
    IrqEntry { vector: u8 },
    /// The matching `*_exit`.
    IrqExit { vector: u8 },
    /// `sched:sched_switch` with the task as `prev`.
    SwitchOut,
    /// `sched:sched_switch` with the task as `next`.
    SwitchIn,
    /// The ring buffer of this CPU lost events here.
    Lost,
}

/// An event at a time, on a CPU, of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub ts: u64,
    pub cpu: u32,
    pub pid: i32,
    pub event: Event,
}

/// A closed interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub pid: i32,
    pub kind: IntervalKind,
    pub start: u64,
    pub end: u64,
    /// Of a system call: the ticks its task spent off CPU inside it.
    pub off_cpu: u64,
    /// The CPU of the event that closed it (a call that blocked may have
    /// begun on another).
    pub cpu: u32,
}

/// A kind's figures over the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct KindFigures {
    pub kind: IntervalKind,
    /// Each interval's length (wall time, start to end).
    pub length: Stats,
    /// The lengths summed.
    pub total: u128,
    /// Of a system call: the time off CPU inside, summed.
    pub off_cpu: u128,
}

#[derive(Clone, Copy, Debug, Default)]
struct OpenSyscall {
    nr: u32,
    start: u64,
    off_cpu: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Task {
    syscall: Option<OpenSyscall>,
    fault: Option<(FaultKind, u64)>,
    /// When it was switched out, while it is.
    off_since: Option<u64>,
    /// The CPU of its last event (a lost mark there cuts its intervals).
    cpu: u32,
}

#[derive(Default)]
struct Sums {
    lengths: ValueCounts,
    total: u128,
    off_cpu: u128,
}

/// `task` (`pid`) runs again at `ts`: its time off CPU, if one was open,
/// added to the call it was in.
fn back_on_cpu(task: &mut Task, pid: i32, ts: u64, cpu: u32) -> Option<Interval> {
    let start = task.off_since.take()?;
    if let Some(call) = task.syscall.as_mut() {
        call.off_cpu += ts.saturating_sub(start);
    }
    Some(Interval {
        pid,
        kind: IntervalKind::OffCpu,
        start,
        end: ts,
        off_cpu: 0,
        cpu,
    })
}

/// Builds the intervals from records fed in time order.
#[derive(Default)]
pub struct Builder {
    tasks: HashMap<i32, Task>,
    /// Open interrupts per CPU, innermost last.
    irqs: HashMap<u32, Vec<(u8, u64, i32)>>,
    sums: BTreeMap<IntervalKind, Sums>,
    unpaired: Unpaired,
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Feeds one record; each interval it closes goes to `sink` and into
    /// the figures.
    pub fn push(&mut self, r: &Record, sink: &mut impl FnMut(&Interval)) {
        if r.event == Event::Lost {
            self.lose(r.cpu);
            return;
        }
        if let Event::IrqEntry { .. } | Event::IrqExit { .. } = r.event {
            self.irq(r, sink);
            return;
        }
        if !matches!(r.event, Event::SwitchIn | Event::SwitchOut) {
            self.resumed(r, sink);
        }
        let task = self.tasks.entry(r.pid).or_default();
        task.cpu = r.cpu;
        let closed = match r.event {
            Event::SysEnter { nr } => {
                let again = task.syscall.replace(OpenSyscall {
                    nr,
                    start: r.ts,
                    off_cpu: 0,
                });
                self.unpaired.opens += u64::from(again.is_some());
                None
            }
            Event::SysExit { nr } => match task.syscall.take() {
                Some(open) if open.nr == nr || nr == RESET_NR => Some(Interval {
                    pid: r.pid,
                    kind: IntervalKind::Syscall(open.nr),
                    start: open.start,
                    end: r.ts,
                    off_cpu: open.off_cpu,
                    cpu: r.cpu,
                }),
                other => {
                    // A different call's exit: this one's entry was lost,
                    // and the open one will not close now.
                    self.unpaired.closes += 1;
                    self.unpaired.opens += u64::from(other.is_some());
                    None
                }
            },
            Event::FaultUser { error_code } => {
                let kind = FaultKind::from_error_code(error_code);
                let again = task.fault.replace((kind, r.ts));
                self.unpaired.opens += u64::from(again.is_some());
                None
            }
            // With no user fault open, a kernel fault's return: ignored.
            Event::FaultDone => task.fault.take().map(|(kind, start)| Interval {
                pid: r.pid,
                kind: IntervalKind::Fault(kind),
                start,
                end: r.ts,
                off_cpu: 0,
                cpu: r.cpu,
            }),
            Event::SwitchOut => {
                // Out again without an in, and no event between: when it
                // ran is unknown, so that time off CPU is not guessed.
                let again = task.off_since.replace(r.ts);
                self.unpaired.opens += u64::from(again.is_some());
                None
            }
            Event::SwitchIn => back_on_cpu(task, r.pid, r.ts, r.cpu),
            Event::IrqEntry { .. } | Event::IrqExit { .. } | Event::Lost => None,
        };
        if let Some(i) = closed {
            self.close(&i, sink);
        }
    }

    /// The task of an event other than a switch runs: a time off CPU still
    /// open lacked its switch in, and ends here.
    fn resumed(&mut self, r: &Record, sink: &mut impl FnMut(&Interval)) {
        let Some(task) = self.tasks.get_mut(&r.pid) else {
            return;
        };
        if let Some(i) = back_on_cpu(task, r.pid, r.ts, r.cpu) {
            self.unpaired.inferred_switch_ins += 1;
            self.close(&i, sink);
        }
    }

    fn irq(&mut self, r: &Record, sink: &mut impl FnMut(&Interval)) {
        if let Event::IrqEntry { .. } = r.event {
            self.resumed(r, sink);
        }
        let stack = self.irqs.entry(r.cpu).or_default();
        match r.event {
            Event::IrqEntry { vector } => stack.push((vector, r.ts, r.pid)),
            Event::IrqExit { vector } => match stack.pop() {
                Some((open, start, pid)) if open == vector => {
                    let i = Interval {
                        pid,
                        kind: IntervalKind::Interrupt(vector),
                        start,
                        end: r.ts,
                        off_cpu: 0,
                        cpu: r.cpu,
                    };
                    self.close(&i, sink);
                }
                Some(other) => {
                    // Not the innermost: its entry was lost; the one open
                    // stays open for its own exit.
                    stack.push(other);
                    self.unpaired.closes += 1;
                }
                None => self.unpaired.closes += 1,
            },
            _ => {}
        }
    }

    /// A lost-events mark on `cpu`: what was open there is dropped.
    fn lose(&mut self, cpu: u32) {
        if let Some(stack) = self.irqs.get_mut(&cpu) {
            self.unpaired.cut_by_loss += stack.len() as u64;
            stack.clear();
        }
        for task in self.tasks.values_mut().filter(|t| t.cpu == cpu) {
            let open = [
                task.syscall.take().is_some(),
                task.fault.take().is_some(),
                task.off_since.take().is_some(),
            ];
            self.unpaired.cut_by_loss += open.iter().filter(|&&o| o).count() as u64;
        }
    }

    fn close(&mut self, i: &Interval, sink: &mut impl FnMut(&Interval)) {
        if i.end < i.start {
            // Out of order: the reader's merge is by time, so only two
            // CPUs' clocks that disagree get here.
            self.unpaired.closes += 1;
            return;
        }
        let s = self.sums.entry(i.kind).or_default();
        let length = i.end - i.start;
        s.lengths.push(length);
        s.total += u128::from(length);
        s.off_cpu += u128::from(i.off_cpu);
        sink(i);
    }

    /// The figures per kind, in kind order; what stayed unpaired (faults
    /// and interrupts still open count as unpaired opens); and the system
    /// calls entered that did not return while traced, by number
    /// (`exit_group` never does; a call still blocked at the end).
    pub fn finish(self) -> Finished {
        let mut unpaired = self.unpaired;
        let mut unreturned = BTreeMap::new();
        for t in self.tasks.values() {
            if let Some(call) = t.syscall {
                *unreturned.entry(call.nr).or_insert(0) += 1;
            }
            unpaired.opens += u64::from(t.fault.is_some());
        }
        unpaired.opens += self.irqs.values().map(|s| s.len() as u64).sum::<u64>();
        let figures = self
            .sums
            .into_iter()
            .map(|(kind, s)| KindFigures {
                kind,
                length: s.lengths.stats(),
                total: s.total,
                off_cpu: s.off_cpu,
            })
            .collect();
        Finished {
            figures,
            unpaired,
            unreturned,
        }
    }
}

/// What the builder made of a whole trace ([`Builder::finish`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Finished {
    pub figures: Vec<KindFigures>,
    pub unpaired: Unpaired,
    /// System calls entered and not returned by the end, by number.
    pub unreturned: BTreeMap<u32, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts: u64, cpu: u32, pid: i32, event: Event) -> Record {
        Record {
            ts,
            cpu,
            pid,
            event,
        }
    }

    fn build(records: &[Record]) -> (Vec<Interval>, Vec<KindFigures>, Unpaired) {
        let mut b = Builder::new();
        let mut out = Vec::new();
        for r in records {
            b.push(r, &mut |i| out.push(*i));
        }
        let f = b.finish();
        (out, f.figures, f.unpaired)
    }

    fn figures_of(figures: &[KindFigures], kind: IntervalKind) -> &KindFigures {
        figures.iter().find(|f| f.kind == kind).expect("a row")
    }

    #[test]
    fn a_blocking_call_splits_into_on_and_off_cpu_and_tasks_stay_apart() {
        use Event::*;
        let (out, figures, unpaired) = build(&[
            rec(100, 0, 7, SysEnter { nr: 0 }),
            rec(110, 1, 8, SysEnter { nr: 1 }),
            rec(150, 0, 7, SwitchOut),
            rec(160, 1, 8, SysExit { nr: 1 }),
            rec(400, 0, 7, SwitchIn),
            rec(430, 0, 7, SysExit { nr: 0 }),
        ]);
        assert_eq!(unpaired, Unpaired::default());
        let read = out
            .iter()
            .find(|i| i.kind == IntervalKind::Syscall(0))
            .unwrap();
        assert_eq!((read.start, read.end, read.off_cpu), (100, 430, 250));
        let off = out.iter().find(|i| i.kind == IntervalKind::OffCpu).unwrap();
        assert_eq!((off.pid, off.start, off.end), (7, 150, 400));
        let write = figures_of(&figures, IntervalKind::Syscall(1));
        assert_eq!((write.length.count, write.total), (1, 50));
        let read = figures_of(&figures, IntervalKind::Syscall(0));
        assert_eq!((read.total, read.off_cpu), (330, 250));
    }

    #[test]
    fn interrupts_nest_per_cpu_and_are_the_interrupted_tasks() {
        use Event::*;
        let (out, figures, unpaired) = build(&[
            rec(10, 0, 7, SysEnter { nr: 3 }),
            rec(20, 0, 7, IrqEntry { vector: 0xec }),
            rec(25, 1, 9, IrqEntry { vector: 0xfb }),
            rec(30, 0, 7, IrqEntry { vector: 0xfd }),
            rec(35, 0, 7, IrqExit { vector: 0xfd }),
            rec(40, 0, 7, IrqExit { vector: 0xec }),
            rec(45, 1, 9, IrqExit { vector: 0xfb }),
            rec(50, 0, 7, SysExit { nr: 3 }),
        ]);
        assert_eq!(unpaired, Unpaired::default());
        let kinds: Vec<(IntervalKind, u64, u64)> =
            out.iter().map(|i| (i.kind, i.start, i.end)).collect();
        assert_eq!(
            kinds,
            [
                (IntervalKind::Interrupt(0xfd), 30, 35),
                (IntervalKind::Interrupt(0xec), 20, 40),
                (IntervalKind::Interrupt(0xfb), 25, 45),
                (IntervalKind::Syscall(3), 10, 50),
            ]
        );
        assert_eq!(out[2].pid, 9);
        // The call's length holds its interrupts: rows are not disjoint.
        assert_eq!(figures_of(&figures, IntervalKind::Syscall(3)).total, 40);
    }

    #[test]
    fn faults_are_timed_to_their_handling_and_sorted_by_kind() {
        use Event::*;
        assert_eq!(FaultKind::from_error_code(0x4), FaultKind::Read);
        assert_eq!(FaultKind::from_error_code(0x6), FaultKind::Write);
        assert_eq!(FaultKind::from_error_code(0x7), FaultKind::WriteProtect);
        assert_eq!(FaultKind::from_error_code(0x15), FaultKind::Exec);
        assert_eq!(FaultKind::from_error_code(0x5), FaultKind::Protection);
        let (out, _, unpaired) = build(&[
            rec(10, 0, 7, FaultUser { error_code: 0x6 }),
            rec(90, 0, 7, FaultDone),
            // A return with no user fault open: a kernel fault's, ignored.
            rec(95, 0, 7, FaultDone),
            rec(100, 0, 7, FaultUser { error_code: 0x7 }),
            rec(130, 0, 7, FaultDone),
        ]);
        assert_eq!(unpaired, Unpaired::default());
        assert_eq!(
            out.iter()
                .map(|i| (i.kind, i.end - i.start))
                .collect::<Vec<_>>(),
            [
                (IntervalKind::Fault(FaultKind::Write), 80),
                (IntervalKind::Fault(FaultKind::WriteProtect), 30)
            ]
        );
    }

    #[test]
    fn what_cannot_be_paired_is_counted_not_guessed() {
        use Event::*;
        let (out, _, unpaired) = build(&[
            // Tracing began inside a call.
            rec(5, 0, 7, SysExit { nr: 0 }),
            // An exit of another call: both sides unpaired.
            rec(10, 0, 7, SysEnter { nr: 1 }),
            rec(20, 0, 7, SysExit { nr: 2 }),
            // exit_group: never returns; then the trace ends.
            rec(30, 0, 7, SysEnter { nr: 231 }),
            rec(40, 0, 7, SysEnter { nr: 0 }),
            // An interrupt exit with nothing open, and one not innermost.
            rec(50, 1, 8, IrqExit { vector: 1 }),
            rec(60, 1, 8, IrqEntry { vector: 2 }),
            rec(70, 1, 8, IrqExit { vector: 3 }),
            rec(80, 1, 8, IrqExit { vector: 2 }),
        ]);
        // Only the interrupt that closed, at its own exit, not the other's.
        assert_eq!(
            out.iter()
                .map(|i| (i.kind, i.start, i.end))
                .collect::<Vec<_>>(),
            [(IntervalKind::Interrupt(2), 60, 80)]
        );
        assert_eq!(
            unpaired,
            Unpaired {
                // 5's exit, 20's exit, 50's and 70's interrupt exits.
                closes: 4,
                // 10's call, 30's re-opened by 40 (40's, left open, is
                // an unreturned call).
                opens: 2,
                cut_by_loss: 0,
                inferred_switch_ins: 0,
            }
        );
    }

    #[test]
    fn a_fault_opened_twice_counts_the_first_and_times_the_second() {
        use Event::*;
        let (out, _, unpaired) = build(&[
            rec(10, 0, 7, FaultUser { error_code: 0x4 }),
            rec(20, 0, 7, FaultUser { error_code: 0x6 }),
            rec(50, 0, 7, FaultDone),
        ]);
        assert_eq!(
            out.iter().map(|i| (i.kind, i.start)).collect::<Vec<_>>(),
            [(IntervalKind::Fault(FaultKind::Write), 20)]
        );
        assert_eq!(unpaired.opens, 1);
        let names: Vec<&str> = [
            FaultKind::Read,
            FaultKind::Write,
            FaultKind::WriteProtect,
            FaultKind::Exec,
            FaultKind::Protection,
        ]
        .map(FaultKind::name)
        .to_vec();
        assert_eq!(
            names,
            ["read", "write", "write-protect", "exec", "protection"]
        );
    }

    #[test]
    fn a_missing_switch_in_ends_at_the_tasks_next_event() {
        use Event::*;
        let (out, figures, unpaired) = build(&[
            rec(10, 1, 7, SysEnter { nr: 61 }),
            rec(20, 1, 7, SwitchOut),
            // No switch in (from idle): its exit is the first sign.
            rec(500, 1, 7, SysExit { nr: 61 }),
            rec(600, 0, 7, SwitchOut),
            // An interrupt in its context also says it runs.
            rec(700, 0, 7, IrqEntry { vector: 0xec }),
            rec(710, 0, 7, IrqExit { vector: 0xec }),
            // Out twice with nothing between: not guessed.
            rec(800, 0, 7, SwitchOut),
            rec(900, 0, 7, SwitchOut),
            rec(950, 0, 7, SwitchIn),
        ]);
        let off: Vec<(u64, u64)> = out
            .iter()
            .filter(|i| i.kind == IntervalKind::OffCpu)
            .map(|i| (i.start, i.end))
            .collect();
        assert_eq!(off, [(20, 500), (600, 700), (900, 950)]);
        let call = figures_of(&figures, IntervalKind::Syscall(61));
        assert_eq!((call.total, call.off_cpu), (490, 480));
        assert_eq!(unpaired.inferred_switch_ins, 2);
        assert_eq!(unpaired.opens, 1);
    }

    #[test]
    fn a_return_whose_number_was_reset_closes_the_open_call() {
        use Event::*;
        let (out, _, unpaired) = build(&[
            rec(10, 0, 7, SysEnter { nr: 15 }),
            rec(30, 0, 7, SysExit { nr: RESET_NR }),
            // Nothing open: still a close without an open.
            rec(40, 0, 7, SysExit { nr: RESET_NR }),
        ]);
        assert_eq!(
            out.iter()
                .map(|i| (i.kind, i.start, i.end))
                .collect::<Vec<_>>(),
            [(IntervalKind::Syscall(15), 10, 30)]
        );
        assert_eq!(unpaired.closes, 1);
    }

    #[test]
    fn what_is_open_at_the_end_is_counted_open_and_calls_by_number() {
        use Event::*;
        let records = [
            rec(10, 0, 7, SysEnter { nr: 0 }),
            rec(20, 0, 7, FaultUser { error_code: 0x4 }),
            rec(30, 1, 8, IrqEntry { vector: 0xec }),
            rec(40, 1, 8, IrqEntry { vector: 0xfd }),
            rec(50, 1, 9, SysEnter { nr: 231 }),
            rec(60, 0, 10, SysEnter { nr: 231 }),
        ];
        let (out, _, unpaired) = build(&records);
        assert!(out.is_empty());
        assert_eq!(unpaired.opens, 3, "a fault, two interrupts");
        let mut b = Builder::new();
        records.iter().for_each(|r| b.push(r, &mut |_| {}));
        let unreturned: Vec<(u32, u64)> = b.finish().unreturned.into_iter().collect();
        assert_eq!(unreturned, [(0, 1), (231, 2)]);
    }

    #[test]
    fn a_lost_mark_cuts_only_what_was_open_on_its_cpu() {
        use Event::*;
        let (out, _, unpaired) = build(&[
            rec(10, 0, 7, SysEnter { nr: 0 }),
            rec(12, 0, 7, IrqEntry { vector: 0xec }),
            rec(15, 1, 8, SysEnter { nr: 1 }),
            rec(20, 0, -1, Lost),
            rec(30, 0, 7, SysExit { nr: 0 }),
            rec(35, 1, 8, SysExit { nr: 1 }),
        ]);
        assert_eq!(
            out.iter().map(|i| i.kind).collect::<Vec<_>>(),
            [IntervalKind::Syscall(1)]
        );
        assert_eq!(
            unpaired,
            Unpaired {
                closes: 1,
                opens: 0,
                cut_by_loss: 2,
                inferred_switch_ins: 0,
            }
        );
    }

    #[test]
    fn an_interval_that_ends_before_it_starts_is_refused() {
        use Event::*;
        let (out, figures, unpaired) = build(&[
            rec(100, 0, 7, SysEnter { nr: 0 }),
            rec(90, 1, 7, SysExit { nr: 0 }),
        ]);
        assert!(out.is_empty() && figures.is_empty());
        assert_eq!(unpaired.closes, 1);
        // One that ends at its start (two events within a TSC quantum) is
        // an interval of 0.
        let (out, _, unpaired) = build(&[
            rec(100, 0, 7, SysEnter { nr: 0 }),
            rec(100, 0, 7, SysExit { nr: 0 }),
        ]);
        assert_eq!((out.len(), out[0].end - out[0].start), (1, 0));
        assert_eq!(unpaired, Unpaired::default());
    }

    #[test]
    fn figures_are_per_kind_with_every_length_counted() {
        use Event::*;
        let mut records = Vec::new();
        for k in 0..100u64 {
            records.push(rec(1000 * k, 0, 7, SysEnter { nr: 39 }));
            records.push(rec(1000 * k + 10 + k, 0, 7, SysExit { nr: 39 }));
        }
        let (_, figures, _) = build(&records);
        let f = figures_of(&figures, IntervalKind::Syscall(39));
        assert_eq!(f.length.count, 100);
        assert_eq!((f.length.min, f.length.max), (10, 109));
        assert_eq!(f.total, (10..110).sum::<u128>());
        assert_eq!(f.length.median, 59);
    }
}
