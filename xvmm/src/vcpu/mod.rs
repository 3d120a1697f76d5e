//! vCPUs and running them.
//!
//! - [`Vcpu::new`] creates a vCPU and does, in this order, what must come before any
//!   register state: TSC frequency (KVM_SET_TSC_KHZ), CPUID (KVM_SET_CPUID2, which
//!   real KVM needs before long-mode sregs) and the TSC offset. The caller then sets
//!   registers for its entry protocol ([`crate::arch::x86_64::regs::setup_boot_cpu`]).
//! - [`Vcpu::tsc_offset`] / [`Vcpu::set_tsc_offset`]: the `KVM_VCPU_TSC_CTRL` /
//!   `KVM_VCPU_TSC_OFFSET` vCPU attribute through raw `KVM_{HAS,GET,SET}_DEVICE_ATTR`
//!   ioctls (kvm-ioctls offers them only on aarch64).
//! - [`Machine::new`]: the one assembly of a VM and its vCPU (with the guest's
//!   [`TscOffset`] policy) that every guest goes through.
//! - [`run_control`]: deadline watchdog and stop signals ([`RunControl`], [`RunningVcpu`]);
//!   [`signals`]: the SIGINT/SIGTERM/SIGHUP guard the caller holds while measuring.
//! - [`exit_loop`]: the one KVM_RUN loop ([`run_loop`]) and fatal-exit description;
//!   each guest handles its own exits through an [`ExitHandler`].
//! - [`exits`]: the handler of guests that use the standard ports ([`run_to_end`]).
//! - [`threads`]: every vCPU of a VM on a host thread of its own ([`run_vcpus`]).
//! - [`stats`]: KVM's own count of a vCPU's exits ([`stats::ExitCounter`]).

pub mod exit_loop;
pub mod exits;
mod machine;
pub mod run_control;
pub mod signals;
pub mod stats;
pub mod threads;

pub use exit_loop::{internal_error_name, run_loop, Action, ExitHandler, Fatal};
pub use exits::{run_to_end, GuestEnd, RunOutcome};
pub use machine::{Machine, MachineSpec};
pub use run_control::{Aborter, RunControl, RunningVcpu, StopReason};
pub use signals::StopSignals;
pub use threads::{run_vcpus, ApVcpu, BootVcpu};

use crate::arch::x86_64::cpuid::{self, CpuidOptions};
use crate::vm::Vm;
use crate::{Error, Result, Setting};
use kvm_bindings::{kvm_device_attr, CpuId, KVM_VCPU_TSC_CTRL, KVM_VCPU_TSC_OFFSET};
use kvm_ioctls::{Cap, VcpuFd};

/// What a vCPU is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuConfig {
    /// vCPU index, also its APIC id.
    pub id: u8,
    /// vCPUs in the VM (for the CPUID topology leaves).
    pub nr_vcpus: u8,
    /// Guest TSC frequency to ask for (KVM_SET_TSC_KHZ); `None` keeps the host's.
    pub tsc_khz: Option<u32>,
    /// Guest TSC offset relative to the (scaled) host TSC.
    pub tsc_offset: TscOffset,
    /// Offer KVM asynchronous page faults in CPUID.
    pub async_pf: bool,
}

impl VcpuConfig {
    /// The boot vCPU with default TSC and no async PF.
    pub fn boot() -> Self {
        VcpuConfig {
            id: 0,
            nr_vcpus: 1,
            tsc_khz: None,
            tsc_offset: TscOffset::Kvm,
            async_pf: false,
        }
    }
}

/// What a vCPU's TSC offset is set to (guest TSC = host TSC * ratio + offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TscOffset {
    /// Left as KVM set it.
    Kvm,
    /// This offset; an error where KVM cannot apply it.
    Exact(i64),
    /// 0 where KVM lets user space set it, so that guest and host stamps share
    /// one clock; never an error (whoever relies on it reads the offset back).
    ZeroIfPossible,
}

/// A configured vCPU.
pub struct Vcpu {
    pub fd: VcpuFd,
    pub id: u8,
    /// The CPUID the guest sees.
    pub cpuid: CpuId,
    /// The guest TSC frequency (also in CPUID 0x40000010).
    pub tsc_khz: u32,
}

mod ioctls {
    use kvm_bindings::kvm_device_attr;
    const KVMIO: u32 = 0xae;
    vmm_sys_util::ioctl_iow_nr!(KVM_SET_DEVICE_ATTR, KVMIO, 0xe1, kvm_device_attr);
    vmm_sys_util::ioctl_iow_nr!(KVM_GET_DEVICE_ATTR, KVMIO, 0xe2, kvm_device_attr);
    vmm_sys_util::ioctl_iow_nr!(KVM_HAS_DEVICE_ATTR, KVMIO, 0xe3, kvm_device_attr);
}

