//! A workload in a VM against the same workload on bare metal (`xvmm
//! --kernel --workload P --baseline BM.json`, or `xvmm compare` of the two
//! files): per kind of kernel interval, the VM's extra time, split into
//! - what more or fewer intervals add, at bare metal's mean length (not of
//!   time off CPU, whose count follows the scheduler);
//! - the exits inside the VM's intervals of that kind (the host's time);
//! - the rest: the VM's intervals last longer with no exit to show for it
//!   (a guest's TLB and cache misses, two-level page walks, or the guest
//!   kernel doing other work).
//!
//! The three parts add up to the difference of the kinds' summed times, the
//! statistic they name; medians stand beside it, undecomposed. A system
//! call's time is its time on CPU (its time blocked is the off-CPU row's),
//! so each row's exits are those inside the time it counts. An interrupt
//! inside a call is in both rows' times and in the interrupt's exits only:
//! kinds of one family add up, families do not add to the wall time.

use super::clocks::{Clocks, DiffUnit};
use crate::schema::workload::{Row, Workload, FAMILIES, FAMILY_OFF_CPU, FAMILY_SYSCALL};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One workload on two machines, every time in the comparison's unit
/// (`Comparison::diff_unit`: each side's ticks, or ns over its own rate).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct WorkloadComparison {
    pub vm_command: Vec<String>,
    pub bare_command: Vec<String>,
    /// How each side's command ended ("exit 0").
    pub vm_ended: String,
    pub bare_ended: String,
    pub vm_wall: f64,
    pub bare_wall: f64,
    /// Whether the VM run's exits were joined with its intervals; when not,
    /// every exits part is 0 and its time is in the rest.
    pub exits_joined: bool,
    /// Whether that join's timeline was verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_verified: Option<bool>,
    /// Exit time while the VM's command ran, summed over its vCPUs: inside
    /// intervals of every kind, and outside every interval (user mode, idle).
    pub vm_exit_time: f64,
    pub vm_exit_time_outside: f64,
    /// One row per kind timed on either side, largest extra time first.
    pub rows: Vec<KindComparison>,
    pub notes: Vec<String>,
}

/// One kind of interval (`syscall read`), VM against bare metal.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct KindComparison {
    pub family: String,
    pub name: String,
    /// Intervals timed (those never closed are not in the times).
    pub vm_count: u64,
    pub bare_count: u64,
    /// The intervals' summed time (a system call's time on CPU).
    pub vm_time: f64,
    pub bare_time: f64,
    /// The median interval, undecomposed (absent: none timed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_median: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bare_median: Option<f64>,
    /// `vm_time - bare_time`, and its three parts.
    pub diff: f64,
    /// `(vm_count - bare_count)` times bare metal's mean interval (a kind
    /// bare metal lacks: the VM's time less its exits; time off CPU: 0).
    pub count_part: f64,
    /// The host's time of the exits inside the VM's intervals.
    pub exits_part: f64,
    /// What remains: `diff - count_part - exits_part`.
    pub rest: f64,
    /// Exits inside the VM's intervals.
    pub vm_exits: u64,
}

impl KindComparison {
    /// "syscall read"; "off-cpu" for the family of one kind.
    pub fn label(&self) -> String {
        if self.family == self.name {
            return self.family.clone();
        }
        format!("{} {}", self.family, self.name)
    }
}

/// A family's kinds summed (kinds of one family do not overlap).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FamilySums {
    pub family: &'static str,
    pub vm_time: f64,
    pub bare_time: f64,
    pub diff: f64,
    pub count_part: f64,
    pub exits_part: f64,
    pub rest: f64,
}

