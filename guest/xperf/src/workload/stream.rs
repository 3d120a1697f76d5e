//! The workload's closed intervals to the VMM as they close (`xvmm
//! --workload`), in chunks through the results buffer, so that the host
//! can join each with its exits. Time off CPU is sent too: the exits in
//! it are another task's or the idle vCPU's, not those of the blocked
//! call it sits in. A chunk the VMM cannot take stops the stream; the
//! report says so and how many were sent.

use xvmm_guest::channel::{IntervalChannel, ResultsRegion};
use xvmm_results::interval_stream::{StreamedInterval, RECORD};
use xvmm_results::stats::workload::Interval;
use xvmm_results::stats::workload_join::kind_code;

/// Bytes per chunk: far below the buffer, so a chunk's exit is rare (one
/// per 256 K intervals) and its copy short.
const CHUNK: usize = 8 << 20;

pub struct IntervalStream {
    channel: IntervalChannel,
    buffer: Vec<u8>,
    chunk: usize,
    sent: u64,
    failed: Option<String>,
}

impl IntervalStream {
    pub fn open(region: ResultsRegion) -> crate::error::Result<IntervalStream> {
        let channel = IntervalChannel::open(region)?;
        let chunk = CHUNK.min(channel.capacity()) / RECORD * RECORD;
        Ok(IntervalStream {
            channel,
            buffer: Vec::with_capacity(chunk),
            chunk,
            sent: 0,
            failed: None,
        })
    }

    pub fn push(&mut self, i: &Interval) {
        if self.failed.is_some() {
            return;
        }
        let record = StreamedInterval {
            start: i.start,
            end: i.end,
            code: kind_code(i.kind),
            cpu: i.cpu,
        };
        self.buffer.extend_from_slice(&record.encode());
        if self.buffer.len() + RECORD > self.chunk {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.buffer.is_empty() || self.failed.is_some() {
            return;
        }
        match self.channel.send(&self.buffer) {
            Ok(()) => self.sent += (self.buffer.len() / RECORD) as u64,
            Err(e) => self.failed = Some(e.to_string()),
        }
        self.buffer.clear();
    }

    /// Sends what is left: the intervals sent, and why the stream stopped
    /// if it did.
    pub fn finish(mut self) -> (u64, Option<String>) {
        self.flush();
        (self.sent, self.failed)
    }
}
