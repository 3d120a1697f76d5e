//! The kernel ABI of docs/xperf-abi.md: prctl(PR_XPERF) detection and
//! registration, and the layout of the 4096-byte stamp page.

use crate::error::{Error, Result};
use std::ptr::NonNull;

pub const PR_XPERF: libc::c_int = 0x5850_4652;
pub const PR_XPERF_QUERY: libc::c_ulong = 0;
pub const PR_XPERF_REGISTER: libc::c_ulong = 1;
pub const PR_XPERF_UNREGISTER: libc::c_ulong = 2;
pub const PR_XPERF_KPAIR: libc::c_ulong = 3;
pub const XPERF_ABI_VERSION: u32 = 2;
/// Bytes of each instruction text in the page.
pub const INSN_LEN: usize = 32;
pub const XPERF_PAGE_MAGIC: u64 = 0x5846_5045_5246_0001;
pub const PAGE_SIZE: usize = 4096;

/// Byte offsets of `struct xperf_page`.
pub mod offset {
    pub const MAGIC: usize = 0;
    pub const ABI_VERSION: usize = 8;
    pub const FLAGS: usize = 12;
    pub const PF_U2K_K: usize = 16;
    pub const PF_K2U_K: usize = 24;
    pub const PF_SEQ: usize = 32;
    pub const PF_ASYNC: usize = 40;
    pub const SC_U2K_K: usize = 48;
    pub const SC_K2U_K: usize = 56;
    pub const SC_SEQ: usize = 64;
    pub const SC_RET_PATH: usize = 72;
    pub const IRQ_ENTRY: usize = 80;
    pub const IRQ_EXIT: usize = 88;
    pub const CPU_ENTRY: usize = 96;
    pub const CPU_EXIT: usize = 100;
    pub const KPAIR: usize = 104;
    pub const KPAIR_INNER: usize = 112;
    pub const ENTRY_INSN: usize = 120;
    pub const EXIT_INSN: usize = 152;
}

/// Bits of the page's `flags` word.
pub const FLAG_KPTI: u32 = 1 << 0;
pub const FLAG_FRED: u32 = 1 << 1;
pub const FLAG_KVM_GUEST: u32 = 1 << 2;

/// `sc_ret_path` value for an IRET return (0 is SYSRET).
pub const RET_PATH_IRET: u32 = 1;

/// What `prctl(PR_XPERF, PR_XPERF_QUERY)` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hooks {
    /// EINVAL: an unpatched kernel.
    Absent,
    /// The hooks are built in and speak this ABI version.
    Present(u32),
    /// Any other failure, with its errno.
    Failed(i32),
}

/// Asks the running kernel whether it has the xperf hooks.
pub fn query() -> Hooks {
    // SAFETY: prctl with integer arguments only; an unknown option is EINVAL.
    let ret = unsafe { libc::prctl(PR_XPERF, PR_XPERF_QUERY, 0 as libc::c_ulong, 0, 0) };
    // Non-negative: the hooks' version.
    if let Ok(version) = u32::try_from(ret) {
        return Hooks::Present(version);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EINVAL) => Hooks::Absent,
        Some(errno) => Hooks::Failed(errno),
        None => Hooks::Failed(0),
    }
}

/// The two stamp slots and the counter of one crossing kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    pub u2k_k: usize,
    pub k2u_k: usize,
    pub seq: usize,
}

pub const PF_SLOTS: Slots = Slots {
    u2k_k: offset::PF_U2K_K,
    k2u_k: offset::PF_K2U_K,
    seq: offset::PF_SEQ,
};
pub const SYSCALL_SLOTS: Slots = Slots {
    u2k_k: offset::SC_U2K_K,
    k2u_k: offset::SC_K2U_K,
    seq: offset::SC_SEQ,
};

/// A page-aligned anonymous page, registered with the kernel as this task's
/// stamp page. Unregistered and unmapped on drop.
pub struct StampPage {
    base: NonNull<u8>,
    registered: bool,
}

