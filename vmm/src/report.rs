//! Human-readable tables of results, and `xvmm compare VM.json BARE.json`.
//!
//! All figures are TSC ticks with the null overhead subtracted (the JSON keeps
//! the raw values too); a nanosecond column is added when the TSC rate is known.

use crate::app::cli::CompareArgs;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;
use xvmm_results::{Crossing, Environment, ExitTiming, Interval, Machine, Report, Stats, Status};

/// "-" for a missing figure.
fn cell(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn corrected(interval: &Option<Interval>) -> Option<&Stats> {
    interval.as_ref().map(|i| &i.corrected)
}

fn median(stats: Option<&Stats>) -> Option<u64> {
    stats.filter(|s| s.count > 0).map(|s| s.median)
}

fn p99(stats: Option<&Stats>) -> Option<u64> {
    stats.filter(|s| s.count > 0).map(|s| s.p99)
}

/// Ticks as nanoseconds at `tsc_khz`, "-" when unknown.
fn nanoseconds(ticks: Option<u64>, tsc_khz: u64) -> String {
    match ticks {
        Some(t) if tsc_khz > 0 => format!("{:.0}", t as f64 * 1e6 / tsc_khz as f64),
        _ => "-".to_string(),
    }
}

fn status_text(status: &Status) -> Option<String> {
    match status {
        Status::Measured => None,
        Status::RoundTripOnly { reason } => Some(format!("round trip only: {reason}")),
        Status::Unsupported { reason } => Some(format!("unsupported: {reason}")),
    }
}

/// The header lines: where the numbers come from.
fn header(report: &Report) -> String {
    let h = &report.host;
    let mut out = String::new();
    let env = report.environment.describe();
    let _ = writeln!(
        out,
        "{} on {}: {env}",
        report.tool,
        or_unknown(&h.cpu_model)
    );
    let _ = writeln!(
        out,
        "TSC {} kHz | hypervisor seen by the guest: {} | KVM module: {}",
        if h.tsc_khz > 0 {
            h.tsc_khz.to_string()
        } else {
            "unknown".into()
        },
        if h.hypervisor_signature.is_empty() {
            "none".into()
        } else {
            format!("{:?}", h.hypervisor_signature)
        },
        or_unknown(&h.kvm_module)
    );
    let m = &report.method;
    let _ = writeln!(
        out,
        "{} samples per row after {} warm-up; stamps `{}` .. `{}`; TSC ticks minus the null overhead",
        m.samples_requested, m.warmup, m.stamp_begin, m.stamp_end
    );
    let n = &report.null_overhead;
    let _ = writeln!(
        out,
        "null overhead (stamp pair, nothing between): median {} min {} p99 {} ({} samples)",
        n.median, n.min, n.p99, n.count
    );
    out
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() {
        "unknown"
    } else {
        s
    }
}

/// The crossing table: one row per crossing, u2k / k2u / round trip, median and p99.
pub fn crossing_table(crossings: &[Crossing], tsc_khz: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:>13} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9}",
        "crossing",
        "valid",
        "u2k med",
        "u2k p99",
        "k2u med",
        "k2u p99",
        "rtrip med",
        "rtrip p99",
        "rtrip ns"
    );
    for c in crossings {
        if let (Some(text), None) = (status_text(&c.status), &c.round_trip) {
            let _ = writeln!(out, "{:<10} {text}", c.name);
            continue;
        }
        let rt = corrected(&c.round_trip);
        let _ = writeln!(
            out,
            "{:<10} {:>13} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9}",
            c.name,
            format!("{}/{}", c.samples_valid, c.samples_requested),
            cell(median(corrected(&c.u2k))),
            cell(p99(corrected(&c.u2k))),
            cell(median(corrected(&c.k2u))),
            cell(p99(corrected(&c.k2u))),
            cell(median(rt)),
            cell(p99(rt)),
            nanoseconds(median(rt), tsc_khz),
        );
        // Guest-written counters: saturate rather than overflow.
        let rejected = c
            .samples_unfilled
            .saturating_add(c.samples_out_of_order)
            .saturating_add(c.samples_other_rejected);
        if rejected > 0 {
            let _ = writeln!(
                out,
                "{:<10} discarded: {} unfilled, {} out of order, {} other{}",
                "",
                c.samples_unfilled,
                c.samples_out_of_order,
                c.samples_other_rejected,
                c.other_rejected_reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
        }
        if let Some(text) = status_text(&c.status) {
            let _ = writeln!(out, "{:<10} {text}", "");
        }
    }
    out
}

