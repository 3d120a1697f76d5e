//! A traced run's exits, kept compactly: a run with 10 M exits must not
//! grow xvmm by more than 64 MiB (issue 25), and a plain list costs 32
//! bytes an exit.
//!
//! Each exit is three LEB128 varints: the code of its (vCPU, reason) pair
//! (pairs are few: one byte), its `kvm_exit` minus the previous exit's
//! (zigzag: exits are pushed when their entry arrives, so across vCPUs the
//! difference can be negative) and its `kvm_entry` minus its `kvm_exit`
//! (zigzag, for the same reason of never losing what was pushed). Exits
//! microseconds apart and microseconds long take 5 or 6 bytes. Records sit
//! in chunks ([`Chunks`]) that are never reallocated, so the log
//! never holds two copies of itself while growing.

use super::varint::{put_varint, unzigzag, zigzag, Chunks, PairCodes, Reader};

/// One traced exit: `kvm_exit` and the next `kvm_entry` of its vCPU, in
/// host TSC ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostExitEvent {
    pub vcpu: u32,
    pub exit: u64,
    pub entry: u64,
    /// Index into the trace's reasons.
    pub reason: u16,
}

/// Exits in the order pushed, a few bytes each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitLog {
    chunks: Chunks,
    /// The code of each (vCPU, reason) pair.
    pairs: PairCodes<(u32, u16)>,
    len: usize,
    last_exit: u64,
}

impl ExitLog {
    pub fn push(&mut self, e: HostExitEvent) {
        let code = self.pairs.code((e.vcpu, e.reason));
        let out = self.chunks.record();
        put_varint(out, code);
        put_varint(out, zigzag(e.exit.wrapping_sub(self.last_exit)));
        put_varint(out, zigzag(e.entry.wrapping_sub(e.exit)));
        self.last_exit = e.exit;
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the records take (the chunks' capacity: what the log holds).
    pub fn bytes(&self) -> usize {
        self.chunks.bytes()
    }

    /// Every exit, in the order pushed.
    pub fn iter(&self) -> Exits<'_> {
        Exits {
            log: self,
            reader: self.chunks.reader(),
            last_exit: 0,
        }
    }
}

/// The exits of an [`ExitLog`], decoded one by one.
pub struct Exits<'a> {
    log: &'a ExitLog,
    reader: Reader<'a>,
    last_exit: u64,
}

impl Iterator for Exits<'_> {
    type Item = HostExitEvent;

    fn next(&mut self) -> Option<HostExitEvent> {
        // The log wrote every record whole, so none of these fails.
        let code = self.reader.varint()?;
        let exit = self.last_exit.wrapping_add(unzigzag(self.reader.varint()?));
        let entry = exit.wrapping_add(unzigzag(self.reader.varint()?));
        let (vcpu, reason) = self.log.pairs.pair(code)?;
        self.last_exit = exit;
        Some(HostExitEvent {
            vcpu,
            exit,
            entry,
            reason,
        })
    }
}

impl<'a> IntoIterator for &'a ExitLog {
    type Item = HostExitEvent;
    type IntoIter = Exits<'a>;

    fn into_iter(self) -> Exits<'a> {
        self.iter()
    }
}

impl FromIterator<HostExitEvent> for ExitLog {
    fn from_iter<I: IntoIterator<Item = HostExitEvent>>(exits: I) -> ExitLog {
        let mut log = ExitLog::default();
        for e in exits {
            log.push(e);
        }
        log
    }
}

impl From<Vec<HostExitEvent>> for ExitLog {
    fn from(exits: Vec<HostExitEvent>) -> ExitLog {
        exits.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(vcpu: u32, exit: u64, entry: u64, reason: u16) -> HostExitEvent {
        HostExitEvent {
            vcpu,
            exit,
            entry,
            reason,
        }
    }

    #[test]
    fn every_exit_comes_back_as_pushed_extremes_included() {
        let exits = vec![
            exit(0, 5_398_127_362_712, 5_398_127_363_112, 3),
            exit(1, 5_398_127_362_000, 5_398_127_364_000, 0), // earlier
            exit(u32::MAX, u64::MAX, 0, u16::MAX),            // entry before exit
            exit(0, 0, u64::MAX, 0),
            exit(7, 1 << 63, 1 << 63, 9),
            exit(0, 5_398_127_362_712, 5_398_127_363_112, 3),
        ];
        let log: ExitLog = exits.clone().into();
        assert_eq!(log.len(), exits.len());
        assert_eq!(log.iter().collect::<Vec<_>>(), exits);
        assert!(ExitLog::default().iter().next().is_none());
        assert!(ExitLog::default().is_empty());
    }

    #[test]
    fn exits_microseconds_apart_take_a_few_bytes_and_span_chunks() {
        use super::super::varint::CHUNK;
        let n = 400_000u64;
        let exits: Vec<HostExitEvent> = (0..n)
            .map(|i| {
                let t = 1_000_000_000 + i * 2_500 + i % 97;
                exit((i % 2) as u32, t, t + 1_000 + i % 3_000, (i % 5) as u16)
            })
            .collect();
        let log: ExitLog = exits.iter().copied().collect();
        let used = log.chunks.used();
        assert!(used as f64 / (n as f64) < 6.5, "{used} bytes");
        assert!(log.chunks.count() >= 2, "the records span chunks");
        assert!(log.iter().eq(exits.iter().copied()));
        // What the log holds is its chunks, each filled before the next
        // starts: at most one chunk more than the records take.
        assert_eq!(log.bytes(), log.chunks.count() * CHUNK);
        assert!(log.bytes() < used + CHUNK, "{} for {used}", log.bytes());
        assert!(!log.is_empty());
    }
}
