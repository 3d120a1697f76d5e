//! The KVM VM: opening /dev/kvm, guest memory, the results slot, optional irqchip.
//!
//! API:
//! - [`open_kvm`] opens `/dev/kvm` (or `$XVMM_KVM_DEVICE`) with one-line errors.
//! - [`Vm::new`] creates a VM from a [`VmConfig`]: RAM from GPA 0 split around the
//!   32-bit MMIO hole ([`crate::layout::ram_ranges`]), the results slot at
//!   [`layout::RESULTS_GPA`] in its own memory slot, KVM's TSS and identity-map pages,
//!   and, when `irqchip` is set, the in-kernel PIC/IOAPIC/LAPIC and PIT.
//! - [`Vm::read_results`] reads what a guest put in the results slot (bounds-checked).

use crate::layout::{self, RamRange};
use crate::{Error, Result};
use kvm_bindings::{kvm_pit_config, kvm_userspace_memory_region, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VmFd};
use std::fs::OpenOptions;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::os::unix::fs::OpenOptionsExt;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use xvmm_results::timeline::TscScaling;

/// Environment variable naming the KVM device to open instead of /dev/kvm (for tests).
pub const KVM_DEVICE_ENV: &str = "XVMM_KVM_DEVICE";
/// The only KVM API version there has ever been.
const KVM_API_VERSION: i32 = 12;

/// Opens the KVM device (`$XVMM_KVM_DEVICE` or `/dev/kvm`) and checks its API version.
pub fn open_kvm() -> Result<Kvm> {
    let path = std::env::var_os(KVM_DEVICE_ENV)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/dev/kvm".into());
    let shown = path.display();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => {
                Error::Kvm(format!("{shown} does not exist: is the kvm module loaded?"))
            }
            Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => Error::Kvm(format!(
                "no permission on {shown}: run as root or join the group that owns it ({e})"
            )),
            _ => Error::Kvm(format!("cannot open {shown}: {e}")),
        })?;
    // SAFETY: we own this freshly opened descriptor and hand it over to `Kvm`.
    let kvm = unsafe { Kvm::from_raw_fd(file.into_raw_fd()) };
    match kvm.get_api_version() {
        KVM_API_VERSION => Ok(kvm),
        v if v < 0 => Err(Error::Kvm(format!(
            "{shown} is not a KVM device (KVM_GET_API_VERSION failed)"
        ))),
        v => Err(Error::Kvm(format!(
            "{shown} reports KVM API version {v}, expected {KVM_API_VERSION}"
        ))),
    }
}

/// What kind of VM to create.
#[derive(Clone, Debug)]
pub struct VmConfig {
    /// Guest RAM in bytes (not counting the results slot).
    pub mem_bytes: u64,
    /// Create the in-kernel PIC/IOAPIC/LAPIC and PIT (Linux wants them; the
    /// microguest does not).
    pub irqchip: bool,
}

/// A created VM with its guest memory.
pub struct Vm {
    pub kvm: Kvm,
    pub fd: VmFd,
    /// Guest RAM plus the results slot.
    pub memory: GuestMemoryMmap,
    /// Guest RAM ranges (without the results slot), lowest first.
    pub ram: Vec<RamRange>,
    /// Bytes of guest RAM asked for.
    pub mem_bytes: u64,
    /// Whether the in-kernel irqchip and PIT exist.
    pub irqchip: bool,
}

