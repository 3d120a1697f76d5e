//! What the report shows, built from the result files: the inputs, VM
//! against bare metal, the characterisation matrix and trend, and one
//! section per file (summary, distributions, exits, characterisation, notes,
//! machine).
//!
//! Every loop here is linear in the size of the files (a result file is
//! untrusted: its number of crossings or metrics is not ours to pick), and
//! tables and charts are cut at fixed sizes with the number left out said.

mod async_pf;
mod attribution;
mod bins;
mod comparison;
mod fleet;
mod matrix;
mod run;
mod trend;
mod workload;
mod workload_compare;

use crate::Input;
use comparison::comparison_sections;
use matrix::matrix_section;
use run::report_section;
use trend::trend_sections;
use xvmm_results::document::{capped, Block, Cell, Document, Row, Section, Table, MAX_TABLE_ROWS};

pub use bins::{bins_of, bins_of_histogram, distribution};

/// Most distributions drawn per file.
pub const MAX_DISTRIBUTIONS: usize = 60;
/// Longest value shown in a matrix cell (the whole text is its title).
const MAX_CELL: usize = 60;
const TICKS: &str = "TSC ticks (null overhead subtracted)";

/// Files past which the report is a fleet's: no section per file (each is
/// a row of the inputs table), at most this many comparisons, trends and
/// matrix columns, each cut saying how many were left out.
pub const FLEET_FILES: usize = 20;

/// The whole document.
pub fn document(inputs: &[Input]) -> Document {
    let fleet = inputs.len() > FLEET_FILES;
    let mut sections = Vec::new();
    // A fleet's page opens on its distributions, its long file table last.
    if fleet {
        sections.extend(fleet::fleet_section(inputs));
    } else {
        sections.push(inputs_section(inputs));
    }
    sections.extend(cut(comparison_sections(inputs), "comparisons"));
    sections.extend(matrix_section(inputs));
    if !fleet {
        sections.extend(fleet::fleet_section(inputs));
    }
    sections.extend(cut(trend_sections(inputs), "trends"));
    if fleet {
        sections.push(inputs_section(inputs));
    } else {
        sections.extend(
            inputs
                .iter()
                .enumerate()
                .map(|(i, input)| report_section(i, input)),
        );
    }
    Document {
        title: "xvmm report".into(),
        subtitle: format!(
            "{} result file(s), rendered by xvmm {}",
            inputs.len(),
            env!("CARGO_PKG_VERSION")
        ),
        sections,
        footer: crate::reading_note(inputs),
    }
}

/// The first [`FLEET_FILES`] sections; the last one kept says how many of
/// `what` were left out.
fn cut(mut sections: Vec<Section>, what: &str) -> Vec<Section> {
    let total = sections.len();
    if total > FLEET_FILES {
        sections.truncate(FLEET_FILES);
        if let Some(last) = sections.last_mut() {
            last.blocks.push(Block::Paragraph(format!(
                "(the first {FLEET_FILES} of {total} {what}; the others are left out)"
            )));
        }
    }
    sections
}

fn column(i: usize, input: &Input) -> String {
    format!("#{} {}", i + 1, input.label)
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

fn inputs_section(inputs: &[Input]) -> Section {
    let header = [
        "#",
        "file",
        "tool",
        "environment",
        "CPU",
        "kernel",
        "TSC kHz",
        "hypervisor",
        "contents",
    ];
    let rows: Vec<Vec<Cell>> = inputs
        .iter()
        .enumerate()
        .take(MAX_TABLE_ROWS)
        .map(|(i, input)| {
            let r = &input.report;
            let mut contents = format!("{} crossings, {} exits", r.crossings.len(), r.exits.len());
            if !r.host_exits.is_empty() {
                contents += &format!(", {} traced exit reasons", r.host_exits.len());
            }
            if let Some(c) = &r.characterize {
                contents += &format!(", characterization ({} metrics)", c.metrics.len());
            }
            if let Some(w) = &r.workload {
                contents += &format!(", a workload ({} kinds of interval)", w.rows.len());
            }
            vec![
                Cell::from(format!("{}", i + 1)),
                input.label.as_str().into(),
                r.tool.as_str().into(),
                r.environment.describe().into(),
                or_dash(&r.host.cpu_model).into(),
                or_dash(&r.host.kernel_release).into(),
                r.host.tsc_khz.to_string().into(),
                or_dash(&r.host.hypervisor_signature).into(),
                contents.into(),
            ]
        })
        .collect();
    let mut blocks = Vec::new();
    if inputs.len() > FLEET_FILES {
        blocks.push(Block::Paragraph(format!(
            "{} files: past {FLEET_FILES}, each file is one row here, not a section of its own \
             (the fleet view, first on this page, shows their characterizations as \
             distributions).",
            inputs.len()
        )));
    }
    capped(
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: rows.into_iter().map(Row::Cells).collect(),
            numeric: false,
        },
        inputs.len(),
        &mut blocks,
    );
    Section {
        id: "inputs".into(),
        title: "Result files".into(),
        blocks,
    }
}

