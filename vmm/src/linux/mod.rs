//! Booting a Linux guest: `xvmm --kernel PATH [--initrd PATH] [--cmdline STR]
//! [--mem MiB] [--timeout SECS] [--pin CPU] [--json FILE] [--quiet]
//! [--samples N] [--warmup N] [--raw] [--trace] [--baseline FILE]`.
//!
//! Without `--initrd` the guest runs the built-in initramfs: the static xperf
//! as `/init` ([`builtin`]); `--samples`, `--warmup` and `--raw`
//! become its arguments (after ` -- ` on the kernel command line) and the
//! default command line gains `xperf_stamps=1`. With `--initrd` those three
//! options are usage errors: the user's command line carries init's arguments.
//!
//! Order: every input is checked before KVM is touched (kernel format and size,
//! initrd fit, command line length, memory size), then the VM is built (in-kernel
//! irqchip + PIT, one vCPU with LINT0 = ExtINT / LINT1 = NMI, UART on IRQ 4 through
//! an irqfd), the kernel is loaded and run until it ends the VM:
//! - PORT_EXIT 0, i8042 reset (`reboot=k`) or power-off: exit 0; after a
//!   "Kernel panic" line on the console, a reset is reported as the panic;
//! - PORT_EXIT n: exit n;
//! - triple fault, KVM internal error, failed entry: a one-line error with RIP;
//! - `--timeout` passes: exit 124; Ctrl-C/SIGTERM: exit 130.
//!
//! Results the guest sent through the doorbell are printed (or written to
//! `--json`), with the host's KVM module and machine added as a note. A
//! built-in xperf that ends cleanly without results is an error. `--trace`
//! times the vCPU thread's exits on the host (`report.host_exits` and a table);
//! `--baseline BARE.json` prints the VM vs bare-metal comparison after the
//! results and, with `--json FILE`, writes it to `FILE.compare.json`. With
//! `--json -` stdout holds only the JSON report; the extra tables go to stderr.

pub mod builtin;

use crate::app::cli::{OnOff, RunArgs};
use crate::arch::x86_64::{msr, regs};
use crate::boot::{self, image};
use crate::devices::serial::{ConsoleOut, ConsoleWatch, Uart};
use crate::devices::PortBus;
use crate::host_trace::{ExitTracer, TraceSummary};
use crate::vcpu::{self, GuestEnd, RunControl, Vcpu, VcpuConfig};
use crate::vm::{Vm, VmConfig};
use crate::{layout, Error, Result};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use xvmm_results::{HostExit, Report};

/// Guest memory when `--mem` is not given.
pub const DEFAULT_MEM_MIB: u64 = 512;

/// The guest's userspace: the user's `--initrd`, or the built-in initramfs
/// with the static xperf as `/init`.
enum GuestInit {
    User(std::fs::File),
    BuiltIn(std::io::Cursor<Vec<u8>>),
}

impl GuestInit {
    fn size(&self) -> u64 {
        match self {
            GuestInit::User(f) => f.metadata().map_or(0, |m| m.len()),
            GuestInit::BuiltIn(c) => c.get_ref().len() as u64,
        }
    }
}

