//! The `workload` block as text: what the command was and how it ended, its
//! wall, user and system time, then one row per kind of kernel interval,
//! each family's rows by total time, largest first.

use super::document::Table;
use crate::schema::workload::{
    ReasonExits, Row, RowExits, Workload, WorkloadExits, FAMILIES, FAMILY_OFF_CPU,
};
use std::fmt::Write as _;
use xvmm_host::escape::visible;

/// Ticks as milliseconds at `tsc_khz` (ticks when the rate is unknown).
fn ms(ticks: u64, tsc_khz: u64) -> String {
    if tsc_khz == 0 {
        return format!("{ticks} ticks");
    }
    format!("{:.3} ms", ticks as f64 / tsc_khz as f64)
}

/// A share of the wall time, in per cent.
fn share(ticks: u64, wall: u64) -> String {
    if wall == 0 {
        return "-".into();
    }
    format!("{:.1} %", ticks as f64 * 100.0 / wall as f64)
}

/// Each family's rows, largest total first.
pub fn rows_by_family(w: &Workload) -> Vec<(&'static str, Vec<&Row>)> {
    FAMILIES
        .iter()
        .map(|&f| {
            let mut rows: Vec<&Row> = w.family(f).collect();
            rows.sort_by(|a, b| {
                (b.total_ticks, b.untimed)
                    .cmp(&(a.total_ticks, a.untimed))
                    .then(a.name.cmp(&b.name))
            });
            (f, rows)
        })
        .filter(|(_, rows)| !rows.is_empty())
        .collect()
}

/// The rows as a table for every backend.
pub fn workload_of(w: &Workload, tsc_khz: u64) -> Table {
    let mut t = Table::new(&[
        "kind", "count", "total", "of wall", "median", "p99", "mean", "off CPU",
    ]);
    for (family, rows) in rows_by_family(w) {
        t.row(vec![format!("{family}:")]);
        for r in rows {
            let l = &r.length;
            let timed = l.count > 0;
            let figure = |v: String| if timed { v } else { "-".into() };
            t.row(vec![
                format!("  {}", visible(&r.name)),
                (l.count + r.untimed).to_string(),
                figure(ms(r.total_ticks, tsc_khz)),
                figure(share(r.total_ticks, w.wall_ticks)),
                figure(l.median.to_string()),
                figure(l.p99.to_string()),
                figure(format!("{:.0}", l.mean)),
                if r.off_cpu_ticks > 0 {
                    ms(r.off_cpu_ticks, tsc_khz)
                } else {
                    String::new()
                },
            ]);
        }
    }
    t
}

/// The whole block as text.
pub fn workload_table(w: &Workload, tsc_khz: u64) -> String {
    let mut out = String::new();
    let command: Vec<String> = w.command.iter().map(|a| visible(a).into_owned()).collect();
    let _ = writeln!(
        out,
        "workload: {} ({}; {} task{})",
        command.join(" "),
        w.ended.describe(),
        w.tasks,
        if w.tasks == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        out,
        "wall {}, user {:.3} ms, system {:.3} ms, off CPU {}",
        ms(w.wall_ticks, tsc_khz),
        w.user_us as f64 / 1000.0,
        w.system_us as f64 / 1000.0,
        ms(w.family_total(FAMILY_OFF_CPU), tsc_khz)
    );
    out += "time in the kernel by kind (median, p99, mean: TSC ticks per interval; a call's \
            time includes its time off CPU, shown apart; totals are summed over the tasks, \
            which run side by side, so shares of the wall time can add up past 100 %)\n";
    out += &workload_of(w, tsc_khz).render();
    let u = &w.unpaired;
    let _ = writeln!(
        out,
        "{} events read, {} lost; not paired: {} closes without an open, {} opens never \
         closed, {} cut by lost events",
        w.events, w.lost_events, u.closes, u.opens, u.cut_by_loss
    );
    if u.inferred_switch_ins > 0 {
        let _ = writeln!(
            out,
            "{} times off CPU ended at the task's next event: the kernel recorded no switch in \
             (from the idle task)",
            u.inferred_switch_ins
        );
    }
    let _ = writeln!(out, "fault ends: {}", visible(&w.fault_end));
    if let Some(x) = &w.exits {
        out += &exits_text(w, x, tsc_khz);
    }
    out
}

