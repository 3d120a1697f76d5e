//! A workload's streamed guest intervals, kept compactly until the join
//! with the host's exits (issue 38: 10 M intervals must fit with 10 M
//! exits in 256 MiB; the wire's 32-byte records would take 320 MiB).
//!
//! The guest sends its intervals in the order they closed, so by their
//! end; the log keeps them so, through a reorder window of [`WINDOW`]
//! intervals that absorbs the guest's own small disorder (its per-CPU
//! trace merge). One that ends before an interval already written is
//! late for this log and handed back: the VMM's sink starts another log
//! for it, and the join reads the logs merged by end ([`merged`]). Each
//! record
//! is three varints: the code of its (CPU, kind) pair (few: one or two
//! bytes), its end minus the previous end, and its length; an interval of
//! microseconds after another takes five or six bytes.

use super::varint::{put_varint, Chunks, PairCodes, Reader};
use crate::schema::interval_stream::StreamedInterval;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Intervals held back to be put in order of their ends.
pub const WINDOW: usize = 4096;

/// Held back: by end, then arrival (ties keep the guest's order).
type Waiting = Reverse<(u64, u64, StreamedKey)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct StreamedKey {
    start: u64,
    code: u64,
    cpu: u32,
}

/// Intervals in order of their ends, a few bytes each.
#[derive(Debug, Default, Clone)]
pub struct IntervalLog {
    chunks: Chunks,
    /// The record code of each (CPU, kind code) pair.
    pairs: PairCodes<(u32, u64)>,
    written: usize,
    last_end: u64,
    window: BinaryHeap<Waiting>,
    arrived: u64,
}

impl IntervalLog {
    /// Takes one interval as it arrived, or hands it back when it ends
    /// before one already written.
    pub fn push(&mut self, i: StreamedInterval) -> Result<(), StreamedInterval> {
        if i.end < self.last_end {
            return Err(i);
        }
        let key = StreamedKey {
            start: i.start,
            code: i.code,
            cpu: i.cpu,
        };
        self.window.push(Reverse((i.end, self.arrived, key)));
        self.arrived += 1;
        if self.window.len() > WINDOW {
            self.write_earliest();
        }
        Ok(())
    }

    fn write_earliest(&mut self) {
        let Some(Reverse((end, _, k))) = self.window.pop() else {
            return;
        };
        let code = self.pairs.code((k.cpu, k.code));
        let out = self.chunks.record();
        put_varint(out, code);
        // Not below the last: the window gives up its earliest, and later
        // arrivals before it were refused as late.
        put_varint(out, end - self.last_end);
        put_varint(out, end.saturating_sub(k.start));
        self.last_end = end;
        self.written += 1;
    }

    /// Intervals kept (late ones are not).
    pub fn len(&self) -> usize {
        self.written + self.window.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the log holds.
    pub fn bytes(&self) -> usize {
        self.chunks.bytes() + self.window.capacity() * std::mem::size_of::<Waiting>()
    }

    /// Every interval kept, in order of their ends (ties in arrival order).
    pub fn iter(&self) -> Intervals<'_> {
        let mut rest: Vec<Waiting> = self.window.iter().copied().collect();
        // Popped from the back: the earliest last.
        rest.sort_unstable();
        Intervals {
            log: self,
            reader: self.chunks.reader(),
            last_end: 0,
            decoded: 0,
            rest,
        }
    }
}

/// The intervals of an [`IntervalLog`], decoded one by one.
pub struct Intervals<'a> {
    log: &'a IntervalLog,
    reader: Reader<'a>,
    last_end: u64,
    decoded: usize,
    rest: Vec<Waiting>,
}

impl Intervals<'_> {
    fn next_written(&mut self) -> Option<StreamedInterval> {
        // The log wrote every record whole, so none of these fails.
        let code = self.reader.varint()?;
        let end = self.last_end + self.reader.varint()?;
        let length = self.reader.varint()?;
        let (cpu, code) = self.log.pairs.pair(code)?;
        self.last_end = end;
        self.decoded += 1;
        Some(StreamedInterval {
            start: end - length,
            end,
            code,
            cpu,
        })
    }
}

impl Iterator for Intervals<'_> {
    type Item = StreamedInterval;

    fn next(&mut self) -> Option<StreamedInterval> {
        if self.decoded < self.log.written {
            return self.next_written();
        }
        let Reverse((end, _, k)) = self.rest.pop()?;
        Some(StreamedInterval {
            start: k.start,
            end,
            code: k.code,
            cpu: k.cpu,
        })
    }
}

/// Several logs' intervals as one stream in order of their ends: a
/// guest's sender that moved between vCPUs left its chunks in each one's
/// log, every log in order.
pub fn merged<'a>(logs: &'a [IntervalLog]) -> impl Iterator<Item = StreamedInterval> + 'a {
    let mut heads: Vec<(Intervals<'a>, Option<StreamedInterval>)> = logs
        .iter()
        .map(|l| {
            let mut it = l.iter();
            let first = it.next();
            (it, first)
        })
        .collect();
    std::iter::from_fn(move || {
        let (_, (it, head)) = heads
            .iter_mut()
            .enumerate()
            .filter(|(_, (_, h))| h.is_some())
            .min_by_key(|(n, (_, h))| (h.map_or(u64::MAX, |h| h.end), *n))?;
        let out = head.take();
        *head = it.next();
        out
    })
}

