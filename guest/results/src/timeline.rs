//! One TSC timeline for the guest's stamps and the host's exit trace.
//!
//! KVM runs a guest on `guest = scale(host) + offset`: `scale` multiplies by
//! the TSC ratio (1 without scaling; a fixed-point number in hardware, 8.32 on
//! AMD, 16.48 on Intel), and the offset is in guest ticks. The offset can be
//! rewritten while the guest runs (`kvm:kvm_write_tsc_offset`), so a
//! [`Mapping`] is piecewise: one offset per stretch of host time.
//!
//! A mapping is never assumed. The guest brackets K calibration exits with
//! its own stamps; the host traces each exit and entry. Every pair must order
//! as `guest_before < map(exit)` and `map(entry) < guest_after`
//! ([`verify`]); one violation makes the timeline unverified. The same pairs
//! bound the offset the guest actually ran with and measure the rate, which
//! checks `--tsc-offset` and `--tsc-khz` against what the guest read.

use serde::{Deserialize, Serialize};

/// Fraction bits of the fixed-point ratio used for mapping (Intel's 48: AMD's
/// 32-bit fractions are exact in it).
pub const RATIO_FRAC_BITS: u32 = 48;

/// An offset KVM wrote while the guest ran, at a host TSC time.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetChange {
    pub host_tsc: u64,
    pub offset: i64,
}

/// Host TSC to guest TSC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The ratio in 16.48 fixed point.
    pub ratio_fixed: u64,
    /// The offset in force before the first change.
    pub offset: i64,
    /// Later offsets, in host time order.
    pub changes: Vec<OffsetChange>,
}

impl Mapping {
    /// A mapping with ratio 1.
    pub fn unscaled(offset: i64) -> Mapping {
        Mapping {
            ratio_fixed: 1 << RATIO_FRAC_BITS,
            offset,
            changes: Vec::new(),
        }
    }

    /// A mapping for a guest running at `guest_khz` on a host TSC of
    /// `host_khz` (KVM's ratio is this quotient, rounded to its fraction).
    pub fn scaled(offset: i64, guest_khz: u64, host_khz: u64) -> Mapping {
        if guest_khz == 0 || host_khz == 0 || guest_khz == host_khz {
            return Mapping::unscaled(offset);
        }
        let fixed = (u128::from(guest_khz) << RATIO_FRAC_BITS) / u128::from(host_khz);
        Mapping {
            ratio_fixed: u64::try_from(fixed).unwrap_or(u64::MAX),
            offset,
            changes: Vec::new(),
        }
    }

    pub fn ratio(&self) -> f64 {
        self.ratio_fixed as f64 / (1u64 << RATIO_FRAC_BITS) as f64
    }

    /// `host` scaled by the ratio, without the offset.
    pub fn scale(&self, host: u64) -> i128 {
        ((u128::from(host) * u128::from(self.ratio_fixed)) >> RATIO_FRAC_BITS) as i128
    }

    /// Host ticks as guest ticks (a duration: no offset).
    pub fn scale_duration(&self, host_ticks: u64) -> u64 {
        u64::try_from(self.scale(host_ticks)).unwrap_or(u64::MAX)
    }

    /// The offset in force at host time `host`.
    pub fn offset_at(&self, host: u64) -> i64 {
        let later = self.changes.partition_point(|c| c.host_tsc <= host);
        later
            .checked_sub(1)
            .map_or(self.offset, |i| self.changes[i].offset)
    }

    /// The guest TSC at host time `host`: modulo 2^64, as the guest reads
    /// it (a negative offset larger than the host TSC wraps it to the top).
    pub fn to_guest(&self, host: u64) -> i128 {
        (self.scale(host) + i128::from(self.offset_at(host))).rem_euclid(1i128 << 64)
    }

