//! A workload in a VM against bare metal as text: the wall times, then per
//! kind of interval the VM's extra time and its three parts, then the
//! families summed, then which kind carries most of the extra time.

use super::document::Table;
use crate::compare::{Comparison, DiffUnit};
use crate::schema::workload::FAMILY_OFF_CPU;
use crate::stats::workload_compare::{KindComparison, WorkloadComparison};
use std::fmt::Write as _;
use xvmm_host::escape::visible;

/// Kinds shown in the text at most; the rest are counted.
pub const MAX_KINDS: usize = 30;

/// How the parts add up, under the table.
const PARTS: &str = "  diff = VM time - bare-metal time = count + exits + rest, exactly (a call's \
time is its time on CPU)
  count = (VM intervals - bare-metal intervals) x bare metal's mean interval (0 for time off \
CPU, whose count follows the scheduler)
  exits = the host's time of the exits inside the VM's intervals of the kind
  rest = the VM's intervals last longer with no exit inside: TLB and cache misses, two-level \
page walks, other work
  medians stand beside, not decomposed; kinds of one family add up, families overlap \
(an interrupt inside a call is in both)
";

/// A time of the comparison's unit as milliseconds, or as the unit itself
/// when the TSC rate is unknown.
pub fn in_ms(c: &Comparison, v: f64) -> String {
    match (c.diff_unit, c.vm_tsc_khz) {
        (DiffUnit::Ns, _) => format!("{:.3} ms", v / 1e6),
        (DiffUnit::Ticks, 0) => format!("{v:.0} ticks"),
        (DiffUnit::Ticks, khz) => format!("{:.3} ms", v / khz as f64),
    }
}

fn signed_ms(c: &Comparison, v: f64) -> String {
    let text = in_ms(c, v);
    if v >= 0.0 {
        format!("+{text}")
    } else {
        text
    }
}

fn percent_of(part: f64, whole: f64) -> String {
    if whole == 0.0 {
        "-".into()
    } else {
        format!("{:+.1} %", part * 100.0 / whole)
    }
}

fn median(c: &Comparison, v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| in_ms(c, v))
}

/// One row per kind, largest extra time first, at most `max` of them.
pub fn workload_comparison_of(c: &Comparison, w: &WorkloadComparison, max: usize) -> Table {
    let mut t = Table::new(&[
        "kind", "VM n", "BM n", "VM time", "BM time", "diff", "count", "exits", "rest", "VM med",
        "BM med",
    ]);
    for r in w.rows.iter().take(max) {
        t.row(vec![
            visible(&r.label()).into_owned(),
            r.vm_count.to_string(),
            r.bare_count.to_string(),
            in_ms(c, r.vm_time),
            in_ms(c, r.bare_time),
            signed_ms(c, r.diff),
            signed_ms(c, r.count_part),
            signed_ms(c, r.exits_part),
            signed_ms(c, r.rest),
            median(c, r.vm_median),
            median(c, r.bare_median),
        ]);
    }
    if w.rows.len() > max {
        t.note(format!("({} more kinds in the JSON)", w.rows.len() - max));
    }
    t
}

/// The kind on CPU that carries most of the VM's extra kernel time, and
/// how much of it its exits are; `None` when no such kind takes longer in
/// the VM. Time off CPU is left out: it is other tasks' work and idle,
/// whose own kinds are in the sum.
pub fn largest_extra(c: &Comparison, w: &WorkloadComparison) -> Option<String> {
    let on_cpu = |r: &&KindComparison| r.family != FAMILY_OFF_CPU;
    // The rows run largest difference first.
    let top = w.rows.iter().find(on_cpu).filter(|r| r.diff > 0.0)?;
    let extra: f64 = w.rows.iter().filter(on_cpu).map(|r| r.diff.max(0.0)).sum();
    let more = i128::from(top.vm_count) - i128::from(top.bare_count);
    Some(format!(
        "most of the VM's extra kernel time on CPU is in {}: {} of {} ({:.0} %), of which {} \
         exits ({} of it) and {} intervals {}",
        visible(&top.label()),
        signed_ms(c, top.diff),
        signed_ms(c, extra),
        top.diff * 100.0 / extra,
        top.vm_exits,
        percent_of(top.exits_part, top.diff).trim_start_matches('+'),
        more.abs(),
        if more < 0 { "fewer" } else { "more" },
    ))
}

/// Time off CPU, VM against bare metal, when either has some.
fn off_cpu_line(c: &Comparison, w: &WorkloadComparison) -> Option<String> {
    let off = w.rows.iter().find(|r| r.family == FAMILY_OFF_CPU)?;
    Some(format!(
        "time off CPU: {} ({} exits inside, {}): waiting for other tasks' work and the \
         vCPU's idle, not in the line above",
        signed_ms(c, off.diff),
        off.vm_exits,
        signed_ms(c, off.exits_part)
    ))
}

