//! The guest's closed kernel intervals, streamed to the VMM while a
//! workload runs (`xvmm --workload`): fixed records of [`RECORD`] bytes,
//! little-endian, written into the results buffer in chunks, each
//! announced by its length on [`crate::channel::PORT_INTERVALS`]. The
//! stream is untrusted input: [`decode`] refuses what no guest xperf
//! writes, and the VMM bounds how much it keeps.
//!
//! | bytes | field |
//! |---|---|
//! | 0-7 | start, guest TSC |
//! | 8-15 | end, guest TSC (not before the start) |
//! | 16-23 | kind code (`stats::workload::IntervalKind::code`) |
//! | 24-27 | CPU of the closing event |
//! | 28-31 | reserved, 0 |

/// Bytes per interval.
pub const RECORD: usize = 32;

/// Most bytes the VMM keeps of one run's stream (16 M intervals); chunks
/// beyond it are counted, not kept.
pub const MAX_STREAM_BYTES: usize = 512 << 20;

/// One guest interval as streamed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamedInterval {
    pub start: u64,
    pub end: u64,
    pub code: u64,
    pub cpu: u32,
}

impl StreamedInterval {
    pub fn new(start: u64, end: u64, code: u64, cpu: u32) -> StreamedInterval {
        StreamedInterval {
            start,
            end,
            code,
            cpu,
        }
    }

    pub fn encode(&self) -> [u8; RECORD] {
        let mut out = [0u8; RECORD];
        out[0..8].copy_from_slice(&self.start.to_le_bytes());
        out[8..16].copy_from_slice(&self.end.to_le_bytes());
        out[16..24].copy_from_slice(&self.code.to_le_bytes());
        out[24..28].copy_from_slice(&self.cpu.to_le_bytes());
        out
    }
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_le_bytes(a)
}

/// The intervals of a chunk, in stream order; an error naming the first
/// thing wrong: a length that is not whole records, an end before its
/// start, a reserved field set.
pub fn decode(chunk: &[u8]) -> Result<Vec<StreamedInterval>, String> {
    if !chunk.len().is_multiple_of(RECORD) {
        return Err(format!(
            "a chunk of {} bytes is not a whole number of {RECORD}-byte intervals",
            chunk.len()
        ));
    }
    chunk
        .chunks_exact(RECORD)
        .enumerate()
        .map(|(i, r)| {
            let mut cpu = [0u8; 4];
            cpu.copy_from_slice(&r[24..28]);
            let s = StreamedInterval {
                start: le_u64(&r[0..8]),
                end: le_u64(&r[8..16]),
                code: le_u64(&r[16..24]),
                cpu: u32::from_le_bytes(cpu),
            };
            if r[28..32] != [0; 4] {
                return Err(format!("interval {i}: reserved bytes set"));
            }
            if s.end < s.start {
                return Err(format!(
                    "interval {i}: ends at {} before its start {}",
                    s.end, s.start
                ));
            }
            Ok(s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_come_back_as_encoded() {
        let a = StreamedInterval {
            start: 1,
            end: u64::MAX,
            code: 1 << 32 | 59,
            cpu: 3,
        };
        let b = StreamedInterval {
            start: 7,
            end: 7,
            code: 3 << 32 | 236,
            cpu: 0,
        };
        let mut bytes = a.encode().to_vec();
        bytes.extend_from_slice(&b.encode());
        assert_eq!(decode(&bytes), Ok(vec![a, b]));
        assert_eq!(decode(&[]), Ok(vec![]));
    }

    #[test]
    fn a_torn_record_a_backwards_interval_and_reserved_bytes_are_refused() {
        let good = StreamedInterval {
            start: 10,
            end: 20,
            code: 1,
            cpu: 0,
        };
        let bytes = good.encode();
        assert!(decode(&bytes[..RECORD - 1])
            .unwrap_err()
            .contains("not a whole number"));
        let backwards = StreamedInterval { start: 21, ..good };
        let mut two = bytes.to_vec();
        two.extend_from_slice(&backwards.encode());
        assert_eq!(
            decode(&two),
            Err("interval 1: ends at 20 before its start 21".into())
        );
        let mut reserved = bytes;
        reserved[31] = 1;
        assert_eq!(
            decode(&reserved),
            Err("interval 0: reserved bytes set".into())
        );
    }
}
