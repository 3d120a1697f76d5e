//! Calibration exits for the VMM's timeline (`xvmm_results::timeline`): a
//! write of the exit's index to the calibration port, between two stamps of
//! our own. The host traces the exit and its entry; the VMM checks that its
//! mapping of host time puts both between our stamps.
//!
//! The exits are spread over the run (a share before every round and after
//! the last), so that a drifting rate or a rewritten offset shows.

use crate::error::Result;
use std::arch::asm;
use xvmm_host::tsc::join;
use xvmm_host::{stamp_close, stamp_open};
use xvmm_results::channel::PORT_CALIBRATE;
use xvmm_results::timeline::GuestCalibration;

/// Takes `total` calibration exits over `checkpoints` checkpoints.
pub struct Calibrator {
    total: u32,
    checkpoints: u32,
    passed: u32,
    taken: Vec<GuestCalibration>,
}

impl Calibrator {
    /// Asks for the port (root only) when there is anything to take.
    pub fn new(total: u64, checkpoints: u32) -> Result<Calibrator> {
        let total = u32::try_from(total).unwrap_or(u32::MAX);
        if total > 0 {
            xvmm_guest::sys::ioperm(PORT_CALIBRATE, 4)?;
        }
        Ok(Calibrator {
            total,
            checkpoints: checkpoints.max(1),
            passed: 0,
            taken: Vec::with_capacity(total as usize),
        })
    }

    /// This checkpoint's share of the exits (the last takes what is left).
    pub fn checkpoint(&mut self) {
        self.passed += 1;
        let due = due(self.total, self.checkpoints, self.passed);
        // At most `total` (a u32) are ever taken.
        let mut index = u32::try_from(self.taken.len()).unwrap_or(u32::MAX);
        while index < due {
            self.taken.push(calibration_exit(index));
            index += 1;
        }
    }

    /// Checkpoints passed, and how many it was told of.
    #[cfg(test)]
    pub(crate) fn checkpoints(&self) -> (u32, u32) {
        (self.passed, self.checkpoints)
    }

    pub fn finish(self) -> Vec<GuestCalibration> {
        self.taken
    }
}

/// Exits due once `passed` of `checkpoints` checkpoints have passed.
fn due(total: u32, checkpoints: u32, passed: u32) -> u32 {
    if passed >= checkpoints {
        total
    } else {
        // Below `total`: passed < checkpoints.
        u32::try_from(u64::from(total) * u64::from(passed) / u64::from(checkpoints))
            .unwrap_or(total)
    }
}

/// One stamped write of `index` to the calibration port. The port must have
/// been granted with `ioperm` ([`Calibrator::new`]).
fn calibration_exit(index: u32) -> GuestCalibration {
    let (lo, hi): (u32, u32);
    let (end_lo, end_hi): (u32, u32);
    // SAFETY: stamps and one port write (granted by ioperm, else SIGSEGV);
    // every clobbered register is declared.
    unsafe {
        asm!(
            stamp_open!(),
            "mov {lo:e}, eax",
            "mov {hi:e}, edx",
            "mov eax, {index:e}",
            "mov dx, {port:x}",
            "out dx, eax",
            stamp_close!(),
            lo = out(reg) lo,
            hi = out(reg) hi,
            index = in(reg) index,
            port = in(reg) PORT_CALIBRATE,
            out("eax") end_lo,
            out("edx") end_hi,
            out("ecx") _,
            options(nostack, preserves_flags),
        );
    }
    GuestCalibration(index, join(lo, hi), join(end_lo, end_hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_total_over_the_checkpoints() {
        // Nothing to take needs no port: checkpoints only count.
        let mut c = Calibrator::new(0, 4).unwrap();
        for _ in 0..4 {
            c.checkpoint();
        }
        assert!(c.finish().is_empty());
        assert_eq!(
            (1..=4).map(|p| due(256, 4, p)).collect::<Vec<_>>(),
            [64, 128, 192, 256]
        );
        assert_eq!(
            (1..=3).map(|p| due(10, 3, p)).collect::<Vec<_>>(),
            [3, 6, 10]
        );
    }
}