impl Vcpu {
    /// Creates vCPU `cfg.id` and sets its TSC frequency, CPUID and TSC offset
    /// (guests assemble theirs through [`Machine::new`]).
    pub fn new(vm: &Vm, cfg: &VcpuConfig) -> Result<Vcpu> {
        let fd = vm
            .fd
            .create_vcpu(u64::from(cfg.id))
            .map_err(|e| Error::Kvm(format!("KVM_CREATE_VCPU {} failed: {e}", cfg.id)))?;
        if let Some(khz) = cfg.tsc_khz {
            if khz == 0 {
                return Err(Setting::TscKhz.invalid("must be positive"));
            }
            if !vm.kvm.check_extension(Cap::TscControl) {
                return Err(Error::Kvm(
                    "setting the guest TSC frequency needs KVM_CAP_TSC_CONTROL, which this KVM lacks"
                        .into(),
                ));
            }
            fd.set_tsc_khz(khz)
                .map_err(|e| Error::Kvm(format!("KVM_SET_TSC_KHZ {khz} failed: {e}")))?;
        }
        let tsc_khz = match fd.get_tsc_khz() {
            Ok(khz) if khz > 0 => khz,
            // Older or unusual KVMs cannot say; the requested value is then all we know.
            _ => cfg.tsc_khz.unwrap_or(0),
        };
        let cpuid = cpuid::build(
            &vm.kvm,
            &CpuidOptions {
                async_pf: cfg.async_pf,
                tsc_khz,
                apic_id: cfg.id,
                nr_vcpus: cfg.nr_vcpus,
                host_invariant_tsc: cpuid::host_has_invariant_tsc(),
                host_brand: cpuid::host_brand(),
                tsc_deadline_timer: vm.irqchip
                    && vm.kvm.check_extension(kvm_ioctls::Cap::TscDeadlineTimer),
            },
        )?;
        fd.set_cpuid2(&cpuid)
            .map_err(|e| Error::Kvm(format!("KVM_SET_CPUID2 failed: {e}")))?;
        let vcpu = Vcpu {
            fd,
            id: cfg.id,
            cpuid,
            tsc_khz,
        };
        match cfg.tsc_offset {
            TscOffset::Kvm => {}
            TscOffset::Exact(offset) => vcpu.set_tsc_offset(offset)?,
            // Best effort: where it is refused or moves anyway, the read-back shows it.
            TscOffset::ZeroIfPossible => {
                let _ = vcpu.set_tsc_offset(0);
            }
        }
        Ok(vcpu)
    }

    fn tsc_offset_attr(addr: u64) -> kvm_device_attr {
        kvm_device_attr {
            flags: 0,
            group: KVM_VCPU_TSC_CTRL,
            attr: u64::from(KVM_VCPU_TSC_OFFSET),
            addr,
        }
    }

    /// Whether this KVM lets user space read and write the TSC offset (Linux 5.16+).
    pub fn has_tsc_offset_control(&self) -> bool {
        let attr = Self::tsc_offset_attr(0);
        // SAFETY: the ioctl reads `attr`, which lives for the call.
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_ref(&self.fd, ioctls::KVM_HAS_DEVICE_ATTR(), &attr)
        };
        ret == 0
    }

    /// The guest TSC offset (guest TSC = host TSC * ratio + offset).
    pub fn tsc_offset(&self) -> Result<i64> {
        if !self.has_tsc_offset_control() {
            return Err(unsupported_tsc_offset());
        }
        let mut value: u64 = 0;
        let attr = Self::tsc_offset_attr(&mut value as *mut u64 as u64);
        // SAFETY: KVM writes 8 bytes to `attr.addr`, which points at `value`.
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_ref(&self.fd, ioctls::KVM_GET_DEVICE_ATTR(), &attr)
        };
        if ret < 0 {
            return Err(Error::Kvm(format!(
                "reading the TSC offset (KVM_GET_DEVICE_ATTR) failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        // KVM's attribute is an s64 passed as its bits.
        Ok(value.cast_signed())
    }

    /// Sets the guest TSC offset.
    pub fn set_tsc_offset(&self, offset: i64) -> Result<()> {
        if !self.has_tsc_offset_control() {
            return Err(unsupported_tsc_offset());
        }
        let value = offset.cast_unsigned();
        let attr = Self::tsc_offset_attr(&value as *const u64 as u64);
        // SAFETY: KVM reads 8 bytes from `attr.addr`, which points at `value`.
        let ret = unsafe {
            vmm_sys_util::ioctl::ioctl_with_ref(&self.fd, ioctls::KVM_SET_DEVICE_ATTR(), &attr)
        };
        if ret < 0 {
            return Err(Error::Kvm(format!(
                "setting the TSC offset to {offset} (KVM_SET_DEVICE_ATTR) failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        // Software KVMs (PVM) accept the attribute but cannot offset a TSC that
        // guest user mode reads natively: check that it took.
        let applied = self.tsc_offset()?;
        if applied != offset {
            return Err(Error::Kvm(format!(
                "this KVM accepted TSC offset {offset} but applies {applied}: it cannot offset the guest TSC"
            )));
        }
        Ok(())
    }

    /// The current RIP, for error messages (0 when it cannot be read).
    pub fn rip(&self) -> u64 {
        self.fd.get_regs().map_or(0, |r| r.rip)
    }
}

fn unsupported_tsc_offset() -> Error {
    Error::Kvm(
        "this KVM has no vCPU TSC offset control (KVM_VCPU_TSC_CTRL/KVM_VCPU_TSC_OFFSET needs Linux 5.16+)"
            .into(),
    )
}