/// Boots the Linux kernel named by `args.kernel`.
pub fn run(args: &RunArgs) -> Result<()> {
    let kernel_path = args
        .kernel
        .as_deref()
        .ok_or_else(|| Error::Usage("--kernel is required to boot Linux".into()))?;
    check_options(args)?;
    let mem_mib = args.mem.unwrap_or(DEFAULT_MEM_MIB);
    let mem_bytes = mem_mib
        .checked_mul(1 << 20)
        .ok_or_else(|| Error::Memory(format!("--mem {mem_mib} MiB is not a representable size")))?;

    let mut kernel = open_input(kernel_path, Error::Kernel)?;
    let image = image::inspect(&kernel).map_err(|e| match e {
        Error::Kernel(m) => Error::Kernel(format!("{}: {m}", kernel_path.display())),
        other => other,
    })?;
    let baseline = args.baseline.as_deref().map(read_baseline).transpose()?;
    let (mut init, cmdline) = match &args.initrd {
        Some(p) => (
            GuestInit::User(open_input(p, Error::Initrd)?),
            args.cmdline
                .clone()
                .unwrap_or_else(boot::cmdline::default_cmdline),
        ),
        None => {
            let xperf = builtin::locate_xperf()?;
            let cpio = builtin::xperf_initramfs(&xperf.bytes)?;
            let xperf_args = builtin::xperf_args(args.samples, args.warmup, args.raw);
            let cmdline = builtin::xperf_cmdline(
                args.cmdline.as_deref(),
                &boot::cmdline::default_cmdline(),
                &xperf_args,
            );
            (GuestInit::BuiltIn(std::io::Cursor::new(cpio)), cmdline)
        }
    };
    let built_in = matches!(init, GuestInit::BuiltIn(_));
    let plan = boot::plan(image, mem_bytes, Some(init.size()), &cmdline)?;
    crate::vm::check_memory_size(mem_bytes, crate::vm::host_available_bytes())?;

    let vm = Vm::new(&VmConfig {
        mem_bytes,
        irqchip: true,
    })?;
    let mut vcpu = Vcpu::new(
        &vm,
        &VcpuConfig {
            id: 0,
            nr_vcpus: 1,
            tsc_khz: args.tsc_khz,
            tsc_offset: args.tsc_offset,
            async_pf: args.async_pf == OnOff::On,
        },
    )?;
    let entry = match &mut init {
        GuestInit::User(f) => boot::load(&vm.memory, &vm.ram, &plan, &mut kernel, Some(f))?,
        GuestInit::BuiltIn(c) => boot::load(&vm.memory, &vm.ram, &plan, &mut kernel, Some(c))?,
    };
    drop(kernel);
    drop(init);
    regs::setup_boot_cpu(&vcpu.fd, &vm.memory, &entry)?;
    msr::setup_boot_msrs(&vcpu.fd)?;
    regs::setup_lint(&vcpu.fd)?;

    let interactive = !args.quiet && stdin_is_tty();
    let (console, panic_line) = console(args.quiet, interactive);
    let uart = Uart::new(console)?;
    vm.fd
        .register_irqfd(uart.interrupt_evt(), layout::UART_IRQ)
        .map_err(|e| {
            Error::Kvm(format!(
                "KVM_IRQFD for the UART (IRQ {}) failed: {e}",
                layout::UART_IRQ
            ))
        })?;
    let uart = Arc::new(Mutex::new(uart));
    if interactive {
        forward_stdin(Arc::clone(&uart));
    }
    let mut bus = PortBus::new(Some(uart));

    if let Some(cpu) = args.pin {
        vcpu::pin_current_thread(cpu)?;
    }
    // Signal handlers first, so that a Ctrl-C while the tracer is set up still
    // lets its Drop restore tracefs.
    let control = RunControl::new(Duration::from_secs(args.timeout))?;
    // The vCPU runs on this thread: trace exactly its exits.
    let tracer = if args.trace {
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        Some(ExitTracer::start(&[tid])?)
    } else {
        None
    };
    control.check()?;
    // A Linux without ACPI powers off by halting with interrupts off, which the
    // in-kernel LAPIC keeps from us: look at a vCPU that sleeps for a second.
    control.set_idle_probe(Some(Duration::from_secs(1)));
    let mut running = control.attach(&mut vcpu);
    let outcome = vcpu::run_to_end(&mut running, &mut bus, &vm.memory);
    drop(running);
    bus.flush();
    let trace = tracer.map(ExitTracer::finish).transpose();
    let outcome = outcome?;
    let trace = trace?;

    let guest_ok = match outcome.end {
        GuestEnd::Exit(0) => Ok(()),
        GuestEnd::Exit(status) => Err(Error::GuestExit(status)),
        GuestEnd::Halted(rip) => {
            if !args.quiet {
                eprintln!(
                    "xvmm: the guest halted with interrupts off at RIP {rip:#x} \
                     (Linux's power-off without ACPI); taken as a power-off"
                );
            }
            match panic_line.get() {
                Some(line) => Err(Error::Guest(format!("kernel panic: {line}"))),
                None => Ok(()),
            }
        }
        GuestEnd::Reset | GuestEnd::PowerOff => match panic_line.get() {
            Some(line) => Err(Error::Guest(format!("kernel panic: {line}"))),
            None => Ok(()),
        },
    };
    let json_to_stdout = args.json.as_deref() == Some(Path::new("-"));
    match outcome.results {
        Some(mut report) => {
            add_host_view(&mut report, trace.as_ref());
            emit_results(&report, args.json.as_deref(), args.quiet)?;
            let extra = extra_tables(
                &report,
                trace.is_some(),
                baseline.as_ref(),
                args.json.as_deref(),
            )?;
            if args.quiet {
                // --quiet: the JSON is the only output.
            } else if json_to_stdout {
                eprint!("{extra}");
            } else {
                print!("{extra}");
            }
        }
        None => {
            if let Some(t) = &trace {
                eprint!("{}", host_exit_table(&t.exits));
            }
            if guest_ok.is_ok() {
                if built_in {
                    return Err(Error::Guest("guest ended without sending results".into()));
                }
                // Only worth a word when results were asked for: a user's own
                // initramfs need not run xperf at all.
                if let Some(path) = &args.json {
                    eprintln!(
                        "xvmm: warning: the guest sent no results; nothing written to {}",
                        path.display()
                    );
                }
            }
        }
    }
    guest_ok
}

