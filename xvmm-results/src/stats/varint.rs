//! LEB128 varints and zigzag differences: the compact logs' encoding
//! (exits, intervals, exits waiting for their interval).

/// A difference taken with wrapping, as a small number when it is small
/// either way: the sign bit moved to bit 0.
pub fn zigzag(v: u64) -> u64 {
    (v << 1) ^ 0u64.wrapping_sub(v >> 63)
}

pub fn unzigzag(v: u64) -> u64 {
    (v >> 1) ^ 0u64.wrapping_sub(v & 1)
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v.to_le_bytes()[0] | 0x80);
        v >>= 7;
    }
    out.push(v.to_le_bytes()[0]);
}

/// The varint at `*at`, moving past it; `None` when the bytes end inside
/// one or it runs past 64 bits.
pub fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Bytes per chunk of a log.
pub const CHUNK: usize = 1 << 20;

/// The longest record: three varints of at most 10 bytes.
pub const MAX_RECORD: usize = 30;

/// A log's records of varints, in chunks of [`CHUNK`] bytes that are never
/// reallocated, so the log never holds two copies of itself while
/// growing; a record never spans two chunks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunks {
    chunks: Vec<Vec<u8>>,
}

impl Chunks {
    /// Where the next record, of at most [`MAX_RECORD`] bytes, goes.
    pub fn record(&mut self) -> &mut Vec<u8> {
        let full = self
            .chunks
            .last()
            .is_none_or(|c| c.capacity() - c.len() < MAX_RECORD);
        if full {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let last = self.chunks.len() - 1;
        &mut self.chunks[last]
    }

    /// Bytes held: the chunks' capacity.
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum()
    }

    /// Bytes the records take.
    pub fn used(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    /// Chunks started.
    pub fn count(&self) -> usize {
        self.chunks.len()
    }

    /// The varints from the first on.
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            chunks: &self.chunks,
            chunk: 0,
            at: 0,
        }
    }
}

/// The small codes a log writes for its records' repeated pairs ((vCPU,
/// reason) for exits, (CPU, kind) for intervals): pairs are few, so a code
/// takes one byte. The last pair's code is kept: a trace's exits come in
/// runs of one vCPU and reason, and most records skip the lookup.
#[derive(Debug, Clone)]
pub struct PairCodes<K> {
    pairs: Vec<K>,
    codes: foldhash::HashMap<K, u64>,
    last: Option<(K, u64)>,
}

impl<K> Default for PairCodes<K> {
    fn default() -> Self {
        PairCodes {
            pairs: Vec::new(),
            codes: foldhash::HashMap::default(),
            last: None,
        }
    }
}

/// Two sets of codes are equal when they give the same pairs the same
/// codes, whichever pair was looked up last.
impl<K: PartialEq> PartialEq for PairCodes<K> {
    fn eq(&self, other: &Self) -> bool {
        self.pairs == other.pairs
    }
}

impl<K: Eq> Eq for PairCodes<K> {}

impl<K: Copy + Eq + std::hash::Hash> PairCodes<K> {
    /// The code of `pair`, the next one free when it is new.
    pub fn code(&mut self, pair: K) -> u64 {
        if let Some((last, code)) = self.last {
            if last == pair {
                return code;
            }
        }
        let pairs = &mut self.pairs;
        let code = *self.codes.entry(pair).or_insert_with(|| {
            pairs.push(pair);
            pairs.len() as u64 - 1
        });
        self.last = Some((pair, code));
        code
    }

    /// The pair of `code`, if one has it.
    pub fn pair(&self, code: u64) -> Option<K> {
        self.pairs.get(usize::try_from(code).ok()?).copied()
    }

    /// Pairs coded.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// The varints of [`Chunks`], one by one.
pub struct Reader<'a> {
    chunks: &'a [Vec<u8>],
    chunk: usize,
    at: usize,
}

impl Reader<'_> {
    /// The next varint; `None` at the end, or where one was cut short.
    pub fn varint(&mut self) -> Option<u64> {
        loop {
            let bytes = self.chunks.get(self.chunk)?;
            if self.at < bytes.len() {
                return get_varint(bytes, &mut self.at);
            }
            self.chunk += 1;
            self.at = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk with exactly the longest record's room left still takes the
    /// next record; only less room starts a new chunk, and reading goes on
    /// across it.
    #[test]
    fn a_chunk_is_used_up_to_the_last_record_that_fits() {
        let mut c = Chunks::default();
        assert_eq!((c.count(), c.bytes()), (0, 0));
        let filled = CHUNK - MAX_RECORD;
        for n in 0..filled {
            put_varint(c.record(), n as u64 % 100);
        }
        let room = |c: &Chunks| c.chunks[0].capacity() - c.chunks[0].len();
        assert_eq!((c.count(), room(&c)), (1, MAX_RECORD));
        put_varint(c.record(), 300);
        assert_eq!((c.count(), room(&c)), (1, MAX_RECORD - 2));
        put_varint(c.record(), 2);
        assert_eq!(c.count(), 2);
        assert_eq!((c.bytes(), c.used()), (2 * CHUNK, filled + 3));
        let mut r = c.reader();
        for n in 0..filled {
            assert_eq!(r.varint(), Some(n as u64 % 100));
        }
        assert_eq!(
            (r.varint(), r.varint(), r.varint()),
            (Some(300), Some(2), None)
        );
    }

    /// Codes are given in order of first sight and kept; the last pair's
    /// cached code never stands in for another pair's.
    #[test]
    fn each_pair_keeps_the_code_it_was_first_given() {
        let mut c = PairCodes::default();
        assert!(c.is_empty());
        let seen: Vec<u64> = [(1, 7), (1, 7), (2, 7), (1, 8), (2, 7), (1, 7), (1, 8)]
            .into_iter()
            .map(|p: (u32, u16)| c.code(p))
            .collect();
        assert_eq!(seen, [0, 0, 1, 2, 1, 0, 2]);
        assert_eq!((c.len(), c.is_empty()), (3, false));
        assert_eq!(
            (c.pair(0), c.pair(1), c.pair(2)),
            (Some((1, 7)), Some((2, 7)), Some((1, 8)))
        );
        assert_eq!((c.pair(3), c.pair(u64::MAX)), (None, None));
        let mut other = PairCodes::default();
        for p in [(1, 7), (2, 7), (1, 8)] {
            other.code(p);
        }
        assert_eq!(c, other, "the same codes, another pair looked up last");
        other.code((9, 9));
        assert_ne!(c, other);
    }

    #[test]
    fn a_varint_cut_short_or_too_long_ends_the_reading() {
        let mut c = Chunks::default();
        put_varint(c.record(), 7);
        put_varint(c.record(), 1 << 40);
        c.chunks[0].pop();
        let mut r = c.reader();
        assert_eq!((r.varint(), r.varint()), (Some(7), None));
        assert_eq!(get_varint(&[0xff; 11], &mut 0), None, "past 64 bits");
        assert_eq!(get_varint(&[0x80, 0x01], &mut 0), Some(128));
        for v in [0, 1, 63, 64, u64::MAX / 2, u64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
            assert_eq!(unzigzag(zigzag(0u64.wrapping_sub(v))), 0u64.wrapping_sub(v));
        }
        assert!(zigzag(0u64.wrapping_sub(1)) < 4, "small either way");
    }
}
