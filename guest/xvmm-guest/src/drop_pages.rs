//! Asking the VMM to drop pages' host backing (`xvmm --host-fault-delay`):
//! the request page is the last page of the results buffer, reached through
//! /dev/mem; the count goes to [`PORT_DROP_PAGES`] and the VMM writes its
//! answer back into the page ([`DropAnswer`]). Guest-physical addresses come
//! from /proc/self/pagemap (root only: others read PFN 0).

use crate::channel::{PhysMapping, ResultsRegion};
use crate::sys;
use crate::{Error, Result};
use std::os::unix::fs::FileExt;
use xvmm_results::channel::{
    DropAnswer, DropRefusal, DROP_REQUEST_HEADER, DROP_REQUEST_MAX, DROP_REQUEST_OFFSET,
    GUEST_PAGE, PORT_DROP_PAGES,
};

/// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const PAGEMAP_PRESENT: u64 = 1 << 63;
const PAGEMAP_PFN: u64 = (1 << 55) - 1;

/// The guest-physical address of the page holding `addr`, which must be
/// resident (touched and locked by the caller).
pub fn physical_address(pagemap: &std::fs::File, addr: usize) -> Result<u64> {
    let mut entry = [0u8; 8];
    let at = (addr as u64 / GUEST_PAGE) * 8;
    pagemap
        .read_exact_at(&mut entry, at)
        .map_err(|e| Error::Channel(format!("reading /proc/self/pagemap: {e}")))?;
    let entry = u64::from_le_bytes(entry);
    let pfn = entry & PAGEMAP_PFN;
    if entry & PAGEMAP_PRESENT == 0 || pfn == 0 {
        return Err(Error::Channel(format!(
            "page {addr:#x} has no physical address in /proc/self/pagemap \
             (not resident, or not root: PFNs need CAP_SYS_ADMIN)"
        )));
    }
    pfn.checked_mul(GUEST_PAGE)
        .map(|base| base + (addr as u64 % GUEST_PAGE))
        .ok_or_else(|| Error::Channel(format!("PFN {pfn:#x} of {addr:#x} is out of range")))
}

/// The mapped request page and the port.
pub struct DropChannel {
    page: PhysMapping,
}

impl DropChannel {
    /// Maps the request page of `region` and gets the port.
    pub fn open(region: ResultsRegion) -> Result<DropChannel> {
        if region.size < DROP_REQUEST_OFFSET + GUEST_PAGE {
            return Err(Error::Channel(format!(
                "the results buffer ({:#x} bytes) has no drop-request page",
                region.size
            )));
        }
        let page = PhysMapping::new(region.gpa + DROP_REQUEST_OFFSET, GUEST_PAGE)?;
        sys::ioperm(PORT_DROP_PAGES, 4)?;
        Ok(DropChannel { page })
    }

    /// Asks the VMM to drop `pages` (guest-physical, page aligned, at most
    /// [`DROP_REQUEST_MAX`]); returns how many it dropped.
    pub fn drop_pages(&mut self, pages: &[u64]) -> Result<u32> {
        let count = u32::try_from(pages.len())
            .ok()
            .filter(|n| (1..=DROP_REQUEST_MAX).contains(n))
            .ok_or_else(|| Error::Channel(format!("{} pages in one drop request", pages.len())))?;
        // SAFETY: the page is mapped for the life of self; every offset is
        // below DROP_REQUEST_HEADER + 8 * DROP_REQUEST_MAX <= 4096.
        unsafe {
            std::ptr::write_volatile(self.page.as_ptr().cast::<i64>(), 0);
            for (i, gpa) in pages.iter().enumerate() {
                let at = self
                    .page
                    .as_ptr()
                    .add(DROP_REQUEST_HEADER + i * 8)
                    .cast::<u64>();
                std::ptr::write_volatile(at, *gpa);
            }
        }
        sys::outl(PORT_DROP_PAGES, count);
        // SAFETY: as above; the VMM wrote the answer during the port exit.
        let word = unsafe { std::ptr::read_volatile(self.page.as_ptr().cast::<i64>()) };
        match DropAnswer::decode(word) {
            DropAnswer::Dropped(n) => Ok(n),
            DropAnswer::Refused(code) => Err(Error::Channel(format!(
                "the VMM refused to drop {count} pages (answer {code}: {})",
                DropRefusal::describe(code)
            ))),
        }
    }
}
