//! A trace recorded to files and read back later: `events/` as tracefs
//! lays it out (`header_page` and each traced event's `format`) and each
//! CPU's `trace_pipe_raw` pages in `cpuN.raw`, the layout the nested
//! harness's recorder writes (`l1-init --record-trace`) and the benches
//! read from `benches/data/`.

use super::aggregate::ExitAggregator;
use super::parse::TraceEvent;
use super::raw::{CpuMerge, PageOutcome, RawDecoder};
use std::fs;
use std::path::Path;
use xvmm_host::tracefs_raw::Page;

/// A recorded trace: its decoder and each CPU's pages, CPU 0 first.
#[derive(Debug, Clone)]
pub struct Recording {
    pub decoder: RawDecoder,
    pub cpus: Vec<Vec<u8>>,
}

/// What reading a recording gave.
#[derive(Debug)]
pub struct Replayed {
    pub aggregator: ExitAggregator,
    /// Events decoded (every kind), and pages that did not decode.
    pub events: u64,
    pub corrupt_pages: u64,
}

impl Recording {
    /// Loads `dir`; refused when a file is missing, a CPU's file is not
    /// whole pages, or the formats do not decode the traced events.
    pub fn load(dir: &Path) -> Result<Recording, String> {
        let decoder = RawDecoder::load(&dir.join("events"))?;
        let mut cpus = Vec::new();
        while let Ok(bytes) = fs::read(dir.join(format!("cpu{}.raw", cpus.len()))) {
            if bytes.len() % decoder.page_size() != 0 {
                return Err(format!(
                    "cpu{}.raw: {} bytes is not a whole number of {}-byte pages",
                    cpus.len(),
                    bytes.len(),
                    decoder.page_size()
                ));
            }
            cpus.push(bytes);
        }
        if cpus.is_empty() {
            return Err(format!("{}: no cpu0.raw", dir.display()));
        }
        Ok(Recording { decoder, cpus })
    }

    /// Every page, CPU by CPU: (cpu, page).
    pub fn pages(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let size = self.decoder.page_size();
        self.cpus
            .iter()
            .enumerate()
            .flat_map(move |(cpu, bytes)| bytes.chunks(size).map(move |p| (cpu, p)))
    }

    /// Decodes every page and merges the CPUs by time into an aggregator,
    /// as the live reader does (a page that does not decode is a lost
    /// window there too).
    pub fn replay(&self) -> Replayed {
        let size = self.decoder.page_size();
        let mut next = vec![0; self.cpus.len()];
        replay_pages(&self.decoder, self.cpus.len(), |cpu, page| {
            let Some(bytes) = self.cpus[cpu].get(next[cpu]..next[cpu] + size) else {
                return false;
            };
            next[cpu] += size;
            page.clear();
            page.extend_from_slice(bytes);
            true
        })
    }
}

/// A CPU's page waiting to be read, and when it starts.
struct NextPage {
    bytes: Vec<u8>,
    start: u64,
}

/// Reads `cpus` CPUs' pages, each CPU's in its order (`next_page(cpu,
/// buffer)` fills the buffer with that CPU's next page, or says there is
/// none), and merges their events by time into an aggregator.
///
/// Pages are read in order of their start across the CPUs, and the events
/// before the earliest start of a page not read yet are handed on at once
/// (no CPU can still give an earlier one): the merge holds about a page per
/// CPU, not the whole run (issue 38: the reader's rate). A page that does
/// not parse starts at its CPU's latest event.
pub fn replay_pages(
    decoder: &RawDecoder,
    cpus: usize,
    mut next_page: impl FnMut(usize, &mut Vec<u8>) -> bool,
) -> Replayed {
    let mut merge = Merge {
        held: CpuMerge::new(cpus),
        latest: vec![0; cpus],
        aggregator: ExitAggregator::default(),
    };
    let mut waiting: Vec<Option<NextPage>> = (0..cpus).map(|_| None).collect();
    let mut fill = |cpu: usize, mut bytes: Vec<u8>, latest: &[u64]| {
        next_page(cpu, &mut bytes).then(|| NextPage {
            start: Page::parse(decoder.layout(), &bytes).map_or(latest[cpu], |p| p.timestamp),
            bytes,
        })
    };
    for (cpu, w) in waiting.iter_mut().enumerate() {
        *w = fill(cpu, Vec::new(), &merge.latest);
    }
    let (mut events, mut corrupt_pages) = (0, 0);
    while let Some((_, cpu)) = earliest(&waiting) {
        let Some(page) = waiting[cpu].take() else {
            break;
        };
        let others = earliest(&waiting).map_or(u64::MAX, |(start, _)| start);
        let (outcome, n) = merge.read(decoder, cpu, &page.bytes, others);
        events += n;
        corrupt_pages += u64::from(outcome == PageOutcome::Corrupt);
        waiting[cpu] = fill(cpu, page.bytes, &merge.latest);
        let horizon = earliest(&waiting).map_or(u64::MAX, |(start, _)| start);
        merge.release_before(horizon);
    }
    merge.release_before(u64::MAX);
    Replayed {
        aggregator: merge.aggregator,
        events,
        corrupt_pages,
    }
}