/// The exit table: round trip in the guest, and its host-side split.
pub fn exit_table(exits: &[ExitTiming], tsc_khz: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<11} {:>13} {:>9} {:>9} {:>9} {:>11} {:>9} {:>11}",
        "VM exit",
        "valid",
        "rtrip med",
        "rtrip p99",
        "rtrip ns",
        "guest->VMM",
        "in VMM",
        "VMM->guest"
    );
    for e in exits {
        if let Some(text) = status_text(&e.status) {
            let _ = writeln!(out, "{:<11} {text}", e.name);
            continue;
        }
        let rt = corrected(&e.round_trip);
        let _ = writeln!(
            out,
            "{:<11} {:>13} {:>9} {:>9} {:>9} {:>11} {:>9} {:>11}",
            e.name,
            format!("{}/{}", e.samples_valid, e.samples_requested),
            cell(median(rt)),
            cell(p99(rt)),
            nanoseconds(median(rt), tsc_khz),
            cell(median(e.guest_to_vmm.as_ref())),
            cell(median(e.in_vmm.as_ref())),
            cell(median(e.vmm_to_guest.as_ref())),
        );
    }
    out
}

/// Everything `xvmm` prints after a microguest run.
pub fn microguest_tables(report: &Report) -> String {
    let mut out = header(report);
    out.push('\n');
    out += &crossing_table(&report.crossings, report.host.tsc_khz);
    if !report.exits.is_empty() {
        out.push('\n');
        out += &exit_table(&report.exits, report.host.tsc_khz);
        out += "(guest->VMM, in VMM, VMM->guest: medians of host stamps taken around KVM_RUN; \
                only exits that reach xvmm have them)\n";
    }
    if !report.notes.is_empty() {
        out += "\nnotes:\n";
        for n in &report.notes {
            let _ = writeln!(out, "- {n}");
        }
    }
    if let Some(m) = &report.machine {
        out += "\nmeasured on:\n";
        out += &machine_table(m);
    }
    out
}

/// The characterisation of a machine, one fact a line: what decides whether
/// two reports can be compared.
pub fn machine_table(m: &Machine) -> String {
    let mut out = String::new();
    let mut line = |key: &str, value: String| {
        let _ = writeln!(out, "  {key:<16} {value}");
    };
    line(
        "cpu",
        format!(
            "{} {} (family/model/stepping {}), {} logical CPUs",
            or_unknown(&m.cpu_vendor),
            or_unknown(&m.cpu_model),
            or_unknown(&m.cpu_signature),
            m.logical_cpus
        ),
    );
    line(
        "tsc",
        format!("{} kHz ({})", m.tsc_khz, or_unknown(&m.tsc_khz_source)),
    );
    line(
        "hypervisor",
        if m.hypervisor_signature.is_empty() {
            "none seen (bare metal, or a hypervisor that hides itself)".into()
        } else {
            format!("{:?}", m.hypervisor_signature)
        },
    );
    line("kernel", or_unknown(&m.kernel_release).into());
    let params = m
        .kvm_params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    line(
        "kvm module",
        if m.kvm_module.is_empty() {
            "none loaded".into()
        } else if params.is_empty() {
            m.kvm_module.clone()
        } else {
            format!("{} ({params})", m.kvm_module)
        },
    );
    line("cpu flags", m.flags.join(" "));
    line(
        "kpti",
        match m.kpti() {
            Some(true) => "on".into(),
            Some(false) => "off".into(),
            None => "unknown".into(),
        },
    );
    line("thp", or_unknown(&m.thp).into());
    line("clocksource", or_unknown(&m.clocksource).into());
    // Only what is not "Not affected": the mitigations that cost crossings.
    let affected: Vec<String> = m
        .vulnerabilities
        .iter()
        .filter(|(_, v)| *v != "Not affected")
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    if affected.is_empty() {
        line(
            "vulnerabilities",
            if m.vulnerabilities.is_empty() {
                "unknown".into()
            } else {
                "none affected".into()
            },
        );
    } else {
        for (i, v) in affected.into_iter().enumerate() {
            line(if i == 0 { "vulnerabilities" } else { "" }, v);
        }
    }
    out
}

