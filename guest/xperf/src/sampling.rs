//! Taking samples: one crossing at a time, with the kernel's stamp page
//! armed before and read after each (split mode), and each sample judged:
//! kept, or rejected with a reason (KVM async page fault, a sequence counter
//! that did not move by one, stamps from different CPUs). Kept samples carry
//! their CPU and how many interrupts hit their window.

use crate::abi::{self, Slots, StampPage};
use crate::error::{Error, Result};
use crate::stamp::Stamps;
use xvmm_results::{Sample, UNFILLED};

/// Whether each sample can be split into u2k/k2u.
pub enum Mode {
    Split(StampPage),
    RoundTrip(String),
}

/// How xperf judged one sample before the shared validation sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Goes to `Crossing::from_rounds` (which still rejects unfilled and
    /// out-of-order stamps).
    Keep,
    /// A KVM async page fault happened during the sample: it is not a fault
    /// of ours and its timing is not a crossing.
    AsyncPf,
    /// The kernel's sequence counter did not advance by exactly one, so the
    /// slots may hold another crossing's stamps.
    SeqMismatch,
    /// The stamps were taken on different CPUs (the task migrated).
    Migrated,
}

/// One sample as taken, with xperf's own verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub sample: Sample,
    pub verdict: Verdict,
}

pub const UNTAKEN: Taken = Taken {
    sample: Sample {
        u2k_u: UNFILLED,
        u2k_k: UNFILLED,
        k2u_k: UNFILLED,
        k2u_u: UNFILLED,
        cpu: None,
        interrupts: None,
    },
    verdict: Verdict::Keep,
};

/// Judges a sample from the counters read before and after it.
pub fn classify(seq_delta: u64, async_delta: u64, sample: &Sample) -> Verdict {
    let unfilled = sample.u2k_k == UNFILLED || sample.k2u_k == UNFILLED;
    if async_delta != 0 {
        Verdict::AsyncPf
    } else if seq_delta == 1 || (seq_delta == 0 && unfilled) {
        // seq 0 with a sentinel left: the shared validation counts it unfilled.
        Verdict::Keep
    } else {
        Verdict::SeqMismatch
    }
}

/// What the kernel says about the latest delivered crossing: the CPUs of its
/// two kernel stamps and this CPU's interrupt count at each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSide {
    pub cpu_entry: u32,
    pub cpu_exit: u32,
    pub irq_entry: u64,
    pub irq_exit: u64,
}

impl KernelSide {
    fn read(page: &StampPage) -> KernelSide {
        KernelSide {
            cpu_entry: page.read_u32(abi::offset::CPU_ENTRY),
            cpu_exit: page.read_u32(abi::offset::CPU_EXIT),
            irq_entry: page.read_u64(abi::offset::IRQ_ENTRY),
            irq_exit: page.read_u64(abi::offset::IRQ_EXIT),
        }
    }
}

/// A sample's stamps: the user ones, the kernel's slots, and what the user
/// and kernel sides say about CPUs and interrupts. `irq_before` is the
/// interrupt count the kernel delivered last before the sample.
pub fn sample_of(
    user: &Stamps,
    kernel: Option<(u64, u64, &KernelSide)>,
    irq_before: u64,
) -> (Sample, bool) {
    let cpu = user.cpu();
    let mut sample = Sample {
        u2k_u: user.open,
        u2k_k: UNFILLED,
        k2u_k: UNFILLED,
        k2u_u: user.close,
        cpu,
        interrupts: None,
    };
    let mut same_cpu = cpu.is_some();
    if let Some((u2k_k, k2u_k, side)) = kernel {
        sample.u2k_k = u2k_k;
        sample.k2u_k = k2u_k;
        // Before the entry stamp (the user's side of u2k, and the previous
        // sample's tail), then between the kernel's two stamps.
        let before = side.irq_entry.wrapping_sub(irq_before);
        let inside = side.irq_exit.wrapping_sub(side.irq_entry);
        sample.interrupts = Some(u32::try_from(before.saturating_add(inside)).unwrap_or(u32::MAX));
        same_cpu &= cpu == Some(side.cpu_entry) && cpu == Some(side.cpu_exit);
    }
    (sample, same_cpu)
}