#[cfg(test)]
mod tests {
    use super::super::varint::CHUNK;
    use super::*;

    fn interval(start: u64, end: u64, code: u64, cpu: u32) -> StreamedInterval {
        StreamedInterval::new(start, end, code, cpu)
    }

    #[test]
    fn intervals_come_back_whole_in_order_of_their_ends() {
        let mut log = IntervalLog::default();
        let mut want = Vec::new();
        // More than the window, so most are written; extremes included.
        for n in 0..(3 * WINDOW as u64) {
            let i = interval(n * 10, n * 10 + 5, (1 << 32) + n % 300, (n % 3) as u32);
            assert_eq!(log.push(i), Ok(()));
            want.push(i);
        }
        let extreme = interval(0, u64::MAX, u64::MAX, u32::MAX);
        assert_eq!(log.push(extreme), Ok(()));
        want.push(extreme);
        assert_eq!(log.iter().collect::<Vec<_>>(), want);
        assert_eq!(log.len(), want.len());
        // A few bytes each, not the wire's 32.
        assert!(log.bytes() < 3 * WINDOW * 8 + (1 << 20) + WINDOW * 64);
    }

    #[test]
    fn a_log_holds_whole_chunks_and_reads_across_them() {
        let mut log = IntervalLog::default();
        assert!(log.is_empty());
        for n in 0..100u64 {
            assert!(log.push(interval(n, n + 1, 1, 0)).is_ok());
        }
        // Held back in the window, nothing written: its entries count.
        assert!(!log.is_empty() && log.chunks.count() == 0);
        assert!(log.bytes() >= 100 * 32, "{}", log.bytes());
        // Past one chunk of records: each chunk reserved whole, never grown.
        let n = 400_000u64;
        for k in 100..n {
            assert!(log
                .push(interval(k * 1000, k * 1000 + 700, 1 + k % 3, 0))
                .is_ok());
        }
        assert!(log.chunks.count() >= 2);
        assert!(log.bytes() >= log.chunks.count() * CHUNK);
        assert!(log.chunks.used() as u64 <= 8 * n, "a few bytes each");
        let back: Vec<StreamedInterval> = log.iter().collect();
        assert_eq!(back.len() as u64, n);
        assert_eq!(back[399_999], interval(399_999_000, 399_999_700, 1, 0));
        assert!(back.windows(2).all(|w| w[0].end < w[1].end));
    }

    #[test]
    fn the_window_holds_back_exactly_its_size() {
        let mut log = IntervalLog::default();
        for n in 0..WINDOW as u64 {
            assert!(log.push(interval(100 + n, 100 + n, 1, 0)).is_ok());
        }
        // Nothing written yet, so an earlier end is still put in order.
        assert_eq!(log.push(interval(5, 10, 1, 0)), Ok(()));
        assert_eq!(log.iter().next().map(|i| i.end), Some(10));
        // A tie with the written one is in order, not late.
        assert_eq!(log.push(interval(10, 10, 2, 0)), Ok(()));
    }

    #[test]
    fn disorder_within_the_window_is_put_right_and_later_counted_late() {
        let mut log = IntervalLog::default();
        // An interrupt closing at 150 sent after the call that closed at 200.
        assert!(log.push(interval(150, 200, 3, 1)).is_ok());
        assert!(log.push(interval(140, 150, 2, 0)).is_ok());
        assert!(log.push(interval(100, 200, 1, 0)).is_ok()); // a tie: kept after the first
        let ends: Vec<(u64, u64)> = log.iter().map(|i| (i.end, i.code)).collect();
        assert_eq!(ends, [(150, 2), (200, 3), (200, 1)]);
        for n in 0..(WINDOW as u64 + 10) {
            assert!(log.push(interval(1000 + n, 1000 + n, 1, 0)).is_ok());
        }
        // 100..=200 are written by now: one ending before them is late.
        let late = interval(10, 20, 1, 0);
        assert_eq!(log.push(late), Err(late));
        let all: Vec<u64> = log.iter().map(|i| i.end).collect();
        assert!(all.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(all.len(), WINDOW + 13);
    }

    #[test]
    fn logs_merge_by_end() {
        let mut a = IntervalLog::default();
        let mut b = IntervalLog::default();
        for (log, ends) in [(&mut a, [5u64, 20, 30]), (&mut b, [10, 20, 40])] {
            for e in ends {
                assert!(log.push(interval(0, e, e, 0)).is_ok());
            }
        }
        let logs = [a, b];
        let ends: Vec<u64> = merged(&logs).map(|i| i.end).collect();
        assert_eq!(ends, [5, 10, 20, 20, 30, 40]);
    }
}
