//! The chunks of a workload's intervals a guest streams through the
//! results buffer ([`xvmm_results::channel::PORT_INTERVALS`]), kept for
//! the join with the host's exits. The stream is the guest's: each chunk
//! is decoded before it is kept (a malformed one is counted and dropped,
//! the guest runs on), and the whole is bounded
//! ([`interval_stream::MAX_STREAM_BYTES`]).

use xvmm_results::interval_stream;
use xvmm_results::stats::interval_log::{self, IntervalLog};
use xvmm_results::stats::workload_join::StreamedInterval;

/// Most logs one vCPU's sink starts: an interval late for all of them
/// (the guest's disorder beyond [`MAX_LOGS`] windows) is counted, not
/// kept.
pub const MAX_LOGS: usize = 16;

/// The intervals one or more vCPUs received, in compact logs in order of
/// their ends: an interval too late for a log's window goes to the next
/// log, so the join, which reads the logs merged by end, still meets it in
/// its place.
#[derive(Debug, Default, Clone)]
pub struct IntervalSink {
    pub logs: Vec<IntervalLog>,
    /// Intervals late for every log.
    late: u64,
    /// Intervals received whole, late ones included.
    pub received: u64,
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
        // Bounded by what was sent, as the wire carries it.
        let held = usize::try_from(self.received)
            .unwrap_or(usize::MAX)
            .saturating_mul(interval_stream::RECORD);
        if held.saturating_add(chunk.len()) > interval_stream::MAX_STREAM_BYTES {
            return Err(format!(
                "the stream passed the VMM's bound of {} MiB",
                interval_stream::MAX_STREAM_BYTES >> 20
            ));
        }
        let decoded = interval_stream::decode(chunk)?;
        self.chunks += 1;
        self.received += decoded.len() as u64;
        for i in decoded {
            self.place(i);
        }
        Ok(())
    }

    /// Into the first log it is not late for, a new one if none.
    fn place(&mut self, mut i: StreamedInterval) {
        for log in &mut self.logs {
            match log.push(i) {
                Ok(()) => return,
                Err(back) => i = back,
            }
        }
        if self.logs.len() < MAX_LOGS {
            let mut log = IntervalLog::default();
            // A new log takes any interval.
            let _ = log.push(i);
            self.logs.push(log);
        } else {
            self.late += 1;
        }
    }

    /// Every interval kept, in order of their ends.
    pub fn intervals(&self) -> impl Iterator<Item = StreamedInterval> + '_ {
        interval_log::merged(&self.logs)
    }

    /// Intervals kept.
    pub fn len(&self) -> usize {
        self.logs.iter().map(IntervalLog::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Intervals that came too late for every log, not kept.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Several vCPUs' sinks as one (the guest's sender may have moved
    /// between them: each keeps its own log, merged by end when read).
    pub fn merge(sinks: impl IntoIterator<Item = IntervalSink>) -> IntervalSink {
        let mut all = IntervalSink::default();
        for s in sinks {
            all.logs.extend(s.logs);
            all.late += s.late;
            all.received += s.received;
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
        let mut b = IntervalSink::default();
        assert_eq!(b.keep(&[record(0, 1), record(3, 9)].concat()), Ok(()));
        let merged = IntervalSink::merge([sink, a, b]);
        assert_eq!((merged.len(), merged.chunks, merged.refused), (3, 2, 1));
        let ends: Vec<u64> = merged.intervals().map(|i| i.end).collect();
        assert_eq!(ends, [1, 2, 9], "merged by end");
        assert_eq!(merged.refused_because.as_deref(), Some("torn"));
    }

    /// An interval later than a log's window starts another log, up to
    /// the bound; read back, every kept one is in its place by end.
    #[test]
    fn late_intervals_go_to_further_logs_then_are_counted() {
        use xvmm_results::stats::interval_log::WINDOW;
        let mut sink = IntervalSink::default();
        // Bands each earlier than the last, each more than a window, so
        // each is late for every log before it.
        let band = WINDOW as u64 + 1;
        let mut chunk = Vec::new();
        for round in 0..(MAX_LOGS as u64) {
            let base = 1_000_000 - round * 10 * band;
            for n in 0..band {
                chunk.extend(record(base + n, base + n));
            }
        }
        assert_eq!(sink.keep(&chunk), Ok(()));
        assert_eq!((sink.logs.len(), sink.late()), (MAX_LOGS, 0));
        let ends: Vec<u64> = sink.intervals().map(|i| i.end).collect();
        assert!(ends.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(ends.len() as u64, MAX_LOGS as u64 * band);
        // Late for all of them: counted, not kept.
        assert_eq!(sink.keep(&record(1, 1)), Ok(()));
        assert_eq!(
            (sink.late(), sink.len() as u64),
            (1, MAX_LOGS as u64 * band)
        );
        let merged = IntervalSink::merge([sink, IntervalSink::default()]);
        assert_eq!(merged.late(), 1);
    }
}
