//! The boot benchmark's plan and figures (issue 25, "Boot"), shared by the
//! bench (`bin/boot.rs`, which prints) and a claims check.
//!
//! Three VMMs boot the same L2 PVH vmlinux, initramfs and command line inside
//! the nested harness's L1, runs alternating: xvmm, QEMU `microvm` (qboot, no
//! ACPI, no option ROMs: [`xvmm_harness::MICROVM`]) and QEMU `pc` (SeaBIOS).
//! Two command lines each:
//! - `quiet` (the harness's usual one): time from VMM start to the guest's
//!   `/init` marker, the guest's uptime then, and memory at the marker;
//! - `console` (no `quiet`, `earlyprintk` on the serial port): time from VMM
//!   start to the kernel's first console byte, stamped by `l1-init` from
//!   outside the guest (QEMU writes each byte as it comes; xvmm writes
//!   whole lines, so its first byte is stamped with its first line's end),
//!   and the guest's clocks from its log ([`GuestClock`]). Subtracting
//!   that time from the time to `/init` gives the kernel's time by the
//!   outside clock, which does not depend on how each VMM starts the
//!   guest's clock.
//!
//! VMM memory overhead: the VMM's resident memory at the marker minus guest
//! RAM's (every guest page touched, by the guest or by the VMM loading it,
//! is resident there; `xvmm_init::memory::split_rss`), from
//! `/proc/PID/smaps`.

use xvmm_harness::{self as harness, l1, HarnessRun, Outcome, Step, StepResult, MARKER};

/// The VMMs compared, in the order each round runs them.
pub const VMMS: [&str; 3] = ["xvmm", "microvm", "pc"];

/// The command line variants (see the module comment).
pub const QUIET: &str = "quiet";
pub const CONSOLE: &str = "console";

/// The `console` variant's command line: the harness's without `quiet`, with
/// the kernel's earliest console on the serial port.
pub fn console_cmdline() -> String {
    harness::l2_cmdline("exit:0")
        .replace(" quiet ", " earlyprintk=serial,ttyS0,115200 printk.time=1 ")
}

fn argv(vmm: &str, cmdline: &str) -> Vec<String> {
    match vmm {
        "xvmm" => {
            // Its pre-kernel profile goes to stderr, off the console's stdout.
            let mut argv = harness::xvmm_argv(l1::L2_VMLINUX, cmdline, 120);
            argv.push("--verbose".into());
            argv
        }
        "microvm" => harness::qemu_microvm_argv(l1::L2_VMLINUX, cmdline),
        _ => harness::qemu_argv(l1::L2_VMLINUX, cmdline),
    }
}

fn step(name: String, argv: Vec<String>) -> Step {
    Step {
        name,
        timeout_secs: 180,
        marker: Some(MARKER.into()),
        stop_at_marker: true,
        argv,
    }
}

/// The plan: one warm-up per VMM, then `runs` rounds of every VMM with
/// each command line, alternating. Step names are `VMM-VARIANT-ROUND`.
pub fn plan(runs: usize) -> Vec<Step> {
    let quiet = harness::l2_cmdline("exit:0");
    let console = console_cmdline();
    let mut plan: Vec<Step> = VMMS
        .iter()
        .map(|v| step(format!("warmup-{v}"), argv(v, &quiet)))
        .collect();
    for i in 0..runs {
        for (variant, cmdline) in [(QUIET, &quiet), (CONSOLE, &console)] {
            for v in VMMS {
                plan.push(step(format!("{v}-{variant}-{i}"), argv(v, cmdline)));
            }
        }
    }
    plan
}

/// One line of `xvmm --verbose`'s pre-kernel profile: (phase, ms).
pub fn profile_line(line: &str) -> Option<(&str, f64)> {
    let (ms, phase) = line.strip_prefix("xvmm: boot:")?.split_once(" ms  ")?;
    Some((phase, ms.trim().parse().ok()?))
}

/// The median of each pre-kernel phase over xvmm's measured runs, in the
/// order xvmm printed them.
pub fn profile(run: &HarnessRun) -> Vec<(String, f64)> {
    let mut phases: Vec<(String, Vec<f64>)> = Vec::new();
    for step in run.steps.iter().filter(|s| s.name.starts_with("xvmm-")) {
        for (phase, ms) in run.output(&step.name).into_iter().filter_map(profile_line) {
            match phases.iter_mut().find(|(p, _)| p == phase) {
                Some((_, v)) => v.push(ms),
                None => phases.push((phase.to_string(), vec![ms])),
            }
        }
    }
    phases
        .into_iter()
        .filter_map(|(p, v)| Some((p, median(v)?)))
        .collect()
}