// ------------------------------------------------------------- comparison

#[cfg(test)]
mod tests {
    use super::run::summary;
    use super::trend::time_unit;
    use super::*;
    use crate::charts;
    use xvmm_results::document::{Block, Chart};
    use xvmm_results::{Characterization, Crossing, Environment, Metric, Report, Sample, Stats};

    #[test]
    fn the_summary_says_what_was_subtracted() {
        use xvmm_results::correction::{PairCost, StampCosts};
        use xvmm_results::sweep::{decide, SweepFit, SweepPhase};
        let mut r = Report::new(
            "t".into(),
            xvmm_results::Environment::Microguest,
            xvmm_results::HostFacts::default(),
            xvmm_results::Method::standard(1, 2),
        );
        assert!(summary(&r).ends_with("samples) subtracted from every timing."));
        let costs = StampCosts::new(PairCost::from_rounds("a", "b", &[vec![42]]), None, None);
        r.stamp_costs = Some(costs.clone());
        assert!(
            summary(&r).ends_with("own stamps' cost (user pair 42)."),
            "{}",
            summary(&r)
        );
        let phase = SweepPhase::from_medians(&[16, 32], &[70, 102], 10).unwrap();
        let sweep = decide(
            42,
            SweepFit::new(vec![phase], Some(2.0)).unwrap(),
            Some(2.0),
        );
        r.stamp_costs = Some(costs.with_user_sweep(sweep));
        assert!(
            summary(&r).ends_with("sweep's intercept, 38 ticks (the null pair is +4.0 off)."),
            "{}",
            summary(&r)
        );
    }
    use xvmm_results::progress::Silent;
    use xvmm_results::{HostFacts, Method};

    fn report(env: Environment, names: &[&str], scale: u64) -> Report {
        let host = HostFacts {
            cpu_model: "Test CPU".into(),
            tsc_khz: 2_000_000,
            ..Default::default()
        };
        let mut r = Report::new("test".into(), env, host, Method::standard(1, 4));
        r.null_overhead = Stats::from_samples(&[40, 50, 60]);
        for name in names {
            let samples: Vec<Sample> = (0..4)
                .map(|i| Sample {
                    u2k_u: 0,
                    u2k_k: 100 * scale + i,
                    k2u_k: 300 * scale,
                    k2u_u: 500 * scale + i,
                    cpu: None,
                    interrupts: None,
                })
                .collect();
            r.crossings.push(Crossing::from_samples(
                name,
                4,
                &samples,
                &xvmm_results::Corrections::derive(50, Some((50, 10))),
                true,
            ));
        }
        r
    }

    fn input(label: &str, report: Report) -> Input {
        Input {
            label: label.into(),
            report,
        }
    }

    /// Issue item 3: the hooks' on - off figure far from what their
    /// sequences add is a warning on the page; within the noise none.
    #[test]
    fn the_page_warns_of_hooks_on_off_far_from_their_sequences() {
        use xvmm_results::correction::{HooksCost, PairCost, StampCosts};
        let with_hooks = |predicted: u64| {
            let mut r = report(Environment::BareMetal, &["getppid"], 1);
            let p = |m: u64| PairCost::from_rounds("a", "b", &[vec![m]]);
            let mut costs = StampCosts::new(p(49), Some((p(49), p(73))), None);
            costs.hooks.push(
                HooksCost::new("getppid", &[1613; 9], &[1000; 9], "")
                    .with_prediction(&[vec![100 + predicted; 9]], &[vec![100; 9]])
                    .reconcile(Some(24.5)),
            );
            r.stamp_costs = Some(costs);
            r.machine = Some(xvmm_results::Machine {
                tsc_quantum_ticks: Some(24.5),
                ..Default::default()
            });
            crate::html(&[input("a", r)], &Silent)
        };
        let page = with_hooks(98);
        assert!(
            page.contains("getppid: hooks on - off 613 ticks"),
            "no warning"
        );
        assert!(!with_hooks(600).contains("hooks on - off 613"));
    }