/// `xvmm machine [--json FILE|-]`: characterises the machine xvmm runs on.
pub fn machine_command(json: Option<&Path>) -> Result<()> {
    let machine = Machine::probe();
    match json {
        Some(path) => {
            let text = serde_json::to_string_pretty(&machine)
                .map_err(|e| Error::Io(format!("cannot encode the machine as JSON: {e}")))?;
            crate::microguest::write_json(path, &text)
        }
        None => {
            print!("{}", machine_table(&machine));
            Ok(())
        }
    }
}

/// `xvmm show REPORT.json`: the tables of a saved report.
pub fn show_command(path: &Path) -> Result<()> {
    let report = read_report(path)?;
    print!("{}", microguest_tables(&report));
    Ok(())
}

/// Name of the comparison schema written by `xvmm compare --json`.
pub const COMPARISON_SCHEMA: &str = "xvmm-comparison";
pub const COMPARISON_SCHEMA_VERSION: u32 = 1;

/// One interval of one crossing, VM against bare metal (corrected ticks).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ComparisonRow {
    pub crossing: String,
    /// "u2k", "k2u" or "round_trip".
    pub interval: String,
    pub vm_median: Option<u64>,
    pub vm_p99: Option<u64>,
    pub bare_median: Option<u64>,
    pub bare_p99: Option<u64>,
    /// VM minus bare metal.
    pub diff_median: Option<i64>,
    pub diff_p99: Option<i64>,
    /// VM over bare metal.
    pub ratio_median: Option<f64>,
    pub ratio_p99: Option<f64>,
    /// Why a side has no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Comparison {
    pub schema: String,
    pub schema_version: u32,
    pub vm_tool: String,
    pub bare_metal_tool: String,
    pub rows: Vec<ComparisonRow>,
    /// Caveats (mismatched environments, TSC rates...).
    pub notes: Vec<String>,
}

fn diff(vm: Option<u64>, bare: Option<u64>) -> Option<i64> {
    Some(i64::try_from(vm?).ok()? - i64::try_from(bare?).ok()?)
}

fn ratio(vm: Option<u64>, bare: Option<u64>) -> Option<f64> {
    let (vm, bare) = (vm?, bare?);
    (bare > 0).then(|| vm as f64 / bare as f64)
}

/// Picks one interval of a crossing.
type IntervalField = fn(&Crossing) -> &Option<Interval>;

fn why_missing(c: Option<&Crossing>, side: &str) -> Option<String> {
    match c {
        None => Some(format!("not in the {side} report")),
        Some(c) => status_text(&c.status).map(|t| format!("{side}: {t}")),
    }
}

