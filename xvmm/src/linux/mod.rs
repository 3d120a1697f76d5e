//! Booting a Linux guest and collecting what its xperf measured.
//!
//! Two steps, so that the caller can check every output destination between
//! them: [`prepare`] checks every input before KVM is touched (kernel format
//! and size, initrd fit, command line length, memory size; for the built-in
//! userspace it finds the static xperf and builds the initramfs, see
//! [`builtin`]); [`run`] builds the VM (in-kernel irqchip + PIT, one vCPU with
//! LINT0 = ExtINT / LINT1 = NMI, UART on IRQ 4 through an irqfd), loads the
//! kernel and runs it until it ends the VM:
//! - PORT_EXIT 0, i8042 reset (`reboot=k`) or power-off: a clean end; after a
//!   "Kernel panic" line on the console, a reset is reported as the panic;
//! - PORT_EXIT n: `Error::GuestExit(n)`;
//! - triple fault, KVM internal error, failed entry: a one-line error with RIP;
//! - `timeout` passes, or a stop signal: `Error::Timeout` / `Error::Interrupted`.
//!
//! Whatever the end, the results the guest sent through the doorbell and the
//! host-side exit trace come back in [`LinuxRun`]; nothing here prints.

mod async_pf;
pub mod builtin;
mod console;
mod host_view;
mod join;

pub use async_pf::{add_async_pf, AsyncPfFacts};
pub use console::{Console, ConsoleFeed};
pub use host_view::add_host_view;
pub use join::{add_timeline, TscFacts, CALIBRATIONS};

use crate::arch::x86_64::{msr, regs};
use crate::boot::{self, image};
use crate::devices::serial::Uart;
use crate::devices::PortBus;
use crate::host_fault::HostFaults;
use crate::host_trace::{ExitTracer, TraceSummary};
use crate::vcpu::{self, GuestEnd, Machine, MachineSpec, RunControl, TscOffset, VcpuConfig};
use crate::vm::{Vm, VmConfig};
use crate::{layout, Error, Result, Setting};
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use xvmm_results::xperf_args::XperfArgs;
use xvmm_results::Report;

/// Guest memory when no size is asked for.
pub const DEFAULT_MEM_MIB: u64 = 512;

/// Most pages a built-in xperf drops and touches per round with
/// `--host-fault-delay` (fewer when fewer samples are asked for): each costs
/// at least the delay, so far fewer than the other crossings' samples.
pub const HOST_MISS_PAGES: u64 = 200;

/// The guest's userspace.
#[derive(Clone, Debug)]
pub enum Userspace {
    /// The user's initramfs, run as is.
    Initrd(PathBuf),
    /// The built-in initramfs: the static xperf as `/init`, given these
    /// options after ` -- ` on the kernel command line.
    BuiltIn { xperf: XperfArgs },
}

/// What to boot and how.
#[derive(Clone, Debug)]
pub struct LinuxConfig {
    pub kernel: PathBuf,
    pub userspace: Userspace,
    /// Replaces the default command line.
    pub cmdline: Option<String>,
    pub mem_mib: u64,
    pub timeout: Duration,
    /// Host CPU to pin the vCPU thread to.
    pub pin: Option<usize>,
    pub tsc_khz: Option<u32>,
    pub tsc_offset: Option<i64>,
    /// Offer KVM asynchronous page faults in CPUID.
    pub async_pf: bool,
    /// Time the vCPU thread's exits on the host (kvm tracepoints).
    pub trace: bool,
    /// Serve pages the guest asks to drop after this delay, through
    /// userfaultfd ([`crate::host_fault`]); a built-in xperf then measures
    /// `pf-host-miss`.
    pub host_fault_delay: Option<Duration>,
}

/// How long each step before the guest's first instruction took, in order:
/// typed data for the caller to show (`xvmm --verbose`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BootProfile {
    pub phases: Vec<(&'static str, Duration)>,
}

impl BootProfile {
    /// Records `phase` as the time since `*since`, and restarts `*since`.
    fn stamp(&mut self, phase: &'static str, since: &mut Instant) {
        let now = Instant::now();
        self.phases.push((phase, now.duration_since(*since)));
        *since = now;
    }

    /// The sum of all phases.
    pub fn total(&self) -> Duration {
        self.phases.iter().map(|(_, d)| *d).sum()
    }
}

