//! Counts on xperf's command lines: the bound every count shares, the
//! default number of rounds, and the one parser of a count. A file of its
//! own below the three argument parsers (args.rs, probes/args.rs,
//! characterize/options.rs), so that none of them depends on another.

use crate::error::{Error, Result};

/// Rounds by default (`--rounds`; characterize's crossings too).
pub const DEFAULT_ROUNDS: u32 = 3;
/// Upper bound for any count: the page-fault region is one page per sample.
pub const MAX_SAMPLES: u64 = 1_000_000;

/// `value` as a count of `name` within `min..=MAX_SAMPLES`.
pub(crate) fn count(name: &str, value: &str, min: u64) -> Result<u64> {
    count_within(name, value, min, MAX_SAMPLES)
}

/// `value` as a count of `name` within `min..=max`.
pub(crate) fn count_within(name: &str, value: &str, min: u64, max: u64) -> Result<u64> {
    let n: u64 = value
        .parse()
        .map_err(|_| Error::Usage(format!("{name} needs a whole number, got {value:?}")))?;
    if !(min..=max).contains(&n) {
        return Err(Error::Usage(format!(
            "{name} must be between {min} and {max}, got {n}"
        )));
    }
    Ok(n)
}
