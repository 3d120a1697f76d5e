//! A phase's stamp words as samples and intervals: plain arithmetic on what
//! the guest wrote, shared by the session that runs the phases, the report
//! built from them ([`mod@super::measure`]) and the linearity check.

use super::machine::HostStamps;
use xvmm_results::{IpiStamps, Sample, UNFILLED};

/// Two-stamp samples of one phase: the valid intervals, the samples they came
/// from (index into the phase) and the host stamps of the measured exits.
pub struct TwoStamp {
    pub intervals: Vec<u64>,
    pub opens: Vec<u64>,
    pub closes: Vec<u64>,
    pub discarded: u64,
    pub host: Vec<HostStamps>,
    /// Guest TSC = host TSC + this, when known for the whole phase.
    pub tsc_offset: Option<i64>,
    /// The host's traced exits (`kvm_exit`, `kvm_entry`), when traced.
    pub traced: Option<Vec<(u64, u64)>>,
    /// The IPI rows: each valid sample's stamps with the receiver's words.
    pub receiver: Vec<IpiStamps>,
    /// The exits KVM counted in the phase (see [`super::machine::PhaseEnd`]).
    pub kvm_exits: Option<u64>,
}

/// The interval from `open` to `close`, where both were filled and `close`
/// comes after `open`: the one rule every stamp pair here is read by.
pub fn interval(open: u64, close: u64) -> Option<u64> {
    (open != UNFILLED && close != UNFILLED && close > open).then(|| close - open)
}

/// Splits two-stamp words into intervals, dropping unfilled or unordered pairs.
pub fn two_stamp_samples(stamps: &[u64]) -> TwoStamp {
    let mut out = TwoStamp {
        intervals: Vec::with_capacity(stamps.len() / 2),
        opens: Vec::with_capacity(stamps.len() / 2),
        closes: Vec::with_capacity(stamps.len() / 2),
        discarded: 0,
        host: Vec::new(),
        tsc_offset: None,
        traced: None,
        receiver: Vec::new(),
        kvm_exits: None,
    };
    for pair in stamps.chunks_exact(2) {
        let (open, close) = (pair[0], pair[1]);
        let Some(i) = interval(open, close) else {
            out.discarded += 1;
            // Keep positions aligned with the host stamps of the same sample.
            out.opens.push(UNFILLED);
            out.closes.push(UNFILLED);
            continue;
        };
        out.intervals.push(i);
        out.opens.push(open);
        out.closes.push(close);
    }
    out
}

/// The IPI rows' words, five a sample (the sender's pair, then the
/// receiver's handler, EOI and halt words): the pair as
/// [`two_stamp_samples`] reads it, and each valid sample's stamps whole.
pub fn receiver_samples(stamps: &[u64]) -> TwoStamp {
    let samples = stamps.chunks_exact(5);
    let pairs: Vec<u64> = samples.clone().flat_map(|w| [w[0], w[1]]).collect();
    let mut out = two_stamp_samples(&pairs);
    out.receiver = samples
        .map(|w| IpiStamps {
            sent: w[0],
            acked: w[1],
            handler: w[2],
            eoi: w[3],
            halted_at: w[4],
        })
        .filter(|s| interval(s.sent, s.acked).is_some())
        .collect();
    out
}

/// Four-stamp words as samples.
pub fn four_stamp_samples(stamps: &[u64]) -> Vec<Sample> {
    stamps
        .chunks_exact(4)
        .map(|s| Sample {
            u2k_u: s[0],
            u2k_k: s[1],
            k2u_k: s[2],
            k2u_u: s[3],
            ..Default::default()
        })
        .collect()
}

/// Each two-stamp sample's interval, 0 where the sample is not valid, so
/// that position i stays sample i (interleaved chain lengths need it).
pub fn aligned_intervals(stamps: &[u64]) -> Vec<u64> {
    stamps
        .chunks_exact(2)
        .map(|p| interval(p[0], p[1]).unwrap_or(0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_stamp_samples_drop_unfilled_and_unordered() {
        let m = two_stamp_samples(&[10, 50, 10, UNFILLED, 60, 60, 100, 170, 7]);
        assert_eq!(m.intervals, vec![40, 70]);
        assert_eq!(m.discarded, 2);
        assert_eq!(m.opens, vec![10, UNFILLED, UNFILLED, 100]);
    }

    #[test]
    fn aligned_intervals_keep_each_samples_place() {
        let words = [
            10, 50, 10, UNFILLED, UNFILLED, 70, 60, 60, 80, 70, 100, 170, 7,
        ];
        assert_eq!(aligned_intervals(&words), vec![40, 0, 0, 0, 0, 70]);
    }

    #[test]
    fn receiver_words_split_into_the_pair_and_the_receivers_stamps() {
        let m = receiver_samples(&[
            10, 50, 20, 30, 5, 60, UNFILLED, 1, 2, 0, 100, 170, 120, 130, 0, 8, 8, 8, 8, 0, 9,
        ]);
        assert_eq!(m.intervals, vec![40, 70]);
        assert_eq!(m.discarded, 2, "the unfilled and the empty sample");
        assert_eq!(m.receiver.len(), 2);
        assert_eq!(
            m.receiver[1],
            IpiStamps {
                sent: 100,
                acked: 170,
                handler: 120,
                eoi: 130,
                halted_at: 0
            }
        );
        assert_eq!(m.receiver[0].halted_at, 5);
    }

    #[test]
    fn four_stamp_words_become_samples() {
        let s = four_stamp_samples(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[1],
            Sample {
                u2k_u: 5,
                u2k_k: 6,
                k2u_k: 7,
                k2u_u: 8,
                ..Default::default()
            }
        );
    }
}
