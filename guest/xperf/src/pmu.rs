//! Core cycles beside the TSC, where the CPU has a PMU and the kernel lets
//! user mode read it: `perf_event_open(PERF_TYPE_HARDWARE,
//! PERF_COUNT_HW_CPU_CYCLES)` on this thread, its first page mapped, and
//! `rdpmc` on the counter the page names (`cap_user_rdpmc`). Without any of
//! that, [`CycleCounter::open`] says why ("no PMU: ...") and the report has
//! TSC ticks only.
//!
//! The machines xvmm is built on have no PMU (`perf stat -e cycles`: not
//! supported), so the reading path below has not run on them.

use std::arch::asm;

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
/// `PERF_ATTR_SIZE_VER0`: the kernel accepts the first 64 bytes of the
/// attribute (every later field zero).
const ATTR_SIZE_VER0: u32 = 64;
/// `perf_event_mmap_page`: `index` at 12, `offset` at 16, `capabilities`
/// at 40 (bit 2 `cap_user_rdpmc`), `pmc_width` at 48.
const PAGE_INDEX: usize = 12;
const PAGE_OFFSET: usize = 16;
const PAGE_CAPABILITIES: usize = 40;
const PAGE_PMC_WIDTH: usize = 48;
const CAP_USER_RDPMC: u64 = 1 << 2;

/// The first 64 bytes of `struct perf_event_attr`.
#[repr(C)]
#[derive(Default)]
struct AttrVer0 {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// Bit field: disabled (0), inherit (1), pinned (2), exclusive (3),
    /// exclude_user (4), exclude_kernel (5), exclude_hv (6)...
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

/// This thread's core-cycle counter, read with `rdpmc`.
pub struct CycleCounter {
    fd: libc::c_int,
    page: *mut u8,
    /// The hardware counter `rdpmc` reads (the page's index - 1).
    counter: u32,
    width: u32,
}

impl CycleCounter {
    /// Opens the counter, or says why there is none ("no PMU: ...").
    pub fn open() -> Result<CycleCounter, String> {
        let attr = AttrVer0 {
            kind: PERF_TYPE_HARDWARE,
            size: ATTR_SIZE_VER0,
            config: PERF_COUNT_HW_CPU_CYCLES,
            // Counting user and kernel cycles: a crossing is both.
            ..Default::default()
        };
        // SAFETY: a valid attribute of the size it states; this thread, any CPU.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const AttrVer0,
                0,
                -1,
                -1,
                0,
            )
        };
        // A file descriptor or -1, both an int in the kernel.
        let fd = libc::c_int::try_from(ret).unwrap_or(-1);
        if fd < 0 {
            return Err(format!(
                "no PMU: perf_event_open(cycles) failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: maps the event's first page read-only; checked below.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            let err = std::io::Error::last_os_error();
            // SAFETY: closing the fd we opened.
            unsafe { libc::close(fd) };
            return Err(format!(
                "no PMU for user mode: mmap of the perf page: {err}"
            ));
        }
        let mut c = CycleCounter {
            fd,
            page: page.cast(),
            counter: 0,
            width: 0,
        };
        let (index, caps) = (c.u32_at(PAGE_INDEX), c.u64_at(PAGE_CAPABILITIES));
        if caps & CAP_USER_RDPMC == 0 || index == 0 {
            return Err(
                "no PMU for user mode: the kernel does not allow rdpmc (cap_user_rdpmc)".into(),
            );
        }
        c.counter = index - 1;
        c.width = u32::from(c.u16_at(PAGE_PMC_WIDTH)).clamp(1, 64);
        Ok(c)
    }

    fn u16_at(&self, off: usize) -> u16 {
        // SAFETY: inside the mapped page.
        unsafe { self.page.add(off).cast::<u16>().read_volatile() }
    }

    fn u32_at(&self, off: usize) -> u32 {
        // SAFETY: inside the mapped page.
        unsafe { self.page.add(off).cast::<u32>().read_volatile() }
    }

    fn u64_at(&self, off: usize) -> u64 {
        // SAFETY: inside the mapped page.
        unsafe { self.page.add(off).cast::<u64>().read_volatile() }
    }

    /// Cycles of one getppid round trip: `rdpmc` on both sides of the
    /// syscall, the difference masked to the counter's width.
    #[inline(always)]
    pub fn getppid_cycles(&self) -> u64 {
        let (lo0, hi0, lo1, hi1): (u32, u32, u32, u32);
        // SAFETY: rdpmc on the counter the kernel allowed; getppid has no
        // side effects; every clobbered register is declared.
        unsafe {
            asm!(
                "lfence",
                "rdpmc",
                "mov {lo0:e}, eax",
                "mov {hi0:e}, edx",
                "mov eax, {nr}",
                "syscall",
                "mov ecx, {counter:e}",
                "lfence",
                "rdpmc",
                nr = const libc::SYS_getppid,
                counter = in(reg) self.counter,
                lo0 = out(reg) lo0,
                hi0 = out(reg) hi0,
                inout("ecx") self.counter => _,
                out("eax") lo1,
                out("edx") hi1,
                out("r11") _,
                options(nostack),
            );
        }
        let mask = if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        };
        let a = (u64::from(hi0) << 32) | u64::from(lo0);
        let b = (u64::from(hi1) << 32) | u64::from(lo1);
        b.wrapping_sub(a) & mask
    }

    /// The counter's offset (the kernel's part of the count), unused by
    /// differences but kept for a reader of the page.
    pub fn offset(&self) -> i64 {
        // The kernel's field is an s64: the same bits.
        self.u64_at(PAGE_OFFSET).cast_signed()
    }
}

impl Drop for CycleCounter {
    fn drop(&mut self) {
        // SAFETY: unmapping and closing what `open` created.
        unsafe {
            libc::munmap(self.page.cast(), 4096);
            libc::close(self.fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attribute_is_version_zero_sized() {
        assert_eq!(std::mem::size_of::<AttrVer0>(), ATTR_SIZE_VER0 as usize);
    }

    /// Where there is a PMU the counter moves across a syscall; where there
    /// is none (the build machines) the reason starts "no PMU".
    #[test]
    fn cycles_are_read_or_their_absence_explained() {
        match CycleCounter::open() {
            Ok(c) => {
                let cycles = (0..100).map(|_| c.getppid_cycles()).min().unwrap_or(0);
                assert!(cycles > 0, "a syscall takes cycles");
            }
            Err(why) => assert!(why.starts_with("no PMU"), "{why}"),
        }
    }
}
