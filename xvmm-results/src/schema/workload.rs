//! The `workload` block of a report: where a whole program's time in the
//! kernel went (`xperf workload -- CMD`), per system call, user page fault
//! kind, interrupt vector and time off CPU, from the kernel's own
//! tracepoints (no patched kernel). Times are TSC ticks of the `x86-tsc`
//! trace clock; the report's `host.tsc_khz` turns them into time.

use crate::Stats;
use serde::{Deserialize, Serialize};

/// The families of rows, in the order tables show them.
pub const FAMILIES: [&str; 4] = [
    FAMILY_SYSCALL,
    FAMILY_FAULT,
    FAMILY_INTERRUPT,
    FAMILY_OFF_CPU,
];
pub const FAMILY_SYSCALL: &str = "syscall";
pub const FAMILY_FAULT: &str = "fault";
pub const FAMILY_INTERRUPT: &str = "interrupt";
pub const FAMILY_OFF_CPU: &str = "off-cpu";

/// What `xperf workload` recorded of one command.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Workload {
    /// The command and its arguments, as given.
    pub command: Vec<String>,
    pub ended: Ended,
    /// From the command's start (the gate opening) to its end, TSC ticks.
    pub wall_ticks: u64,
    /// The command's user and system CPU time with every descendant it
    /// waited for (`wait4`'s rusage), microseconds.
    pub user_us: u64,
    pub system_us: u64,
    /// Tasks followed: the command, and every process and thread it and
    /// they created.
    pub tasks: u64,
    /// One row per system call, fault kind, interrupt vector, and off CPU.
    pub rows: Vec<Row>,
    /// Trace records read (of the events below), and pages' lost events.
    pub events: u64,
    pub lost_events: u64,
    /// What could not be paired into an interval, by cause.
    pub unpaired: Unpaired,
    /// How a user fault's end was found: the probe used, or why faults are
    /// counted and not timed.
    pub fault_end: String,
    /// The guest TSC when the command was let go (0: not recorded); its
    /// end is `start_tsc + wall_ticks`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_tsc: u64,
    /// Intervals the guest sent its VMM (`xvmm --workload`), and why the
    /// stream stopped early if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streamed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_stopped: Option<String>,
    /// Host exits joined with the intervals (a VM run traced by xvmm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exits: Option<WorkloadExits>,
}

/// How the command ended.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Ended {
    /// Its exit status, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// xperf stopped it: `--timeout`, or a stop signal (named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
}

impl Ended {
    /// "exit 0", "killed by signal 9 (stopped: timeout after 5 s)".
    pub fn describe(&self) -> String {
        let how = match (self.code, self.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            (None, None) => "not ended".into(),
        };
        match &self.stopped_by {
            Some(why) => format!("{how} (stopped: {why})"),
            None => how,
        }
    }

    /// It exited by itself with status 0.
    pub fn succeeded(&self) -> bool {
        self.code == Some(0) && self.stopped_by.is_none()
    }
}

/// One kind of interval: each one's length, and their sum.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// One of [`FAMILIES`].
    pub family: String,
    /// The call's name (`read`, `syscall_999` for a number the table lacks),
    /// the fault's kind (`read`, `write`, `write-protect`, `exec`,
    /// `protection`), the interrupt's tracepoint (`local_timer`), `off-cpu`.
    pub name: String,
    /// Each interval's length, start to end, TSC ticks.
    pub length: Stats,
    /// The lengths summed.
    pub total_ticks: u64,
    /// Of a system call: the time its task spent off CPU inside it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub off_cpu_ticks: u64,
    /// How many began and were not timed: of a fault kind whose end could
    /// not be found, every one (then `length` is empty); of a system call,
    /// those that never returned while traced (`exit_group` never does).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub untimed: u64,
    /// The kind's code in the guest's stream of intervals
    /// (`stats::workload::IntervalKind::code`), by which the VMM finds the
    /// row of each interval it joins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u64>,
}

/// A VM workload's host exits joined with its guest intervals (`xvmm
/// --kernel --workload`): each exit whose guest time falls inside an
/// interval of its vCPU goes to the innermost such interval's row (an
/// interrupt inside a system call takes it); the rest of the command's
/// run is user mode, idle, or xperf. Exit times are host ticks scaled to
/// guest ticks by the timeline's ratio (a duration, not a difference of
/// the two clocks).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct WorkloadExits {
    /// Intervals the guest streamed and the VMM joined.
    pub intervals: u64,
    /// Stream chunks refused (malformed) or dropped (beyond the VMM's
    /// bound), and the first reason.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunks_refused: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_because: Option<String>,
    /// Whether the timeline the join used is verified; when not, the
    /// attribution is shown marked as such.
    pub timeline_verified: bool,
    /// Per row with exits inside its intervals.
    pub rows: Vec<RowExits>,
    /// Exits from the command's start to its end outside every interval:
    /// in user mode, idle, or in xperf's own work.
    pub outside: Vec<ReasonExits>,
    /// Exits of the run before the command started or after it ended (the
    /// boot, xperf's set-up and report), counted, not attributed.
    pub outside_window: u64,
    /// Intervals that came too late for the join's order of their ends
    /// (the guest's disorder beyond the VMM's window), not joined.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub intervals_late: u64,
    /// Exits that came after a later exit of their vCPU beyond what the
    /// join reorders, joined where they would have been in order.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub exits_misordered: u64,
}