/// Compares every crossing of `vm` with the same-named crossing of `bare`.
pub fn compare(vm: &Report, bare: &Report) -> Comparison {
    let mut names: Vec<&str> = vm.crossings.iter().map(|c| c.name.as_str()).collect();
    for c in &bare.crossings {
        if !names.contains(&c.name.as_str()) {
            names.push(&c.name);
        }
    }
    let mut rows = Vec::new();
    for name in names {
        let (v, b) = (vm.crossing(name), bare.crossing(name));
        let note = why_missing(v, "VM").or_else(|| why_missing(b, "bare metal"));
        let pick = |c: Option<&Crossing>, f: IntervalField| {
            c.and_then(|c| corrected(f(c)))
                .filter(|s| s.count > 0)
                .cloned()
        };
        let intervals: [(&str, IntervalField); 3] = [
            ("u2k", |c| &c.u2k),
            ("k2u", |c| &c.k2u),
            ("round_trip", |c| &c.round_trip),
        ];
        for (interval, field) in intervals {
            let (vs, bs) = (pick(v, field), pick(b, field));
            let (vm_median, vm_p99) = (vs.as_ref().map(|s| s.median), vs.as_ref().map(|s| s.p99));
            let (bare_median, bare_p99) =
                (bs.as_ref().map(|s| s.median), bs.as_ref().map(|s| s.p99));
            if vs.is_none() && bs.is_none() && interval != "round_trip" {
                continue;
            }
            rows.push(ComparisonRow {
                crossing: name.to_string(),
                interval: interval.to_string(),
                vm_median,
                vm_p99,
                bare_median,
                bare_p99,
                diff_median: diff(vm_median, bare_median),
                diff_p99: diff(vm_p99, bare_p99),
                ratio_median: ratio(vm_median, bare_median),
                ratio_p99: ratio(vm_p99, bare_p99),
                note: note.clone(),
            });
        }
    }
    let mut notes = Vec::new();
    if vm.environment == Environment::BareMetal {
        notes.push("the VM report says it was measured on bare metal".into());
    }
    if bare.environment != Environment::BareMetal {
        notes.push(format!(
            "the bare-metal report says it was measured in environment {:?}",
            bare.environment
        ));
    }
    if vm.host.tsc_khz > 0 && bare.host.tsc_khz > 0 {
        let skew = vm.host.tsc_khz.abs_diff(bare.host.tsc_khz) as f64 / bare.host.tsc_khz as f64;
        if skew > 0.001 {
            notes.push(format!(
                "TSC rates differ ({} vs {} kHz): tick counts are not directly comparable",
                vm.host.tsc_khz, bare.host.tsc_khz
            ));
        }
    }
    Comparison {
        schema: COMPARISON_SCHEMA.into(),
        schema_version: COMPARISON_SCHEMA_VERSION,
        vm_tool: vm.tool.clone(),
        bare_metal_tool: bare.tool.clone(),
        rows,
        notes,
    }
}

fn signed(v: Option<i64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:+}"))
}

fn times(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}x"))
}

/// The comparison as a table.
pub fn comparison_table(c: &Comparison) -> String {
    let mut out = String::new();
    let w = c
        .rows
        .iter()
        .map(|r| r.crossing.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let _ = writeln!(
        out,
        "VM: {}  vs  bare metal: {}",
        c.vm_tool, c.bare_metal_tool
    );
    let _ = writeln!(
        out,
        "TSC ticks, null overhead subtracted; diff = VM - bare metal, ratio = VM / bare metal"
    );
    let _ = writeln!(
        out,
        "{:<w$} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}",
        "crossing",
        "interval",
        "VM med",
        "VM p99",
        "BM med",
        "BM p99",
        "diff med",
        "diff p99",
        "x med",
        "x p99"
    );
    for r in &c.rows {
        let _ = writeln!(
            out,
            "{:<w$} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}{}",
            r.crossing,
            r.interval,
            cell(r.vm_median),
            cell(r.vm_p99),
            cell(r.bare_median),
            cell(r.bare_p99),
            signed(r.diff_median),
            signed(r.diff_p99),
            times(r.ratio_median),
            times(r.ratio_p99),
            r.note
                .as_deref()
                .map(|n| format!("  ({n})"))
                .unwrap_or_default(),
        );
    }
    for n in &c.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

fn read_report(path: &Path) -> Result<Report> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("cannot read", path, e))?;
    Report::from_json(&text).map_err(|e| Error::Io(format!("{}: {e}", path.display())))
}

