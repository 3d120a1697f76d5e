//! One TSC timeline for the guest's stamps and the host's exit trace.
//!
//! KVM runs a guest on `guest = scale(host) + offset`: `scale` multiplies by
//! the TSC ratio, a fixed-point number with 32 fraction bits on SVM and 48
//! on VMX, computed by KVM from the requested rate and the host kernel's own
//! `tsc_khz` ([`TscScaling`]; 1 without scaling), and the offset is in guest
//! ticks. The offset can be rewritten while the guest runs
//! (`kvm:kvm_write_tsc_offset`), so a [`Mapping`] is piecewise: one offset
//! per stretch of host time.
//!
//! A mapping is never assumed. The guest brackets K calibration exits with
//! its own stamps; the host traces each exit and entry. Every pair must order
//! as `guest_before < map(exit)` and `map(entry) < guest_after`
//! ([`verify`]); one violation makes the timeline unverified. The same pairs
//! bound the offset the guest actually ran with and measure the rate, which
//! checks `--tsc-offset` and `--tsc-khz` against what the guest read.

use serde::{Deserialize, Serialize};

/// Fraction bits of an unscaled mapping's ratio (any width holds 1 exactly).
pub const RATIO_FRAC_BITS: u32 = 48;

/// How a KVM scales a guest's TSC (`set_tsc_khz` and `kvm_scale_tsc` in
/// arch/x86/kvm/x86.c): its ratio's fraction bits and largest ratio (the
/// vendor module's `kvm_caps`), and the tolerance within which a requested
/// rate is not scaled at all (the `tsc_tolerance_ppm` module parameter).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct TscScaling {
    pub frac_bits: u32,
    /// KVM refuses ratios at or above this.
    pub max_ratio: u64,
    pub tolerance_ppm: u32,
}

/// kvm's `tsc_tolerance_ppm` default.
pub const KVM_TSC_TOLERANCE_PPM: u32 = 250;

impl TscScaling {
    /// kvm_amd: 8.32, below `SVM_TSC_RATIO_MAX`.
    pub const SVM: TscScaling = TscScaling {
        frac_bits: 32,
        max_ratio: 0x0000_00ff_ffff_ffff,
        tolerance_ppm: KVM_TSC_TOLERANCE_PPM,
    };
    /// kvm_intel: 16.48, below `KVM_VMX_TSC_MULTIPLIER_MAX`.
    pub const VMX: TscScaling = TscScaling {
        frac_bits: 48,
        max_ratio: u64::MAX,
        tolerance_ppm: KVM_TSC_TOLERANCE_PPM,
    };

    /// The ratio KVM runs a guest asked for `guest_khz` with on a host
    /// kernel whose `tsc_khz` is `host_khz`: `1 << frac_bits` (no scaling)
    /// within the tolerance, else `mul_u64_u32_div(1 << frac_bits,
    /// guest_khz, host_khz)`; an error where KVM refuses the rate.
    pub fn ratio(&self, guest_khz: u32, host_khz: u32) -> Result<u64, String> {
        let one = 1u64 << self.frac_bits;
        if guest_khz == 0 {
            return Ok(one);
        }
        if host_khz == 0 {
            return Err("the host kernel's TSC rate is unknown".into());
        }
        // adjust_tsc_khz(): u64 arithmetic, truncated to u32.
        let ppm = i64::from(self.tolerance_ppm);
        #[allow(
            clippy::cast_possible_truncation,
            reason = "adjust_tsc_khz() truncates its u64 result to u32 too"
        )]
        let adjust = |sign: i64| {
            let factor = u64::try_from(1_000_000 + sign * ppm).unwrap_or(0);
            (u64::from(host_khz) * factor / 1_000_000) as u32
        };
        if (adjust(-1)..=adjust(1)).contains(&guest_khz) {
            return Ok(one);
        }
        // Saturating: a ratio beyond 64 bits (only on a host below 65 MHz) is
        // refused just below as too large.
        let ratio = u64::try_from((u128::from(one) * u128::from(guest_khz)) / u128::from(host_khz))
            .unwrap_or(u64::MAX);
        if ratio == 0 || ratio >= self.max_ratio {
            return Err(format!(
                "KVM refuses {guest_khz} kHz on a {host_khz} kHz host (ratio {ratio:#x} \
                 with {} fraction bits)",
                self.frac_bits
            ));
        }
        Ok(ratio)
    }
}