/// Takes `n` samples of one crossing. In split mode the kernel slots are armed
/// with the sentinel before and read after each sample, with the counters;
/// `iret` counts getppid samples that returned through IRET.
pub fn take(
    mode: &mut Mode,
    slots: Slots,
    n: usize,
    iret: &mut u64,
    mut cross: impl FnMut(usize) -> Stamps,
) -> Vec<Taken> {
    // Filled with a non-zero value so every page of the array is written (and
    // faulted in) now, never by a store inside the measured loop.
    let mut taken = vec![UNTAKEN; n];
    match mode {
        Mode::RoundTrip(_) => {
            for (i, slot) in taken.iter_mut().enumerate() {
                let stamps = cross(i);
                let (sample, same_cpu) = sample_of(&stamps, None, 0);
                let verdict = if same_cpu {
                    Verdict::Keep
                } else {
                    Verdict::Migrated
                };
                *slot = Taken { sample, verdict };
            }
        }
        Mode::Split(page) => {
            for (i, slot) in taken.iter_mut().enumerate() {
                *slot = take_split(page, slots, iret, || cross(i));
            }
            mark_tails(&mut taken);
        }
    }
    taken
}

/// One split-mode sample.
#[inline(always)]
fn take_split(
    page: &mut StampPage,
    slots: Slots,
    iret: &mut u64,
    cross: impl FnOnce() -> Stamps,
) -> Taken {
    page.arm(slots);
    let seq0 = page.read_u64(slots.seq);
    let async0 = page.read_u64(abi::offset::PF_ASYNC);
    let irq0 = page.read_u64(abi::offset::IRQ_EXIT);
    let stamps = cross();
    let (u2k_k, k2u_k) = (page.read_u64(slots.u2k_k), page.read_u64(slots.k2u_k));
    let side = KernelSide::read(page);
    let seq_delta = page.read_u64(slots.seq).wrapping_sub(seq0);
    let async_delta = page.read_u64(abi::offset::PF_ASYNC).wrapping_sub(async0);
    let (mut sample, same_cpu) = sample_of(&stamps, Some((u2k_k, k2u_k, &side)), irq0);
    let mut verdict = classify(seq_delta, async_delta, &sample);
    if seq_delta != 1 {
        // Nothing of this sample was delivered: its interrupt count is not its own.
        sample.interrupts = None;
    } else if verdict == Verdict::Keep && !same_cpu {
        verdict = Verdict::Migrated;
    }
    // The return path is only this sample's when it was delivered.
    if slots == abi::SYSCALL_SLOTS
        && verdict == Verdict::Keep
        && seq_delta == 1
        && page.read_u32(abi::offset::SC_RET_PATH) == abi::RET_PATH_IRET
    {
        *iret += 1;
    }
    Taken { sample, verdict }
}

/// An interrupt counted for a sample may have come before its entry stamp,
/// in the previous sample's tail (its k2u after the return to user mode):
/// count it there too (the counts of the two stretches are not told apart).
fn mark_tails(taken: &mut [Taken]) {
    for i in 1..taken.len() {
        if taken[i].sample.interrupts.is_some_and(|n| n > 0) {
            if let Some(prev) = taken[i - 1].sample.interrupts.as_mut() {
                *prev = (*prev).max(1);
            }
        }
    }
}

/// An anonymous region whose pages are faulted in one at a time.
pub struct Region {
    base: *mut u8,
    len: usize,
}