impl Vm {
    /// Creates the VM, its memory and (optionally) its interrupt controllers.
    pub fn new(cfg: &VmConfig) -> Result<Vm> {
        check_memory_size(cfg.mem_bytes, host_available_bytes())?;
        let kvm = open_kvm()?;
        let fd = kvm
            .create_vm()
            .map_err(|e| Error::Kvm(format!("KVM_CREATE_VM failed: {e}")))?;

        let ram = layout::ram_ranges(cfg.mem_bytes);
        let mut ranges: Vec<(GuestAddress, usize)> = Vec::with_capacity(ram.len() + 1);
        for r in &ram {
            let size = usize::try_from(r.size).map_err(|_| {
                Error::Memory(format!(
                    "{} bytes do not fit the host address space",
                    r.size
                ))
            })?;
            ranges.push((GuestAddress(r.start), size));
        }
        ranges.push((
            GuestAddress(layout::RESULTS_GPA),
            xvmm_results::num::usize_from(layout::RESULTS_SIZE),
        ));
        ranges.sort_by_key(|r| r.0);
        let memory = GuestMemoryMmap::from_ranges(&ranges).map_err(|e| {
            Error::Memory(format!(
                "cannot allocate {} MiB of guest memory: {e}",
                cfg.mem_bytes >> 20
            ))
        })?;

        for (slot, region) in (0u32..).zip(memory.iter()) {
            let host = region
                .get_host_address(vm_memory::MemoryRegionAddress(0))
                .map_err(|e| Error::Memory(format!("guest region has no host mapping: {e}")))?;
            let mem_region = kvm_userspace_memory_region {
                slot,
                flags: 0,
                guest_phys_addr: region.start_addr().0,
                memory_size: region.len(),
                userspace_addr: host as u64,
            };
            // SAFETY: the region stays mapped as long as `memory`, which lives in the
            // returned Vm next to the VM fd; KVM drops its mapping with the VM.
            unsafe { fd.set_user_memory_region(mem_region) }.map_err(|e| {
                Error::Kvm(format!(
                    "KVM_SET_USER_MEMORY_REGION slot {slot} at {:#x} ({} MiB) failed: {e}",
                    region.start_addr().0,
                    region.len() >> 20
                ))
            })?;
        }

        fd.set_tss_address(xvmm_results::num::usize_from(layout::TSS_GPA))
            .map_err(|e| Error::Kvm(format!("KVM_SET_TSS_ADDR failed: {e}")))?;
        fd.set_identity_map_address(layout::IDENTITY_MAP_GPA)
            .map_err(|e| Error::Kvm(format!("KVM_SET_IDENTITY_MAP_ADDR failed: {e}")))?;

        if cfg.irqchip {
            fd.create_irq_chip()
                .map_err(|e| Error::Kvm(format!("KVM_CREATE_IRQCHIP failed: {e}")))?;
            // The dummy speaker port keeps PC-speaker accesses (port 0x61) in the kernel.
            let pit = kvm_pit_config {
                flags: KVM_PIT_SPEAKER_DUMMY,
                ..Default::default()
            };
            fd.create_pit2(pit)
                .map_err(|e| Error::Kvm(format!("KVM_CREATE_PIT2 failed: {e}")))?;
            disable_pit_reinjection(&fd)?;
        }

        Ok(Vm {
            kvm,
            fd,
            memory,
            ram,
            mem_bytes: cfg.mem_bytes,
            irqchip: cfg.irqchip,
        })
    }

    /// Reads `len` bytes the guest announced through the results doorbell.
    /// The length is guest-controlled: it is checked against the slot size.
    pub fn read_results_bytes(&self, len: u64) -> Result<Vec<u8>> {
        read_results_bytes(&self.memory, len)
    }

    /// Reads and parses the guest's JSON report from the results slot.
    pub fn read_results(&self, len: u64) -> Result<xvmm_results::Report> {
        parse_results(&self.read_results_bytes(len)?)
    }

    /// The VM's default TSC rate (`KVM_GET_TSC_KHZ` on the VM, Linux 6.0
    /// and later): on a host with a constant TSC, the host kernel's own
    /// `tsc_khz`, the divisor of KVM's scaling ratio. `None` where this KVM
    /// cannot say.
    pub fn tsc_khz(&self) -> Option<u32> {
        // SAFETY: the ioctl takes no argument and returns the rate.
        let ret = unsafe { vmm_sys_util::ioctl::ioctl(&self.fd, ioctls::KVM_GET_TSC_KHZ()) };
        u32::try_from(ret).ok().filter(|&khz| khz > 0)
    }
}