impl WorkloadComparison {
    /// Each family's rows summed, in [`FAMILIES`] order; families with no
    /// row are left out.
    pub fn families(&self) -> Vec<FamilySums> {
        FAMILIES
            .iter()
            .filter_map(|&family| {
                let rows: Vec<&KindComparison> =
                    self.rows.iter().filter(|r| r.family == family).collect();
                (!rows.is_empty()).then(|| FamilySums {
                    family,
                    vm_time: rows.iter().map(|r| r.vm_time).sum(),
                    bare_time: rows.iter().map(|r| r.bare_time).sum(),
                    diff: rows.iter().map(|r| r.diff).sum(),
                    count_part: rows.iter().map(|r| r.count_part).sum(),
                    exits_part: rows.iter().map(|r| r.exits_part).sum(),
                    rest: rows.iter().map(|r| r.rest).sum(),
                })
            })
            .collect()
    }
}

/// The time a row counts, ticks: a system call's on CPU, else all of it.
fn counted_ticks(row: &Row) -> u64 {
    if row.family == FAMILY_SYSCALL {
        row.total_ticks.saturating_sub(row.off_cpu_ticks)
    } else {
        row.total_ticks
    }
}

/// One side of a kind: intervals timed, time and median in the unit.
#[derive(Debug, Clone, Copy, Default)]
struct Side {
    count: u64,
    time: f64,
    median: Option<f64>,
}

impl Side {
    fn of(row: Option<&Row>, per_tick: f64) -> Side {
        let Some(row) = row.filter(|r| r.length.count > 0) else {
            return Side::default();
        };
        Side {
            count: row.length.count,
            time: counted_ticks(row) as f64 * per_tick,
            median: Some(row.length.median as f64 * per_tick),
        }
    }
}

/// The difference of one kind and its parts.
fn kind_row(family: &str, name: &str, vm: Side, bare: Side, exits: (u64, f64)) -> KindComparison {
    let diff = vm.time - bare.time;
    let (vm_exits, exits_part) = exits;
    let count_part = if family == FAMILY_OFF_CPU {
        // How often a task is switched out follows the scheduler, not the
        // work, and its times off CPU range over orders of magnitude: a
        // mean of one run's times says nothing of the other's.
        0.0
    } else if bare.count == 0 {
        // A kind bare metal never entered: all of it is new intervals.
        vm.time - exits_part
    } else {
        (vm.count as f64 - bare.count as f64) * (bare.time / bare.count as f64)
    };
    KindComparison {
        family: family.into(),
        name: name.into(),
        vm_count: vm.count,
        bare_count: bare.count,
        vm_time: vm.time,
        bare_time: bare.time,
        vm_median: vm.median,
        bare_median: bare.median,
        diff,
        count_part,
        exits_part,
        rest: diff - count_part - exits_part,
        vm_exits,
    }
}