pub use crate::median;

/// One VMM's measured runs of one variant that reached the marker, with
/// the guest uptime each printed there.
pub struct Runs<'a> {
    pub runs: Vec<(&'a StepResult, Option<f64>)>,
}

impl<'a> Runs<'a> {
    pub fn of(run: &'a HarnessRun, vmm: &str, variant: &str) -> Runs<'a> {
        let prefix = format!("{vmm}-{variant}-");
        Runs {
            runs: run
                .steps
                .iter()
                .filter(|s| s.name.starts_with(&prefix) && s.outcome == Outcome::StoppedAtMarker)
                .map(|s| (s, run.guest_uptime(&s.name).map(|u| u * 1e3)))
                .collect(),
        }
    }

    fn each(&self, f: impl Fn(&StepResult, Option<f64>) -> Option<f64>) -> Vec<f64> {
        self.runs.iter().filter_map(|(s, u)| f(s, *u)).collect()
    }

    /// VMM start to `/init`, ms.
    pub fn to_init(&self) -> Vec<f64> {
        self.each(|s, _| s.marker_ms)
    }
    /// VMM start to the first console byte, ms.
    pub fn to_first_byte(&self) -> Vec<f64> {
        self.each(|s, _| s.first_byte_ms)
    }
    /// First console line to `/init` by the outside clock, ms.
    pub fn byte_to_init(&self) -> Vec<f64> {
        self.each(|s, _| Some(s.marker_ms? - s.first_byte_ms?))
    }
    /// The guest's own uptime at `/init`, ms.
    pub fn uptime(&self) -> Vec<f64> {
        self.each(|_, u| u)
    }
    /// VMM start to `/init` less the guest's uptime then, ms.
    pub fn before_clock(&self) -> Vec<f64> {
        self.each(|s, u| Some(s.marker_ms? - u?))
    }
    /// Resident memory besides guest RAM at the marker, KiB.
    pub fn overhead_kib(&self) -> Vec<f64> {
        self.each(|s, _| s.other_rss_kib.map(|k| k as f64))
    }
    /// What each run's kernel log says about the guest's clocks.
    pub fn clocks(&self, run: &HarnessRun) -> Vec<GuestClock> {
        self.runs
            .iter()
            .map(|(s, _)| GuestClock::of(&run.output(&s.name)))
            .collect()
    }
    /// Guest RAM resident at the marker, KiB.
    pub fn guest_kib(&self) -> Vec<f64> {
        self.each(|s, _| s.guest_rss_kib.map(|k| k as f64))
    }
}

/// What a `console` run's kernel log says about the guest's clocks, ms:
/// from the VM's creation to the kernel's kvmclock set-up (KVM's clock,
/// `kvm-clock: using sched offset of N cycles` at the `tsc: Detected`
/// rate), and how far the guest's time of day (which `/proc/uptime`
/// follows) lagged its kvmclock-based sched_clock when the kernel marked
/// sched_clock stable: until `clocksource: Switched to clocksource
/// kvm-clock` the kernel keeps time in jiffies, and a nested guest loses
/// ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GuestClock {
    pub vm_to_kvmclock_ms: Option<f64>,
    pub uptime_lag_ms: Option<f64>,
}