/// `--samples`, `--warmup` and `--raw` become xperf arguments, so they need
/// the built-in xperf; with a user `--initrd` the user's command line (after
/// ` -- `) is where such options go.
fn check_options(args: &RunArgs) -> Result<()> {
    if args.initrd.is_none() {
        return Ok(());
    }
    let xperf_only = [
        (args.samples.is_some(), "--samples"),
        (args.warmup.is_some(), "--warmup"),
        (args.raw, "--raw"),
    ];
    match xperf_only.iter().find(|(given, _)| *given) {
        Some((_, name)) => Err(Error::Usage(format!(
            "{name} is passed to the built-in xperf and cannot be used with --initrd (put init arguments after ' -- ' in --cmdline)"
        ))),
        None => Ok(()),
    }
}

/// Reads the bare-metal report given with `--baseline`.
fn read_baseline(path: &Path) -> Result<Report> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("cannot read", path, e))?;
    Report::from_json(&text)
        .map_err(|e| Error::Usage(format!("--baseline {}: {e}", path.display())))
}

/// Adds what only the host knows: its KVM module (the guest sees none) and a
/// note with the host's own characterisation, plus the traced exits. The
/// report keeps the guest's view in `host` and `machine`; nothing is replaced.
fn add_host_view(report: &mut Report, trace: Option<&TraceSummary>) {
    let host = xvmm_results::Machine::probe();
    if report.host.kvm_module.is_empty() {
        report.host.kvm_module = host.kvm_module.clone();
    }
    report.notes.push(host_note(&host));
    if let Some(t) = trace {
        report.host_exits = t.exits.clone();
        report.notes.push(format!(
            "host exits traced with kvm:kvm_exit/kvm_entry on the vCPU thread: {} unpaired events, {} lost to buffer overruns",
            t.unpaired, t.lost
        ));
    }
}

/// One line describing the VMM's host (the guest's own view is in `machine`).
fn host_note(m: &xvmm_results::Machine) -> String {
    format!(
        "VMM host: {} ({}), {} logical CPUs, TSC {} kHz ({}), kernel {}, KVM module {}, halt_poll_ns {}, clocksource {}",
        or_unknown(&m.cpu_model),
        or_unknown(&m.cpu_signature),
        m.logical_cpus,
        m.tsc_khz,
        or_unknown(&m.tsc_khz_source),
        or_unknown(&m.kernel_release),
        or_unknown(&m.kvm_module),
        m.kvm_params
            .get("halt_poll_ns")
            .map_or("unknown", String::as_str),
        or_unknown(&m.clocksource),
    )
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() {
        "unknown"
    } else {
        s
    }
}

/// The host-exit table (when `traced`) and the `--baseline` comparison, printed after the
/// results. With `--json FILE` the comparison is also written to
/// `FILE.compare.json`, so that `FILE` stays an xvmm-results report.
fn extra_tables(
    report: &Report,
    traced: bool,
    baseline: Option<&Report>,
    json: Option<&Path>,
) -> Result<String> {
    let mut out = String::new();
    if traced {
        out.push('\n');
        out += &host_exit_table(&report.host_exits);
    }
    if let Some(bare) = baseline {
        let comparison = crate::report::compare(report, bare);
        out.push('\n');
        out += &crate::report::comparison_table(&comparison);
        if let Some(path) = json.filter(|p| *p != Path::new("-")) {
            let file = comparison_path(path);
            let text = serde_json::to_string_pretty(&comparison)
                .map_err(|e| Error::Io(format!("cannot serialise the comparison: {e}")))?;
            write_atomically(&file, text.as_bytes())?;
            out += &format!("comparison written to {}\n", file.display());
        }
    }
    Ok(out)
}

/// `FILE.compare.json` next to the `--json FILE`.
fn comparison_path(json: &Path) -> std::path::PathBuf {
    let mut name = json.as_os_str().to_owned();
    name.push(".compare.json");
    name.into()
}

