//! Booting a Linux guest and collecting what its xperf measured.
//!
//! Two steps, so that the caller can check every output destination between
//! them: [`prepare`] checks every input before KVM is touched (kernel format
//! and size, initrd fit, command line length, memory size; for the built-in
//! userspace it finds the static xperf and builds the initramfs, see
//! [`builtin`]); [`run`] builds the VM (in-kernel irqchip + PIT, `cpus` vCPUs
//! with LINT0 = ExtINT / LINT1 = NMI named in an MP table, UART on IRQ 4
//! through an irqfd), loads the kernel and runs it, each vCPU on a host
//! thread of its own ([`vcpu::run_vcpus`]), until it ends the VM:
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
pub mod workload;

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
    /// The built-in initramfs with a workload beside xperf, which runs it
    /// under `xperf workload` ([`workload`]).
    Workload(workload::WorkloadSpec),
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
    /// vCPUs (1 to [`boot::mptable::MAX_VCPUS`], and no more than KVM runs).
    pub cpus: u8,
    /// Host CPUs to pin the vCPU threads to, one per vCPU in order; empty:
    /// not pinned.
    pub pin: Vec<usize>,
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
    check_cpus(config.cpus, &config.pin, &crate::affinity::usable_cpus())?;
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
        Userspace::Workload(spec) => {
            let (init, cmdline, id) = workload_init(&config, spec, mem_bytes)?;
            run_id = Some(id);
            (init, cmdline)
        }
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

/// Refuses a vCPU count the MP table cannot describe and a pin list that
/// does not name one host CPU this process may use (`usable`) per vCPU.
pub fn check_cpus(cpus: u8, pin: &[usize], usable: &[usize]) -> Result<()> {
    let most = boot::mptable::MAX_VCPUS;
    if cpus == 0 {
        return Err(Setting::Cpus.invalid("0: a guest needs at least one vCPU"));
    }
    if cpus > most {
        return Err(Setting::Cpus.invalid(format!(
            "{cpus}: at most {most} (the MP table's 8-bit APIC ids)"
        )));
    }
    if !pin.is_empty() && pin.len() != usize::from(cpus) {
        return Err(Setting::PinCpu.invalid(format!(
            "names {} host CPU{} for {cpus} vCPU{}: give one per vCPU",
            pin.len(),
            if pin.len() == 1 { "" } else { "s" },
            if cpus == 1 { "" } else { "s" },
        )));
    }
    match pin.iter().find(|cpu| !usable.contains(cpu)) {
        Some(cpu) => Err(Setting::PinCpu.invalid(format!(
            "{cpu}: no such CPU, or not one this process may use ({})",
            cpu_list(usable)
        ))),
        None => Ok(()),
    }
}

/// CPUs as a kernel CPU list: "0-3,6".
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// What the user should know of how the vCPUs share the host's CPUs: more
/// vCPUs than host CPUs, or two pinned to one.
pub fn sharing_note(cpus: u8, pin: &[usize], host_cpus: usize) -> Option<String> {
    let mut distinct = pin.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if usize::from(cpus) > host_cpus {
        Some(format!(
            "{cpus} vCPUs on {host_cpus} host CPUs: the measurements include the host's scheduling of vCPU threads"
        ))
    } else if distinct.len() < pin.len() {
        Some(format!(
            "--pin puts {} vCPUs on {} host CPUs: the measurements include the host's scheduling of vCPU threads",
            pin.len(),
            distinct.len()
        ))
    } else {
        None
    }
}

/// The built-in initramfs with the workload packed, the command line that
/// runs it under `xperf workload`, and the run's id.
fn workload_init(
    config: &LinuxConfig,
    spec: &workload::WorkloadSpec,
    mem_bytes: u64,
) -> Result<(Init, String, String)> {
    if let Some(line) = config.cmdline.as_deref() {
        if builtin::has_init_separator(line) {
            return Err(Error::Usage(
                "with --workload, --cmdline holds kernel parameters only: init's \
                 arguments (after ` -- `) are the workload's"
                    .into(),
            ));
        }
    }
    let id = new_run_id();
    let (files, init_args) = workload::pack(spec, mem_bytes, &id, CALIBRATIONS)?;
    let cpio = builtin::BuiltInInitramfs::with_files(builtin::locate_xperf()?, &files)?;
    let cmdline = builtin::xperf_cmdline(
        config.cmdline.as_deref(),
        &boot::cmdline::default_cmdline(),
        &init_args,
    );
    Ok((Init::BuiltIn(cpio), cmdline, id))
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
    /// The workload's intervals the guest streamed (`--workload`).
    pub intervals: crate::devices::interval_sink::IntervalSink,
    /// What the fault server did (with `host_fault_delay`).
    pub host_faults: Option<crate::host_fault::HostFaultSummary>,
    /// The guest's MSR_KVM_ASYNC_PF_EN at the end: whether it turned async
    /// page faults on (bit 0), as KVM saw it.
    pub async_pf_en: Option<u64>,
    /// Where the time before the guest's first instruction went.
    pub profile: BootProfile,
    /// The VM's vCPUs and the host CPUs their threads were pinned to.
    pub placement: Placement,
}