/// The kinds of both sides, each once: the VM's in its order, then bare
/// metal's others.
fn kinds<'a>(vm: &'a Workload, bare: &'a Workload) -> Vec<(&'a str, &'a str)> {
    let mut kinds: Vec<(&str, &str)> = Vec::new();
    for r in vm.rows.iter().chain(&bare.rows) {
        let kind = (r.family.as_str(), r.name.as_str());
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

/// Whether two commands are one: the same arguments, and programs of one
/// file name (xvmm runs its copy from `/workload/`).
fn same_command(a: &[String], b: &[String]) -> bool {
    let program = |c: &[String]| {
        c.first()
            .map(|p| Path::new(p).file_name().map(|n| n.to_owned()))
    };
    a.len() == b.len() && program(a) == program(b) && a.get(1..) == b.get(1..)
}

fn notes(vm: &Workload, bare: &Workload, unit: DiffUnit) -> Vec<String> {
    let mut notes = Vec::new();
    if !same_command(&vm.command, &bare.command) {
        notes.push(format!(
            "the commands differ (VM: {:?}; bare metal: {:?}): the kinds compare different work",
            vm.command, bare.command
        ));
    }
    for (side, w) in [("VM", vm), ("bare metal", bare)] {
        if !w.ended.succeeded() {
            notes.push(format!("{side}: the command ended {}", w.ended.describe()));
        }
        if w.lost_events > 0 {
            notes.push(format!(
                "{side}: the trace lost {} events: some intervals are missing from its times",
                w.lost_events
            ));
        }
    }
    match &vm.exits {
        None => notes.push(
            "the VM file has no exits joined with its intervals (xvmm --kernel --workload \
             joins them): its exits parts are 0 and their time is in the rest"
                .into(),
        ),
        Some(x) if !x.timeline_verified => notes.push(
            "the VM run's timeline was NOT verified: its exits may be placed in the wrong \
             intervals"
                .into(),
        ),
        Some(_) => {}
    }
    if unit == DiffUnit::Ns {
        notes
            .push("the TSC rates differ: times are ns, each side's ticks over its own rate".into());
    }
    notes
}

/// The comparison of two files' workloads, the VM's first; `clocks` turns
/// each side's ticks into the comparison's unit.
pub(crate) fn compare_workloads(
    vm: &Workload,
    bare: &Workload,
    clocks: Clocks,
) -> WorkloadComparison {
    let exits_of = |family: &str, name: &str| -> (u64, f64) {
        vm.exits
            .as_ref()
            .and_then(|x| x.rows.iter().find(|r| r.family == family && r.name == name))
            .map_or((0, 0.0), |r| (r.count(), r.ticks() as f64 * clocks.vm))
    };
    let mut rows: Vec<KindComparison> = kinds(vm, bare)
        .into_iter()
        .map(|(family, name)| {
            let v = Side::of(vm.row(family, name), clocks.vm);
            let b = Side::of(bare.row(family, name), clocks.bare);
            kind_row(family, name, v, b, exits_of(family, name))
        })
        .filter(|r| r.vm_count + r.bare_count > 0)
        .collect();
    rows.sort_by(|a, b| {
        b.diff
            .total_cmp(&a.diff)
            .then_with(|| a.label().cmp(&b.label()))
    });
    let (inside, outside) = vm.exits.as_ref().map_or((0, 0), |x| {
        let inside = x
            .rows
            .iter()
            .map(|r| r.ticks())
            .fold(0, u64::saturating_add);
        let outside = x
            .outside
            .iter()
            .map(|r| r.ticks)
            .fold(0, u64::saturating_add);
        (inside, outside)
    });
    WorkloadComparison {
        vm_command: vm.command.clone(),
        bare_command: bare.command.clone(),
        vm_ended: vm.ended.describe(),
        bare_ended: bare.ended.describe(),
        vm_wall: vm.wall_ticks as f64 * clocks.vm,
        bare_wall: bare.wall_ticks as f64 * clocks.bare,
        exits_joined: vm.exits.is_some(),
        timeline_verified: vm.exits.as_ref().map(|x| x.timeline_verified),
        vm_exit_time: inside.saturating_add(outside) as f64 * clocks.vm,
        vm_exit_time_outside: outside as f64 * clocks.vm,
        rows,
        notes: notes(vm, bare, clocks.unit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::workload::{
        Ended, ReasonExits, RowExits, WorkloadExits, FAMILY_FAULT, FAMILY_INTERRUPT, FAMILY_OFF_CPU,
    };
    use crate::Stats;

    fn row(family: &str, name: &str, count: u64, median: u64, total: u64) -> Row {
        Row {
            family: family.into(),
            name: name.into(),
            length: Stats {
                count,
                median,
                ..Stats::default()
            },
            total_ticks: total,
            ..Row::default()
        }
    }

    fn workload(command: &str, rows: Vec<Row>) -> Workload {
        Workload {
            command: vec![command.into(), "-c".into(), "x".into()],
            ended: Ended {
                code: Some(0),
                ..Ended::default()
            },
            wall_ticks: 10_000,
            rows,
            ..Workload::default()
        }
    }

    fn exits(family: &str, name: &str, count: u64, ticks: u64) -> RowExits {
        RowExits {
            family: family.into(),
            name: name.into(),
            reasons: vec![ReasonExits {
                reason: "msr".into(),
                count,
                ticks,
            }],
        }
    }

    const ONE_CLOCK: Clocks = Clocks {
        unit: DiffUnit::Ticks,
        vm: 1.0,
        bare: 1.0,
    };

    fn find<'c>(c: &'c WorkloadComparison, label: &str) -> &'c KindComparison {
        c.rows
            .iter()
            .find(|r| r.label() == label)
            .unwrap_or_else(|| panic!("no {label} in {:?}", c.rows))
    }

    /// A call entered more often, each slower, with exits inside: the three
    /// parts are each what they say and add up to the difference.
    #[test]
    fn a_kinds_extra_time_splits_into_count_exits_and_rest() {
        let mut vm = workload(
            "/workload/busybox",
            vec![
                row(FAMILY_SYSCALL, "read", 12, 150, 1800),
                row(FAMILY_SYSCALL, "write", 1, 10, 10),
            ],
        );
        vm.rows[0].off_cpu_ticks = 300; // on CPU: 1500
        vm.exits = Some(WorkloadExits {
            timeline_verified: true,
            rows: vec![exits(FAMILY_SYSCALL, "read", 3, 240)],
            outside: vec![ReasonExits {
                reason: "hlt".into(),
                count: 2,
                ticks: 60,
            }],
            ..WorkloadExits::default()
        });
        let bare = workload(
            "/bin/busybox",
            vec![row(FAMILY_SYSCALL, "read", 10, 100, 1000)],
        );
        let c = compare_workloads(&vm, &bare, ONE_CLOCK);
        let r = find(&c, "syscall read");
        assert_eq!((r.vm_time, r.bare_time, r.diff), (1500.0, 1000.0, 500.0));
        // Two more calls at bare metal's mean of 100.
        assert_eq!(r.count_part, 200.0);
        assert_eq!((r.exits_part, r.vm_exits), (240.0, 3));
        assert_eq!(r.rest, 60.0);
        assert_eq!(r.count_part + r.exits_part + r.rest, r.diff);
        assert_eq!((r.vm_median, r.bare_median), (Some(150.0), Some(100.0)));
        assert_eq!((c.vm_exit_time, c.vm_exit_time_outside), (300.0, 60.0));
        // A kind of the same family with no exits of its own has none.
        let write = find(&c, "syscall write");
        assert_eq!((write.exits_part, write.vm_exits), (0.0, 0));
        assert_eq!(c.timeline_verified, Some(true));
        // One program under two paths is one command.
        assert!(c.notes.is_empty(), "{:?}", c.notes);
    }

    /// Kinds on one side only: a new kind's time is all new intervals and
    /// its exits; a vanished one's is all count. Rows run largest extra
    /// time first, and every row adds up.
    #[test]
    fn kinds_on_one_side_only_are_counted_whole() {
        let mut vm = workload(
            "p",
            vec![
                row(FAMILY_INTERRUPT, "local_timer", 4, 50, 400),
                row(FAMILY_FAULT, "read", 5, 20, 100),
            ],
        );
        vm.exits = Some(WorkloadExits {
            timeline_verified: true,
            rows: vec![exits(FAMILY_INTERRUPT, "local_timer", 4, 150)],
            ..WorkloadExits::default()
        });
        let bare = workload(
            "p",
            vec![
                row(FAMILY_FAULT, "read", 5, 20, 100),
                row(FAMILY_OFF_CPU, "off-cpu", 2, 300, 700),
            ],
        );
        let c = compare_workloads(&vm, &bare, ONE_CLOCK);
        let labels: Vec<String> = c.rows.iter().map(KindComparison::label).collect();
        assert_eq!(labels, ["interrupt local_timer", "fault read", "off-cpu"]);
        let timer = find(&c, "interrupt local_timer");
        assert_eq!(
            (timer.count_part, timer.exits_part, timer.rest),
            (250.0, 150.0, 0.0)
        );
        let off = find(&c, "off-cpu");
        // Time off CPU is not split by count: all of it is the rest.
        assert_eq!((off.diff, off.count_part, off.rest), (-700.0, 0.0, -700.0));
        assert_eq!(off.vm_median, None);
        // Faults counted and never timed on one side are no interval there.
        let mut untimed = vm.clone();
        untimed.rows[1] = Row {
            untimed: 5,
            ..row(FAMILY_FAULT, "read", 0, 0, 0)
        };
        let c = compare_workloads(&untimed, &bare, ONE_CLOCK);
        let fault = find(&c, "fault read");
        assert_eq!((fault.vm_count, fault.vm_median), (0, None));
        assert_eq!((fault.count_part, fault.rest), (-100.0, 0.0));
        // Untimed on both sides: no row at all.
        let mut bare_untimed = bare.clone();
        bare_untimed.rows[0] = untimed.rows[1].clone();
        let c = compare_workloads(&untimed, &bare_untimed, ONE_CLOCK);
        assert!(
            c.rows.iter().all(|r| r.family != FAMILY_FAULT),
            "{:?}",
            c.rows
        );
        let c = compare_workloads(&vm, &bare, ONE_CLOCK);
        let fault = find(&c, "fault read");
        assert_eq!((fault.diff, fault.count_part, fault.rest), (0.0, 0.0, 0.0));
        for r in &c.rows {
            assert_eq!(r.count_part + r.exits_part + r.rest, r.diff, "{r:?}");
        }
        let families = c.families();
        let names: Vec<&str> = families.iter().map(|f| f.family).collect();
        assert_eq!(names, ["fault", "interrupt", "off-cpu"]);
        assert_eq!(families[1].exits_part, 150.0);
    }

    /// Two TSC rates: each side's ticks go over its own rate, never one
    /// clock's ticks minus the other's.
    #[test]
    fn two_rates_are_compared_in_nanoseconds() {
        // 2 GHz VM, 4 GHz bare metal: 2000 VM ticks and 4000 bare ticks are
        // both 1000 ns.
        let mut vm = workload("p", vec![row(FAMILY_SYSCALL, "write", 1, 2000, 2000)]);
        vm.exits = Some(WorkloadExits {
            rows: vec![exits(FAMILY_SYSCALL, "write", 1, 400)],
            outside: exits("", "", 1, 100).reasons,
            ..WorkloadExits::default()
        });
        let bare = workload("p", vec![row(FAMILY_SYSCALL, "write", 1, 4000, 4000)]);
        let clocks = Clocks::of(2_000_000, 4_000_000);
        let c = compare_workloads(&vm, &bare, clocks);
        let r = find(&c, "syscall write");
        assert_eq!((r.vm_time, r.bare_time, r.diff), (1000.0, 1000.0, 0.0));
        assert_eq!((r.vm_median, r.bare_median), (Some(1000.0), Some(1000.0)));
        assert_eq!((r.exits_part, r.rest), (200.0, -200.0));
        assert_eq!((c.vm_exit_time, c.vm_exit_time_outside), (250.0, 50.0));
        assert_eq!((c.vm_wall, c.bare_wall), (5000.0, 2500.0));
        assert!(c.notes.iter().any(|n| n.contains("ns")), "{:?}", c.notes);
    }

    /// What makes the figures less than they look is said: other work, a
    /// failed command, lost events, exits not joined or not placed.
    #[test]
    fn what_the_comparison_cannot_vouch_for_is_noted() {
        let mut vm = workload("/workload/gzip", vec![]);
        vm.lost_events = 7;
        let mut bare = workload("/bin/busybox", vec![]);
        bare.ended = Ended {
            signal: Some(9),
            ..Ended::default()
        };
        let c = compare_workloads(&vm, &bare, ONE_CLOCK);
        let all = c.notes.join("\n");
        for expected in [
            "commands differ",
            "killed by signal 9",
            "lost 7",
            "no exits joined",
        ] {
            assert!(all.contains(expected), "no {expected:?} in {all}");
        }
        assert!(!c.exits_joined);
        vm.exits = Some(WorkloadExits::default());
        let c = compare_workloads(&vm, &bare, ONE_CLOCK);
        assert!(
            c.notes.iter().any(|n| n.contains("NOT verified")),
            "{:?}",
            c.notes
        );
        assert!(!same_command(&["a".into()], &["a".into(), "b".into()]));
        assert!(!same_command(
            &["/x/a".into(), "1".into()],
            &["/y/a".into(), "2".into()]
        ));
    }
}
