//! The chunks of a workload's intervals a guest streams through the
//! results buffer ([`xvmm_results::channel::PORT_INTERVALS`]), kept for
//! the join with the host's exits. The stream is the guest's: each chunk
//! is decoded before it is kept (a malformed one is counted and dropped,
//! the guest runs on), and the whole is bounded
//! ([`interval_stream::MAX_STREAM_BYTES`]).

use xvmm_results::interval_stream::{self, StreamedInterval};

/// The intervals one or more vCPUs received.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IntervalSink {
    pub intervals: Vec<StreamedInterval>,
    pub chunks: u64,
    /// Chunks refused (malformed, or beyond the bound).
    pub refused: u64,
    /// Why the first was.
    pub refused_because: Option<String>,
}

impl IntervalSink {
    /// Takes a chunk as read from the results buffer (or why it could not
    /// be read).
    pub fn take_chunk(&mut self, read: Result<Vec<u8>, String>) {
        let taken = read.and_then(|bytes| self.keep(&bytes));
        if let Err(why) = taken {
            self.refused += 1;
            self.refused_because.get_or_insert(why);
        }
    }

    /// Decodes and keeps one chunk, within the bound.
    pub fn keep(&mut self, chunk: &[u8]) -> Result<(), String> {
        let held = self.intervals.len() * interval_stream::RECORD;
        if held + chunk.len() > interval_stream::MAX_STREAM_BYTES {
            return Err(format!(
                "the stream passed the VMM's bound of {} MiB",
                interval_stream::MAX_STREAM_BYTES >> 20
            ));
        }
        let decoded = interval_stream::decode(chunk)?;
        self.chunks += 1;
        self.intervals.extend(decoded);
        Ok(())
    }

    /// Several vCPUs' sinks as one (the guest's sender may have moved
    /// between them; the join orders the intervals itself).
    pub fn merge(sinks: impl IntoIterator<Item = IntervalSink>) -> IntervalSink {
        let mut all = IntervalSink::default();
        for s in sinks {
            all.intervals.extend(s.intervals);
            all.chunks += s.chunks;
            all.refused += s.refused;
            if all.refused_because.is_none() {
                all.refused_because = s.refused_because;
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(start: u64, end: u64) -> Vec<u8> {
        StreamedInterval {
            start,
            end,
            code: 1 << 32,
            cpu: 0,
        }
        .encode()
        .to_vec()
    }

    #[test]
    fn malformed_chunks_are_counted_and_dropped_good_ones_kept() {
        let mut sink = IntervalSink::default();
        assert_eq!(sink.keep(&record(1, 2)), Ok(()));
        let backwards = record(5, 4);
        assert!(sink.keep(&backwards).is_err());
        let a = IntervalSink {
            refused: 1,
            refused_because: Some("torn".into()),
            ..IntervalSink::default()
        };
        let merged = IntervalSink::merge([sink, a]);
        assert_eq!(
            (merged.intervals.len(), merged.chunks, merged.refused),
            (1, 1, 1)
        );
        assert_eq!(merged.refused_because.as_deref(), Some("torn"));
    }
}