impl Region {
    /// Maps `pages` pages without populating them and opts out of THP, so
    /// every first touch is one 4 KiB fault. Returns whether the THP opt-out
    /// was accepted.
    pub fn map(pages: usize) -> Result<(Region, bool)> {
        let len = pages
            .checked_mul(abi::PAGE_SIZE)
            .ok_or_else(|| Error::Usage("region size overflows".into()))?
            .max(abi::PAGE_SIZE);
        // SAFETY: fresh private anonymous mapping, checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os(&format!("mmap of {pages} pages")));
        }
        // SAFETY: advice on our own mapping.
        let no_thp = unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) } == 0;
        Ok((
            Region {
                base: base.cast(),
                len,
            },
            no_thp,
        ))
    }

    pub fn page(&self, index: usize) -> *mut u8 {
        self.base.wrapping_add((index * abi::PAGE_SIZE) % self.len)
    }

    /// Locks every (touched) page in memory: the guest kernel does not swap
    /// or reclaim them. (Compaction may still move a locked page where
    /// `vm.compact_unevictable_allowed` is 1; xperf's guest runs nothing
    /// that compacts between finding the addresses and touching the pages.)
    pub fn lock(&self) -> Result<()> {
        // SAFETY: locking our own mapping.
        if unsafe { libc::mlock(self.base.cast(), self.len) } != 0 {
            return Err(Error::last_os("mlock"));
        }
        Ok(())
    }

    /// Drops every page, so the next touch of each faults again.
    pub fn discard(&self) -> Result<()> {
        // SAFETY: advice on our own mapping.
        if unsafe { libc::madvise(self.base.cast(), self.len, libc::MADV_DONTNEED) } != 0 {
            return Err(Error::last_os("madvise(MADV_DONTNEED)"));
        }
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping we created.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(a: u64, b: u64, c: u64, d: u64) -> Sample {
        Sample {
            u2k_u: a,
            u2k_k: b,
            k2u_k: c,
            k2u_u: d,
            ..Default::default()
        }
    }

    #[test]
    fn classification_prefers_async_then_sequence() {
        let good = s(1, 2, 3, 4);
        let unfilled = s(1, UNFILLED, UNFILLED, 4);
        assert_eq!(classify(1, 0, &good), Verdict::Keep);
        assert_eq!(classify(1, 1, &good), Verdict::AsyncPf);
        assert_eq!(classify(0, 1, &unfilled), Verdict::AsyncPf);
        assert_eq!(classify(0, 0, &unfilled), Verdict::Keep);
        assert_eq!(classify(2, 0, &good), Verdict::SeqMismatch);
        assert_eq!(classify(0, 0, &good), Verdict::SeqMismatch);
    }

    fn stamps(aux_open: u32, aux_close: u32) -> Stamps {
        Stamps {
            open: 10,
            close: 40,
            aux_open,
            aux_close,
        }
    }

    #[test]
    fn interrupts_and_cpus_from_both_sides() {
        let side = KernelSide {
            cpu_entry: 1,
            cpu_exit: 1,
            irq_entry: 105,
            irq_exit: 107,
        };
        let (sample, same) = sample_of(&stamps(1, 1), Some((20, 30, &side)), 100);
        assert_eq!(sample.interrupts, Some(7), "5 before the entry, 2 inside");
        assert_eq!(sample.cpu, Some(1));
        assert!(same);
        // The kernel returned on another CPU.
        let moved = KernelSide {
            cpu_exit: 0,
            ..side
        };
        assert!(!sample_of(&stamps(1, 1), Some((20, 30, &moved)), 100).1);
        // The user stamps came from two CPUs.
        let (sample, same) = sample_of(&stamps(0, 1), None, 0);
        assert!(!same && sample.cpu.is_none() && sample.interrupts.is_none());
    }

    #[test]
    fn an_interrupt_before_a_sample_also_marks_the_one_before() {
        let with = |n: Option<u32>| Taken {
            sample: Sample {
                interrupts: n,
                ..s(1, 2, 3, 4)
            },
            verdict: Verdict::Keep,
        };
        let mut t = [
            with(Some(0)),
            with(Some(1)),
            with(Some(0)),
            with(None),
            with(Some(2)),
        ];
        mark_tails(&mut t);
        let n: Vec<Option<u32>> = t.iter().map(|t| t.sample.interrupts).collect();
        assert_eq!(n, [Some(1), Some(1), Some(0), None, Some(2)]);
    }
}