/// How many vCPUs a run had and where their threads ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    pub vcpus: u8,
    /// Host CPU of each vCPU's thread, in vCPU order; empty: not pinned.
    pub pin: Vec<usize>,
}

impl Placement {
    /// One line for the report: "VM: 2 vCPUs (threads pinned to host CPUs 0,3)".
    pub fn note(&self) -> String {
        let (n, s) = (self.vcpus, if self.vcpus == 1 { "" } else { "s" });
        if self.pin.is_empty() {
            format!("VM: {n} vCPU{s}, each on a host thread of its own, not pinned")
        } else {
            let cpus: Vec<String> = self.pin.iter().map(usize::to_string).collect();
            format!(
                "VM: {n} vCPU{s}, each on a host thread of its own, pinned to host CPU{s} {} in vCPU order",
                cpus.join(",")
            )
        }
    }
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
            nr_vcpus: cfg.cpus,
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
    boot::mptable::write(&vm.memory, cfg.cpus, cpu_signature(vcpu))?;
    regs::setup_boot_cpu(&vcpu.fd, &vm.memory, &entry)?;
    for v in std::iter::once(vcpu).chain(&machine.aps) {
        msr::setup_boot_msrs(&v.fd)?;
        regs::setup_lint(&v.fd)?;
    }
    p.profile
        .stamp("MP table, vCPU registers, MSRs, LINT", &mut since);
    Ok(machine)
}

/// CPUID leaf 1 as the vCPU sees it, for the MP table's processor entries.
fn cpu_signature(vcpu: &vcpu::Vcpu) -> boot::mptable::CpuSignature {
    let leaf1 = vcpu
        .cpuid
        .as_slice()
        .iter()
        .find(|e| e.function == 1 && e.index == 0);
    boot::mptable::CpuSignature {
        signature: leaf1.map_or(0, |e| e.eax),
        features: leaf1.map_or(0, |e| e.edx),
    }
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
    let Machine {
        vm,
        mut vcpu,
        mut aps,
        ..
    } = build_machine(&mut prepared)?;
    let mut since = Instant::now();
    let (mut bus, panic_line) = attach_uart(&vm, console)?;
    let cfg = &prepared.config;
    if let Some(&cpu) = cfg.pin.first() {
        crate::affinity::pin_current_thread(cpu)?;
    }
    let mut notes: Vec<String> =
        sharing_note(cfg.cpus, &cfg.pin, crate::affinity::usable_cpus().len())
            .into_iter()
            .collect();
    // The watchdog first, so that a stop signal while the tracer is set up
    // still ends the run and the tracer's drop restores tracefs.
    let control = RunControl::new(cfg.timeout)?;
    let mut faults = start_fault_server(cfg, &vm, &control)?;
    control.check()?;
    // A Linux without ACPI powers off by halting with interrupts off, which the
    // in-kernel LAPIC keeps from us: look at a vCPU that sleeps for a second.
    control.set_idle_probe(Some(Duration::from_secs(1)));
    let offset_before = vcpu.tsc_offset().ok();
    let ap_runs = aps
        .iter_mut()
        .enumerate()
        .map(|(i, ap)| vcpu::ApVcpu {
            vcpu: ap,
            bus: bus.sharing_devices(),
            pin: cfg.pin.get(i + 1).copied(),
        })
        .collect();
    let boot_run = vcpu::BootVcpu {
        vcpu: &mut vcpu,
        bus: &mut bus,
        faults: faults.as_mut(),
    };
    let profile = &mut prepared.profile;
    let (tracer, outcome) = vcpu::run_vcpus(&control, &vm.memory, boot_run, ap_runs, |tids| {
        let tracer = cfg.trace.then(|| ExitTracer::start(tids)).transpose()?;
        profile.stamp(
            "UART, watchdog, fault server, vCPU threads, tracer",
            &mut since,
        );
        ready(profile);
        Ok(tracer)
    })?;
    let host_faults = faults.map(HostFaults::finish);
    let async_pf_en = msr::get_msr(&vcpu.fd, msr::MSR_KVM_ASYNC_PF_EN).ok();
    let trace = tracer.map(ExitTracer::finish).transpose()?;
    let tsc = tsc_facts(&vm, &vcpu, cfg, offset_before);
    let end = outcome
        .end
        .and_then(|end| clean_end(end, panic_line.get(), &mut notes))
        .and_then(|()| fault_server_end(host_faults.as_ref()));
    Ok(LinuxRun {
        end,
        results: outcome.results,
        bad_results: outcome.bad_results,
        trace,
        notes,
        tsc,
        run_id: prepared.run_id.clone(),
        asked_samples: prepared.asked_samples,
        intervals: outcome.intervals,
        host_faults,
        async_pf_en,
        placement: Placement {
            vcpus: prepared.config.cpus,
            pin: prepared.config.pin.clone(),
        },
        profile: prepared.profile,
    })
}

