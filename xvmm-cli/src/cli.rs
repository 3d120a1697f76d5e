//! Command-line interface (clap). Parsing only: no behaviour lives here.
//! Options of the measuring run sit at the top level and conflict with every
//! subcommand, so `xvmm --samples 5 compare a b` is a usage error rather than
//! an option silently ignored.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use xvmm::{Error, Setting};

#[derive(Parser, Debug)]
#[command(
    name = "xvmm",
    version,
    about = "Measure user<->kernel crossing costs under KVM and what the hypervisor adds",
    long_about = "Without --kernel, boots the built-in bare-metal microguest and measures the \
                  hardware floor (#PF, int3, syscall crossings and VM-exit round trips). With \
                  --kernel, boots a (patched) Linux guest that runs xperf.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

impl Cli {
    /// Parses `argv` (the program name first): with `--workload` before a
    /// `--`, the words after that `--` are the workload's arguments.
    pub fn parse_args<I, T>(argv: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString>,
    {
        let mut argv: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
        let dashes = argv.iter().position(|a| a == "--");
        let workload = |a: &std::ffi::OsString| {
            a == "--workload" || a.to_str().is_some_and(|a| a.starts_with("--workload="))
        };
        let tail = match dashes.filter(|&at| argv[..at].iter().any(workload)) {
            Some(at) => {
                let tail = argv.split_off(at + 1);
                argv.pop();
                tail
            }
            None => Vec::new(),
        };
        let mut cli = Cli::try_parse_from(argv)?;
        cli.run.workload_args = tail
            .into_iter()
            .map(|a| {
                a.into_string().map_err(|a| {
                    clap::Error::raw(
                        clap::error::ErrorKind::InvalidUtf8,
                        format!("the workload argument {a:?} is not UTF-8\n"),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(cli)
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build guest and harness kernels, or check a built one's hook sites.
    #[command(subcommand, subcommand_required = true, arg_required_else_help = true)]
    Kernel(KernelCommand),
    /// Write a newc initramfs holding the given files.
    Initramfs(InitramfsArgs),
    /// Compare a VM report with a bare-metal report.
    Compare(CompareArgs),
    /// Characterise this machine: CPU, TSC, hypervisor, KVM module, mitigations.
    Machine(MachineArgs),
    /// Print the tables of a saved xvmm-results report.
    Show(ShowArgs),
    /// Render result files as one self-contained HTML page with charts (or Markdown).
    Report(ReportArgs),
    /// Check that the stamps are linear and the stamp costs runs subtract are right, in the
    /// microguest: the user pair at CPL3, the kernel pair at CPL0, each with negative controls.
    Linearity(LinearityArgs),
}

#[derive(Args, Debug)]
pub struct LinearityArgs {
    /// Samples of each phase of the independent sweep (each decision phase takes half).
    #[arg(long, default_value_t = 8000, value_parser = clap::value_parser!(u64).range(200..=1_000_000))]
    pub samples: u64,
    /// Rounds of the run's own decision (null pair and short sweep), as a run's --rounds.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Seconds the whole check may take.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_SECS))]
    pub timeout: u64,
    /// Write the result as JSON to this file ("-" for stdout; then no table).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Result files written with --json by xvmm or xperf (xperf characterize included).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Where the page goes ("-" for stdout); written atomically once complete.
    #[arg(long, short)]
    pub output: PathBuf,
    /// Write Markdown (tables only) instead of HTML.
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Args, Debug)]
pub struct MachineArgs {
    /// Write the characterisation as JSON to this file ("-" for stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// A report written with --json by xvmm or xperf.
    pub report: PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum KernelCommand {
    /// Build a kernel out of tree (cached by its inputs) and print the paths.
    Build(KernelBuildArgs),
    /// List the xperf hook sites of a built vmlinux and check each is a NOP when off.
    Hooks(KernelHooksArgs),
}

#[derive(Args, Debug)]
pub struct KernelHooksArgs {
    /// An uncompressed vmlinux (with its symbol table) built with the xperf series.
    pub vmlinux: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KernelFlavour {
    /// A small guest kernel (L2): serial console, initrd, PVH, KVM guest.
    Guest,
    /// The nested-harness host kernel (L1): the guest options plus KVM host support.
    Host,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KernelVersion {
    /// Linux 6.12 (Debian's linux-source-6.12).
    #[value(name = "6.12")]
    V6_12,
    /// Linux 6.1 (Debian's linux-source-6.1, the kernel of Debian 12).
    #[value(name = "6.1")]
    V6_1,
}

#[derive(Args, Debug)]
pub struct KernelBuildArgs {
    /// Which kernel to build.
    #[arg(long, value_enum, default_value = "guest")]
    pub flavour: KernelFlavour,
    /// Which Linux release: its Debian linux-source package, its patch
    /// series (patches/linux-VERSION) and its config fragment overrides.
    #[arg(long, value_enum, default_value = "6.12")]
    pub version: KernelVersion,
    /// Apply the measurement patch series from patches/linux-VERSION.
    #[arg(long)]
    pub patched: bool,
    /// A Linux source tree or tarball of that release to build instead of
    /// Debian's linux-source-VERSION.
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// Cache directory (default: $XVMM_CACHE or ~/.cache/xvmm).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Parallel make jobs (default: number of CPUs).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub jobs: Option<usize>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct InitramfsArgs {
    /// Output file.
    #[arg(long, short)]
    pub output: PathBuf,
    /// Entries as GUEST_PATH=HOST_FILE; "/init=..." makes the init.
    #[arg(required = true)]
    pub entries: Vec<String>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Report measured inside a VM.
    pub vm: PathBuf,
    /// Report measured on bare metal with the same kernel and tool.
    pub bare_metal: PathBuf,
    /// Write the comparison as JSON to this file ("-" for stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AsyncPf {
    On,
    Off,
    /// Two runs, on then off, printed side by side.
    Both,
}

/// `--host-fault-delay`: a number with a unit (ns, us, ms, s).
pub fn parse_delay(text: &str) -> Result<std::time::Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} needs a unit: ns, us, ms or s (e.g. 200us)"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let per_unit = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(format!("unknown unit {unit:?}: ns, us, ms or s")),
    };
    n.checked_mul(per_unit)
        .map(std::time::Duration::from_nanos)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// Host CPUs in the order given (`--pin`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Most CPUs a list may name: as many as a `cpu_set_t` holds.
const MAX_LISTED_CPUS: usize = libc::CPU_SETSIZE as usize;

/// `--pin`: comma-separated CPUs and inclusive ranges ("0,2", "4-7"). A
/// CPU the host lacks is the library's to refuse, with the CPUs it has.
pub fn parse_cpu_list(text: &str) -> Result<CpuList, String> {
    let cpus = xvmm_host::cpu_list::parse(text, MAX_LISTED_CPUS)?;
    // u32 into usize: lossless on every target xvmm builds for.
    Ok(CpuList(cpus.into_iter().map(|c| c as usize).collect()))
}

/// Largest `--timeout`: over 11 days, and far from overflowing a deadline.
pub const MAX_TIMEOUT_SECS: u64 = 1_000_000;

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Linux kernel to boot (bzImage or ELF vmlinux with a PVH note).
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Initial ramdisk for the Linux guest (default: the built-in xperf initramfs).
    /// The built-in xperf's options (--samples, --warmup, --rounds, --raw)
    /// do not apply to it: put init arguments after ' -- ' in --cmdline.
    #[arg(long, requires = "kernel", conflicts_with_all = ["samples", "warmup", "rounds", "raw", "interrupt_path"])]
    pub initrd: Option<PathBuf>,
    /// Kernel command line (replaces the default).
    #[arg(long, requires = "kernel")]
    pub cmdline: Option<String>,
    /// Guest memory in MiB (Linux guests).
    #[arg(long, requires = "kernel")]
    pub mem: Option<u64>,
    /// Give up after this many seconds of guest run time (1 to 1000000).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_SECS))]
    pub timeout: u64,
    /// vCPUs of the Linux guest (1 to 254), each run by a host thread of its own.
    #[arg(long, requires = "kernel", default_value_t = 1)]
    pub cpus: u8,
    /// Pin the vCPU threads to these host CPUs, one per vCPU in order (the
    /// microguest: its vCPU, then the IPI rows' receiver): a kernel-style
    /// list such as 2, 0,2 or 4-7.
    #[arg(long, value_parser = parse_cpu_list)]
    pub pin: Option<CpuList>,
    /// Samples per crossing.
    #[arg(long)]
    pub samples: Option<u64>,
    /// Warm-up iterations per crossing before recording.
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Times the whole measurement is repeated (default 3): per-round medians,
    /// their spread and a confidence interval of each median.
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Write the results as JSON to this file ("-" for stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write every figure as OpenMetrics gauges to this file,
    /// atomically (name it *.prom in node_exporter's textfile directory).
    #[arg(long, value_parser = xvmm_results::render::openmetrics::destination)]
    pub openmetrics: Option<PathBuf>,
    /// Keep every sample's four stamps in the JSON.
    #[arg(long)]
    pub raw: bool,
    /// The built-in xperf also measures the interrupt path: a cross-CPU
    /// wake-up and a TLB shootdown (with --cpus 2 or more) and a timer
    /// sleep; under --trace each sample's exits are placed on every vCPU.
    #[arg(long, requires = "kernel")]
    pub interrupt_path: bool,
    /// Guest TSC frequency in kHz (KVM_SET_TSC_KHZ).
    #[arg(long)]
    pub tsc_khz: Option<u32>,
    /// Guest TSC offset in ticks relative to the host TSC (KVM_VCPU_TSC_OFFSET).
    #[arg(long, allow_hyphen_values = true)]
    pub tsc_offset: Option<i64>,
    /// Offer KVM asynchronous page faults to the guest; `both` boots twice
    /// (on, then off) and prints the two side by side (Linux guests; `both`
    /// needs --host-fault-delay, without which no fault goes asynchronous).
    #[arg(
        long,
        value_enum,
        default_value = "off",
        requires_ifs = [("on", "kernel"), ("both", "kernel"), ("both", "host_fault_delay")]
    )]
    pub async_pf: AsyncPf,
    /// Drop pages the guest names on the host and serve their faults after
    /// this delay through userfaultfd (e.g. 200us; 1us to 1s): the built-in
    /// xperf measures pf-host-miss. Implies --trace.
    #[arg(long, value_parser = parse_delay, requires = "kernel")]
    pub host_fault_delay: Option<std::time::Duration>,
    /// Time VM exits on the host with the kvm:kvm_exit/kvm_entry tracepoints.
    #[arg(long)]
    pub trace: bool,
    /// Run this static x86-64 program in the Linux guest under `xperf
    /// workload`, its arguments after ` -- `, and join its system calls,
    /// faults and interrupts with the host's exits (implies --trace). It
    /// lands in /workload/ beside any --workload-file; it is stopped
    /// before --timeout, with what was recorded kept.
    #[arg(
        long,
        requires = "kernel",
        conflicts_with_all = ["initrd", "samples", "warmup", "rounds", "raw", "interrupt_path", "host_fault_delay", "openmetrics"]
    )]
    pub workload: Option<PathBuf>,
    /// A file the workload reads, copied to /workload/ in the guest
    /// (repeatable).
    #[arg(long, requires = "workload")]
    pub workload_file: Vec<PathBuf>,
    /// The workload's arguments: what follows ` -- ` after `--workload`,
    /// split off before clap parses ([`Cli::parse_args`]), since a
    /// positional argument here would make clap take a mistyped
    /// subcommand for one.
    #[arg(skip)]
    pub workload_args: Vec<String>,
    /// Bare-metal xperf report to compare the VM results with (of
    /// `xperf workload` with --workload).
    #[arg(long, requires = "kernel")]
    pub baseline: Option<PathBuf>,
    /// Print nothing but the JSON: no guest console (Linux guest), no
    /// tables or progress (built-in microguest).
    #[arg(long)]
    pub quiet: bool,
    /// Linux guest: print how long each step before the guest's first
    /// instruction took (reading the kernel, building the initramfs, setting
    /// up memory and the vCPU), on stderr as the guest starts.
    #[arg(long, conflicts_with = "quiet")]
    pub verbose: bool,
}

/// The flag that sets a library [`Setting`].
pub fn flag(setting: Setting) -> &'static str {
    match setting {
        Setting::Samples => "--samples",
        Setting::Warmup => "--warmup",
        Setting::Rounds => "--rounds",
        Setting::Timeout => "--timeout",
        Setting::MemoryMib => "--mem",
        Setting::PinCpu => "--pin",
        Setting::TscKhz => "--tsc-khz",
        Setting::HostFaultDelay => "--host-fault-delay",
        Setting::Cpus => "--cpus",
    }
}

/// A library error about a setting, said of the flag that set it (a memory
/// error stays one: its exit status is 1, a usage error's 2).
pub fn in_flag_terms(err: Error) -> Error {
    match err {
        Error::Invalid { setting, text } => {
            let line = format!("{} {text}", flag(setting));
            match setting {
                Setting::MemoryMib => Error::Memory(line),
                _ => Error::Usage(line),
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    const EVERY_SETTING: [Setting; 9] = [
        Setting::Cpus,
        Setting::Samples,
        Setting::Warmup,
        Setting::Rounds,
        Setting::Timeout,
        Setting::MemoryMib,
        Setting::PinCpu,
        Setting::TscKhz,
        Setting::HostFaultDelay,
    ];

    #[test]
    fn every_setting_is_named_by_a_flag_xvmm_has() {
        let cmd = Cli::command();
        let longs: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        for s in EVERY_SETTING {
            assert!(longs.iter().any(|l| l == flag(s)), "{s:?}: {}", flag(s));
        }
    }

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("2").unwrap().0, [2]);
        assert_eq!(parse_cpu_list("0,2").unwrap().0, [0, 2]);
        assert_eq!(parse_cpu_list("4-7,1").unwrap().0, [4, 5, 6, 7, 1]);
        assert_eq!(parse_cpu_list("3-3").unwrap().0, [3]);
        // A CPU past the host's is refused later, naming the host's CPUs.
        assert_eq!(parse_cpu_list("100000").unwrap().0, [100000]);
        for bad in [
            "", "a", "1,", "-1", "2-1", "1-", "0-99999", "0x1", "0-1023,5",
        ] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_cpu_list("0-1023").unwrap().0.len(), 1024);
    }

    #[test]
    fn a_setting_error_is_said_of_its_flag_with_its_kind() {
        let e = in_flag_terms(Setting::PinCpu.invalid("9: no such CPU"));
        assert!(
            matches!(&e, Error::Usage(m) if m == "--pin 9: no such CPU"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "usage: --pin 9: no such CPU");
        let e = in_flag_terms(Setting::MemoryMib.invalid("16 MiB is too small"));
        assert!(
            matches!(&e, Error::Memory(m) if m == "--mem 16 MiB is too small"),
            "{e:?}"
        );
        // The library's own wording names no flag.
        for s in EVERY_SETTING {
            let text = s.invalid("x").to_string();
            assert!(!text.contains("--"), "{text}");
        }
        let other = in_flag_terms(Error::Kvm("k".into()));
        assert!(matches!(other, Error::Kvm(m) if m == "k"));
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::parse_args(std::iter::once("xvmm").chain(args.iter().copied()))
    }

    #[test]
    fn the_workloads_arguments_are_what_follows_the_dashes() {
        let k = ["--kernel", "k", "--workload", "w"];
        let args = |a: &[&str]| parse(&[&k[..], a].concat()).unwrap().run.workload_args;
        assert_eq!(
            args(&["--", "sh", "-c", "--x -- y"]),
            ["sh", "-c", "--x -- y"]
        );
        assert_eq!(args(&["--", "a", "--", "--json"]), ["a", "--", "--json"]);
        assert!(args(&["--"]).is_empty() && args(&[]).is_empty());
        let cli = parse(&["--workload=w", "--kernel", "k", "--json", "-", "--", "x"]).unwrap();
        assert_eq!(
            (cli.run.workload_args, cli.run.json),
            (vec!["x".to_string()], Some(PathBuf::from("-")))
        );
    }

    #[test]
    fn which_flags_apply_to_which_run_is_clap_s_to_say() {
        use clap::error::ErrorKind::{ArgumentConflict, MissingRequiredArgument, ValueValidation};
        let k = ["--kernel", "k"];
        let refused = [
            (&["--mem", "64"][..], MissingRequiredArgument),
            (&["--async-pf", "on"], MissingRequiredArgument),
            (&["--async-pf", "both"], MissingRequiredArgument),
            (&[k[0], k[1], "--async-pf", "both"], MissingRequiredArgument),
            (
                &[k[0], k[1], "--initrd", "i", "--samples", "5"],
                ArgumentConflict,
            ),
            (
                &[k[0], k[1], "--initrd", "i", "--warmup", "5"],
                ArgumentConflict,
            ),
            (
                &[k[0], k[1], "--initrd", "i", "--rounds", "2"],
                ArgumentConflict,
            ),
            (&[k[0], k[1], "--initrd", "i", "--raw"], ArgumentConflict),
            (&["--workload", "w"], MissingRequiredArgument),
            (
                &[k[0], k[1], "--workload-file", "f"],
                MissingRequiredArgument,
            ),
            (&[k[0], k[1], "--", "x"], ArgumentConflict),
            (&["--samples", "5", "machine"], ArgumentConflict),
            (
                &[k[0], k[1], "--workload", "w", "--initrd", "i"],
                ArgumentConflict,
            ),
            (
                &[k[0], k[1], "--workload", "w", "--openmetrics", "m"],
                ArgumentConflict,
            ),
            (&["--timeout", "0"], ValueValidation),
            (&["--timeout", "1000001"], ValueValidation),
        ];
        for (args, kind) in refused {
            let e = parse(args)
                .err()
                .unwrap_or_else(|| panic!("{args:?} accepted"));
            assert_eq!(e.kind(), kind, "{args:?}: {e}");
        }
        for ok in [
            &[k[0], k[1], "--mem", "64"][..],
            &[k[0], k[1], "--async-pf", "on"],
            &[
                k[0],
                k[1],
                "--async-pf",
                "both",
                "--host-fault-delay",
                "1ms",
            ],
            &[k[0], k[1], "--initrd", "i", "--trace", "--pin", "0"],
            &["--async-pf", "off", "--samples", "5", "--raw"],
            &["--timeout", "1"],
            &["--timeout", "1000000"],
        ] {
            assert!(parse(ok).is_ok(), "{ok:?} refused");
        }
    }
}
