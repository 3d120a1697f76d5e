//! Booting a Linux guest: `xvmm --kernel PATH [--initrd PATH] [--cmdline STR]
//! [--mem MiB] [--timeout SECS] [--pin CPU] [--json FILE] [--quiet]`.
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
//! Results the guest sent through the doorbell are printed (or written to `--json`).

use crate::arch::x86_64::{msr, regs};
use crate::boot::{self, image};
use crate::cli::{OnOff, RunArgs};
use crate::devices::serial::{ConsoleOut, ConsoleWatch, Uart};
use crate::devices::PortBus;
use crate::vcpu::{self, GuestEnd, RunControl, Vcpu, VcpuConfig};
use crate::vm::{Vm, VmConfig};
use crate::{layout, Error, Result};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Guest memory when `--mem` is not given.
pub const DEFAULT_MEM_MIB: u64 = 512;

/// Boots the Linux kernel named by `args.kernel`.
pub fn run(args: &RunArgs) -> Result<()> {
    let kernel_path = args
        .kernel
        .as_deref()
        .ok_or_else(|| Error::Usage("--kernel is required to boot Linux".into()))?;
    reject_microguest_options(args)?;
    let mem_mib = args.mem.unwrap_or(DEFAULT_MEM_MIB);
    let mem_bytes = mem_mib
        .checked_mul(1 << 20)
        .ok_or_else(|| Error::Memory(format!("--mem {mem_mib} MiB is not a representable size")))?;

    let mut kernel = open_input(kernel_path, Error::Kernel)?;
    let image = image::inspect(&kernel).map_err(|e| match e {
        Error::Kernel(m) => Error::Kernel(format!("{}: {m}", kernel_path.display())),
        other => other,
    })?;
    let mut initrd = match &args.initrd {
        Some(p) => Some(open_input(p, Error::Initrd)?),
        None => None,
    };
    let initrd_size = initrd.as_ref().map(|f| f.metadata().map_or(0, |m| m.len()));
    let cmdline = args
        .cmdline
        .clone()
        .unwrap_or_else(boot::cmdline::default_cmdline);
    let plan = boot::plan(image, mem_bytes, initrd_size, &cmdline)?;
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
    let entry = boot::load(&vm.memory, &vm.ram, &plan, &mut kernel, initrd.as_mut())?;
    drop(kernel);
    drop(initrd);
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
    let control = RunControl::new(Duration::from_secs(args.timeout))?;
    let mut running = control.attach(&mut vcpu);
    let outcome = vcpu::run_to_end(&mut running, &mut bus, &vm.memory);
    drop(running);
    bus.flush();
    let outcome = outcome?;

    if let Some(report) = &outcome.results {
        emit_results(report, args.json.as_deref())?;
    }
    match outcome.end {
        GuestEnd::Exit(0) => Ok(()),
        GuestEnd::Exit(status) => Err(Error::GuestExit(status)),
        GuestEnd::Reset | GuestEnd::PowerOff => match panic_line.get() {
            Some(line) => Err(Error::Guest(format!("kernel panic: {line}"))),
            None => Ok(()),
        },
    }
}

/// Options that only make sense for the built-in microguest (or are not wired
/// to Linux guests yet) are refused rather than silently ignored.
fn reject_microguest_options(args: &RunArgs) -> Result<()> {
    let unsupported = [
        (args.samples.is_some(), "--samples"),
        (args.warmup.is_some(), "--warmup"),
        (args.raw, "--raw"),
        (args.trace, "--trace"),
        (args.baseline.is_some(), "--baseline"),
    ];
    match unsupported.iter().find(|(given, _)| *given) {
        Some((_, name)) => Err(Error::Usage(format!(
            "{name} is not supported with --kernel (pass measurement options to xperf on the guest command line)"
        ))),
        None => Ok(()),
    }
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
fn emit_results(report: &xvmm_results::Report, json: Option<&Path>) -> Result<()> {
    match json {
        Some(p) if p == Path::new("-") => println!("{}", report.to_json_pretty()),
        Some(p) => {
            write_atomically(p, report.to_json_pretty().as_bytes())?;
            print!("{}", crate::report::microguest_tables(report));
        }
        None => print!("{}", crate::report::microguest_tables(report)),
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a
/// rename, so that readers never see a half-written file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| Error::Io(format!("{}: not a file name", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io("cannot write", path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_the_file() {
        let dir = std::env::temp_dir().join(format!("xvmm-linux-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left");
        let err = write_atomically(&dir.join("missing/x.json"), b"x").unwrap_err();
        assert!(err.to_string().starts_with("io: cannot write"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn input_checks() {
        let err = input_size(Path::new("/nonexistent/k"), Error::Kernel).unwrap_err();
        assert_eq!(err.to_string(), "kernel: /nonexistent/k: no such file");
        let err = input_size(Path::new("/"), Error::Initrd).unwrap_err();
        assert_eq!(err.to_string(), "initrd: /: not a regular file");
    }
}