/// A row's reasons, largest time first, at most three named.
fn top_reasons(reasons: &[ReasonExits], tsc_khz: u64) -> String {
    let mut named: Vec<String> = reasons
        .iter()
        .take(3)
        .map(|r| {
            format!(
                "{} {} ({})",
                visible(&r.reason),
                r.count,
                ms(r.ticks, tsc_khz)
            )
        })
        .collect();
    if reasons.len() > 3 {
        named.push(format!("{} more", reasons.len() - 3));
    }
    named.join(", ")
}

/// The host's exits joined with the intervals.
pub fn workload_exits_of(w: &Workload, x: &WorkloadExits, tsc_khz: u64) -> Table {
    let mut t = Table::new(&[
        "kind",
        "exits",
        "exit time",
        "of its time",
        "of wall",
        "reasons (time)",
    ]);
    for r in &x.rows {
        let own = w.row(&r.family, &r.name).map_or(0, |row| row.total_ticks);
        t.row(vec![
            if r.family == r.name {
                visible(&r.family).into_owned()
            } else {
                format!("{} {}", visible(&r.family), visible(&r.name))
            },
            r.count().to_string(),
            ms(r.ticks(), tsc_khz),
            share(r.ticks(), own),
            share(r.ticks(), w.wall_ticks),
            top_reasons(&r.reasons, tsc_khz),
        ]);
    }
    let outside_ticks: u64 = x.outside.iter().map(|r| r.ticks).sum();
    let outside_count: u64 = x.outside.iter().map(|r| r.count).sum();
    t.row(vec![
        "outside every interval".into(),
        outside_count.to_string(),
        ms(outside_ticks, tsc_khz),
        "-".into(),
        share(outside_ticks, w.wall_ticks),
        top_reasons(&x.outside, tsc_khz),
    ]);
    t
}

