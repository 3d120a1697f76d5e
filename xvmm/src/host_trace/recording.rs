//! A trace recorded to files and read back later: `events/` as tracefs
//! lays it out (`header_page` and each traced event's `format`) and each
//! CPU's `trace_pipe_raw` pages in `cpuN.raw`, the layout the nested
//! harness's recorder writes (`l1-init --record-trace`) and the benches
//! read from `benches/data/`.

use super::aggregate::ExitAggregator;
use super::raw::{CpuMerge, PageOutcome, RawDecoder};
use std::fs;
use std::path::Path;

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
        let mut merge = CpuMerge::new(self.cpus.len());
        let (mut events, mut corrupt_pages) = (0, 0);
        for (cpu, page) in self.pages() {
            let (outcome, n) = self.decoder.decode_into(cpu, page, &mut merge);
            events += n;
            corrupt_pages += u64::from(outcome == PageOutcome::Corrupt);
        }
        let mut aggregator = ExitAggregator::default();
        merge.release_all(|(cpu, ev)| aggregator.push_on(cpu, ev));
        Replayed {
            aggregator,
            events,
            corrupt_pages,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_trace::raw::{example_decoder, example_formats, EXAMPLE_HEADER_PAGE};
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
