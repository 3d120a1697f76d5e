//! The per-CPU binary pipes of a tracefs instance (`per_cpu/cpuN/
//! trace_pipe_raw`): opened non-blocking, drained a page at a time, and
//! their streams merged into one by time ([`CpuMerge`]). xvmm's exit tracer
//! and xperf's workload tracer both read their instances this way; what a
//! page holds is [`super::tracefs_raw`]'s.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `per_cpu/cpuN/trace_pipe_raw` of every CPU of an instance,
/// non-blocking, in CPU order.
pub fn open_cpu_pipes(instance: &Path) -> Result<Vec<File>, String> {
    let dir = instance.join("per_cpu");
    let entries = fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut cpus: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
        .collect();
    cpus.sort_unstable();
    if cpus.is_empty() {
        return Err(format!("{}: no CPUs", dir.display()));
    }
    cpus.iter()
        .map(|cpu| {
            let path = dir.join(format!("cpu{cpu}/trace_pipe_raw"));
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
                .map_err(|e| format!("opening {}: {e}", path.display()))
        })
        .collect()
}

/// Reads whole pages from one CPU's pipe until it is empty, giving each to
/// `each`; `true` if there was any.
pub fn drain_pipe(
    pipe: &mut impl Read,
    page: &mut [u8],
    mut each: impl FnMut(&[u8]),
) -> std::io::Result<bool> {
    let mut any = false;
    loop {
        match pipe.read(page) {
            Ok(0) => return Ok(any),
            Ok(n) => {
                each(&page[..n]);
                any = true;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(any),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// How far behind the reader's own clock an event may still be committed:
/// a tracepoint writes with preemption off, so far less than this.
const COMMIT_SLACK: u64 = 1 << 25;

/// Per-CPU streams of timestamped items merged into one ordered stream:
/// an item is released once no CPU can still deliver an earlier one.
#[derive(Debug)]
pub struct CpuMerge<T> {
    queues: Vec<VecDeque<(u64, T)>>,
    latest: Vec<u64>,
}

impl<T> CpuMerge<T> {
    pub fn new(cpus: usize) -> CpuMerge<T> {
        CpuMerge {
            queues: (0..cpus).map(|_| VecDeque::new()).collect(),
            latest: vec![0; cpus],
        }
    }

    pub fn push(&mut self, cpu: usize, ts: u64, item: T) {
        if let (Some(q), Some(l)) = (self.queues.get_mut(cpu), self.latest.get_mut(cpu)) {
            q.push_back((ts, item));
            *l = (*l).max(ts);
        }
    }

    /// Whether no CPU's item is held.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }

    /// The time of the latest item `cpu` delivered.
    pub fn latest(&self, cpu: usize) -> u64 {
        self.latest.get(cpu).copied().unwrap_or(0)
    }

    /// Releases the items of every CPU drained since `drained_from` (a TSC
    /// value): what a CPU delivers later is no earlier than that (less the
    /// commit slack) nor than the latest item it delivered.
    pub fn release_drained(&mut self, drained_from: u64, out: impl FnMut(T)) {
        let floor = drained_from.saturating_sub(COMMIT_SLACK);
        let horizon = self.latest.iter().map(|&l| l.max(floor)).min();
        self.release_before(horizon.unwrap_or(0), out);
    }

    /// Everything still held, in order.
    pub fn release_all(&mut self, out: impl FnMut(T)) {
        self.release_before(u64::MAX, out);
        for q in &mut self.queues {
            q.clear();
        }
    }

    /// Items earlier than `horizon` (all of them for `u64::MAX`), each
    /// CPU's in its own order, the CPUs' by time.
    pub fn release_before(&mut self, horizon: u64, mut out: impl FnMut(T)) {
        let mut heads: BinaryHeap<Reverse<(u64, usize)>> = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(cpu, q)| q.front().map(|(ts, _)| Reverse((*ts, cpu))))
            .collect();
        while let Some(Reverse((ts, cpu))) = heads.pop() {
            if ts >= horizon && horizon != u64::MAX {
                break;
            }
            let Some((_, item)) = self.queues[cpu].pop_front() else {
                continue;
            };
            out(item);
            if let Some((next, _)) = self.queues[cpu].front() {
                heads.push(Reverse((*next, cpu)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cpus_pipe_opens_in_cpu_order() {
        let dir = std::env::temp_dir().join(format!("tracefs-pipes-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        assert!(open_cpu_pipes(&dir).unwrap_err().contains("per_cpu"));
        fs::create_dir_all(dir.join("per_cpu")).unwrap();
        assert!(open_cpu_pipes(&dir).unwrap_err().ends_with("no CPUs"));
        // Numeric order, not the directory's: cpu10 after cpu2.
        for cpu in [10, 2, 0] {
            let d = dir.join(format!("per_cpu/cpu{cpu}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("trace_pipe_raw"), cpu.to_string()).unwrap();
        }
        fs::create_dir_all(dir.join("per_cpu/other")).unwrap();
        let read: Vec<String> = open_cpu_pipes(&dir)
            .unwrap()
            .into_iter()
            .map(|mut f| {
                let mut s = String::new();
                f.read_to_string(&mut s).unwrap();
                s
            })
            .collect();
        assert_eq!(read, ["0", "2", "10"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A pipe's reads in turn, then end of file.
    struct Script(VecDeque<std::io::Result<Vec<u8>>>);

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.pop_front() {
                None => Ok(0),
                Some(Ok(b)) => {
                    buf[..b.len()].copy_from_slice(&b);
                    Ok(b.len())
                }
                Some(Err(e)) => Err(e),
            }
        }
    }

    #[test]
    fn a_pipe_is_drained_through_interruptions_until_it_would_block() {
        let err = |k: ErrorKind| Err(std::io::Error::from(k));
        let mut page = [0u8; 8];
        let mut pipe = Script(VecDeque::from([
            Ok(vec![1]),
            err(ErrorKind::Interrupted),
            Ok(vec![2, 2]),
            err(ErrorKind::WouldBlock),
            Ok(vec![3]),
        ]));
        let mut got = Vec::new();
        assert!(drain_pipe(&mut pipe, &mut page, |b| got.push(b.to_vec())).unwrap());
        assert_eq!(got, [vec![1], vec![2, 2]]);
        // The next round finds what came since.
        assert!(drain_pipe(&mut pipe, &mut page, |b| got.push(b.to_vec())).unwrap());
        assert_eq!(got.len(), 3);
        let mut empty = Script(VecDeque::from([err(ErrorKind::WouldBlock)]));
        assert!(!drain_pipe(&mut empty, &mut page, |_| {}).unwrap());
        let mut broken = Script(VecDeque::from([Ok(vec![1]), err(ErrorKind::Other)]));
        assert_eq!(
            drain_pipe(&mut broken, &mut page, |_| {})
                .unwrap_err()
                .kind(),
            ErrorKind::Other
        );
    }

    #[test]
    fn cpus_merge_by_time_and_wait_for_the_slowest() {
        let mut m = CpuMerge::new(2);
        m.push(1, 90, "cpu1 early");
        m.push(0, 100, "exit on cpu0");
        m.push(1, 150, "entry on cpu1");
        let mut out = Vec::new();
        // cpu0 may still deliver anything from 100 on.
        m.release_drained(0, |e| out.push(e));
        assert_eq!(out, ["cpu1 early"]);
        m.push(0, 200, "later on cpu0");
        m.release_drained(0, |e| out.push(e));
        assert_eq!(out, ["cpu1 early", "exit on cpu0"]);
        // A CPU drained after time T delivers nothing before T less the slack.
        m.release_drained(175 + COMMIT_SLACK, |e| out.push(e));
        assert_eq!(out[2], "entry on cpu1");
        m.push(1, 190, "cpu1 again");
        // Drained at a time within the slack of what is held: a CPU may
        // still commit an event from before it, so nothing goes.
        m.release_drained(COMMIT_SLACK / 2 + 300, |e| out.push(e));
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!((m.latest(0), m.latest(1), m.latest(7)), (200, 190, 0));
        m.release_all(|e| out.push(e));
        assert_eq!(out[3..], ["cpu1 again", "later on cpu0"]);
        m.push(7, 1, "no such CPU");
        m.release_all(|e| out.push(e));
        assert_eq!(out.len(), 5);
    }

    /// Held items on any CPU make the merge non-empty until released; an
    /// item before the horizon goes, one at it stays.
    #[test]
    fn the_merge_is_empty_only_when_nothing_is_held() {
        let mut m = CpuMerge::new(3);
        assert!(m.is_empty());
        m.push(2, 50, "cpu2");
        m.push(0, 60, "cpu0");
        assert!(!m.is_empty());
        let mut out = Vec::new();
        m.release_before(60, |e| out.push(e));
        assert_eq!((out.as_slice(), m.is_empty()), (["cpu2"].as_slice(), false));
        m.release_before(61, |e| out.push(e));
        assert_eq!((out.len(), m.is_empty()), (2, true));
    }
}