fn exits_text(w: &Workload, x: &WorkloadExits, tsc_khz: u64) -> String {
    let mut out = format!(
        "VM exits of the workload's run by where they fell ({}; exit times are the host's, \
         scaled to guest ticks; an exit inside an interrupt inside a call counts for the \
         interrupt):\n",
        if x.timeline_verified {
            "timeline verified"
        } else {
            "timeline NOT verified: placement may be off"
        }
    );
    out += &workload_exits_of(w, x, tsc_khz).render();
    // Kernel time against the exits inside it: time off CPU on neither side.
    let inside: u64 = x
        .rows
        .iter()
        .filter(|r| r.family != FAMILY_OFF_CPU)
        .map(RowExits::ticks)
        .sum();
    let kernel: u64 = w
        .rows
        .iter()
        .filter(|r| r.family != FAMILY_OFF_CPU)
        .fold(0u64, |s, r| s.saturating_add(r.total_ticks));
    let _ = writeln!(
        out,
        "exits inside kernel intervals: {} of their {} ({}); {} exits before the command \
         started or after it ended, not attributed",
        ms(inside, tsc_khz),
        ms(kernel, tsc_khz),
        share(inside, kernel),
        x.outside_window
    );
    match w.streamed {
        Some(sent) if sent != x.intervals => {
            let _ = writeln!(
                out,
                "the guest sent {sent} intervals and the VMM joined {}: the attribution \
                 misses the difference",
                x.intervals
            );
        }
        _ => {}
    }
    if x.intervals_late > 0 {
        let _ = writeln!(
            out,
            "{} intervals came later than the VMM could put them in order: not joined",
            x.intervals_late
        );
    }
    if x.exits_misordered > 0 {
        let _ = writeln!(
            out,
            "{} exits came after later exits of their vCPU: joined as if in order, which may \
             place them in the wrong interval",
            x.exits_misordered
        );
    }
    if let Some(why) = &w.stream_stopped {
        let _ = writeln!(out, "the guest's stream stopped early: {}", visible(why));
    }
    if x.chunks_refused > 0 {
        let _ = writeln!(
            out,
            "{} chunks of the stream refused: {}",
            x.chunks_refused,
            visible(x.refused_because.as_deref().unwrap_or("?"))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::workload::{Ended, FAMILY_FAULT, FAMILY_SYSCALL};
    use crate::Stats;

    fn row(family: &str, name: &str, lengths: &[u64]) -> Row {
        Row {
            family: family.into(),
            name: name.into(),
            length: Stats::from_samples(lengths),
            total_ticks: lengths.iter().sum(),
            ..Row::default()
        }
    }

    #[test]
    fn families_come_in_order_and_rows_by_total() {
        let w = Workload {
            command: vec!["sh".into(), "-c".into(), "x\x1b[2J".into()],
            ended: Ended {
                code: Some(0),
                ..Ended::default()
            },
            wall_ticks: 1_000_000,
            tasks: 2,
            rows: vec![
                row(FAMILY_OFF_CPU, "off-cpu", &[300_000]),
                row(FAMILY_SYSCALL, "read", &[100, 300]),
                row(FAMILY_SYSCALL, "write", &[50_000]),
                Row {
                    untimed: 3,
                    ..row(FAMILY_FAULT, "write", &[])
                },
            ],
            ..Workload::default()
        };
        let order: Vec<(&str, Vec<&str>)> = rows_by_family(&w)
            .into_iter()
            .map(|(f, rows)| (f, rows.iter().map(|r| r.name.as_str()).collect()))
            .collect();
        assert_eq!(
            order,
            [
                ("syscall", vec!["write", "read"]),
                ("fault", vec!["write"]),
                ("off-cpu", vec!["off-cpu"])
            ]
        );
        let text = workload_table(&w, 1000);
        assert!(
            text.starts_with("workload: sh -c x\\x1b[2J (exit 0; 2 tasks)"),
            "{text}"
        );
        assert!(text.contains("off CPU 300.000 ms"), "{text}");
        // 50 000 of 1 000 000 ticks: 5 % of the wall time, 50 ms at 1 MHz.
        let write = text
            .lines()
            .find(|l| l.trim_start().starts_with("write"))
            .unwrap();
        assert!(
            write.contains("50.000 ms") && write.contains("5.0 %"),
            "{write}"
        );
        // A fault kind counted but not timed shows its count and no times.
        let fault = text
            .lines()
            .filter(|l| l.trim_start().starts_with("write"))
            .nth(1);
        let fault = fault.unwrap();
        assert!(fault.contains(" 3 ") && fault.contains('-'), "{fault}");
    }

    /// What the join could not place in order is said, and only then.
    #[test]
    fn late_intervals_and_misordered_exits_are_said() {
        let mut w = Workload {
            wall_ticks: 1_000,
            rows: vec![row(FAMILY_SYSCALL, "read", &[100])],
            exits: Some(WorkloadExits {
                intervals: 1,
                timeline_verified: true,
                ..WorkloadExits::default()
            }),
            ..Workload::default()
        };
        let text = workload_table(&w, 1000);
        assert!(!text.contains("in order") && !text.contains("after later exits"));
        if let Some(x) = w.exits.as_mut() {
            (x.intervals_late, x.exits_misordered) = (3, 7);
        }
        let text = workload_table(&w, 1000);
        assert!(
            text.contains("3 intervals came later than the VMM could put them in order"),
            "{text}"
        );
        assert!(
            text.contains("7 exits came after later exits of their vCPU"),
            "{text}"
        );
    }
}