/// The earliest start of the pages waiting, and its CPU.
fn earliest(waiting: &[Option<NextPage>]) -> Option<(u64, usize)> {
    waiting
        .iter()
        .enumerate()
        .filter_map(|(cpu, w)| Some((w.as_ref()?.start, cpu)))
        .min()
}

/// The CPUs' events on their way into the aggregator, and each CPU's
/// latest.
struct Merge {
    held: CpuMerge<(usize, TraceEvent)>,
    latest: Vec<u64>,
    aggregator: ExitAggregator,
}

impl Merge {
    /// Decodes a page of `cpu`; no other CPU has an event not read yet
    /// before `others`. While nothing is held, an event before that is
    /// already in order and goes straight to the aggregator; from the first
    /// that is not, the page's events are held to be merged. Returns how
    /// the page decoded and its events.
    fn read(
        &mut self,
        decoder: &RawDecoder,
        cpu: usize,
        page: &[u8],
        others: u64,
    ) -> (PageOutcome, u64) {
        let mut straight = self.held.is_empty();
        let mut events = 0;
        let (held, aggregator, latest) = (&mut self.held, &mut self.aggregator, &mut self.latest);
        let outcome = decoder.decode_page(page, |ts, ev| {
            events += 1;
            latest[cpu] = latest[cpu].max(ts);
            straight &= ts < others;
            if straight {
                aggregator.push_on(cpu, ev);
            } else {
                held.push(cpu, ts, (cpu, ev));
            }
        });
        if outcome == PageOutcome::Corrupt {
            // As the live reader marks it: a lost window from the CPU's
            // latest event.
            held.push(cpu, latest[cpu], (cpu, TraceEvent::Lost { count: 0 }));
        }
        (outcome, events)
    }

    fn release_before(&mut self, horizon: u64) {
        let aggregator = &mut self.aggregator;
        self.held
            .release_before(horizon, |(cpu, ev)| aggregator.push_on(cpu, ev));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_trace::raw::{example_decoder, example_formats, EXAMPLE_HEADER_PAGE};
    use crate::host_trace::TraceSummary;
    use xvmm_host::tracefs_raw::{encode_record, EventFormat, Missed, PageWriter};

    /// A recording directory of the example formats with one exit and its
    /// entry on CPU 1 and nothing on CPU 0.
    fn write_recording(dir: &Path) {
        let events = dir.join("events");
        fs::create_dir_all(&events).unwrap();
        fs::write(events.join("header_page"), EXAMPLE_HEADER_PAGE).unwrap();
        for f in example_formats() {
            let name = EventFormat::parse(&f).unwrap().name;
            let d = events.join("kvm").join(name);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("format"), f).unwrap();
        }
        let decoder = example_decoder().unwrap();
        let record = |name: &str, values: &[(&str, u64)]| {
            encode_record(decoder.format(name).unwrap(), values)
        };
        let exit = record("kvm_exit", &[("common_pid", 7), ("exit_reason", 0x7b)]);
        let entry = record("kvm_entry", &[("common_pid", 7)]);
        let mut page = PageWriter::new(decoder.layout(), 1000);
        assert!(page.event(0, &exit) && page.event(150, &entry));
        fs::write(dir.join("cpu0.raw"), b"").unwrap();
        fs::write(dir.join("cpu1.raw"), page.finish(Missed::None)).unwrap();
    }