    fn characterized(host: &str, started: u64, cpuid: u64) -> Report {
        let mut r = report(Environment::BareMetal, &["getppid"], 1);
        r.characterize = Some(Characterization {
            started_unix: started,
            seconds: 1.0,
            hostname: host.into(),
            privileged: false,
            node_name: String::new(),
            metrics: vec![
                Metric::from_samples("exits", "cpuid", "ticks", &[cpuid, cpuid + 10]),
                Metric::fact("hypervisor", "virt", "kvm"),
                Metric::missing("hypervisor", "dmi", "no DMI"),
            ],
        });
        r
    }

    fn ids(doc: &Document) -> Vec<&str> {
        doc.sections.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn a_vm_is_compared_with_the_bare_metal_file_of_its_cpu() {
        let on = |cpu: &str, env| {
            let mut r = report(env, &["getppid"], 1);
            r.host.cpu_model = cpu.into();
            r
        };
        let doc = document(&[
            input("other.json", on("Other CPU", Environment::BareMetal)),
            input("vm.json", on("Test CPU", Environment::LinuxVm)),
            input("own.json", on("Test CPU", Environment::BareMetal)),
            input("lone-vm.json", on("Third CPU", Environment::LinuxVm)),
        ]);
        let titles: Vec<&str> = doc
            .sections
            .iter()
            .filter(|s| s.id.starts_with("compare-"))
            .map(|s| s.title.as_str())
            .collect();
        // Same CPU model first; without one, the first bare-metal file.
        assert_eq!(
            titles,
            [
                "VM vs bare metal: vm.json against own.json",
                "VM vs bare metal: lone-vm.json against other.json"
            ]
        );
    }

    #[test]
    fn a_vm_and_a_bare_metal_file_give_a_comparison_with_both_sides() {
        let doc = document(&[
            input("vm.json", report(Environment::LinuxVm, &["getppid"], 2)),
            input("bm.json", report(Environment::BareMetal, &["getppid"], 1)),
        ]);
        assert_eq!(ids(&doc), ["inputs", "compare-1", "file-1", "file-2"]);
        let Some(Block::Chart(Chart::Bars(chart))) = doc.sections[1].blocks.get(1) else {
            panic!("no comparison chart: {:?}", doc.sections[1].blocks);
        };
        assert_eq!(chart.series, ["VM", "bare metal"]);
        let sides: Vec<usize> = chart.bars.iter().map(|b| b.series).collect();
        assert!(sides.contains(&0) && sides.contains(&1), "{sides:?}");
        // u2k raw 200 (VM) vs 100 (BM), minus its stamp cost (50 + 50) / 2.
        let u2k: Vec<f64> = chart
            .bars
            .iter()
            .filter(|b| b.label.starts_with("getppid u2k"))
            .map(|b| b.to)
            .collect();
        assert_eq!(u2k, [151.0, 51.0]);
    }

    #[test]
    fn characterizations_give_a_matrix_and_over_time_a_trend() {
        let doc = document(&[
            input("a.json", characterized("box", 1_000, 1000)),
            input("b.json", characterized("box", 1_000 + 7200, 2000)),
            input("c.json", characterized("other", 5, 500)),
        ]);
        assert_eq!(
            ids(&doc),
            ["inputs", "matrix", "trend-1", "file-1", "file-2", "file-3"]
        );
        let matrix = &doc.sections[1];
        let Some(Block::Table(t)) = matrix.blocks.iter().find(|b| matches!(b, Block::Table(_)))
        else {
            panic!("no matrix table");
        };
        let rows = t.cell_rows();
        let cpuid = rows.iter().find(|r| r[0].text == "exits: cpuid").unwrap();
        // Nearest-rank medians of two samples: the lower one.
        assert_eq!(cpuid[1].text, "1000 ticks");
        assert_eq!(cpuid[2].text, "2000 ticks (2.00x)");
        let dmi = rows
            .iter()
            .find(|r| r[0].text == "hypervisor: dmi")
            .unwrap();
        assert_eq!(
            (dmi[1].text.as_str(), dmi[1].title.as_deref()),
            ("not measured", Some("no DMI"))
        );
        let Some(Block::Chart(Chart::Trend(trend))) = doc.sections[2].blocks.get(1) else {
            panic!("no trend chart");
        };
        let cpuid_line = trend.lines.iter().find(|l| l.name == "cpuid").unwrap();
        assert_eq!(cpuid_line.points.len(), 2);
        assert_eq!(cpuid_line.points[1].0, 2.0, "two hours later");
        assert_eq!(trend.x_unit, "hours since the first run");
        assert_eq!(time_unit(30), ("seconds", 1.0));
        assert_eq!(time_unit(10 * 86_400).0, "days");
        assert_eq!(cpuid_line.points[1].1, 2.0);
        // One file per machine: no trend. The same host name under another
        // hypervisor is another machine (L1 and L2 of the harness).
        let doc = document(&[
            input("a", characterized("x", 1, 5)),
            input("b", characterized("y", 2, 5)),
        ]);
        assert_eq!(ids(&doc), ["inputs", "matrix", "file-1", "file-2"]);
        let mut guest = characterized("x", 2, 5);
        guest.host.hypervisor_signature = "KVMKVMKVM".into();
        let doc = document(&[input("a", characterized("x", 1, 5)), input("b", guest)]);
        assert_eq!(ids(&doc), ["inputs", "matrix", "file-1", "file-2"]);
    }

    /// The matrix's `exits: cpuid` row.
    fn cpuid_row(doc: &Document) -> Vec<Cell> {
        let matrix = doc.sections.iter().find(|s| s.id == "matrix").unwrap();
        let Some(Block::Table(t)) = matrix.blocks.iter().find(|b| matches!(b, Block::Table(_)))
        else {
            panic!("no matrix table");
        };
        t.cell_rows()
            .iter()
            .find(|r| r[0].text == "exits: cpuid")
            .unwrap()
            .to_vec()
    }

    fn matrix_text(doc: &Document) -> String {
        let matrix = doc.sections.iter().find(|s| s.id == "matrix").unwrap();
        format!("{:?}", matrix.blocks)
    }

    #[test]
    fn machines_with_different_tsc_rates_compare_in_nanoseconds() {
        // 3000 ticks at 3 GHz and 2000 ticks at 2 GHz: both 1 us.
        let mut fast = characterized("fast", 1, 3000);
        fast.host.tsc_khz = 3_000_000;
        let mut slow = characterized("slow", 2, 2000);
        slow.host.tsc_khz = 2_000_000;
        let doc = document(&[input("slow", slow.clone()), input("fast", fast.clone())]);
        let row = cpuid_row(&doc);
        assert_eq!(row[2].text, "3000 ticks (1.00x)", "{row:?}");
        let text = matrix_text(&doc);
        assert!(text.contains("ratios of nanoseconds"), "{text}");
        // One TSC rate (within 0.1 %): ticks, and the page says so.
        fast.host.tsc_khz = 2_001_000;
        let doc = document(&[input("slow", slow.clone()), input("fast", fast.clone())]);
        assert_eq!(cpuid_row(&doc)[2].text, "3000 ticks (1.50x)");
        assert!(matrix_text(&doc).contains("ratios of TSC ticks"));
        // A file without a rate cannot be converted: no ratio, and why.
        fast.host.tsc_khz = 0;
        let doc = document(&[input("slow", slow), input("fast", fast)]);
        let row = cpuid_row(&doc);
        assert_eq!(row[2].text, "3000 ticks", "{row:?}");
        assert!(row[2].title.as_deref().unwrap().contains("no TSC rate"));
    }

    #[test]
    fn metrics_in_different_units_get_no_ratio() {
        let mut a = characterized("a", 1, 1000);
        let mut b = characterized("b", 2, 1000);
        for (r, chunk) in [(&mut a, 128), (&mut b, 64)] {
            let c = r.characterize.as_mut().unwrap();
            c.metrics[0].unit = format!("ticks/{chunk} pauses");
        }
        let row = cpuid_row(&document(&[input("a", a), input("b", b)]));
        assert_eq!(row[2].text, "1000 ticks/64 pauses", "{row:?}");
    }

    #[test]
    fn raw_samples_and_stored_histograms_become_bins() {
        let lin = bins_of(&[100, 110, 120, 130, 1000], 130);
        assert_eq!(lin.iter().map(|b| b.count).sum::<u64>(), 5);
        assert!(lin.iter().all(|b| b.lo < b.hi));
        assert!(lin.last().unwrap().tail && !lin[0].tail);
        let log = bins_of(&[1, 10, 100, 1000, 10_000, 0], 1000);
        assert!(log[1].hi / log[1].lo > 1.1, "log-spaced: {log:?}");
        assert_eq!(log.iter().map(|b| b.count).sum::<u64>(), 6);
        assert!(bins_of(&[], 0).is_empty());
        assert_eq!(
            bins_of(&[7, 7, 7], 7).iter().map(|b| b.count).sum::<u64>(),
            3
        );

        let mut values: Vec<u64> = (0..1000).map(|i| 400 + i % 50).collect();
        values.extend([100_000; 5]);
        let stats = Stats::from_samples(&values);
        let bins = bins_of_histogram(&stats);
        let tail = bins.last().unwrap();
        assert!(tail.tail && tail.hi == 100_000.0, "{tail:?}");
        assert_eq!(bins.iter().map(|b| b.count).sum::<u64>(), 1005);
        // A hostile histogram: a million buckets of width 0.
        let mut odd = stats.clone();
        odd.histogram.counts = vec![1; 1_000_000];
        odd.histogram.width = 0;
        let bins = bins_of_histogram(&odd);
        assert!(bins.len() <= charts::MAX_BINS + 1);
        assert_eq!(
            bins.iter()
                .filter(|b| !b.tail)
                .map(|b| b.count)
                .sum::<u64>(),
            1_000_000
        );
    }

    #[test]
    fn a_huge_file_is_cut_to_fixed_sizes() {
        let names: Vec<String> = (0..3000).map(|i| format!("c{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let doc = document(&[input("huge.json", report(Environment::BareMetal, &refs, 1))]);
        let file = &doc.sections[1];
        let grid = file.blocks.iter().find_map(|b| match b {
            Block::Grid(g) => Some(g.len()),
            _ => None,
        });
        assert_eq!(grid, Some(MAX_DISTRIBUTIONS));
        let tables: Vec<usize> = file
            .blocks
            .iter()
            .filter_map(|b| match b {
                Block::Table(t) => Some(t.cell_rows().len()),
                _ => None,
            })
            .collect();
        assert!(tables.iter().all(|&n| n <= MAX_TABLE_ROWS), "{tables:?}");
        assert!(file
            .blocks
            .iter()
            .any(|b| matches!(b, Block::Paragraph(p) if p.contains("of 3000 rows"))));
        let html = super::super::html(
            &[input(
                "huge.json",
                report(Environment::BareMetal, &refs[..200], 1),
            )],
            &Silent,
        );
        assert!(html.len() < 8 << 20, "{} bytes", html.len());
    }

    /// getppid's sample `k`, its kernel stamps `extra` ticks late and
    /// jittered deterministically.
    fn getppid_sample(k: u64, extra: u64) -> Sample {
        Sample {
            u2k_u: 10_000 * k,
            u2k_k: 10_000 * k + 300 + extra + k % 7,
            k2u_k: 10_000 * k + 700 + extra + k % 7,
            k2u_u: 10_000 * k + 1000 + extra + k % 5,
            cpu: Some(0),
            interrupts: None,
        }
    }

    /// The VM's 200 samples: every 10th slowed in u2k by an exit, every
    /// 25th in k2u.
    fn traced_vm_samples() -> Vec<Sample> {
        (1..=200)
            .map(|k| {
                let mut s = getppid_sample(k, if k % 10 == 0 { 2000 } else { 60 });
                if k % 25 == 0 {
                    s.k2u_u += 100;
                }
                s
            })
            .collect()
    }

    /// The host's exits during the VM's samples: an npf in every 10th
    /// sample's u2k, an intr in every 25th's kernel time.
    fn host_trace_of_the_vm() -> xvmm_results::attribution::HostTrace {
        use xvmm_results::attribution::{HostExitEvent, HostTrace};
        let mut exits = Vec::new();
        for k in 1..=200u64 {
            if k % 10 == 0 {
                exits.push(HostExitEvent {
                    vcpu: 0,
                    exit: 10_000 * k + 100,
                    entry: 10_000 * k + 2_000,
                    reason: 0,
                });
            }
            if k % 25 == 0 {
                exits.push(HostExitEvent {
                    vcpu: 0,
                    exit: 10_000 * k + 2_500,
                    entry: 10_000 * k + 2_600,
                    reason: 1,
                });
            }
        }
        HostTrace {
            reasons: vec!["npf".into(), "intr".into()],
            exits: exits.into(),
            lost: Vec::new(),
        }
    }

    /// A timeline whose every check passed, with the guest's TSC the host's.
    fn verified_timeline() -> xvmm_results::timeline::Timeline {
        xvmm_results::timeline::Timeline {
            offset: 0,
            offset_source: "KVM_VCPU_TSC_OFFSET".into(),
            ratio: 1.0,
            ratio_fixed: None,
            ratio_frac_bits: None,
            host_khz: None,
            checks: 4,
            calibrations: 4,
            violations: 0,
            bound_ticks: 10,
            verified: true,
            offset_inferred: false,
            reason: None,
            offset_changes: vec![],
            measured_offset: None,
            requested_offset: None,
            measured_khz: None,
            requested_khz: None,
            unmatched: 0,
            lost_events: 0,
            lost_windows: 0,
            lost_unplaced: 0,
        }
    }

    /// A traced VM run of `getppid` (every 10th sample with an npf exit in
    /// u2k, every 25th an intr exit in the kernel) joined to its trace, and
    /// the bare-metal run of the same crossing without exits.
    pub(crate) fn traced_pair() -> (Report, Report) {
        use xvmm_results::attribution::{attribute, Index};
        use xvmm_results::timeline::Mapping;
        let corr = xvmm_results::Corrections::derive(50, Some((50, 10)));
        let vm_samples = traced_vm_samples();
        let bm_samples: Vec<Sample> = (1..=200).map(|k| getppid_sample(k, 0)).collect();
        let trace = host_trace_of_the_vm();
        let mut vm = report(Environment::LinuxVm, &[], 1);
        let mut c = Crossing::from_samples("getppid", 200, &vm_samples, &corr, true);
        c.samples = Some(vm_samples);
        vm.crossings.push(c);
        attribute(&mut vm, &Index::new(&trace, &Mapping::unscaled(0)), Some(0));
        vm.timeline = Some(verified_timeline());
        let mut bm = report(Environment::BareMetal, &[], 1);
        bm.crossings.push(Crossing::from_samples(
            "getppid",
            200,
            &bm_samples,
            &corr,
            false,
        ));
        (vm, bm)
    }

    fn stacked_of(doc: &Document) -> Option<&xvmm_results::document::StackedChart> {
        doc.charts().into_iter().find_map(|c| match c {
            Chart::Stacked(s) => Some(s),
            _ => None,
        })
    }

    /// Issue 24, item 4a: a traced VM against bare metal gets the stacked
    /// decomposition; an untraced pair says why it has none.
    #[test]
    fn a_traced_vm_against_bare_metal_is_decomposed_in_stacked_bars() {
        let (vm, bm) = traced_pair();
        let inputs = [input("vm.json", vm), input("bm.json", bm)];
        let doc = document(&inputs);
        let stacked = stacked_of(&doc).expect("a stacked chart");
        assert_eq!(stacked.series[..2], ["bare metal", "VM without exits"]);
        assert!(
            stacked.series.contains(&"exit: npf".to_string()),
            "{:?}",
            stacked.series
        );
        let u2k = stacked
            .bars
            .iter()
            .find(|b| b.label == "getppid u2k")
            .unwrap();
        let series: Vec<usize> = u2k.parts.iter().map(|p| p.series).collect();
        assert_eq!(series[..2], [0, 1], "{u2k:?}");
        assert!(u2k.parts.len() >= 3, "an exit part: {u2k:?}");
        let (lo, hi) = u2k.whisker.expect("the without-exits interval");
        let end = u2k.parts[0].value + u2k.parts[1].value;
        assert!(lo <= end && end <= hi, "{lo} {end} {hi}");
        assert!(u2k.mark.is_some());
        let svg = charts::stacked(stacked);
        assert!(svg.contains("<rect") && svg.contains("VM without exits") && svg.contains("npf"));
        let html = crate::html(&inputs, &Silent);
        assert_eq!(html.matches("data-kind=\"stacked\"").count(), 1);
        // Control: the same pair without the trace has no such chart.
        let (mut vm, bm) = traced_pair();
        for c in &mut vm.crossings {
            for i in [&mut c.u2k, &mut c.in_kernel, &mut c.k2u, &mut c.round_trip]
                .into_iter()
                .flatten()
            {
                i.host = None;
            }
        }
        let plain = [input("vm.json", vm), input("bm.json", bm)];
        let doc = document(&plain);
        assert!(stacked_of(&doc).is_none());
        assert!(format!("{:?}", doc.sections[1].blocks).contains("No decomposition into exits"));
        assert!(!crate::html(&plain, &Silent).contains("data-kind=\"stacked\""));
    }

    /// Issue 24, item 4b: a traced run's slowest samples on a timeline, the
    /// exits inside each as labelled boxes; a traced file without them says
    /// why.
    #[test]
    fn a_traced_run_draws_its_slowest_samples_on_a_timeline() {
        let (vm, _) = traced_pair();
        let doc = document(&[input("vm.json", vm.clone())]);
        let strip = doc
            .charts()
            .into_iter()
            .find_map(|c| match c {
                Chart::Timeline(t) => Some(t),
                _ => None,
            })
            .expect("a timeline strip");
        assert_eq!(strip.rows.len(), xvmm_results::attribution::SLOWEST_SAMPLES);
        let first = &strip.rows[0];
        assert_eq!(
            first.spans.iter().map(|s| s.series).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(first.spans.windows(2).all(|w| w[0].to == w[1].from));
        // The slowest sample holds both an npf and an intr exit (k = 200).
        let labels: Vec<&str> = first.events.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(labels, ["npf 1900", "intr 100"], "{first:?}");
        assert_eq!((first.events[0].from, first.events[0].to), (100.0, 2000.0));
        let svg = charts::timeline(strip);
        assert!(
            svg.contains("npf 1900") && svg.contains("in kernel"),
            "{svg}"
        );
        assert!(crate::html(&[input("vm.json", vm.clone())], &Silent)
            .contains("data-kind=\"timeline\""));
        // Control: the same traced file without the kept samples.
        let mut old = vm;
        for c in &mut old.crossings {
            if let Some(h) = c.round_trip.as_mut().and_then(|i| i.host.as_mut()) {
                h.slowest.clear();
            }
        }
        let doc = document(&[input("old.json", old.clone())]);
        assert!(!doc.charts().iter().any(|c| c.kind() == "timeline"));
        assert!(format!("{:?}", doc.sections).contains("No timeline strip"));
    }

    /// `n` characterizations of several instance types and kernels, their
    /// figures varied deterministically.
    fn fleet(n: usize) -> Vec<Input> {
        let types = [
            ("EPYC", "KVMKVMKVM", 2_000_000),
            ("Xeon", "KVMKVMKVM", 2_100_000),
            ("Xeon", "Microsoft Hv", 2_100_000),
            ("Graviton-ish", "", 2_500_000),
        ];
        (0..n)
            .map(|i| {
                let (cpu, hv, khz) = types[i % types.len()];
                let mut r = characterized(&format!("node-{i}"), 1_000 + i as u64, 0);
                r.host.cpu_model = cpu.into();
                r.host.hypervisor_signature = hv.into();
                r.host.tsc_khz = khz;
                r.host.kernel_release = format!("6.{}", i % 3);
                let c = r.characterize.as_mut().unwrap();
                let v = 1000 + (i as u64 * 7919) % 500 + 1000 * (i % types.len()) as u64;
                c.metrics[0] = Metric::from_samples("exits", "cpuid", "ticks", &[v, v + 10]);
                c.metrics.push(Metric::from_samples(
                    "crossings",
                    "getppid",
                    "ticks",
                    &[v / 10],
                ));
                input(&format!("n{i}.json"), r)
            })
            .collect()
    }

    fn boxes_of(doc: &Document) -> Vec<&xvmm_results::document::BoxChart> {
        doc.charts()
            .into_iter()
            .filter_map(|c| match c {
                Chart::Boxes(b) => Some(b),
                _ => None,
            })
            .collect()
    }

    /// Issue 24, item 4e: many characterizations as box plots per instance
    /// type and kernel; past FLEET_FILES files no section per file, so 1000
    /// files make a page of bounded size.
    #[test]
    fn a_fleet_is_drawn_as_boxes_and_a_thousand_files_stay_small() {
        let inputs = fleet(1000);
        let doc = document(&inputs);
        assert_eq!(ids(&doc), ["fleet", "matrix", "inputs"]);
        let boxes = boxes_of(&doc);
        // cpuid and getppid, each by instance type and by kernel.
        assert_eq!(boxes.len(), 4, "{boxes:?}");
        let by_type = &boxes[0];
        assert!(by_type
            .caption
            .starts_with("cpuid: median per file, by instance type"));
        let labels: Vec<&str> = by_type.groups.iter().map(|g| g.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "EPYC · KVMKVMKVM",
                "Xeon · KVMKVMKVM",
                "Xeon · Microsoft Hv",
                "Graviton-ish · no hypervisor"
            ]
        );
        assert!(by_type.groups.iter().all(|g| g.count == 250));
        // EPYC: 1000..1500 ticks at 2 GHz: 500..750 ns.
        let q = by_type.groups[0].quartiles;
        assert!(
            q.min >= 500.0 && q.max < 750.0 && q.q1 <= q.median && q.median <= q.q3,
            "{q:?}"
        );
        assert_eq!(boxes[1].groups.len(), 3, "three kernels");
        let matrix = doc.sections.iter().find(|s| s.id == "matrix").unwrap();
        assert!(format!("{:?}", matrix.blocks).contains("the first 20 of 1000"));
        let html = crate::html(&inputs, &Silent);
        assert_eq!(html.matches("data-kind=\"boxes\"").count(), 4);
        assert!(html.len() < 2 << 20, "{} bytes for 1000 files", html.len());
        let svg = charts::boxes(by_type);
        assert!(svg.contains("EPYC · KVMKVMKVM (n=250)"), "{svg}");
        // Control: a few files keep their own sections and get no fleet view.
        let few = document(&fleet(3));
        assert!(boxes_of(&few).is_empty());
        assert_eq!(
            ids(&few).iter().filter(|i| i.starts_with("file-")).count(),
            3
        );
    }

    /// Issue 24, item 4d: the TCG caveat only where a file was measured
    /// under QEMU TCG, in both backends' footers.
    #[test]
    fn the_footer_says_emulated_only_for_emulated_files() {
        let real = input("real.json", report(Environment::BareMetal, &["getppid"], 1));
        let mut tcg = input("l1.json", report(Environment::BareMetal, &["getppid"], 1));
        tcg.report.host.hypervisor_signature = crate::TCG_SIGNATURE.into();
        let mut by_machine = real.clone();
        by_machine.report.machine = Some(xvmm_results::machine::Machine {
            hypervisor_signature: crate::TCG_SIGNATURE.into(),
            ..Default::default()
        });
        assert!(!crate::emulated(&real.report));
        assert!(crate::emulated(&tcg.report) && crate::emulated(&by_machine.report));
        let only_real = [real.clone()];
        let mixed = [real.clone(), tcg.clone()];
        assert_eq!(document(&only_real).footer, crate::READING_NOTE);
        let footer = document(&mixed).footer;
        assert!(
            footer.contains(
                "TCG (hypervisor signature TCGTCGTCGTCG, as in the nested harness): file(s) #2."
            ),
            "{footer}"
        );
        for (page, tcg_expected) in [
            (super::super::html(&only_real, &Silent), false),
            (super::super::html(&mixed, &Silent), true),
            (super::super::markdown(&only_real, &Silent), false),
            (super::super::markdown(&mixed, &Silent), true),
        ] {
            assert_eq!(page.contains("QEMU TCG"), tcg_expected, "{page}");
            assert!(page.contains("This page loads nothing"));
        }
    }

    #[test]
    fn names_from_files_reach_the_page_as_text() {
        let mut r = report(Environment::BareMetal, &["<script>alert(1)</script>"], 1);
        r.notes.push("<img src=x onerror=alert(1)>".into());
        r.tool = "\"><svg onload=alert(1)>".into();
        let html = super::super::html(&[input("<b>.json", r.clone())], &Silent);
        for raw in ["<script", "<img", "<b>", "<svg onload"] {
            assert!(!html.contains(raw), "{raw} reached the page raw");
        }
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        let md = super::super::markdown(&[input("<b>.json", r)], &Silent);
        assert!(!md.contains("<script") && md.contains("&lt;script&gt;"));
        assert!(md.contains("*Chart (in the HTML report): "));
    }
}