/// The whole workload comparison as text.
pub fn workload_comparison_text(c: &Comparison, w: &WorkloadComparison) -> String {
    let command: Vec<String> = w
        .vm_command
        .iter()
        .map(|a| visible(a).into_owned())
        .collect();
    let mut out = format!(
        "workload: {} (VM: {}; bare metal: {})\n",
        command.join(" "),
        visible(&w.vm_ended),
        visible(&w.bare_ended)
    );
    let _ = writeln!(
        out,
        "wall: VM {}, bare metal {}, {} ({})",
        in_ms(c, w.vm_wall),
        in_ms(c, w.bare_wall),
        signed_ms(c, w.vm_wall - w.bare_wall),
        percent_of(w.vm_wall - w.bare_wall, w.bare_wall)
    );
    if w.exits_joined {
        let _ = writeln!(
            out,
            "exit time while the VM's command ran: {} summed over its vCPUs ({} of it outside \
             every interval: user mode, idle){}",
            in_ms(c, w.vm_exit_time),
            in_ms(c, w.vm_exit_time_outside),
            match w.timeline_verified {
                Some(false) => "; timeline NOT verified",
                _ => "",
            }
        );
    }
    out += &workload_comparison_of(c, w, MAX_KINDS).render();
    out += PARTS;
    let mut families = Table::new(&[
        "family", "VM time", "BM time", "diff", "count", "exits", "rest",
    ]);
    for f in w.families() {
        families.row(vec![
            f.family.to_string(),
            in_ms(c, f.vm_time),
            in_ms(c, f.bare_time),
            signed_ms(c, f.diff),
            signed_ms(c, f.count_part),
            signed_ms(c, f.exits_part),
            signed_ms(c, f.rest),
        ]);
    }
    out += "by family:\n";
    out += &families.render();
    for line in [largest_extra(c, w), off_cpu_line(c, w)]
        .into_iter()
        .flatten()
    {
        let _ = writeln!(out, "{line}");
    }
    for n in &w.notes {
        let _ = writeln!(out, "note: {}", visible(n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(family: &str, name: &str, diff: f64, exits: f64) -> KindComparison {
        KindComparison {
            family: family.into(),
            name: name.into(),
            vm_count: 12,
            bare_count: 10,
            vm_time: 1000.0 + diff,
            bare_time: 1000.0,
            diff,
            count_part: 0.0,
            exits_part: exits,
            rest: diff - exits,
            vm_exits: 3,
            ..KindComparison::default()
        }
    }

    fn comparison(w: WorkloadComparison) -> Comparison {
        Comparison {
            schema: String::new(),
            schema_version: 0,
            vm_tool: "xvmm".into(),
            bare_metal_tool: "xperf".into(),
            diff_unit: DiffUnit::Ticks,
            vm_tsc_khz: 1000,
            bare_tsc_khz: 1000,
            rows: vec![],
            notes: vec![],
            probes: vec![],
            workload: Some(w),
        }
    }

    #[test]
    fn the_text_names_the_kind_with_most_extra_time_and_its_exits_share() {
        let w = WorkloadComparison {
            vm_command: vec!["gzip\x1b[2J".into()],
            vm_ended: "exit 0".into(),
            bare_ended: "exit 0".into(),
            vm_wall: 13_000.0,
            bare_wall: 10_000.0,
            exits_joined: true,
            timeline_verified: Some(false),
            rows: vec![
                kind("off-cpu", "off-cpu", 9000.0, 100.0),
                kind("syscall", "write", 3000.0, 750.0),
                kind("fault", "read", 1000.0, 0.0),
                kind("syscall", "read", -500.0, 0.0),
            ],
            ..WorkloadComparison::default()
        };
        let c = comparison(w);
        let text = workload_comparison_text(&c, c.workload.as_ref().unwrap());
        assert!(text.contains("+3.000 ms (+30.0 %)"), "{text}");
        assert!(text.contains("timeline NOT verified"), "{text}");
        // 3000 of the 4000 extra (the faster read is not "extra"), a quarter exits.
        assert!(
            text.contains("on CPU is in syscall write: +3.000 ms of +4.000 ms (75 %), of which 3 exits (25.0 % of it) and 2 intervals more"),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "escaped: {text}");
        assert!(
            text.contains("time off CPU: +9.000 ms (3 exits inside, +0.100 ms)"),
            "{text}"
        );
        // The syscall family adds its kinds: +2.5 ms, 0.75 of it exits.
        let family = text
            .split("by family:")
            .nth(1)
            .unwrap()
            .lines()
            .find(|l| l.trim_start().starts_with("syscall "))
            .unwrap();
        assert!(
            family.contains("+2.500 ms") && family.contains("+0.750 ms"),
            "{family}"
        );
        let table = workload_comparison_of(&c, c.workload.as_ref().unwrap(), 2).render();
        assert!(table.contains("(2 more kinds in the JSON)"), "{table}");
    }

    #[test]
    fn fewer_intervals_are_said_as_fewer() {
        let mut fewer = kind("interrupt", "local_timer", 500.0, 200.0);
        fewer.vm_count = 5;
        let c = comparison(WorkloadComparison {
            rows: vec![fewer],
            ..WorkloadComparison::default()
        });
        let line = largest_extra(&c, c.workload.as_ref().unwrap()).unwrap();
        assert!(
            line.ends_with("(40.0 % of it) and 5 intervals fewer"),
            "{line}"
        );
    }

    #[test]
    fn no_kind_slower_in_the_vm_names_none() {
        let w = WorkloadComparison {
            rows: vec![kind("syscall", "read", -5.0, 0.0)],
            ..WorkloadComparison::default()
        };
        let c = comparison(w);
        assert_eq!(largest_extra(&c, c.workload.as_ref().unwrap()), None);
        let ns = Comparison {
            diff_unit: DiffUnit::Ns,
            ..c.clone()
        };
        assert_eq!(in_ms(&ns, 2_500_000.0), "2.500 ms");
        let unknown = Comparison { vm_tsc_khz: 0, ..c };
        assert_eq!(in_ms(&unknown, 42.0), "42 ticks");
    }
}