    #[test]
    fn a_recording_replays_into_paired_exits() {
        let dir = tempfile_dir("replay");
        write_recording(&dir);
        let rec = Recording::load(&dir).unwrap();
        assert_eq!(rec.cpus.len(), 2);
        assert_eq!(rec.pages().count(), 1);
        let r = rec.replay();
        assert_eq!((r.events, r.corrupt_pages), (2, 0));
        let summary = r.aggregator.finish(0);
        let exits: Vec<_> = summary.trace.exits.iter().collect();
        assert_eq!(exits.len(), 1);
        assert_eq!((exits[0].exit, exits[0].entry), (1000, 1150));
        let _ = fs::remove_dir_all(&dir);
    }

    /// Issue item 1: CPU 0 at 100 and 110, CPU 1 at 200..400, CPU 0's next
    /// page at 500 marked lost. CPU 0's events were lost after *its* last
    /// one (110), not after the merged stream's (400).
    #[test]
    fn a_cpus_lost_window_opens_after_its_own_last_event() {
        let dir = tempfile_dir("lost-per-cpu");
        write_recording(&dir);
        let decoder = example_decoder().unwrap();
        let record = |name: &str, pid: u64| {
            encode_record(
                decoder.format(name).unwrap(),
                &[("common_pid", pid), ("exit_reason", 0x7b)],
            )
        };
        let (exit, entry) = (|p| record("kvm_exit", p), |p| record("kvm_entry", p));
        let mut first = PageWriter::new(decoder.layout(), 100);
        assert!(first.event(0, &exit(7)) && first.event(10, &entry(7)));
        let mut second = PageWriter::new(decoder.layout(), 500);
        assert!(second.event(0, &exit(7)) && second.event(20, &entry(7)));
        let mut cpu0 = first.finish(Missed::None);
        cpu0.extend(second.finish(Missed::Count(4)));
        let mut other = PageWriter::new(decoder.layout(), 200);
        assert!(other.event(0, &exit(8)) && other.event(100, &entry(8)));
        assert!(other.event(100, &exit(8)));
        fs::write(dir.join("cpu0.raw"), cpu0).unwrap();
        fs::write(dir.join("cpu1.raw"), other.finish(Missed::None)).unwrap();
        let done = Recording::load(&dir).unwrap().replay().aggregator.finish(4);
        assert_eq!(done.trace.lost, [(110, 500)]);
        assert_eq!((done.lost, done.lost_unplaced), (4, 0));
        let _ = fs::remove_dir_all(&dir);
    }

    /// A page that does not decode is counted, and the pages after it
    /// still are read.
    #[test]
    fn corrupt_pages_are_counted_and_skipped() {
        let dir = tempfile_dir("corrupt");
        write_recording(&dir);
        let decoder = example_decoder().unwrap();
        let bad = || {
            let mut w = PageWriter::new(decoder.layout(), 50);
            assert!(w.raw(&[0, 0, 0, 0, 0xff, 0xff, 0, 0]));
            w.finish(Missed::None)
        };
        let mut cpu1 = bad();
        cpu1.extend(bad());
        cpu1.extend(fs::read(dir.join("cpu1.raw")).unwrap());
        fs::write(dir.join("cpu1.raw"), cpu1).unwrap();
        let r = Recording::load(&dir).unwrap().replay();
        assert_eq!(r.corrupt_pages, 2);
        assert_eq!(r.aggregator.finish(0).trace.exits.len(), 1);
        let _ = fs::remove_dir_all(&dir);
    }