/// The userfaultfd fault server, with `--host-fault-delay`: a failure of
/// it stops the run through `control`.
fn start_fault_server(
    cfg: &LinuxConfig,
    vm: &Vm,
    control: &RunControl,
) -> Result<Option<HostFaults>> {
    let Some(delay) = cfg.host_fault_delay else {
        return Ok(None);
    };
    let aborter = control.aborter();
    HostFaults::start(
        delay,
        &vm.memory,
        &vm.ram,
        Box::new(move |why| aborter.abort(format!("the fault server failed: {why}"))),
    )
    .map(Some)
}

/// The run's end as far as the fault server goes: a failure of it fails a
/// run that otherwise ended cleanly.
fn fault_server_end(faults: Option<&crate::host_fault::HostFaultSummary>) -> Result<()> {
    match faults.and_then(|f| f.failure.clone()) {
        // The guest finished on ordinary faults: its results are kept,
        // and flagged in `async_pf.host.failure`.
        Some(why) => Err(Error::HostFault(format!("the fault server failed: {why}"))),
        None => Ok(()),
    }
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
    fn vcpu_counts_and_pin_lists_that_cannot_boot_are_refused_before_it() {
        let usable = [0, 1, 2, 3, 6];
        assert!(check_cpus(1, &[], &usable).is_ok());
        assert!(check_cpus(2, &[3, 6], &usable).is_ok());
        assert!(
            check_cpus(254, &[], &usable).is_ok(),
            "more vCPUs than CPUs"
        );
        let said = |cpus, pin: &[usize]| check_cpus(cpus, pin, &usable).unwrap_err().to_string();
        assert!(said(0, &[]).contains("at least one vCPU"));
        assert!(said(255, &[]).contains("at most 254"));
        let short = said(2, &[1]);
        assert!(short.contains("1 host CPU for 2 vCPUs"), "{short}");
        assert!(said(1, &[1, 2]).contains("2 host CPUs for 1 vCPU:"));
        let missing = said(2, &[1, 5]);
        assert!(
            missing.contains("5: no such CPU") && missing.contains("(0-3,6)"),
            "{missing}"
        );
    }

    #[test]
    fn the_placement_note_names_the_vcpus_and_their_host_cpus() {
        let one = Placement {
            vcpus: 1,
            pin: vec![],
        };
        assert_eq!(
            one.note(),
            "VM: 1 vCPU, each on a host thread of its own, not pinned"
        );
        let two = Placement {
            vcpus: 2,
            pin: vec![0, 3],
        };
        assert_eq!(
            two.note(),
            "VM: 2 vCPUs, each on a host thread of its own, pinned to host CPUs 0,3 in vCPU order"
        );
    }

    #[test]
    fn sharing_host_cpus_is_noted() {
        assert_eq!(sharing_note(2, &[], 2), None);
        assert_eq!(sharing_note(2, &[0, 1], 4), None);
        let over = sharing_note(3, &[], 2).unwrap();
        assert!(over.starts_with("3 vCPUs on 2 host CPUs"), "{over}");
        let doubled = sharing_note(2, &[1, 1], 4).unwrap();
        assert!(doubled.contains("2 vCPUs on 1 host CPUs"), "{doubled}");
    }

    #[test]
    fn cpu_lists_are_written_as_the_kernel_writes_them() {
        assert_eq!(cpu_list(&[]), "");
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(cpu_list(&[1, 3, 4]), "1,3-4");
    }

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
