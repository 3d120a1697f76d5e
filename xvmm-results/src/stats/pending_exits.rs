//! One vCPU's exits that no interval has claimed yet, in time order, kept
//! compactly: the join sweeps the intervals by end, so an interval claims
//! the newest of them (those at or after its start) and the older ones
//! wait for a longer interval, or for the end, when they are outside
//! every interval. Those are a workload's exits in user mode, so they can
//! be most of its exits.
//!
//! The newest [`OPEN`] to twice that are plain entries; below them, blocks
//! of [`OPEN`] varint records (the time minus the previous, zigzag; the
//! host time; the reason), three to six bytes an exit. A claim that
//! reaches below the plain entries opens the blocks it needs; each entry
//! is sealed and opened at most once more per claim that reaches it, so
//! the sweep stays linear.

use super::varint::{get_varint, put_varint, unzigzag, zigzag};

/// Entries per sealed block, and the fewest kept plain.
pub const OPEN: usize = 256;

/// An exit waiting for its interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The guest TSC at the exit.
    pub at: u64,
    /// Its host time, guest ticks.
    pub ticks: u64,
    pub reason: u16,
}

#[derive(Debug, Clone)]
struct Block {
    first_at: u64,
    last_at: u64,
    bytes: Vec<u8>,
}

impl Block {
    fn seal(entries: &[Pending]) -> Block {
        let mut bytes = Vec::with_capacity(entries.len() * 5);
        let mut last = entries.first().map_or(0, |p| p.at);
        for p in entries {
            put_varint(&mut bytes, zigzag(p.at.wrapping_sub(last)));
            put_varint(&mut bytes, p.ticks);
            put_varint(&mut bytes, u64::from(p.reason));
            last = p.at;
        }
        bytes.shrink_to_fit();
        Block {
            first_at: entries.first().map_or(0, |p| p.at),
            last_at: last,
            bytes,
        }
    }

    fn open(&self, into: &mut Vec<Pending>) {
        let (mut at, mut last) = (0, self.first_at);
        // Sealed whole by `seal`, so every varint is there.
        while let (Some(d), Some(ticks), Some(reason)) = (
            get_varint(&self.bytes, &mut at),
            get_varint(&self.bytes, &mut at),
            get_varint(&self.bytes, &mut at),
        ) {
            last = last.wrapping_add(unzigzag(d));
            into.push(Pending {
                at: last,
                ticks,
                reason: u16::try_from(reason).unwrap_or(u16::MAX),
            });
        }
    }
}

/// The unclaimed exits of one vCPU.
#[derive(Debug, Clone, Default)]
pub struct PendingExits {
    sealed: Vec<Block>,
    open: Vec<Pending>,
    /// Exits pushed before one already held: placed as if in order.
    misordered: u64,
}

impl PendingExits {
    /// Adds the next exit of the vCPU.
    pub fn push(&mut self, p: Pending) {
        let i = self.open.partition_point(|q| q.at <= p.at);
        if i == 0 && self.sealed.last().is_some_and(|b| b.last_at > p.at) {
            self.misordered += 1;
        }
        self.open.insert(i, p);
        if self.open.len() >= 2 * OPEN {
            self.sealed.push(Block::seal(&self.open[..OPEN]));
            self.open.drain(..OPEN);
        }
    }

    /// Hands `into` each held exit at `start..=end`, and lets it go.
    pub fn claim(&mut self, start: u64, end: u64, mut into: impl FnMut(&Pending)) {
        loop {
            let hi = self.open.partition_point(|p| p.at <= end);
            let lo = self.open[..hi].partition_point(|p| p.at < start);
            self.open.drain(lo..hi).for_each(|p| into(&p));
            // The newest sealed block, only if it may hold some of the
            // claim (in order, only when nothing plain is older than
            // `start`).
            match self.sealed.last() {
                Some(b) if b.last_at >= start => {
                    let mut opened = Vec::with_capacity(OPEN + self.open.len());
                    b.open(&mut opened);
                    opened.append(&mut self.open);
                    self.open = opened;
                    self.sealed.pop();
                }
                _ => return,
            }
        }
    }

    /// Hands `into` every exit still held, oldest first, and lets them go.
    pub fn drain(&mut self, mut into: impl FnMut(&Pending)) {
        let mut opened = Vec::with_capacity(OPEN);
        for b in self.sealed.drain(..) {
            opened.clear();
            b.open(&mut opened);
            opened.iter().for_each(&mut into);
        }
        self.open.drain(..).for_each(|p| into(&p));
    }