    /// Whether an offset change falls in the host-time window `[from, to]`.
    pub fn changes_within(&self, from: u64, to: u64) -> bool {
        let first = self.changes.partition_point(|c| c.host_tsc < from);
        self.changes.get(first).is_some_and(|c| c.host_tsc <= to)
    }
}

/// One calibration exit as the guest took it: `[index, before, after]`, the
/// index being the value it wrote to the calibration port.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestCalibration(pub u32, pub u64, pub u64);

/// One calibration exit, as the guest saw it and as the host traced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalibrationPair {
    pub guest_before: u64,
    pub guest_after: u64,
    pub host_exit: u64,
    pub host_entry: u64,
}

/// Offsets consistent with every calibration pair: `low..=high`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetRange {
    pub low: i64,
    pub high: i64,
}

/// What the calibration pairs say about a mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Verification {
    pub checks: u64,
    pub violations: u64,
    /// The largest `guest_after - guest_before` of a pair: no placement of an
    /// exit is known better than this.
    pub bound_ticks: u64,
    /// Offsets every pair allows (with the mapping's ratio), when the offset
    /// did not change during the run; `None` if no offset fits.
    pub offset_range: Option<OffsetRange>,
    /// Guest ticks per host tick from the first and last pairs (their
    /// midpoints), when they are far enough apart to say.
    pub measured_ratio: Option<f64>,
}

fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Checks every pair against `mapping` (see the module text).
pub fn verify(mapping: &Mapping, pairs: &[CalibrationPair]) -> Verification {
    let mut v = Verification {
        checks: 0,
        violations: 0,
        bound_ticks: 0,
        offset_range: None,
        measured_ratio: None,
    };
    let (mut low, mut high) = (i128::MIN, i128::MAX);
    for p in pairs {
        v.checks += 1;
        v.bound_ticks = v
            .bound_ticks
            .max(p.guest_after.saturating_sub(p.guest_before));
        let ordered = p.host_exit <= p.host_entry
            && i128::from(p.guest_before) < mapping.to_guest(p.host_exit)
            && mapping.to_guest(p.host_entry) < i128::from(p.guest_after);
        if !ordered {
            v.violations += 1;
        }
        low = low.max(i128::from(p.guest_before) - mapping.scale(p.host_exit) + 1);
        high = high.min(i128::from(p.guest_after) - mapping.scale(p.host_entry) - 1);
    }
    if !pairs.is_empty() && mapping.changes.is_empty() && low <= high {
        v.offset_range = Some(OffsetRange {
            low: clamp_i64(low),
            high: clamp_i64(high),
        });
    }
    v.measured_ratio = measured_ratio(pairs, v.bound_ticks);
    v
}

/// The rate from the outermost pairs, when they are more than 1000 bounds
/// apart (the midpoints are each known to within one bound).
fn measured_ratio(pairs: &[CalibrationPair], bound: u64) -> Option<f64> {
    let mid_guest = |p: &CalibrationPair| (p.guest_before / 2) as f64 + (p.guest_after / 2) as f64;
    let mid_host = |p: &CalibrationPair| (p.host_exit / 2) as f64 + (p.host_entry / 2) as f64;
    let (first, last) = (pairs.first()?, pairs.last()?);
    let host_span = mid_host(last) - mid_host(first);
    let guest_span = mid_guest(last) - mid_guest(first);
    (host_span > 1000.0 * bound.max(1) as f64 && guest_span > 0.0).then(|| guest_span / host_span)
}