/// The exits inside one row's intervals.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct RowExits {
    pub family: String,
    pub name: String,
    pub reasons: Vec<ReasonExits>,
}

/// Exits of one reason: how many and their time, guest ticks.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct ReasonExits {
    pub reason: String,
    pub count: u64,
    pub ticks: u64,
}

impl RowExits {
    /// Exit time inside the row, guest ticks.
    pub fn ticks(&self) -> u64 {
        self.reasons.iter().map(|r| r.ticks).sum()
    }

    pub fn count(&self) -> u64 {
        self.reasons.iter().map(|r| r.count).sum()
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// What could not be paired, by cause (`stats::workload::Builder` counts
/// it; the report carries it).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unpaired {
    /// A close with no open (tracing began inside it, or its open was lost;
    /// a forked child's first return).
    pub closes: u64,
    /// A fault or an interrupt still open at the end, an open replaced
    /// before it closed, or a task switched out twice with nothing between
    /// (a call entered and never returned is counted in its row instead).
    pub opens: u64,
    /// Open intervals a lost-events mark on their CPU dropped.
    pub cut_by_loss: u64,
    /// Times off CPU closed by the task's next event, not by its switch
    /// in: a kernel may record no switch away from the idle task (Linux
    /// 6.18 under PVM records none on its second CPU), so the task's own
    /// next event is the first sign it runs again. Such a time off CPU
    /// ends there: later by the few microseconds from its switch in.
    #[serde(default)]
    pub inferred_switch_ins: u64,
}

impl Workload {
    /// The rows of one family, in the order they are held.
    pub fn family<'a>(&'a self, family: &'a str) -> impl Iterator<Item = &'a Row> + 'a {
        self.rows.iter().filter(move |r| r.family == family)
    }

    /// The summed time of a family's rows, TSC ticks.
    pub fn family_total(&self, family: &str) -> u64 {
        self.family(family)
            .fold(0u64, |sum, r| sum.saturating_add(r.total_ticks))
    }

    /// The row of one family and name.
    pub fn row(&self, family: &str, name: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.family == family && r.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(family: &str, name: &str, total: u64) -> Row {
        Row {
            family: family.into(),
            name: name.into(),
            total_ticks: total,
            ..Row::default()
        }
    }

    #[test]
    fn families_sum_their_own_rows() {
        let w = Workload {
            rows: vec![
                row(FAMILY_SYSCALL, "read", 10),
                row(FAMILY_SYSCALL, "write", u64::MAX),
                row(FAMILY_FAULT, "read", 7),
            ],
            ..Workload::default()
        };
        assert_eq!(w.family_total(FAMILY_SYSCALL), u64::MAX);
        assert_eq!(w.family_total(FAMILY_FAULT), 7);
        assert_eq!(w.family_total(FAMILY_OFF_CPU), 0);
        assert_eq!(w.row(FAMILY_FAULT, "read").unwrap().total_ticks, 7);
        assert!(w.row(FAMILY_FAULT, "write").is_none());
    }

    #[test]
    fn an_end_says_how_and_why() {
        let exit = |c| Ended {
            code: Some(c),
            ..Ended::default()
        };
        assert_eq!(exit(0).describe(), "exit 0");
        assert!(exit(0).succeeded() && !exit(3).succeeded());
        let killed = Ended {
            signal: Some(9),
            stopped_by: Some("timeout after 5 s".into()),
            ..Ended::default()
        };
        assert_eq!(
            killed.describe(),
            "killed by signal 9 (stopped: timeout after 5 s)"
        );
        assert!(!killed.succeeded());
        assert_eq!(Ended::default().describe(), "not ended");
    }

    #[test]
    fn the_json_reads_back_and_leaves_empty_counts_out() {
        let w = Workload {
            command: vec!["true".into()],
            rows: vec![row(FAMILY_OFF_CPU, "off-cpu", 5)],
            ..Workload::default()
        };
        let text = serde_json::to_string(&w).unwrap();
        assert!(
            !text.contains("untimed") && !text.contains("off_cpu_ticks"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Workload>(&text).unwrap(), w);
    }
}