/// Host-side exit-to-entry times per exit reason (TSC ticks).
pub fn host_exit_table(exits: &[HostExit]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "host exits (kvm_exit -> kvm_entry, host TSC ticks)\n{:<24} {:>9} {:>9} {:>9}",
        "reason", "count", "median", "p99"
    );
    for e in exits {
        let s = &e.exit_to_entry;
        let _ = writeln!(
            out,
            "{:<24} {:>9} {:>9} {:>9}",
            e.reason, s.count, s.median, s.p99
        );
    }
    if exits.is_empty() {
        out += "(no exits traced)\n";
    }
    out
}

/// Opens an input file; missing, unreadable and empty files are errors of the
/// kind `wrap` makes.
fn open_input(path: &Path, wrap: fn(String) -> Error) -> Result<std::fs::File> {
    input_size(path, wrap)?;
    std::fs::File::open(path).map_err(|e| wrap(format!("{}: cannot open: {e}", path.display())))
}

/// Size of an input file, checking that it exists, is a file and is not empty.
fn input_size(path: &Path, wrap: fn(String) -> Error) -> Result<u64> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => wrap(format!("{shown}: no such file")),
        _ => wrap(format!("{shown}: {e}")),
    })?;
    if !meta.is_file() {
        return Err(wrap(format!("{shown}: not a regular file")));
    }
    if meta.len() == 0 {
        return Err(wrap(format!("{shown}: file is empty")));
    }
    Ok(meta.len())
}

/// Flushes after every write, so that a prompt without a newline shows up.
struct Unbuffered<W: Write>(W);

impl<W: Write> Write for Unbuffered<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        self.0.flush()?;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The console writer, watched for panics: nothing (`--quiet`), stdout flushed
/// per byte when a person is typing, else stdout line-buffered (one write per
/// line instead of one per guest byte).
fn console(quiet: bool, interactive: bool) -> (ConsoleOut, Arc<OnceLock<String>>) {
    if quiet {
        let (watch, panic) = ConsoleWatch::new(std::io::sink());
        (Box::new(watch), panic)
    } else if interactive {
        let (watch, panic) = ConsoleWatch::new(Unbuffered(std::io::stdout()));
        (Box::new(watch), panic)
    } else {
        let (watch, panic) = ConsoleWatch::new(std::io::stdout());
        (Box::new(watch), panic)
    }
}

/// Whether stdin is a terminal.
fn stdin_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDIN_FILENO) == 1 }
}

