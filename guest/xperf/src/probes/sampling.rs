//! The two crossings `xperf probes` times (getppid and the #PF refault), in
//! chunks of samples, and which probe hits fall inside which sample.
//!
//! Each sample is a round trip between the user stamps of [`crate::stamp`];
//! its two stamps are also its window in time. The kernel's trace records
//! carry x86-tsc timestamps, the same clock, so a record whose timestamp lies
//! inside a sample's window was made by that sample's crossing.

use crate::error::Result;
use crate::sampling::Region;
use crate::stamp;
use xvmm_results::probes::Round;

/// A crossing `xperf probes` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Getppid,
    PfRefault,
}

impl Kind {
    /// The crossing's name in reports (as `xperf`'s own crossings).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Getppid => crate::measure::GETPPID,
            Kind::PfRefault => crate::measure::PF_REFAULT,
        }
    }

    /// The prefix of its dynamic events' names.
    pub fn event_prefix(self) -> &'static str {
        match self {
            Kind::Getppid => "getppid",
            Kind::PfRefault => "pf_refault",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        [Kind::Getppid, Kind::PfRefault]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

/// Takes chunks of one crossing: `warmup` unrecorded iterations, then the
/// recorded samples into a buffer allocated (and touched) once.
pub struct Crosser {
    kind: Kind,
    warmup: usize,
    /// (open, close) stamps of the recorded samples.
    windows: Vec<(u64, u64)>,
    /// The #PF pages: warm-up pages first, then one per recorded sample.
    region: Option<Region>,
    /// Recorded samples whose two stamps came from different CPUs (TSC_AUX),
    /// over every chunk: xperf is pinned, so this should stay 0.
    migrated: u64,
}

impl Crosser {
    pub fn new(kind: Kind, warmup: usize, samples: usize) -> Result<Crosser> {
        let region = match kind {
            Kind::Getppid => None,
            Kind::PfRefault => {
                let (region, _) = Region::map(warmup + samples)?;
                // The first touch populates the page tables; every later
                // touch after MADV_DONTNEED is the refault being measured.
                for i in 0..warmup + samples {
                    // SAFETY: page(i) lies inside the live writable mapping.
                    unsafe { region.page(i).write_volatile(1) };
                }
                Some(region)
            }
        };
        Ok(Crosser {
            kind,
            warmup,
            windows: vec![(1, 1); samples],
            region,
            migrated: 0,
        })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The address range of the pages the recorded samples fault on.
    pub fn recorded_pages(&self) -> Option<(u64, u64)> {
        let region = self.region.as_ref()?;
        let start = region.page(self.warmup) as u64;
        Some((
            start,
            start + (self.windows.len() * crate::abi::PAGE_SIZE) as u64,
        ))
    }

    /// Samples so far whose stamps came from two CPUs.
    pub fn migrated(&self) -> u64 {
        self.migrated
    }

    /// Runs one chunk; returns the recorded samples' windows.
    pub fn chunk(&mut self) -> Result<&[(u64, u64)]> {
        let mut migrated = 0;
        let mut window = |s: stamp::Stamps| {
            migrated += u64::from(s.cpu().is_none());
            (s.open, s.close)
        };
        match &self.region {
            None => {
                for _ in 0..self.warmup {
                    std::hint::black_box(stamp::getppid_pair());
                }
                for w in self.windows.iter_mut() {
                    *w = window(stamp::getppid_pair());
                }
            }
            Some(region) => {
                region.discard()?;
                for i in 0..self.warmup {
                    // SAFETY: page(i) lies inside the live writable mapping.
                    std::hint::black_box(unsafe { stamp::store_pair(region.page(i)) });
                }
                let warmup = self.warmup;
                for (i, w) in self.windows.iter_mut().enumerate() {
                    // SAFETY: as above.
                    *w = window(unsafe { stamp::store_pair(region.page(warmup + i)) });
                }
            }
        }
        self.migrated += migrated;
        Ok(&self.windows)
    }
}

/// Round trips of a chunk's windows (raw ticks).
pub fn round_trips(windows: &[(u64, u64)]) -> Vec<u64> {
    windows.iter().map(|(a, b)| b.saturating_sub(*a)).collect()
}

/// How the records of one chunk fall into its samples.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tally {
    /// Samples in which every matcher matched exactly `per_sample` records.
    pub exact: u64,
    /// Records inside some sample's window, per matcher.
    pub inside: Vec<u64>,
    /// Records of this task outside every window (warm-up, the reads).
    pub outside: u64,
}

/// Counts `records` (timestamp, matcher index) per sample `windows`
/// (sorted, disjoint, as taken). `per_sample` is what each matcher must
/// match in every sample.
pub fn tally(
    records: &[(u64, usize)],
    windows: &[(u64, u64)],
    matchers: usize,
    per_sample: u64,
) -> Tally {
    let mut sorted = records.to_vec();
    sorted.sort_unstable();
    let mut per = vec![vec![0u64; matchers]; windows.len()];
    let mut inside = vec![0u64; matchers];
    let mut outside = 0;
    let mut w = 0;
    for &(ts, m) in &sorted {
        while w < windows.len() && windows[w].1 < ts {
            w += 1;
        }
        match windows.get(w) {
            Some(&(open, close)) if open <= ts && ts <= close && m < matchers => {
                per[w][m] += 1;
                inside[m] += 1;
            }
            _ => outside += 1,
        }
    }
    let exact = per
        .iter()
        .filter(|counts| counts.iter().all(|&c| c == per_sample))
        .count() as u64;
    Tally {
        exact,
        inside,
        outside,
    }
}

/// The samples of one no-probe/probe round, as [`xvmm_results::probes`] wants them.
pub fn round(baseline: &[(u64, u64)], probed: &[(u64, u64)]) -> Round {
    Round {
        baseline: round_trips(baseline),
        probed: round_trips(probed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_land_in_their_samples() {
        let windows = [(100, 200), (300, 400), (500, 600)];
        // Matcher 0 once per sample, matcher 1 missing in the last sample,
        // one record between samples, one with an unknown matcher.
        let records = [
            (150, 0),
            (160, 1),
            (250, 0),
            (310, 1),
            (399, 0),
            (500, 0),
            (550, 9),
        ];
        let t = tally(&records, &windows, 2, 1);
        assert_eq!(t.exact, 2);
        assert_eq!(t.inside, [3, 2]);
        assert_eq!(t.outside, 2);
        // A control mode expects nothing anywhere.
        let quiet = tally(&[(50, 0), (700, 0)], &windows, 1, 0);
        assert_eq!((quiet.exact, quiet.outside), (3, 2));
        let doubled = tally(&[(150, 0), (151, 0)], &windows[..1], 1, 1);
        assert_eq!(doubled.exact, 0);
    }

    #[test]
    fn both_crossings_take_ordered_windows() {
        for kind in [Kind::Getppid, Kind::PfRefault] {
            let mut c = Crosser::new(kind, 4, 32).unwrap();
            let windows = c.chunk().unwrap().to_vec();
            assert_eq!(windows.len(), 32);
            assert!(windows.iter().all(|(a, b)| a < b), "{kind:?}");
            assert!(windows.windows(2).all(|w| w[0].1 <= w[1].0), "{kind:?}");
            assert_eq!(kind.name(), Kind::parse(kind.name()).unwrap().name());
        }
        let c = Crosser::new(Kind::PfRefault, 2, 3).unwrap();
        let (start, end) = c.recorded_pages().unwrap();
        assert_eq!(end - start, 3 * 4096);
        assert!(Crosser::new(Kind::Getppid, 0, 1)
            .unwrap()
            .recorded_pages()
            .is_none());
    }
}
