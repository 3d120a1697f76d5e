//! The ACPI PM timer's count, as a device model serves it from the host
//! clock (QEMU's PIIX4 and ICH9 ACPI do the same): a 24-bit counter at
//! 3.579545 MHz. The microguest's `pio-in-pmtimer` row reads it, the peer of
//! kvm-unit-tests' inl_from_pmtimer.

use std::time::Instant;

/// The PM timer's rate, fixed by the ACPI specification.
pub const HZ: u128 = 3_579_545;

/// The 24-bit count `elapsed` after the timer started.
pub fn count(elapsed: std::time::Duration) -> u32 {
    let ticks = elapsed.as_nanos() * HZ / 1_000_000_000;
    // Masked to the timer's 24 bits, so it fits.
    (ticks & 0xff_ffff) as u32
}

/// A PM timer that started when it was made.
#[derive(Clone, Copy, Debug)]
pub struct PmTimer {
    start: Instant,
}

impl PmTimer {
    pub fn new() -> PmTimer {
        PmTimer {
            start: Instant::now(),
        }
    }

    /// The count now.
    pub fn read(&self) -> u32 {
        count(self.start.elapsed())
    }
}

impl Default for PmTimer {
    fn default() -> Self {
        PmTimer::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_count_runs_at_the_acpi_rate_and_wraps_at_24_bits() {
        assert_eq!(count(Duration::ZERO), 0);
        assert_eq!(count(Duration::from_micros(1)), 3);
        assert_eq!(count(Duration::from_millis(1)), 3579);
        // One second: 3579545 ticks, under 2^24.
        assert_eq!(count(Duration::from_secs(1)), 3_579_545);
        // Five seconds: 17897725 = 2^24 + 1120509, so it has wrapped.
        assert_eq!(count(Duration::from_secs(5)), 17_897_725 - (1 << 24));
        let t = PmTimer::new();
        let (a, b) = (t.read(), {
            std::thread::sleep(Duration::from_millis(2));
            t.read()
        });
        assert!(b > a && b - a >= 7158, "{a} {b}");
    }
}