/// The number after `key` on `line`, up to the next space, `,` or `)`.
fn number_after(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    let end = rest.find([' ', ',', ')']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

impl GuestClock {
    pub fn of(lines: &[&str]) -> GuestClock {
        let find = |key: &str| lines.iter().find(|l| l.contains(key)).copied();
        let mhz = find("tsc: Detected ").and_then(|l| number_after(l, "tsc: Detected "));
        let cycles = find("kvm-clock: using sched offset of ")
            .and_then(|l| number_after(l, "kvm-clock: using sched offset of "));
        // "sched_clock: Marking stable (KTIME, OFFSET)->(SCHED, OFFSET)", ns.
        let lag = find("sched_clock: Marking stable (").and_then(|l| {
            let ktime = number_after(l, "Marking stable (")?;
            let sched = number_after(l, ")->(")?;
            Some((sched - ktime) / 1e6)
        });
        GuestClock {
            vm_to_kvmclock_ms: cycles.zip(mhz).map(|(c, m)| c / m / 1e3),
            uptime_lag_ms: lag,
        }
    }
}

/// The figures issue 25 asks for, medians over the measured runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    /// xvmm / microvm, time from VMM start to `/init` (target <= 0.45).
    pub init_vs_microvm: Option<f64>,
    /// xvmm / pc, the same.
    pub init_vs_pc: Option<f64>,
    /// xvmm / microvm, time from VMM start to the first console byte
    /// (target <= 0.15).
    pub first_byte_vs_microvm: Option<f64>,
    /// xvmm / microvm, the kernel's time by the outside clock: the median
    /// time to `/init` (quiet) less the median time to the first console
    /// line (console runs; nothing is printed before it, so `quiet` does
    /// not change it).
    pub kernel_vs_microvm: Option<f64>,
    /// xvmm / microvm, guest uptime at `/init`.
    pub uptime_vs_microvm: Option<f64>,
    /// xvmm's memory overhead at the marker, MiB (target <= 3).
    pub xvmm_overhead_mib: Option<f64>,
}

pub const TARGET_INIT: f64 = 0.45;
pub const TARGET_FIRST_BYTE: f64 = 0.15;
pub const TARGET_OVERHEAD_MIB: f64 = 3.0;

/// A VMM's kernel time by the outside clock (see
/// [`Figures::kernel_vs_microvm`]), ms.
pub fn kernel_ms(run: &HarnessRun, vmm: &str) -> Option<f64> {
    let to_init = median(Runs::of(run, vmm, QUIET).to_init())?;
    Some(to_init - median(Runs::of(run, vmm, CONSOLE).to_first_byte())?)
}

fn ratio(a: Vec<f64>, b: Vec<f64>) -> Option<f64> {
    median(a).zip(median(b)).map(|(a, b)| a / b)
}

impl Figures {
    pub fn of(run: &HarnessRun) -> Figures {
        let q = |v| Runs::of(run, v, QUIET);
        let c = |v| Runs::of(run, v, CONSOLE);
        Figures {
            init_vs_microvm: ratio(q("xvmm").to_init(), q("microvm").to_init()),
            init_vs_pc: ratio(q("xvmm").to_init(), q("pc").to_init()),
            first_byte_vs_microvm: ratio(c("xvmm").to_first_byte(), c("microvm").to_first_byte()),
            kernel_vs_microvm: kernel_ms(run, "xvmm")
                .zip(kernel_ms(run, "microvm"))
                .map(|(a, b)| a / b),
            uptime_vs_microvm: ratio(q("xvmm").uptime(), q("microvm").uptime()),
            xvmm_overhead_mib: median(q("xvmm").overhead_kib()).map(|k| k / 1024.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_alternates_every_vmm_and_variant() {
        let p = plan(2);
        let names: Vec<&str> = p.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names.len(), 3 + 2 * 6);
        assert_eq!(p[3].argv.last().unwrap(), "--verbose");
        assert_eq!(
            &names[..4],
            ["warmup-xvmm", "warmup-microvm", "warmup-pc", "xvmm-quiet-0"]
        );
        assert_eq!(
            &names[4..9],
            [
                "microvm-quiet-0",
                "pc-quiet-0",
                "xvmm-console-0",
                "microvm-console-0",
                "pc-console-0"
            ]
        );
        let cmdline = |s: &Step| s.argv.iter().any(|a| a.contains(" quiet "));
        assert!(cmdline(&p[3]) && !cmdline(&p[6]));
        assert!(p[6].argv.iter().any(|a| a.contains("earlyprintk=serial")));
        assert!(p[4].argv.iter().any(|a| a.starts_with("microvm,")));
    }

    #[test]
    fn profile_lines_parse() {
        assert_eq!(
            profile_line("xvmm: boot:   36.782 ms  VM, guest memory"),
            Some(("VM, guest memory", 36.782))
        );
        assert_eq!(profile_line("xvmm: other"), None);
        assert_eq!(profile_line("xvmm: boot: x ms  y"), None);
    }

    #[test]
    fn guest_clocks_come_from_the_kernel_log() {
        let log = [
            "[    0.000000] kvm-clock: using sched offset of 932061635 cycles",
            "[    0.063694] tsc: Detected 2445.404 MHz processor",
            "[    3.934962] sched_clock: Marking stable (3431990470, 502651402)->(4805585405, -870943533)",
        ];
        let c = GuestClock::of(&log);
        let ms = c.vm_to_kvmclock_ms.unwrap();
        assert!((ms - 381.14).abs() < 0.01, "{ms}");
        let lag = c.uptime_lag_ms.unwrap();
        assert!((lag - 1373.594935).abs() < 1e-6, "{lag}");
        assert_eq!(GuestClock::of(&log[..1]), GuestClock::default());
    }

    #[test]
    fn median_and_ratio() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(ratio(vec![1.0, 2.0, 3.0], vec![4.0, 4.0, 8.0]), Some(0.5));
        assert_eq!(ratio(vec![], vec![1.0]), None);
    }
}