/// A checked boot: everything [`run`] needs, nothing of KVM touched yet.
pub struct Prepared {
    config: LinuxConfig,
    /// The pre-kernel phases so far ([`run`] adds its own).
    profile: BootProfile,
    kernel: std::fs::File,
    plan: boot::BootPlan,
    init: Init,
    /// Given to a traced built-in xperf, which echoes it in its results.
    run_id: Option<String>,
    /// The samples per crossing the built-in xperf was asked for.
    asked_samples: Option<u64>,
}

enum Init {
    User(std::fs::File),
    BuiltIn(builtin::BuiltInInitramfs),
}

impl Prepared {
    /// Whether the guest runs the built-in xperf (which must send results).
    pub fn built_in(&self) -> bool {
        matches!(self.init, Init::BuiltIn(_))
    }

    /// Whether async page faults are offered in CPUID.
    pub fn async_pf_offered(&self) -> bool {
        self.config.async_pf
    }
}

/// Checks every input and builds the built-in initramfs if there is one.
pub fn prepare(config: LinuxConfig) -> Result<Prepared> {
    let mem_bytes = config.mem_mib.checked_mul(1 << 20).ok_or_else(|| {
        Setting::MemoryMib.invalid(format!(
            "{} MiB is not a representable size",
            config.mem_mib
        ))
    })?;
    if let Some(delay) = config.host_fault_delay {
        crate::host_fault::check_delay(delay)?;
        crate::host_fault::check_userfaultfd()?;
    }
    let mut profile = BootProfile::default();
    let mut since = Instant::now();
    let kernel = open_input(&config.kernel, Error::Kernel)?;
    let (mut run_id, mut asked_samples) = (None, None);
    let image = image::inspect(&kernel).map_err(|e| match e {
        Error::Kernel(m) => Error::Kernel(format!("{}: {m}", config.kernel.display())),
        other => other,
    })?;
    profile.stamp("open and inspect the kernel", &mut since);
    let (init, cmdline) = match &config.userspace {
        Userspace::Initrd(path) => (
            Init::User(open_input(path, Error::Initrd)?),
            config
                .cmdline
                .clone()
                .unwrap_or_else(boot::cmdline::default_cmdline),
        ),
        Userspace::BuiltIn { xperf: options } => {
            let cpio = builtin::BuiltInInitramfs::new(builtin::locate_xperf()?)?;
            let mut options = options.clone();
            if config.trace
                && builtin::runs_crossings(config.cmdline.as_deref(), &options.to_argv())
            {
                run_id = Some(new_run_id());
                traced(&mut options, run_id.clone());
            }
            let cmdline = builtin::xperf_cmdline(
                config.cmdline.as_deref(),
                &boot::cmdline::default_cmdline(),
                &options.to_argv(),
            );
            asked_samples = builtin::asked_samples(&cmdline);
            (Init::BuiltIn(cpio), cmdline)
        }
    };
    profile.stamp(
        match &init {
            Init::User(_) => "open the initrd",
            Init::BuiltIn(_) => "find xperf, check it is static, lay out the initramfs",
        },
        &mut since,
    );
    let init_size = match &init {
        Init::User(f) => f.metadata().map_or(0, |m| m.len()),
        Init::BuiltIn(b) => b.size(),
    };
    let plan = boot::plan(image, mem_bytes, Some(init_size), &cmdline)?;
    crate::vm::check_memory_size(mem_bytes, crate::vm::host_available_bytes())?;
    profile.stamp("plan the layout, check memory", &mut since);
    Ok(Prepared {
        config,
        profile,
        kernel,
        plan,
        init,
        run_id,
        asked_samples,
    })
}

/// What a traced run adds to xperf's options: every sample's stamps, the
/// calibration exits and the run id.
fn traced(options: &mut XperfArgs, run_id: Option<String>) {
    options.raw = true;
    options.calibrate = Some(CALIBRATIONS);
    options.run_id = run_id;
}