    /// Exits that came before one already held, beyond the plain ones.
    pub fn misordered(&self) -> u64 {
        self.misordered
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.sealed
            .iter()
            .map(|b| b.bytes.capacity() + std::mem::size_of::<Block>())
            .sum::<usize>()
            + self.open.capacity() * std::mem::size_of::<Pending>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(at: u64) -> Pending {
        Pending {
            at,
            ticks: at % 1000 + 1,
            reason: (at % 7) as u16,
        }
    }

    fn claimed(held: &mut PendingExits, start: u64, end: u64) -> Vec<u64> {
        let mut out = Vec::new();
        held.claim(start, end, |q| {
            assert_eq!(*q, p(q.at), "comes back as pushed");
            out.push(q.at);
        });
        out
    }

    #[test]
    fn a_claim_takes_the_exits_in_its_span_sealed_or_not() {
        let mut held = PendingExits::default();
        let n = 10 * OPEN as u64;
        for t in 0..n {
            held.push(p(t * 10));
        }
        let sealed = held.sealed.len();
        assert!(sealed >= 8, "most are sealed");
        // Inside the plain ones, which opens nothing, then reaching into
        // sealed blocks.
        assert_eq!(
            claimed(&mut held, (n - 3) * 10, n * 10),
            [(n - 3) * 10, (n - 2) * 10, (n - 1) * 10]
        );
        assert_eq!(held.sealed.len(), sealed);
        let deep = claimed(&mut held, 2005, (n - 4) * 10);
        assert_eq!(deep.len() as u64, n - 3 - 201);
        assert_eq!(deep.iter().min(), Some(&2010));
        // What is left is what no claim reached, oldest first.
        let mut rest = Vec::new();
        held.drain(|q| rest.push(q.at));
        assert_eq!(rest, (0..=200).map(|t| t * 10).collect::<Vec<_>>());
        assert_eq!(held.misordered(), 0);
        assert!(claimed(&mut held, 0, u64::MAX).is_empty());
    }

    #[test]
    fn a_claim_spares_what_lies_after_its_end() {
        let mut held = PendingExits::default();
        for t in [10, 20, 30, 40] {
            held.push(p(t));
        }
        assert_eq!(claimed(&mut held, 15, 30), [20, 30]);
        assert_eq!(claimed(&mut held, 0, 100), [10, 40]);
    }

    #[test]
    fn an_exit_out_of_order_is_placed_and_counted_when_below_the_plain_ones() {
        let mut held = PendingExits::default();
        held.push(p(50));
        held.push(p(30)); // among the plain ones: placed, not counted
        assert_eq!(held.misordered(), 0);
        for t in 0..(2 * OPEN as u64) {
            held.push(p(1000 + t));
        }
        held.push(p(40)); // below a sealed block
        assert_eq!(held.misordered(), 1);
        // A tie with the newest sealed one is in order.
        let sealed_below = || {
            let mut held = PendingExits::default();
            for t in 0..(2 * OPEN as u64) {
                held.push(p(t));
            }
            // Nothing plain left, 0..OPEN sealed.
            held.claim(OPEN as u64, u64::MAX, |_| {});
            held
        };
        let mut tie = sealed_below();
        tie.push(p(OPEN as u64 - 1));
        tie.push(p(OPEN as u64 - 1));
        assert_eq!(tie.misordered(), 0);
        let mut below = sealed_below();
        below.push(p(3));
        assert_eq!(below.misordered(), 1);
        let mut all = Vec::new();
        held.drain(|q| all.push(q.at));
        assert_eq!(&all[..2], [30, 50]);
        assert_eq!(all.len(), 2 * OPEN + 3);
    }

    #[test]
    fn held_exits_take_a_few_bytes_each() {
        let mut held = PendingExits::default();
        let n = 100_000u64;
        for t in 0..n {
            held.push(Pending {
                at: 1_000_000 + t * 4500,
                ticks: 1500 + t % 700,
                reason: (t % 5) as u16,
            });
        }
        let per = held.bytes() as f64 / n as f64;
        // Three varints of a byte or more each.
        assert!((3.0..6.5).contains(&per), "{per} bytes an exit");
    }

    #[test]
    fn the_newest_stay_plain_and_the_older_are_sealed_a_block_at_a_time() {
        let mut held = PendingExits::default();
        for t in 0..(2 * OPEN as u64 - 1) {
            held.push(p(t));
        }
        assert!(held.sealed.is_empty());
        let plain = held.bytes();
        assert!(plain >= (2 * OPEN - 1) * std::mem::size_of::<Pending>());
        held.push(p(2 * OPEN as u64));
        // A sealed block takes less than its entries did plain: its bytes
        // and its own header, on top of the plain entries' room.
        let block = held.sealed[0].bytes.capacity() + std::mem::size_of::<Block>();
        assert_eq!(held.bytes(), plain + block);
        assert!(block < OPEN * std::mem::size_of::<Pending>());
        assert_eq!((held.sealed.len(), held.open.len()), (1, OPEN));
    }
}