/// An offset KVM wrote while the guest ran, at a host TSC time.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetChange {
    pub host_tsc: u64,
    pub offset: i64,
}

/// Host TSC to guest TSC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The ratio in fixed point, `frac_bits` of fraction.
    pub ratio_fixed: u64,
    pub frac_bits: u32,
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
            frac_bits: RATIO_FRAC_BITS,
            offset,
            changes: Vec::new(),
        }
    }

    /// The mapping KVM gives a guest asked for `guest_khz` on a host kernel
    /// whose `tsc_khz` is `host_khz` (see [`TscScaling::ratio`]).
    pub fn scaled(
        offset: i64,
        guest_khz: u32,
        host_khz: u32,
        scaling: TscScaling,
    ) -> Result<Mapping, String> {
        Ok(Mapping {
            ratio_fixed: scaling.ratio(guest_khz, host_khz)?,
            frac_bits: scaling.frac_bits,
            offset,
            changes: Vec::new(),
        })
    }

    pub fn ratio(&self) -> f64 {
        self.ratio_fixed as f64 / (1u128 << self.frac_bits) as f64
    }

    /// `host` scaled by the ratio, without the offset: KVM's
    /// `mul_u64_u64_shr(host, ratio, frac_bits)`, truncated to 64 bits as
    /// the hardware's counter is.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "truncated to 64 bits on purpose, as mul_u64_u64_shr() and the counter are"
    )]
    pub fn scale(&self, host: u64) -> i128 {
        i128::from(((u128::from(host) * u128::from(self.ratio_fixed)) >> self.frac_bits) as u64)
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

    /// The guest time at host time `host` under `offset`, not wrapped (not
    /// even the product: a window's end at `u64::MAX` must stay on top).
    fn unwrapped(&self, host: u64, offset: i64) -> i128 {
        let product = (u128::from(host) * u128::from(self.ratio_fixed)) >> self.frac_bits;
        i128::try_from(product).unwrap_or(i128::MAX) + i128::from(offset)
    }

    /// Stretches of host time with one offset: `(first, last, offset)`.
    fn stretches(&self) -> Vec<(u64, u64, i64)> {
        let mut out = Vec::with_capacity(self.changes.len() + 1);
        let (mut from, mut offset) = (0u64, self.offset);
        for c in &self.changes {
            if c.host_tsc > from {
                out.push((from, c.host_tsc - 1, offset));
            }
            (from, offset) = (c.host_tsc, c.offset);
        }
        out.push((from, u64::MAX, offset));
        out
    }

    /// The guest times host times `[from, to]` map to, one range per
    /// stretch of one offset they overlap (not wrapped: a window's end at
    /// `u64::MAX` stays above every guest time).
    pub fn guest_ranges(&self, from: u64, to: u64) -> Vec<(i128, i128)> {
        self.stretches()
            .into_iter()
            .filter(|&(first, last, _)| first <= to && from <= last)
            .map(|(first, last, offset)| {
                (
                    self.unwrapped(from.max(first), offset),
                    self.unwrapped(to.min(last), offset),
                )
            })
            .collect()
    }

    /// For each offset change, the guest times between the last one read
    /// before it and the first one read after it. A guest window that
    /// touches one is not known to lie under a single offset: it may
    /// straddle the change, or (when the offset went back) its times were
    /// read twice, once under each offset.
    pub fn jumps(&self) -> Vec<(i128, i128)> {
        let mut previous = self.offset;
        self.changes
            .iter()
            .map(|c| {
                let before = self.unwrapped(c.host_tsc, previous);
                let after = self.unwrapped(c.host_tsc, c.offset);
                previous = c.offset;
                (before.min(after), before.max(after))
            })
            .collect()
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
    crate::num::i64_clamped(v)
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
    /// KVM's ratio in fixed point, and its fraction bits (32 on SVM, 48 on
    /// VMX) when the guest TSC was scaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio_fixed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio_frac_bits: Option<u32>,
    /// The host kernel's `tsc_khz` as KVM reported it (`KVM_GET_TSC_KHZ`
    /// on the VM): KVM's divisor, and the rate `measured_khz` is taken in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_khz: Option<u64>,
    /// Calibration pairs checked: the exits both sides saw.
    pub checks: u64,
    /// Calibration exits there were: those asked for, or more if either
    /// side saw more.
    #[serde(default)]
    pub calibrations: u64,
    pub violations: u64,
    /// The largest calibration slack in ticks (see [`Verification`]).
    pub bound_ticks: u64,
    /// KVM's own offset was checked, enough calibration exits matched,
    /// none failed, nothing else made the timeline unusable.
    pub verified: bool,
    /// The offset was inferred from the calibration exits themselves, so
    /// they cannot contradict it: at best the timeline is consistent, never
    /// verified.
    #[serde(default)]
    pub offset_inferred: bool,
    /// Why it is neither verified nor consistent.
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
    /// Host-time windows in which events were lost: their samples are
    /// unattributable.
    #[serde(default)]
    pub lost_windows: u64,
    /// Lost events the overrun counters count and the stream never marked:
    /// where they fell is unknown, so no sample of the run is attributable.
    #[serde(default)]
    pub lost_unplaced: u64,
}

/// What a timeline can be trusted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// KVM's offset and rate, checked by calibration exits that could have
    /// contradicted them.
    Verified,
    /// An offset inferred from the calibration exits, which agree with it
    /// by construction.
    Consistent,
    NotVerified,
}