/// The timeline a traced run used, as written in the report.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Timeline {
    /// The offset in force when the guest started (guest ticks).
    pub offset: i64,
    /// Where the offset came from: KVM's vCPU attribute, or the calibration.
    pub offset_source: String,
    /// Guest ticks per host tick.
    pub ratio: f64,
    /// Calibration pairs checked.
    pub checks: u64,
    pub violations: u64,
    /// The largest calibration slack in ticks (see [`Verification`]).
    pub bound_ticks: u64,
    /// Checks ran, none failed, nothing else made the timeline unusable.
    pub verified: bool,
    /// Why it is not verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Offsets KVM wrote during the run, with their host times.
    pub offset_changes: Vec<OffsetChange>,
    /// Offsets every calibration pair allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_offset: Option<OffsetRange>,
    /// `--tsc-offset`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_offset: Option<i64>,
    /// The guest's TSC rate measured from the calibration pairs, in kHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_khz: Option<u64>,
    /// `--tsc-khz`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_khz: Option<u32>,
    /// Calibration exits the guest reported and the host did not trace (or
    /// the other way round).
    pub unmatched: u64,
    /// Trace events the host's ring buffer lost.
    pub lost_events: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(gb: u64, ga: u64, he: u64, hn: u64) -> CalibrationPair {
        CalibrationPair {
            guest_before: gb,
            guest_after: ga,
            host_exit: he,
            host_entry: hn,
        }
    }

    #[test]
    fn offsets_change_at_their_host_time() {
        let mut m = Mapping::unscaled(-1000);
        m.changes = vec![
            OffsetChange {
                host_tsc: 5000,
                offset: -2000,
            },
            OffsetChange {
                host_tsc: 9000,
                offset: 10,
            },
        ];
        assert_eq!(m.to_guest(4999), 3999);
        assert_eq!(m.to_guest(5000), 3000);
        assert_eq!(m.to_guest(9001), 9011);
        assert!(m.changes_within(4000, 5000));
        assert!(!m.changes_within(5001, 8999));
        // Below zero the guest's counter wraps, as the hardware's does.
        assert_eq!(Mapping::unscaled(-10).to_guest(3), (1i128 << 64) - 7);
    }

    #[test]
    fn scaling_uses_the_fixed_point_ratio() {
        let m = Mapping::scaled(0, 1_000_000, 2_000_000);
        assert_eq!(m.to_guest(2_000_000_000_000), 1_000_000_000_000);
        assert!((m.ratio() - 0.5).abs() < 1e-12);
        assert_eq!(Mapping::scaled(7, 0, 5).ratio_fixed, 1 << RATIO_FRAC_BITS);
    }

    #[test]
    fn pairs_verify_bound_the_offset_and_catch_a_wrong_one() {
        // The guest ran with offset -100: exits at host 1000 and 1_000_000.
        let pairs = [
            pair(880, 960, 1000, 1040),
            pair(999_880, 999_990, 1_000_000, 1_000_050),
        ];
        let v = verify(&Mapping::unscaled(-100), &pairs);
        assert_eq!((v.checks, v.violations, v.bound_ticks), (2, 0, 110));
        let range = v.offset_range.unwrap();
        assert!(range.low <= -100 && -100 <= range.high, "{range:?}");
        assert_eq!((range.low, range.high), (-119, -81));
        // An offset the guest did not run with breaks the order.
        let wrong = verify(&Mapping::unscaled(0), &pairs);
        assert_eq!(wrong.violations, 2);
        // An entry before its exit is a violation whatever the offset.
        let swapped = verify(&Mapping::unscaled(-100), &[pair(880, 960, 1040, 1000)]);
        assert_eq!(swapped.violations, 1);
    }

    #[test]
    fn the_rate_is_measured_only_across_a_long_enough_span() {
        // A guest at half the host rate, offset 0.
        let p = |host: u64| pair(host / 2 - 5, host / 2 + 30, host, host + 40);
        let far = verify(&Mapping::scaled(0, 1, 2), &[p(1_000), p(100_000_000)]);
        assert_eq!(far.violations, 0);
        assert!((far.measured_ratio.unwrap() - 0.5).abs() < 1e-6);
        let near = verify(&Mapping::scaled(0, 1, 2), &[p(1_000), p(2_000)]);
        assert_eq!(near.measured_ratio, None);
        assert_eq!(verify(&Mapping::unscaled(0), &[]).offset_range, None);
    }
}