/// 64 random bits as hex: tells this run's results from any other's.
fn new_run_id() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into `bytes`.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if usize::try_from(n).ok() != Some(bytes.len()) {
        // No entropy source: time and pid still differ from run to run.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        bytes = (t ^ u64::from(std::process::id()) << 40).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How a Linux run ended and what it brought back.
#[derive(Debug)]
pub struct LinuxRun {
    /// Ok for a clean end (exit 0, reboot, power-off); the reason otherwise.
    pub end: Result<()>,
    /// The last report the guest's xperf sent.
    pub results: Option<Report>,
    /// Why a report the guest sent was refused.
    pub bad_results: Option<Error>,
    /// Host-side exit timing (with `trace`).
    pub trace: Option<TraceSummary>,
    /// What the caller should tell the user about the end (a halt taken as a
    /// power-off).
    pub notes: Vec<String>,
    /// The guest's TSC as KVM set it up (for [`add_timeline`]).
    pub tsc: TscFacts,
    /// The id a traced xperf was given.
    pub run_id: Option<String>,
    /// The samples per crossing, every round together, that the command
    /// line asked the built-in xperf for: what bounds the samples of its
    /// results, whatever they say was requested ([`add_timeline`]).
    pub asked_samples: Option<u64>,
    /// What the fault server did (with `host_fault_delay`).
    pub host_faults: Option<crate::host_fault::HostFaultSummary>,
    /// The guest's MSR_KVM_ASYNC_PF_EN at the end: whether it turned async
    /// page faults on (bit 0), as KVM saw it.
    pub async_pf_en: Option<u64>,
    /// Where the time before the guest's first instruction went.
    pub profile: BootProfile,
}

/// Builds the VM and its vCPU and loads the guest: ready to run.
fn build_machine(p: &mut Prepared) -> Result<Machine> {
    let mut since = Instant::now();
    let cfg = &p.config;
    let machine = Machine::new(&MachineSpec {
        vm: VmConfig {
            mem_bytes: cfg.mem_mib << 20,
            irqchip: true,
        },
        vcpu: VcpuConfig {
            id: 0,
            nr_vcpus: 1,
            tsc_khz: cfg.tsc_khz,
            // Without --tsc-offset, the guest's TSC is as KVM sets it up.
            tsc_offset: cfg.tsc_offset.map_or(TscOffset::Kvm, TscOffset::Exact),
            async_pf: cfg.async_pf,
        },
        user_space_msr: false,
    })?;
    p.profile
        .stamp("VM, guest memory, irqchip, vCPU, CPUID", &mut since);
    let (vm, vcpu) = (&machine.vm, &machine.vcpu);
    let (kernel_mapped, initrd_mapped) = map_inputs(p, &vm.memory)?;
    p.profile.stamp(
        match (kernel_mapped, initrd_mapped) {
            (true, true) => "map the ELF kernel and the initrd into guest memory",
            (true, false) => "map the ELF kernel into guest memory",
            (false, true) => "map the initrd into guest memory",
            (false, false) => "(kernel and initrd not mappable: copied)",
        },
        &mut since,
    );
    let kernel = (!kernel_mapped).then_some(&mut p.kernel);
    let entry = match &mut p.init {
        Init::User(f) => {
            let initrd = (!initrd_mapped).then_some(f);
            boot::load(&vm.memory, &vm.ram, &p.plan, kernel, initrd)?
        }
        Init::BuiltIn(b) => {
            let mut copied = (!initrd_mapped)
                .then(|| b.to_bytes().map(Cursor::new))
                .transpose()?;
            boot::load(&vm.memory, &vm.ram, &p.plan, kernel, copied.as_mut())?
        }
    };
    p.profile.stamp(
        "copy what was not mapped, write the boot structures",
        &mut since,
    );
    regs::setup_boot_cpu(&vcpu.fd, &vm.memory, &entry)?;
    msr::setup_boot_msrs(&vcpu.fd)?;
    regs::setup_lint(&vcpu.fd)?;
    p.profile.stamp("vCPU registers, MSRs, LINT", &mut since);
    Ok(machine)
}

/// Maps the ELF kernel and the initrd (the user's, or xperf inside the
/// built-in one) from their files into guest memory where they can be
/// ([`boot::map`]): whether each was.
fn map_inputs(p: &Prepared, memory: &vm_memory::GuestMemoryMmap) -> Result<(bool, bool)> {
    // userfaultfd (the fault server) registers anonymous memory only.
    if p.config.host_fault_delay.is_some() {
        return Ok((false, false));
    }
    let kernel = matches!(p.plan.image, image::KernelImage::Elf(_))
        && boot::map::map_elf_kernel(memory, &p.kernel)?;
    let initrd = match (&p.init, p.plan.initrd) {
        (Init::User(f), Some(place)) => boot::map::map_file(memory, f, place.addr)?,
        (Init::BuiltIn(b), Some(place)) => {
            let parts = (
                b.before.as_slice(),
                &b.xperf.file,
                b.xperf.size,
                b.after.as_slice(),
            );
            boot::map::map_around(memory, parts, place.addr)?
        }
        _ => false,
    };
    Ok((kernel, initrd))
}

/// The UART on IRQ 4 (through an irqfd), writing to the console.
fn attach_uart(vm: &Vm, console: Console) -> Result<(PortBus, console::PanicLine)> {
    let (out, panic_line) = console::watch(console.out);
    let uart = Uart::new(out)?;
    vm.fd
        .register_irqfd(uart.interrupt_evt(), layout::UART_IRQ)
        .map_err(|e| {
            Error::Kvm(format!(
                "KVM_IRQFD for the UART (IRQ {}) failed: {e}",
                layout::UART_IRQ
            ))
        })?;
    let uart = Arc::new(Mutex::new(uart));
    if let Some(feed) = console.input {
        console::forward_input(Arc::clone(&uart), feed);
    }
    Ok((PortBus::new(Some(uart)), panic_line))
}

/// Boots the prepared guest and runs it to its end (see the module docs).
pub fn run(prepared: Prepared, console: Console) -> Result<LinuxRun> {
    run_with(prepared, console, &|_| {})
}

/// [`run`], calling `ready` with the pre-kernel profile right before the
/// guest's first instruction: a caller can show it while the guest runs
/// (a boot measured to its `/init` is often killed there).
pub fn run_with(
    mut prepared: Prepared,
    console: Console,
    ready: &dyn Fn(&BootProfile),
) -> Result<LinuxRun> {
    let Machine { vm, mut vcpu, .. } = build_machine(&mut prepared)?;
    let mut since = Instant::now();
    let (mut bus, panic_line) = attach_uart(&vm, console)?;
    let cfg = &prepared.config;
    if let Some(cpu) = cfg.pin {
        crate::affinity::pin_current_thread(cpu)?;
    }
    // The watchdog first, so that a stop signal while the tracer is set up
    // still ends the run and the tracer's drop restores tracefs.
    let control = RunControl::new(cfg.timeout)?;
    let tracer = if cfg.trace {
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        Some(ExitTracer::start(&[tid])?)
    } else {
        None
    };
    let mut faults = match cfg.host_fault_delay {
        Some(delay) => {
            let aborter = control.aborter();
            Some(HostFaults::start(
                delay,
                &vm.memory,
                &vm.ram,
                Box::new(move |why| aborter.abort(format!("the fault server failed: {why}"))),
            )?)
        }
        None => None,
    };
    control.check()?;
    // A Linux without ACPI powers off by halting with interrupts off, which the
    // in-kernel LAPIC keeps from us: look at a vCPU that sleeps for a second.
    control.set_idle_probe(Some(Duration::from_secs(1)));
    let offset_before = vcpu.tsc_offset().ok();
    prepared
        .profile
        .stamp("UART, watchdog, tracer, fault server", &mut since);
    ready(&prepared.profile);
    let mut running = control.attach(&mut vcpu);
    let outcome = vcpu::run_to_end(&mut running, &mut bus, &vm.memory, faults.as_mut());
    drop(running);
    let host_faults = faults.map(HostFaults::finish);
    let async_pf_en = msr::get_msr(&vcpu.fd, msr::MSR_KVM_ASYNC_PF_EN).ok();
    let trace = tracer.map(ExitTracer::finish).transpose()?;
    let tsc = tsc_facts(&vm, &vcpu, cfg, offset_before);
    let mut notes = Vec::new();
    let end = outcome
        .end
        .and_then(|end| clean_end(end, panic_line.get(), &mut notes))
        .and_then(
            |()| match host_faults.as_ref().and_then(|f| f.failure.clone()) {
                // The guest finished on ordinary faults: its results are kept,
                // and flagged in `async_pf.host.failure`.
                Some(why) => Err(Error::HostFault(format!("the fault server failed: {why}"))),
                None => Ok(()),
            },
        );
    Ok(LinuxRun {
        end,
        results: outcome.results,
        bad_results: outcome.bad_results,
        trace,
        notes,
        tsc,
        run_id: prepared.run_id.clone(),
        asked_samples: prepared.asked_samples,
        host_faults,
        async_pf_en,
        profile: prepared.profile,
    })
}

/// The guest's TSC as KVM set it up, at the end of a run.
fn tsc_facts(
    vm: &Vm,
    vcpu: &vcpu::Vcpu,
    cfg: &LinuxConfig,
    offset_before: Option<i64>,
) -> TscFacts {
    TscFacts {
        offset_before,
        offset_after: vcpu.tsc_offset().ok(),
        guest_khz: vcpu.tsc_khz,
        requested_offset: cfg.tsc_offset,
        requested_khz: cfg.tsc_khz,
        // KVM's divisor; where this KVM cannot say, the caller falls back
        // to `Machine::probe` (unscaled, the vCPU's rate is the host's).
        host_khz: vm
            .tsc_khz()
            .or(cfg.tsc_khz.is_none().then_some(vcpu.tsc_khz))
            .map_or(0, u64::from),
        scaling: crate::vm::kvm_tsc_scaling(),
    }
}

/// Whether a guest's end is clean: a reset or power-off after a kernel panic
/// is the panic; a halt with interrupts off is Linux's power-off without ACPI.
fn clean_end(end: GuestEnd, panic: Option<&String>, notes: &mut Vec<String>) -> Result<()> {
    let panicked = || match panic {
        Some(line) => Err(Error::Guest(format!("kernel panic: {line}"))),
        None => Ok(()),
    };
    match end {
        GuestEnd::Exit(0) => Ok(()),
        GuestEnd::Exit(status) => Err(Error::GuestExit(status)),
        GuestEnd::Halted(rip) => {
            notes.push(format!(
                "the guest halted with interrupts off at RIP {rip:#x} \
                 (Linux's power-off without ACPI); taken as a power-off"
            ));
            panicked()
        }
        GuestEnd::Reset | GuestEnd::PowerOff => panicked(),
    }
}

/// Opens an input file; missing, unreadable, empty and non-regular files are
/// errors of the kind `wrap` makes.
fn open_input(path: &Path, wrap: fn(String) -> Error) -> Result<std::fs::File> {
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
    std::fs::File::open(path).map_err(|e| wrap(format!("{shown}: cannot open: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_stamps_consecutive_phases() {
        let mut p = BootProfile::default();
        let start = Instant::now();
        let mut since = start;
        std::thread::sleep(Duration::from_millis(2));
        p.stamp("a", &mut since);
        p.stamp("b", &mut since);
        assert_eq!(p.phases.len(), 2);
        assert!(p.phases[0].1 >= Duration::from_millis(2), "{p:?}");
        assert_eq!(since.duration_since(start), p.total());
    }

    #[test]
    fn input_checks() {
        let err = open_input(Path::new("/nonexistent/k"), Error::Kernel).unwrap_err();
        assert_eq!(err.to_string(), "kernel: /nonexistent/k: no such file");
        let err = open_input(Path::new("/"), Error::Initrd).unwrap_err();
        assert_eq!(err.to_string(), "initrd: /: not a regular file");
        let err = open_input(Path::new("/dev/zero"), Error::Kernel).unwrap_err();
        assert_eq!(err.to_string(), "kernel: /dev/zero: not a regular file");
    }

    #[test]
    fn ends_after_a_panic_are_the_panic() {
        let mut notes = Vec::new();
        assert!(clean_end(GuestEnd::Exit(0), None, &mut notes).is_ok());
        assert!(matches!(
            clean_end(GuestEnd::Exit(3), None, &mut notes),
            Err(Error::GuestExit(3))
        ));
        let line = "Kernel panic - not syncing: x".to_string();
        let err = clean_end(GuestEnd::Reset, Some(&line), &mut notes).unwrap_err();
        assert_eq!(
            err.to_string(),
            "guest: kernel panic: Kernel panic - not syncing: x"
        );
        assert!(notes.is_empty());
        assert!(clean_end(GuestEnd::Halted(0x1000), None, &mut notes).is_ok());
        assert!(notes[0].contains("RIP 0x1000"), "{notes:?}");
    }
}