/// Forwards what is typed on the terminal to the guest's UART. Only for a
/// terminal, so that xvmm never swallows a pipe meant for someone else.
fn forward_stdin(uart: Arc<Mutex<Uart>>) {
    let spawned = std::thread::Builder::new()
        .name("xvmm-stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin();
            while let Ok(n) = stdin.read(&mut buf) {
                if n == 0 {
                    return;
                }
                let mut pending = &buf[..n];
                while !pending.is_empty() {
                    let taken = uart
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .enqueue_input(pending);
                    pending = &pending[taken..];
                    if !pending.is_empty() {
                        // The guest has not drained its FIFO yet.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        });
    // Without stdin forwarding the guest still runs; nothing to report.
    drop(spawned);
}

/// Prints the guest's results as tables, and writes them as JSON to `json`
/// ("-" = stdout instead of the tables).
/// With `quiet`, only the JSON is written.
fn emit_results(report: &xvmm_results::Report, json: Option<&Path>, quiet: bool) -> Result<()> {
    match json {
        Some(p) if p == Path::new("-") => println!("{}", report.to_json_pretty()),
        Some(p) => {
            write_atomically(p, report.to_json_pretty().as_bytes())?;
            if !quiet {
                print!("{}", crate::report::microguest_tables(report));
            }
        }
        None => print!("{}", crate::report::microguest_tables(report)),
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically (see [`xvmm_results::write_atomically`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    xvmm_results::write_atomically(path, bytes).map_err(|e| Error::io("cannot write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_errors_are_one_line() {
        let dir = std::env::temp_dir().join(format!("xvmm-linux-test-{}", std::process::id()));
        let err = write_atomically(&dir.join("missing/x.json"), b"x").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("io: cannot write") && !text.contains('\n'),
            "{text}"
        );
    }

    fn run_args(extra: &[&str]) -> RunArgs {
        use clap::Parser;
        let mut argv = vec!["xvmm", "--kernel", "k"];
        argv.extend_from_slice(extra);
        crate::app::cli::Cli::try_parse_from(argv).unwrap().run
    }

    #[test]
    fn xperf_options_need_the_built_in_initramfs() {
        for ok in [
            &["--samples", "5", "--warmup", "0", "--raw"][..],
            &["--initrd", "i", "--trace", "--pin", "0"],
        ] {
            assert!(check_options(&run_args(ok)).is_ok(), "{ok:?}");
        }
        for (bad, name) in [
            (&["--initrd", "i", "--samples", "5"][..], "--samples"),
            (&["--initrd", "i", "--warmup", "5"], "--warmup"),
            (&["--initrd", "i", "--raw"], "--raw"),
        ] {
            let err = check_options(&run_args(bad)).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            assert!(
                err.to_string()
                    .starts_with(&format!("usage: {name} is passed")),
                "{err}"
            );
        }
    }

    fn measured_report(environment: xvmm_results::Environment, ticks: u64) -> Report {
        let mut r = Report::new(
            "xperf test".into(),
            environment,
            Default::default(),
            xvmm_results::Method::standard(0, 3),
        );
        let samples: Vec<xvmm_results::Sample> = (0..3)
            .map(|i| xvmm_results::Sample {
                u2k_u: 100,
                u2k_k: 100 + ticks + i,
                k2u_k: 200 + 2 * ticks,
                k2u_u: 200 + 3 * ticks,
            })
            .collect();
        r.crossings.push(xvmm_results::Crossing::from_samples(
            "getppid", 3, &samples, 0, false,
        ));
        r
    }

    #[test]
    fn host_view_and_traced_exits_are_added_not_replaced() {
        let mut report = measured_report(xvmm_results::Environment::LinuxVm, 100);
        report.host.kvm_module = "guest says".into();
        let trace = TraceSummary {
            exits: vec![HostExit {
                reason: "io".into(),
                exit_to_entry: xvmm_results::Stats::from_samples(&[10, 20, 30]),
            }],
            unpaired: 2,
            lost: 0,
        };
        add_host_view(&mut report, Some(&trace));
        assert_eq!(report.host.kvm_module, "guest says");
        assert!(
            report.notes[0].starts_with("VMM host: "),
            "{:?}",
            report.notes
        );
        assert!(report.notes[1].contains("2 unpaired events, 0 lost"));
        assert_eq!(report.host_exits, trace.exits);
        let table = host_exit_table(&report.host_exits);
        let row = table.lines().find(|l| l.starts_with("io ")).unwrap();
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            ["io", "3", "20", "30"]
        );
        assert!(host_exit_table(&[]).contains("(no exits traced)"));
    }

    #[test]
    fn baseline_comparison_is_printed_and_written_beside_the_json() {
        let dir = std::env::temp_dir().join(format!("xvmm-linux-cmp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let vm = measured_report(xvmm_results::Environment::LinuxVm, 200);
        let bare = measured_report(xvmm_results::Environment::BareMetal, 100);
        let json = dir.join("vm.json");
        let text = extra_tables(&vm, false, Some(&bare), Some(&json)).unwrap();
        assert!(text.contains("getppid"), "{text}");
        let written = std::fs::read_to_string(dir.join("vm.json.compare.json")).unwrap();
        let cmp: crate::report::Comparison = serde_json::from_str(&written).unwrap();
        assert_eq!(cmp, crate::report::compare(&vm, &bare));
        // u2k: 200 vs 100 ticks (plus 0..2 per sample): the VM takes twice as long.
        let u2k = cmp.rows.iter().find(|r| r.interval == "u2k").unwrap();
        assert_eq!((u2k.vm_median, u2k.bare_median), (Some(201), Some(101)));
        // "--json -": nothing written, the table only.
        assert!(extra_tables(&vm, false, Some(&bare), Some(Path::new("-"))).is_ok());
        assert_eq!(extra_tables(&vm, false, None, None).unwrap(), "");
        let traced = extra_tables(&vm, true, None, None).unwrap();
        assert!(traced.contains("(no exits traced)"), "{traced}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_baseline_is_a_one_line_usage_error() {
        let err = read_baseline(Path::new("/nonexistent.json")).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("io: cannot read /nonexistent.json"));
        let path = std::env::temp_dir().join(format!("xvmm-bad-baseline-{}", std::process::id()));
        std::fs::write(&path, "{\"schema\": 1}").unwrap();
        let err = read_baseline(&path).unwrap_err().to_string();
        assert!(
            err.starts_with("usage: --baseline ") && !err.contains('\n'),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn input_checks() {
        let err = input_size(Path::new("/nonexistent/k"), Error::Kernel).unwrap_err();
        assert_eq!(err.to_string(), "kernel: /nonexistent/k: no such file");
        let err = input_size(Path::new("/"), Error::Initrd).unwrap_err();
        assert_eq!(err.to_string(), "initrd: /: not a regular file");
    }
}