/// How this host's KVM scales a guest's TSC: SVM's ratio under kvm_amd,
/// VMX's under kvm_intel, and the loaded `tsc_tolerance_ppm`. `None` when
/// neither vendor module is loaded (PVM has no TSC scaling).
pub fn kvm_tsc_scaling() -> Option<TscScaling> {
    let module = |name: &str| std::path::Path::new("/sys/module").join(name).exists();
    let tolerance = std::fs::read_to_string("/sys/module/kvm/parameters/tsc_tolerance_ppm")
        .ok()
        .and_then(|t| t.trim().parse().ok());
    tsc_scaling_of(module("kvm_amd"), module("kvm_intel"), tolerance)
}

fn tsc_scaling_of(amd: bool, intel: bool, tolerance_ppm: Option<u32>) -> Option<TscScaling> {
    let vendor = match (amd, intel) {
        (true, false) => TscScaling::SVM,
        (false, true) => TscScaling::VMX,
        _ => return None,
    };
    Some(TscScaling {
        tolerance_ppm: tolerance_ppm.unwrap_or(vendor.tolerance_ppm),
        ..vendor
    })
}

mod ioctls {
    const KVMIO: u32 = 0xae;
    vmm_sys_util::ioctl_io_nr!(KVM_REINJECT_CONTROL, KVMIO, 0x71);
    vmm_sys_util::ioctl_io_nr!(KVM_GET_TSC_KHZ, KVMIO, 0xa3);
}