/// `xvmm compare VM.json BARE.json [--json FILE]`.
pub fn compare_command(args: &CompareArgs) -> Result<()> {
    let vm = read_report(&args.vm)?;
    let bare = read_report(&args.bare_metal)?;
    let comparison = compare(&vm, &bare);
    let json = serde_json::to_string_pretty(&comparison)
        .map_err(|e| Error::Io(format!("cannot serialise the comparison: {e}")))?;
    match &args.json {
        Some(path) if path == Path::new("-") => {
            eprint!("{}", comparison_table(&comparison));
            crate::microguest::write_json(path, &json)
        }
        Some(path) => {
            print!("{}", comparison_table(&comparison));
            crate::microguest::write_json(path, &json)
        }
        None => {
            print!("{}", comparison_table(&comparison));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::{HostFacts, Method, Sample};

    fn report(env: Environment, scale: u64) -> Report {
        let mut r = Report::new(
            "test".into(),
            env,
            HostFacts {
                cpu_model: "Test CPU".into(),
                tsc_khz: 2_000_000,
                ..Default::default()
            },
            Method::standard(10, 3),
        );
        r.null_overhead = Stats::from_samples(&[40, 50, 60]);
        let samples: Vec<Sample> = (0..3)
            .map(|i| Sample {
                u2k_u: 1000,
                u2k_k: 1000 + 100 * scale + i,
                k2u_k: 1000 + 300 * scale,
                k2u_u: 1000 + 500 * scale,
            })
            .collect();
        r.crossings
            .push(Crossing::from_samples("pf", 3, &samples, 50, false));
        r.crossings.push(Crossing::unsupported(
            "int-n",
            3,
            "hypervisor refused int 0x80".into(),
        ));
        r
    }

    #[test]
    fn crossing_table_has_one_row_per_crossing_with_corrected_medians() {
        let r = report(Environment::Microguest, 1);
        let text = microguest_tables(&r);
        let pf = text.lines().find(|l| l.starts_with("pf ")).unwrap();
        let cols: Vec<&str> = pf.split_whitespace().collect();
        // Raw u2k 100..102, k2u 200, round trip 500, minus the null median 50.
        assert_eq!(cols[1], "3/3");
        assert_eq!((cols[2], cols[3]), ("51", "52"));
        assert_eq!((cols[4], cols[5]), ("150", "150"));
        assert_eq!((cols[6], cols[7]), ("450", "450"));
        assert_eq!(cols[8], "225", "450 ticks at 2 GHz");
        assert!(text.contains("int-n      unsupported: hypervisor refused int 0x80"));
        assert!(text.contains("null overhead (stamp pair, nothing between): median 50 min 40"));
        assert!(text.contains("Test CPU"));
    }

    #[test]
    fn exit_table_shows_split_or_dashes() {
        let e = ExitTiming {
            name: "pio-out".into(),
            status: Status::Measured,
            samples_requested: 2,
            samples_valid: 2,
            round_trip: Some(Interval::from_raw(&[1000, 1200], 100)),
            guest_to_vmm: Some(Stats::from_samples(&[400, 500])),
            in_vmm: Some(Stats::from_samples(&[100, 100])),
            vmm_to_guest: None,
        };
        let text = exit_table(&[e], 0);
        let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            row,
            ["pio-out", "2/2", "900", "1100", "-", "400", "100", "-"]
        );
    }

    #[test]
    fn comparison_gives_difference_and_ratio() {
        let vm = report(Environment::Microguest, 2);
        let bare = report(Environment::BareMetal, 1);
        let c = compare(&vm, &bare);
        let rt = c
            .rows
            .iter()
            .find(|r| r.crossing == "pf" && r.interval == "round_trip")
            .unwrap();
        assert_eq!((rt.vm_median, rt.bare_median), (Some(950), Some(450)));
        assert_eq!(rt.diff_median, Some(500));
        assert!((rt.ratio_median.unwrap() - 950.0 / 450.0).abs() < 1e-9);
        let int_n = c.rows.iter().find(|r| r.crossing == "int-n").unwrap();
        assert_eq!(int_n.vm_median, None);
        assert!(int_n.note.as_deref().unwrap().contains("unsupported"));
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        let table = comparison_table(&c);
        assert!(table.contains("+500"), "{table}");
        assert!(table.contains("2.11x"), "{table}");

        // Swapped arguments are flagged.
        let swapped = compare(&bare, &vm);
        assert_eq!(swapped.notes.len(), 2, "{:?}", swapped.notes);
    }

    #[test]
    fn compare_command_errors_are_one_line() {
        let args = CompareArgs {
            vm: "/nonexistent/vm.json".into(),
            bare_metal: "/nonexistent/bare.json".into(),
            json: None,
        };
        let err = compare_command(&args).unwrap_err().to_string();
        assert!(
            err.starts_with("io: cannot read /nonexistent/vm.json"),
            "{err}"
        );
        let dir = std::env::temp_dir().join(format!("xvmm-compare-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"schema\": 1}").unwrap();
        let args = CompareArgs {
            vm: bad.clone(),
            bare_metal: bad,
            json: None,
        };
        let err = compare_command(&args).unwrap_err().to_string();
        assert!(
            err.contains("bad.json: results are not valid JSON") && !err.contains('\n'),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
