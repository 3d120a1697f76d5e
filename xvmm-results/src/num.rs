//! Number conversions the workspace's cast lints (`[workspace.lints]` in the
//! root Cargo.toml) would otherwise flag at every site. Each says once why it
//! cannot lose a value, or which clamp it makes on purpose.

/// `v` as a `usize`, losslessly: xvmm is built only for 64-bit targets
/// (x86_64 KVM hosts and their guests), where `usize` has 64 bits. A 32-bit
/// build stops here instead of truncating lengths and offsets.
#[cfg(target_pointer_width = "64")]
#[must_use]
#[allow(
    clippy::cast_possible_truncation,
    reason = "usize is 64 bits wide on every target this is compiled for (the cfg above)"
)]
pub const fn usize_from(v: u64) -> usize {
    v as usize
}

/// `v` as a `u64`, saturating: NaN and anything below 0 give 0, anything at
/// or above 2^64 gives `u64::MAX`, a fraction is cut off. This is what `as`
/// does from a float; the name says that the clamp is meant.
#[must_use]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a float-to-integer `as` saturates (and NaN gives 0), the clamp documented above"
)]
pub fn u64_saturating(v: f64) -> u64 {
    v as u64
}

/// `v` as a `u32`, saturating like [`u64_saturating`].
#[must_use]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a float-to-integer `as` saturates (and NaN gives 0), the clamp documented above"
)]
pub fn u32_saturating(v: f64) -> u32 {
    v as u32
}

/// `v` as a `usize`, saturating like [`u64_saturating`].
#[must_use]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a float-to-integer `as` saturates (and NaN gives 0), the clamp documented above"
)]
pub fn usize_saturating(v: f64) -> usize {
    v as usize
}

/// `v` as an `i64`, saturating: NaN gives 0, anything beyond the range of
/// `i64` its nearer end, a fraction is cut off (`as` from a float).
#[must_use]
#[allow(
    clippy::cast_possible_truncation,
    reason = "a float-to-integer `as` saturates (and NaN gives 0), the clamp documented above"
)]
pub fn i64_saturating(v: f64) -> i64 {
    v as i64
}

/// `v` clamped into `i64`.
#[must_use]
pub fn i64_clamped(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// `a - b` as a signed number, exact wherever it fits an `i64` and clamped
/// to `i64::MIN`/`i64::MAX` beyond (only medians of 2^63 ticks or more, which
/// no measurement has, get there).
#[must_use]
pub fn difference(a: u64, b: u64) -> i64 {
    i64_clamped(i128::from(a) - i128::from(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usize_from_keeps_every_bit() {
        assert_eq!(usize_from(u64::MAX), usize::MAX);
        assert_eq!(usize_from(4096), 4096);
    }

    #[test]
    fn float_conversions_saturate() {
        assert_eq!(u64_saturating(-1.0), 0);
        assert_eq!(u64_saturating(f64::NAN), 0);
        assert_eq!(u64_saturating(1e30), u64::MAX);
        assert_eq!(u64_saturating(41.9), 41);
        assert_eq!(u32_saturating(1e12), u32::MAX);
        assert_eq!(usize_saturating(-0.5), 0);
        assert_eq!(i64_saturating(-1e30), i64::MIN);
        assert_eq!(i64_saturating(-2.7), -2);
    }

    #[test]
    fn difference_is_exact_in_range_and_clamps_beyond() {
        assert_eq!(difference(3, 5), -2);
        assert_eq!(difference(5, 3), 2);
        assert_eq!(difference(u64::MAX, 0), i64::MAX);
        assert_eq!(difference(0, u64::MAX), i64::MIN);
        assert_eq!(i64_clamped(i128::MIN), i64::MIN);
    }
}