/// Turns off KVM's catch-up of missed PIT ticks. With it on, a guest that falls
/// behind (a starved VMM thread, a nested setup) gets every missed tick
/// delivered back to back and can spend all its time in the timer interrupt; Linux
/// keeps time from kvmclock/TSC and needs no replayed ticks.
fn disable_pit_reinjection(fd: &VmFd) -> Result<()> {
    let control = kvm_bindings::kvm_reinject_control {
        pit_reinject: 0,
        reserved: [0; 31],
    };
    // SAFETY: KVM reads a kvm_reinject_control from the pointer, which lives for the call.
    let ret = unsafe {
        vmm_sys_util::ioctl::ioctl_with_ref(fd, ioctls::KVM_REINJECT_CONTROL(), &control)
    };
    if ret < 0 {
        return Err(Error::Kvm(format!(
            "KVM_REINJECT_CONTROL failed: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Reads `len` bytes from the results slot of `memory`, refusing lengths beyond it.
pub fn read_results_bytes(memory: &GuestMemoryMmap, len: u64) -> Result<Vec<u8>> {
    if len > layout::RESULTS_SIZE {
        return Err(Error::Guest(format!(
            "results length {len} exceeds the results slot ({} bytes)",
            layout::RESULTS_SIZE
        )));
    }
    let mut buf = vec![0u8; xvmm_results::num::usize_from(len)];
    memory
        .read_slice(&mut buf, GuestAddress(layout::RESULTS_GPA))
        .map_err(|e| Error::Guest(format!("cannot read the results slot: {e}")))?;
    Ok(buf)
}

/// Parses a guest's results (a JSON [`xvmm_results::Report`]).
pub fn parse_results(bytes: &[u8]) -> Result<xvmm_results::Report> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::Guest(format!("results are not UTF-8: {e}")))?;
    xvmm_results::Report::from_json(text)
        .map_err(|e| Error::Guest(format!("malformed results: {e}")))
}

/// Smallest guest RAM we accept at all: room for the boot structures below 1 MiB
/// plus one MiB above.
pub const MIN_MEM_BYTES: u64 = 2 << 20;

/// Checks a requested guest RAM size against what the host can give.
/// `host_available` is `None` when it cannot be determined.
pub fn check_memory_size(mem_bytes: u64, host_available: Option<u64>) -> Result<()> {
    if mem_bytes < MIN_MEM_BYTES {
        return Err(Error::Memory(format!(
            "{} KiB of guest memory is too small: at least {} MiB is needed",
            mem_bytes >> 10,
            MIN_MEM_BYTES >> 20
        )));
    }
    if !mem_bytes.is_multiple_of(layout::PAGE_SIZE) {
        return Err(Error::Memory(format!(
            "guest memory size {mem_bytes} is not a multiple of the 4 KiB page size"
        )));
    }
    if let Some(avail) = host_available {
        if mem_bytes > avail {
            return Err(Error::Memory(format!(
                "{} MiB of guest memory is more than the host can give ({} MiB available)",
                mem_bytes >> 20,
                avail >> 20
            )));
        }
    }
    Ok(())
}

/// Memory the host can give without swapping anything out: MemAvailable + SwapFree
/// from /proc/meminfo. Guest RAM is mapped lazily (MAP_NORESERVE), so mmap alone
/// would accept sizes the guest could never use.
pub fn host_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_available(&text)
}

fn parse_meminfo_available(text: &str) -> Option<u64> {
    use xvmm_results::machine::meminfo_bytes;
    let avail = meminfo_bytes(text, "MemAvailable")?;
    Some(avail.saturating_add(meminfo_bytes(text, "SwapFree").unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_parsing() {
        let text = "MemTotal:       24684000 kB\nMemFree:  100 kB\nMemAvailable:   1000 kB\nSwapFree:   24 kB\n";
        assert_eq!(parse_meminfo_available(text), Some(1024 * 1024));
        assert_eq!(parse_meminfo_available("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn the_vendor_module_picks_kvms_ratio_and_the_loaded_tolerance_applies() {
        assert_eq!(tsc_scaling_of(true, false, None), Some(TscScaling::SVM));
        assert_eq!(tsc_scaling_of(false, true, None), Some(TscScaling::VMX));
        let strict = tsc_scaling_of(true, false, Some(10)).unwrap();
        assert_eq!((strict.frac_bits, strict.tolerance_ppm), (32, 10));
        assert_eq!(tsc_scaling_of(false, false, Some(250)), None);
        assert_eq!(tsc_scaling_of(true, true, None), None);
    }

    #[test]
    fn memory_size_limits() {
        assert!(check_memory_size(512 << 20, Some(1 << 30)).is_ok());
        assert!(check_memory_size(512 << 20, None).is_ok());
        let too_big = check_memory_size(2 << 30, Some(1 << 30))
            .unwrap_err()
            .to_string();
        assert!(too_big.contains("more than the host can give"), "{too_big}");
        let too_small = check_memory_size(1 << 20, None).unwrap_err().to_string();
        assert!(too_small.contains("too small"), "{too_small}");
        assert!(check_memory_size((4 << 20) + 1, None).is_err());
    }

    #[test]
    fn results_length_is_bounds_checked() {
        let mem = GuestMemoryMmap::from_ranges(&[(
            GuestAddress(layout::RESULTS_GPA),
            xvmm_results::num::usize_from(layout::RESULTS_SIZE),
        )])
        .unwrap();
        mem.write_slice(b"{\"x\":1}", GuestAddress(layout::RESULTS_GPA))
            .unwrap();
        assert_eq!(read_results_bytes(&mem, 7).unwrap(), b"{\"x\":1}");
        let err = read_results_bytes(&mem, layout::RESULTS_SIZE + 1).unwrap_err();
        assert!(err.to_string().contains("exceeds the results slot"));
        let err = parse_results(b"{\"x\":1}").unwrap_err();
        assert!(
            err.to_string().starts_with("guest: malformed results"),
            "{err}"
        );
        let err = parse_results(&[0xff, 0xfe]).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"));
    }
}