impl StampPage {
    /// Maps the page and touches it, so neither the kernel's pin nor a later
    /// sentinel write faults. Not yet registered.
    fn map() -> Result<StampPage> {
        // SAFETY: a fresh private anonymous mapping; checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::last_os("mmap of the stamp page"));
        }
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| Error::Sys("mmap returned a null stamp page".into()))?;
        let mut page = StampPage {
            base,
            registered: false,
        };
        for off in (0..PAGE_SIZE).step_by(8) {
            page.write_u64(off, 0);
        }
        Ok(page)
    }

    /// A mapped page no kernel writes to: tests play the kernel through
    /// [`StampPage::base_ptr`].
    #[cfg(test)]
    pub(crate) fn unregistered() -> Result<StampPage> {
        StampPage::map()
    }

    #[cfg(test)]
    pub(crate) fn base_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Maps a page and registers it as this task's stamp page.
    pub fn register() -> Result<StampPage> {
        let mut page = StampPage::map()?;
        page.register_page()?;
        Ok(page)
    }

    fn register_page(&mut self) -> Result<()> {
        let page = self;
        let ptr = page.base.as_ptr();
        // SAFETY: prctl with the address of a page we own for as long as it is
        // registered (Drop unregisters before unmapping).
        let ret = unsafe {
            libc::prctl(
                PR_XPERF,
                PR_XPERF_REGISTER,
                ptr as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if ret != 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EBUSY) => Error::Hooks(
                    "registration refused (EBUSY): the entry hooks are switched off at boot".into(),
                ),
                _ => Error::Hooks(format!("PR_XPERF_REGISTER failed: {err}")),
            });
        }
        page.registered = true;
        let magic = page.read_u64(offset::MAGIC);
        if magic != XPERF_PAGE_MAGIC {
            return Err(Error::Hooks(format!(
                "stamp page magic is {magic:#x} after registration, expected {XPERF_PAGE_MAGIC:#x}"
            )));
        }
        let version = page.read_u32(offset::ABI_VERSION);
        if version != XPERF_ABI_VERSION {
            return Err(Error::Hooks(format!(
                "stamp page ABI version is {version}, this xperf speaks {XPERF_ABI_VERSION}"
            )));
        }
        Ok(())
    }

    pub fn flags(&self) -> u32 {
        self.read_u32(offset::FLAGS)
    }

    /// A NUL-terminated text the kernel wrote at `off` ([`INSN_LEN`] bytes).
    pub fn text(&self, off: usize) -> String {
        let off = off.min(PAGE_SIZE - INSN_LEN);
        let mut bytes = Vec::with_capacity(INSN_LEN);
        for i in 0..INSN_LEN {
            // SAFETY: in bounds (clamped above) of the mapped page.
            let b = unsafe { self.base.as_ptr().add(off + i).read_volatile() };
            if b == 0 {
                break;
            }
            bytes.push(b);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The kernel's stamp pairs, once (PR_XPERF_KPAIR): (return stamp then
    /// entry stamp, entry stamp then return stamp), in ticks.
    pub fn kernel_pairs(&self) -> Result<(u64, u64)> {
        // SAFETY: prctl with integer arguments; the kernel writes our page.
        let ret = unsafe {
            libc::prctl(
                PR_XPERF,
                PR_XPERF_KPAIR,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if ret != 0 {
            return Err(Error::last_os("prctl(PR_XPERF, KPAIR)"));
        }
        Ok((
            self.read_u64(offset::KPAIR),
            self.read_u64(offset::KPAIR_INNER),
        ))
    }

    /// Drops the registration (the kernel's hooks go off if nobody else is
    /// registered); [`StampPage::reregister`] takes it back.
    pub fn unregister(&mut self) -> Result<()> {
        // SAFETY: prctl with integer arguments.
        let ret = unsafe {
            libc::prctl(
                PR_XPERF,
                PR_XPERF_UNREGISTER,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if ret != 0 {
            return Err(Error::last_os("prctl(PR_XPERF, UNREGISTER)"));
        }
        self.registered = false;
        Ok(())
    }

    /// Registers this page again after [`StampPage::unregister`].
    pub fn reregister(&mut self) -> Result<()> {
        self.register_page()
    }

    /// Writes the sentinel into both kernel stamp slots of one crossing kind.
    #[inline(always)]
    pub fn arm(&mut self, slots: Slots) {
        self.write_u64(slots.u2k_k, xvmm_results::UNFILLED);
        self.write_u64(slots.k2u_k, xvmm_results::UNFILLED);
    }

    #[inline(always)]
    pub fn read_u64(&self, off: usize) -> u64 {
        let off = off.min(PAGE_SIZE - 8) & !7;
        // SAFETY: in bounds (clamped above) and 8-aligned within a mapped page;
        // volatile because the kernel writes it behind the compiler's back.
        unsafe { self.base.as_ptr().add(off).cast::<u64>().read_volatile() }
    }

    #[inline(always)]
    pub fn read_u32(&self, off: usize) -> u32 {
        let off = off.min(PAGE_SIZE - 4) & !3;
        // SAFETY: as read_u64, 4-aligned.
        unsafe { self.base.as_ptr().add(off).cast::<u32>().read_volatile() }
    }

    #[inline(always)]
    fn write_u64(&mut self, off: usize, value: u64) {
        let off = off.min(PAGE_SIZE - 8) & !7;
        // SAFETY: as read_u64.
        unsafe {
            self.base
                .as_ptr()
                .add(off)
                .cast::<u64>()
                .write_volatile(value)
        }
    }
}

impl Drop for StampPage {
    fn drop(&mut self) {
        // SAFETY: unregister first so the kernel drops its pin and stops writing,
        // then unmap the page we mapped.
        unsafe {
            if self.registered {
                libc::prctl(
                    PR_XPERF,
                    PR_XPERF_UNREGISTER,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                );
            }
            libc::munmap(self.base.as_ptr().cast(), PAGE_SIZE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_layout_matches_the_abi_document() {
        // The u64 slots follow the header (magic, version, flags) back to back.
        assert_eq!(offset::MAGIC + 8, offset::ABI_VERSION);
        assert_eq!(offset::ABI_VERSION + 4, offset::FLAGS);
        assert_eq!(offset::FLAGS + 4, offset::PF_U2K_K);
        let u64s = [
            offset::PF_U2K_K,
            offset::PF_K2U_K,
            offset::PF_SEQ,
            offset::PF_ASYNC,
            offset::SC_U2K_K,
            offset::SC_K2U_K,
            offset::SC_SEQ,
        ];
        for pair in u64s.windows(2) {
            assert_eq!(pair[1] - pair[0], 8);
        }
        assert_eq!(offset::SC_SEQ + 8, offset::SC_RET_PATH);
        // Version 2: after the 4-byte return path and reserved word.
        assert_eq!(offset::SC_RET_PATH + 8, offset::IRQ_ENTRY);
        assert_eq!(offset::IRQ_ENTRY + 8, offset::IRQ_EXIT);
        assert_eq!(offset::IRQ_EXIT + 8, offset::CPU_ENTRY);
        assert_eq!(offset::CPU_ENTRY + 4, offset::CPU_EXIT);
        assert_eq!(offset::CPU_EXIT + 4, offset::KPAIR);
        assert_eq!(offset::KPAIR + 8, offset::KPAIR_INNER);
        assert_eq!(offset::KPAIR_INNER + 8, offset::ENTRY_INSN);
        assert_eq!(offset::ENTRY_INSN + INSN_LEN, offset::EXIT_INSN);
        const { assert!(offset::EXIT_INSN + INSN_LEN <= PAGE_SIZE) };
        assert_eq!(&PR_XPERF.to_be_bytes(), b"XPFR");
    }

    #[test]
    fn query_on_this_kernel_is_answered() {
        // An unpatched kernel says EINVAL (Absent); a patched one says version 1.
        match query() {
            Hooks::Absent => {}
            Hooks::Present(v) => assert_eq!(v, XPERF_ABI_VERSION),
            Hooks::Failed(errno) => panic!("prctl(PR_XPERF) failed with errno {errno}"),
        }
    }
}