impl Timeline {
    pub fn verdict(&self) -> Verdict {
        match (self.verified, self.offset_inferred, &self.reason) {
            (true, false, None) => Verdict::Verified,
            (false, true, None) => Verdict::Consistent,
            _ => Verdict::NotVerified,
        }
    }
}

/// The share of calibration exits that must be seen by both sides for a
/// timeline to be checked at all, in percent.
pub const MIN_MATCHED_PERCENT: u64 = 90;

/// Why `matched` calibration pairs out of `calibrations` are too few to
/// check a timeline with, if they are.
pub fn too_few_matched(matched: u64, calibrations: u64) -> Option<String> {
    if matched == 0 {
        return Some("no calibration exit was seen by both the guest and the host".into());
    }
    (u128::from(matched) * 100 < u128::from(calibrations) * u128::from(MIN_MATCHED_PERCENT)).then(
        || {
            format!(
                "only {matched} of {calibrations} calibration exits were seen by both the guest \
                 and the host (at least {MIN_MATCHED_PERCENT} % must be)"
            )
        },
    )
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
    fn guest_ranges_are_only_the_stretches_a_window_overlaps() {
        let change = |host_tsc, offset| OffsetChange { host_tsc, offset };
        let mut m = Mapping::unscaled(0);
        m.changes = vec![change(100, 1000), change(200, 5000)];
        // Inside one stretch: one range, under that stretch's offset.
        assert_eq!(m.guest_ranges(10, 20), vec![(10, 20)]);
        assert_eq!(m.guest_ranges(150, 160), vec![(1150, 1160)]);
        assert_eq!(m.guest_ranges(250, 260), vec![(5250, 5260)]);
        // Across a change: one range per side.
        assert_eq!(m.guest_ranges(90, 110), vec![(90, 99), (1100, 1110)]);
        // A change at host time 0, and two at one host time: no empty
        // stretch, and the last offset read there holds from it on.
        m.changes = vec![change(0, 7), change(300, 1), change(300, 2)];
        assert_eq!(m.guest_ranges(0, 10), vec![(7, 17)]);
        assert_eq!(m.guest_ranges(290, 310), vec![(297, 306), (302, 312)]);
    }
    #[test]
    fn a_change_at_either_end_of_a_window_is_within_it() {
        let mut m = Mapping::unscaled(0);
        m.changes = vec![OffsetChange {
            host_tsc: 100,
            offset: 5,
        }];
        assert!(m.changes_within(100, 200) && m.changes_within(0, 100));
        assert!(m.changes_within(99, 101));
        assert!(!m.changes_within(101, 200) && !m.changes_within(0, 99));
    }

    /// Verification's two answers agree at the boundary: a pair the
    /// mapping puts at exactly a guest stamp (no tick between the guest's
    /// stamp and the exit, or the entry and the guest's next stamp) is a
    /// violation, and the offsets the pairs allow exclude that offset.
    #[test]
    fn a_host_event_on_a_guest_stamp_is_a_violation_and_outside_the_allowed_offsets() {
        let pair = |before, exit, entry, after| CalibrationPair {
            guest_before: before,
            guest_after: after,
            host_exit: exit,
            host_entry: entry,
        };
        let m = Mapping::unscaled(0);
        for p in [pair(1000, 1000, 1050, 1100), pair(1000, 1010, 1100, 1100)] {
            let v = verify(&m, &[p]);
            assert_eq!(v.violations, 1, "{p:?}");
            let r = v.offset_range.unwrap();
            assert!(!(r.low..=r.high).contains(&0), "{p:?}: {r:?}");
        }
        // One tick inside on both sides: no violation, and 0 allowed.
        let v = verify(&m, &[pair(1000, 1001, 1099, 1100)]);
        assert_eq!(v.violations, 0);
        assert_eq!(v.offset_range, Some(OffsetRange { low: 0, high: 0 }));
    }

    /// The rate is only measured from pairs more than 1000 bounds apart
    /// on the host, and only where the guest's clock moved between them.
    #[test]
    fn the_rate_needs_pairs_more_than_a_thousand_bounds_apart_and_a_moving_guest() {
        let pair = |guest: u64, host: u64| CalibrationPair {
            guest_before: guest,
            guest_after: guest + 100,
            host_exit: host,
            host_entry: host + 100,
        };
        let first = pair(1000, 1000);
        // Exactly 1000 bounds (100 ticks each) apart: not enough.
        assert_eq!(measured_ratio(&[first, pair(101_000, 101_000)], 100), None);
        assert_eq!(measured_ratio(&[first, pair(51_000, 51_000)], 100), None);
        let r = measured_ratio(&[first, pair(201_004, 101_002)], 100).unwrap();
        assert!((r - 2.0).abs() < 1e-9, "{r}");
        // The guest's clock did not move: no rate.
        assert_eq!(measured_ratio(&[first, pair(1000, 201_000)], 100), None);
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
        // At host 5000 the guest goes back from 4000 to 3000 (3000..4000
        // is read twice); at 9000 it jumps on from 7000 to 9010.
        assert_eq!(m.jumps(), [(3000, 4000), (7000, 9010)]);
        assert_eq!(
            m.guest_ranges(4000, 9500),
            [(3000, 3999), (3000, 6999), (9010, 9510)]
        );
        // A window to the end of time stays above every guest time, even
        // when the ratio is above 1 (the guest's counter would wrap).
        let fast = Mapping::scaled(0, 5_000_000, 1_000_000, TscScaling::SVM).unwrap();
        let (_, top) = fast.guest_ranges(0, u64::MAX)[0];
        assert!(top > i128::from(u64::MAX), "{top}");
        assert_eq!(
            Mapping::unscaled(-10).guest_ranges(0, u64::MAX),
            [(-10, i128::from(u64::MAX) - 10)]
        );
        // Below zero the guest's counter wraps, as the hardware's does.
        assert_eq!(Mapping::unscaled(-10).to_guest(3), (1i128 << 64) - 7);
    }

    /// KVM's guest TSC for a guest asked for `g` kHz on a host kernel
    /// with `tsc_khz` = `h`, written from arch/x86/kvm/x86.c (Linux 6.12)
    /// apart from [`TscScaling`]: `set_tsc_khz`'s
    /// `mul_u64_u32_div(1ULL << frac, user_tsc_khz, tsc_khz)`, then
    /// `kvm_scale_tsc` (`mul_u64_u64_shr(tsc, ratio, frac)`) plus the offset.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "the kernel's u64 arithmetic: results truncated to 64 bits, the offset added as two's complement"
    )]
    fn kvm_guest_tsc(host: u64, offset: i64, g: u32, h: u32, frac: u32) -> i128 {
        let ratio = ((1u128 << frac) * u128::from(g) / u128::from(h)) as u64;
        let scaled = ((u128::from(host) * u128::from(ratio)) >> frac) as u64;
        i128::from(scaled.wrapping_add(offset as u64))
    }

    const HOST_TSC: u64 = 200_000_000_000_000;

    #[test]
    fn scaling_is_kvms_ratio_on_svm_and_on_vmx() {
        // A 2445 MHz AMD host (this project's CI) asked for 1 GHz, and a
        // 2600 MHz Intel host asked for 3 GHz.
        let svm = Mapping::scaled(-7, 1_000_000, 2_445_000, TscScaling::SVM).unwrap();
        assert_eq!(
            svm.to_guest(HOST_TSC),
            kvm_guest_tsc(HOST_TSC, -7, 1_000_000, 2_445_000, 32)
        );
        assert_eq!(svm.ratio_fixed, (1u64 << 32) * 1_000_000 / 2_445_000);
        let vmx = Mapping::scaled(-7, 3_000_000, 2_600_000, TscScaling::VMX).unwrap();
        assert_eq!(
            vmx.to_guest(HOST_TSC),
            kvm_guest_tsc(HOST_TSC, -7, 3_000_000, 2_600_000, 48)
        );
        // The two fractions differ by thousands of ticks at this host TSC:
        // mapping an SVM guest with 48 bits would misplace every exit.
        let svm_as_vmx = Mapping::scaled(-7, 1_000_000, 2_445_000, TscScaling::VMX).unwrap();
        let apart = svm_as_vmx.to_guest(HOST_TSC) - svm.to_guest(HOST_TSC);
        assert!(apart > 10_000, "{apart}");
        assert!((svm.ratio() - 1_000.0 / 2_445.0).abs() < 1e-9);
    }

    #[test]
    fn a_rate_within_kvms_tolerance_is_not_scaled() {
        // 100 kHz above a 2445 MHz host is 41 ppm: KVM keeps ratio 1.
        for scaling in [TscScaling::SVM, TscScaling::VMX] {
            let m = Mapping::scaled(-7, 2_445_100, 2_445_000, scaling).unwrap();
            assert_eq!(m.ratio_fixed, 1 << scaling.frac_bits);
            assert_eq!(m.to_guest(HOST_TSC), i128::from(HOST_TSC - 7));
        }
        // The window's edges as adjust_tsc_khz() truncates them:
        // 2_445_000 * 999_750 / 1e6 = 2_444_388.75 -> 2_444_388, and
        // 2_445_000 * 1_000_250 / 1e6 = 2_445_611.25 -> 2_445_611.
        let one = 1u64 << 32;
        let svm = TscScaling::SVM;
        assert_eq!(svm.ratio(2_444_388, 2_445_000), Ok(one));
        assert_ne!(svm.ratio(2_444_387, 2_445_000), Ok(one));
        assert_eq!(svm.ratio(2_445_611, 2_445_000), Ok(one));
        assert_ne!(svm.ratio(2_445_612, 2_445_000), Ok(one));
        // A module loaded with a narrower tolerance scales the same rate.
        let strict = TscScaling {
            tolerance_ppm: 10,
            ..svm
        };
        assert_ne!(strict.ratio(2_445_100, 2_445_000), Ok(one));
        // No rate asked: the default ratio; no host rate known, or a ratio
        // KVM refuses: an error, never a guess.
        assert_eq!(Mapping::unscaled(7).ratio_fixed, 1 << RATIO_FRAC_BITS);
        assert_eq!(svm.ratio(0, 2_445_000), Ok(one));
        assert!(svm.ratio(1_000_000, 0).is_err());
        assert!(svm.ratio(1_000_000_000, 3).is_err());
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
    fn nine_in_ten_calibration_exits_must_match() {
        assert!(too_few_matched(1, 256).unwrap().contains("only 1 of 256"));
        assert!(too_few_matched(230, 256).is_some());
        assert_eq!(too_few_matched(231, 256), None);
        assert_eq!(too_few_matched(9, 10), None);
        assert!(too_few_matched(8, 9).is_some());
        assert!(too_few_matched(0, 0)
            .unwrap()
            .contains("no calibration exit"));
    }

    #[test]
    fn the_rate_is_measured_only_across_a_long_enough_span() {
        // A guest at half the host rate, offset 0.
        let p = |host: u64| pair(host / 2 - 5, host / 2 + 30, host, host + 40);
        let half = Mapping::scaled(0, 1_000_000, 2_000_000, TscScaling::SVM).unwrap();
        let far = verify(&half, &[p(1_000), p(100_000_000)]);
        assert_eq!(far.violations, 0);
        assert!((far.measured_ratio.unwrap() - 0.5).abs() < 1e-6);
        let near = verify(&half, &[p(1_000), p(2_000)]);
        assert_eq!(near.measured_ratio, None);
        assert_eq!(verify(&Mapping::unscaled(0), &[]).offset_range, None);
    }
}