    /// Random pages of three CPUs: exits, entries and port writes of five
    /// threads that move between CPUs, times that tie across CPUs, pages
    /// that overlap in time, some with lost events, some that do not
    /// decode.
    fn random_cpus(decoder: &RawDecoder, rng: &mut fastrand::Rng) -> Vec<Vec<u8>> {
        let record = |name: &str, pid: u64, rng: &mut fastrand::Rng| {
            let values = [
                ("common_pid", pid),
                ("vcpu_id", pid),
                ("exit_reason", rng.choice([0x7b, 0x1e, 0x0c]).unwrap()),
                ("rw", 1),
                ("port", 0x510),
                ("val", rng.u64(..9)),
            ];
            encode_record(decoder.format(name).unwrap(), &values)
        };
        (0..3)
            .map(|cpu| {
                let mut at = 1000 + cpu * rng.u64(..40);
                let mut bytes = Vec::new();
                for _ in 0..rng.u64(..12) {
                    let mut page = PageWriter::new(decoder.layout(), at);
                    if rng.u64(..10) == 0 {
                        assert!(page.raw(&[0, 0, 0, 0, 0xff, 0xff, 0, 0]));
                    }
                    for _ in 0..rng.u64(..30) {
                        let delta: u32 = rng.choice([0, 1, 2, 5, 60]).unwrap();
                        let name = rng.choice(["kvm_exit", "kvm_entry", "kvm_pio"]).unwrap();
                        let ev = record(name, 1 + rng.u64(..5), rng);
                        assert!(page.event(delta, &ev));
                        at += u64::from(delta);
                    }
                    let missed = rng
                        .choice([
                            Missed::None,
                            Missed::None,
                            Missed::Count(3),
                            Missed::Unknown,
                        ])
                        .unwrap();
                    bytes.extend(page.finish(missed));
                    at += rng.u64(..100);
                }
                bytes
            })
            .collect()
    }

    /// What a recording gave when every page was decoded into the merge
    /// and the merge released whole: the oracle of the streamed replay.
    fn replayed_whole(rec: &Recording) -> TraceSummary {
        let mut merge = CpuMerge::new(rec.cpus.len());
        for (cpu, page) in rec.pages() {
            rec.decoder.decode_into(cpu, page, &mut merge);
        }
        let mut aggregator = ExitAggregator::default();
        merge.release_all(|(cpu, ev)| aggregator.push_on(cpu, ev));
        aggregator.finish(0)
    }

    /// Issue 38: the replay that hands events on as the pages allow gives
    /// what merging the whole run at once gives, on random pages.
    #[test]
    fn a_streamed_replay_gives_what_the_whole_merge_gives() {
        let decoder = example_decoder().unwrap();
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let (mut exits, mut unpaired, mut lost) = (0, 0, 0);
        for _ in 0..300 {
            let rec = Recording {
                cpus: random_cpus(&decoder, &mut rng),
                decoder: decoder.clone(),
            };
            let replayed = rec.replay();
            let want = replayed_whole(&rec);
            let pages = rec.pages().count() as u64;
            let got = replayed.aggregator.finish(0);
            assert_eq!(got.trace, want.trace);
            assert_eq!(got.exits, want.exits);
            assert_eq!((got.unpaired, got.lost), (want.unpaired, want.lost));
            assert_eq!(got.calibrations, want.calibrations);
            assert!(replayed.corrupt_pages <= pages);
            exits += got.trace.exits.len();
            (unpaired, lost) = (unpaired + got.unpaired, lost + got.trace.lost.len());
        }
        // The random runs hold what the comparison is about.
        assert!(
            exits > 5_000 && unpaired > 1000 && lost > 100,
            "{exits} {unpaired} {lost}"
        );
    }

    #[test]
    fn a_cut_or_missing_recording_is_refused() {
        let dir = tempfile_dir("cut");
        write_recording(&dir);
        fs::write(dir.join("cpu1.raw"), [0u8; 100]).unwrap();
        let e = Recording::load(&dir).unwrap_err();
        assert!(e.contains("not a whole number"), "{e}");
        fs::remove_file(dir.join("cpu0.raw")).unwrap();
        assert!(Recording::load(&dir).unwrap_err().contains("no cpu0.raw"));
        fs::remove_file(dir.join("events/header_page")).unwrap();
        assert!(Recording::load(&dir).unwrap_err().contains("header_page"));
        let _ = fs::remove_dir_all(&dir);
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("xvmm-recording-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }
}
