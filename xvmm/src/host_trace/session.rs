//! The tracing session: the private tracefs instance, its filters and
//! events, the reader thread, and the instance's removal on every way out.

use super::aggregate::{ExitAggregator, TraceReader, TraceSummary};
use super::parse::{line_cpu, parse_line, AsyncPfEvent, TraceLines, TRACED_EVENTS};
use super::raw::{drain_pipe, open_cpu_pipes, CpuMerge, PageOutcome, RawDecoder};
use crate::{Error, Result};
use std::fs;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use xvmm_host::host_state::journal::{self, Change};
use xvmm_host::host_state::mounts::{FsKind, FsUse};

const INSTANCE_PREFIX: &str = "xvmm-";
/// Per-CPU ring buffer size for the instance; a reader thread drains it
/// continuously, so this only has to absorb scheduling hiccups.
const BUFFER_KB: u32 = 8192;

/// What a reader thread hands back.
type Drained = std::io::Result<(ExitAggregator, TraceReader)>;

/// A running kvm_exit/kvm_entry trace of some threads.
pub struct ExitTracer {
    instance: PathBuf,
    /// The instance's journal entry, forgotten once it is removed.
    recorded: Change,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Drained>>,
    async_pf_traced: bool,
    /// Declared last: dropped after `Drop::drop` has removed the instance,
    /// so a mount released with it is left empty.
    _tracefs: FsUse,
}

fn write_file(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value)
        .map_err(|e| Error::Tracing(format!("writing {value:?} to {}: {e}", path.display())))
}

/// tracefs for xvmm (mounted when absent; see [`xvmm_host::host_state`]).
fn tracefs() -> Result<FsUse> {
    FsUse::acquire(FsKind::Tracefs, None).map_err(|e| Error::Tracing(e.to_string()))
}

/// Creates a tracefs instance, recorded in the journal first: a process
/// killed after this leaves a record the next start undoes.
fn make_instance(root: &Path, name: &str) -> Result<(PathBuf, Change)> {
    let change = Change::Instance { name: name.into() };
    journal::record(change.clone()).map_err(|e| Error::Tracing(e.to_string()))?;
    let path = root.join("instances").join(name);
    if let Err(e) = fs::create_dir(&path) {
        journal::forget(&change);
        return Err(Error::Tracing(format!(
            "creating tracefs instance {}: {e}",
            path.display()
        )));
    }
    Ok((path, change))
}

/// `common_pid == a || common_pid == b`: only the given threads' events;
/// empty when no threads are given.
fn tid_filter(tids: &[i32]) -> String {
    tids.iter()
        .map(|t| format!("common_pid == {t}"))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// The filter to write for the kvm `event`, if any: none without threads,
/// and none for `kvm_async_pf_completed`, which fires in a kworker, so it
/// cannot be filtered by the vCPU thread.
fn event_filter<'a>(filter: &'a str, event: &str) -> Option<&'a str> {
    if filter.is_empty() || event == AsyncPfEvent::Completed.tracepoint() {
        None
    } else {
        Some(filter)
    }
}

/// The async page fault tracepoints under `kvm_events` (an instance's
/// `events/kvm`), where the host has them all (a kernel without
/// CONFIG_KVM_ASYNC_PF has none); returns whether they are on.
fn enable_async_pf(kvm_events: &Path, filter: &str) -> Result<bool> {
    let dirs: Vec<(AsyncPfEvent, PathBuf)> = AsyncPfEvent::ALL
        .iter()
        .map(|e| (*e, kvm_events.join(e.tracepoint())))
        .collect();
    if !dirs.iter().all(|(_, d)| d.is_dir()) {
        return Ok(false);
    }
    for (event, dir) in dirs {
        if let Some(filter) = event_filter(filter, event.tracepoint()) {
            write_file(&dir.join("filter"), filter)?;
        }
        write_file(&dir.join("enable"), "1")?;
    }
    Ok(true)
}

/// One pass over every CPU's pipe, giving each page with its CPU to
/// `each`; `true` if any CPU had pages.
fn drain_cpus(
    pipes: &mut [fs::File],
    page: &mut [u8],
    mut each: impl FnMut(usize, &[u8]),
) -> std::io::Result<bool> {
    let mut any = false;
    for (cpu, pipe) in pipes.iter_mut().enumerate() {
        any |= drain_pipe(pipe, page, |bytes| each(cpu, bytes))?;
    }
    Ok(any)
}

/// The raw reader's loop: drains every CPU's pages in rounds, merging the
/// CPUs by time up to where no CPU can still deliver an earlier event,
/// until a round begun after `stop` finds nothing.
fn read_raw(decoder: &RawDecoder, pipes: &mut [fs::File], stop: &AtomicBool) -> Drained {
    let mut agg = ExitAggregator::default();
    let mut merge = CpuMerge::new(pipes.len());
    let mut page = vec![0u8; decoder.page_size()];
    let mut corrupt_pages = 0;
    loop {
        let round = xvmm_host::tsc::rdtsc();
        // Tracing is off before stop is set: a drain begun after
        // it that finds nothing is the last.
        let stopping = stop.load(Ordering::Acquire);
        let any = drain_cpus(pipes, &mut page, |cpu, bytes| {
            if decoder.decode_into(cpu, bytes, &mut merge).0 == PageOutcome::Corrupt {
                corrupt_pages += 1;
            }
        })?;
        merge.release_drained(round, |(cpu, ev)| agg.push_on(cpu, ev));
        if !any && stopping {
            merge.release_all(|(cpu, ev)| agg.push_on(cpu, ev));
            return Ok((agg, TraceReader::Raw { corrupt_pages }));
        }
        if !any {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The text reader's loop over a non-blocking `trace_pipe`, until a read
/// after `stop` finds it empty.
fn read_text(mut pipe: impl Read, stop: &AtomicBool, why: String) -> Drained {
    let mut agg = ExitAggregator::default();
    let mut buf = vec![0u8; 1 << 16];
    let mut lines = TraceLines::default();
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                lines.feed(&buf[..n], |line| {
                    if let Some(ev) = parse_line(line) {
                        // trace_pipe merges the CPUs: each line names its own.
                        agg.push_on(line_cpu(line).unwrap_or(0), ev);
                    }
                });
                continue;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        // Nothing to read: the buffer is drained, so stopping now loses nothing.
        if stop.load(Ordering::Acquire) {
            return Ok((agg, TraceReader::Text { why }));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the joined reader thread gave, as the tracer's result.
fn reader_result(
    joined: Option<std::thread::Result<Drained>>,
) -> Result<(ExitAggregator, TraceReader)> {
    match joined {
        Some(Ok(Ok(drained))) => Ok(drained),
        Some(Ok(Err(e))) => Err(Error::Tracing(format!("reading the trace: {e}"))),
        _ => Err(Error::Tracing("trace reader thread failed".into())),
    }
}

/// The lines of a CPU's `stats` that count lost events: overwritten
/// (`overrun`), which the kernel marks on the page after them, and those
/// no page marks: dropped when the buffer did not overwrite (`dropped
/// events`) or when a writer ran into an uncommitted page (`commit
/// overrun`).
const MARKED: &str = "overrun";
const UNMARKED: [&str; 2] = ["commit overrun", "dropped events"];

/// Every CPU's loss counters of an instance, summed: (overruns, losses
/// no page marks).
fn lost_events(instance: &Path) -> (u64, u64) {
    let Ok(cpus) = fs::read_dir(instance.join("per_cpu")) else {
        return (0, 0);
    };
    let mut sums = (0u64, 0u64);
    let texts = cpus
        .flatten()
        .filter_map(|cpu| fs::read_to_string(cpu.path().join("stats")).ok());
    for stats in texts {
        for (key, value) in stats.lines().filter_map(|l| l.split_once(':')) {
            let Ok(value) = value.trim().parse::<u64>() else {
                continue;
            };
            let key = key.trim();
            if key == MARKED {
                sums.0 = sums.0.saturating_add(value);
            } else if UNMARKED.contains(&key) {
                sums.1 = sums.1.saturating_add(value);
            }
        }
    }
    sums
}

/// Removes an instance directory; whether it is gone (also when someone
/// else removed it first).
fn remove_instance(path: &Path) -> bool {
    fs::remove_dir(path).is_ok() || !path.exists()
}

impl ExitTracer {
    /// Starts tracing kvm_exit/kvm_entry of the given thread ids (vCPU threads).
    pub fn start(tids: &[i32]) -> Result<ExitTracer> {
        let tracefs = tracefs()?;
        let root = tracefs.root();
        if !root.join("events/kvm/kvm_exit").is_dir() {
            return Err(Error::Tracing(
                "the kvm:kvm_exit tracepoint is not available (kvm module not loaded?)".into(),
            ));
        }
        let name = format!("{INSTANCE_PREFIX}{}", std::process::id());
        let (instance, recorded) = make_instance(root, &name)?;
        // From here on the instance exists: the tracer owns it, and its Drop removes it.
        let mut tracer = ExitTracer {
            instance,
            recorded,
            stop: Arc::new(AtomicBool::new(false)),
            reader: None,
            async_pf_traced: false,
            _tracefs: tracefs,
        };
        tracer.async_pf_traced = tracer.configure(tids)?;
        tracer.reader = Some(tracer.spawn_reader()?);
        write_file(&tracer.instance.join("tracing_on"), "1")?;
        Ok(tracer)
    }

    /// Returns whether the async page fault events are traced.
    fn configure(&self, tids: &[i32]) -> Result<bool> {
        let i = &self.instance;
        write_file(&i.join("tracing_on"), "0")?;
        write_file(&i.join("trace_clock"), "x86-tsc").map_err(|_| {
            Error::Tracing("the x86-tsc trace clock is not available on this host".into())
        })?;
        write_file(&i.join("buffer_size_kb"), &BUFFER_KB.to_string())?;
        // An instance starts with the top level's options, and with
        // overwrite off a full buffer drops events without marking the pages
        // that follow: nothing would say where they fell. Overwritten events
        // are marked there, so their windows can be placed.
        write_file(&i.join("options/overwrite"), "1")?;
        let filter = tid_filter(tids);
        for event in TRACED_EVENTS {
            let dir = i.join("events/kvm").join(event);
            if !dir.is_dir() {
                return Err(Error::Tracing(format!(
                    "the kvm:{event} tracepoint is not available on this host"
                )));
            }
            if let Some(filter) = event_filter(&filter, event) {
                write_file(&dir.join("filter"), filter)?;
            }
            write_file(&dir.join("enable"), "1")?;
        }
        enable_async_pf(&i.join("events/kvm"), &filter)
    }

    /// The binary reader where this host's pages and formats can be
    /// decoded, the text reader otherwise.
    fn spawn_reader(&self) -> Result<JoinHandle<Drained>> {
        match self.raw_setup() {
            Ok((decoder, pipes)) => Ok(self.spawn_raw_reader(decoder, pipes)),
            Err(why) => self.spawn_text_reader(why),
        }
    }

    fn raw_setup(&self) -> std::result::Result<(RawDecoder, Vec<fs::File>), String> {
        if std::env::var_os("XVMM_TRACE_TEXT").is_some() {
            return Err("XVMM_TRACE_TEXT is set".into());
        }
        let decoder = RawDecoder::load(&self.instance.join("events"))?;
        Ok((decoder, open_cpu_pipes(&self.instance)?))
    }

    /// Drains every CPU's pages in rounds, merging the CPUs by time up to
    /// where no CPU can still deliver an earlier event.
    fn spawn_raw_reader(
        &self,
        decoder: RawDecoder,
        mut pipes: Vec<fs::File>,
    ) -> JoinHandle<Drained> {
        let stop = Arc::clone(&self.stop);
        std::thread::spawn(move || {
            crate::affinity::unpin_helper_thread();
            read_raw(&decoder, &mut pipes, &stop)
        })
    }

    fn spawn_text_reader(&self, why: String) -> Result<JoinHandle<Drained>> {
        let path = self.instance.join("trace_pipe");
        let pipe = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| Error::Tracing(format!("opening {}: {e}", path.display())))?;
        let stop = Arc::clone(&self.stop);
        Ok(std::thread::spawn(move || {
            crate::affinity::unpin_helper_thread();
            read_text(pipe, &stop, why)
        }))
    }

    /// Stops tracing, drains the buffer and returns the per-reason summary.
    pub fn finish(mut self) -> Result<TraceSummary> {
        write_file(&self.instance.join("tracing_on"), "0")?;
        self.stop.store(true, Ordering::Release);
        let (agg, reader) = reader_result(self.reader.take().map(JoinHandle::join))?;
        let (overrun, unmarked) = lost_events(&self.instance);
        Ok(TraceSummary {
            reader,
            async_pf_traced: self.async_pf_traced,
            ..agg.finish_counted(overrun, unmarked)
        })
    }

    pub fn instance_path(&self) -> &Path {
        &self.instance
    }
}

impl Drop for ExitTracer {
    fn drop(&mut self) {
        let _ = fs::write(self.instance.join("tracing_on"), "0");
        self.stop.store(true, Ordering::Release);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let async_pf = AsyncPfEvent::ALL.map(AsyncPfEvent::tracepoint);
        for event in TRACED_EVENTS.iter().chain(&async_pf) {
            let _ = fs::write(
                self.instance.join("events/kvm").join(event).join("enable"),
                "0",
            );
        }
        // The kernel refuses rmdir while a file of the instance is open; the
        // reader has been joined, so nothing is. A failed removal stays in
        // the journal for the next start to finish.
        if remove_instance(&self.instance) {
            journal::forget(&self.recorded);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_trace::example_decoder;

    /// A non-blocking pipe with nothing in it, its write end held open
    /// (as an idle `trace_pipe_raw` is: reads say "would block").
    fn empty_pipe() -> (fs::File, fs::File) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: pipe2 only writes two descriptors into the array.
        let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) };
        assert_eq!(made, 0);
        // SAFETY: the two descriptors are new and belong to the Files alone.
        unsafe { (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1])) }
    }

    /// CPU time the thread of `handle` has used.
    fn thread_cpu(handle: &JoinHandle<Drained>) -> Duration {
        use std::os::unix::thread::JoinHandleExt;
        let mut clock: libc::clockid_t = 0;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: the thread is alive (joined only after) and both calls
        // only write the values passed.
        unsafe {
            assert_eq!(
                libc::pthread_getcpuclockid(handle.as_pthread_t(), &mut clock),
                0
            );
            assert_eq!(libc::clock_gettime(clock, &mut ts), 0);
        }
        let secs = u64::try_from(ts.tv_sec).unwrap();
        Duration::new(secs, u32::try_from(ts.tv_nsec).unwrap())
    }

    /// A reader with nothing to read sleeps between rounds: one that spun
    /// would take a whole CPU from the vCPU it traces.
    #[test]
    fn idle_readers_sleep_instead_of_spinning() {
        let (raw_read, _raw_write) = empty_pipe();
        let (text_read, _text_write) = empty_pipe();
        let stop = Arc::new(AtomicBool::new(false));
        let raw = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let decoder = example_decoder().unwrap();
                read_raw(&decoder, &mut [raw_read], &stop)
            })
        };
        let text = {
            let stop = stop.clone();
            std::thread::spawn(move || read_text(text_read, &stop, String::new()))
        };
        std::thread::sleep(Duration::from_millis(400));
        let used = [thread_cpu(&raw), thread_cpu(&text)];
        stop.store(true, Ordering::Release);
        let (_, how) = raw.join().unwrap().unwrap();
        assert!(matches!(how, TraceReader::Raw { corrupt_pages: 0 }));
        text.join().unwrap().unwrap();
        for (reader, cpu) in ["raw", "text"].iter().zip(used) {
            assert!(
                cpu < Duration::from_millis(100),
                "{reader}: {cpu:?} of CPU in 400 ms"
            );
        }
    }

    #[test]
    fn filters_name_the_threads_except_for_the_kworker_event() {
        assert_eq!(tid_filter(&[]), "");
        assert_eq!(tid_filter(&[7]), "common_pid == 7");
        let both = tid_filter(&[7, 9]);
        assert_eq!(both, "common_pid == 7 || common_pid == 9");
        for event in TRACED_EVENTS {
            assert_eq!(event_filter(&both, event), Some(both.as_str()), "{event}");
            assert_eq!(event_filter("", event), None, "{event}");
        }
        let completed = AsyncPfEvent::Completed.tracepoint();
        assert_eq!(event_filter(&both, completed), None);
        assert_eq!(event_filter("", completed), None);
        let ready = AsyncPfEvent::Ready.tracepoint();
        assert_eq!(event_filter(&both, ready), Some(both.as_str()));
    }

    /// `enable_async_pf` on a plain directory laid out like an instance's
    /// `events/kvm`: which files it writes, not how tracefs takes them.
    #[test]
    fn async_pf_tracepoints_are_enabled_only_when_all_exist() {
        let dir = std::env::temp_dir().join(format!("xvmm-async-pf-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let [present @ .., missing] = AsyncPfEvent::ALL;
        for e in present {
            fs::create_dir_all(dir.join(e.tracepoint())).unwrap();
        }
        let read =
            |e: AsyncPfEvent, f: &str| fs::read_to_string(dir.join(e.tracepoint()).join(f)).ok();
        // One missing (an older kernel): none is turned on.
        assert!(!enable_async_pf(&dir, "common_pid == 5").unwrap());
        assert!(present.iter().all(|&e| read(e, "enable").is_none()));
        fs::create_dir(dir.join(missing.tracepoint())).unwrap();
        assert!(enable_async_pf(&dir, "common_pid == 5").unwrap());
        for e in AsyncPfEvent::ALL {
            assert_eq!(read(e, "enable").as_deref(), Some("1"), "{e:?}");
            let filter = (e != AsyncPfEvent::Completed).then_some("common_pid == 5");
            assert_eq!(read(e, "filter").as_deref(), filter, "{e:?}");
        }
        // Without threads nothing is filtered.
        for e in AsyncPfEvent::ALL {
            let _ = fs::remove_file(dir.join(e.tracepoint()).join("filter"));
        }
        assert!(enable_async_pf(&dir, "").unwrap());
        assert!(AsyncPfEvent::ALL
            .iter()
            .all(|&e| read(e, "filter").is_none()));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A non-blocking pipe as (read end, write end), like a trace_pipe_raw.
    fn nonblocking_pipe() -> (fs::File, fs::File) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two fds it is given room for.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        assert_eq!(rc, 0);
        // SAFETY: both fds are fresh and owned by nothing else.
        unsafe { (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1])) }
    }

    #[test]
    fn a_round_reports_pages_from_any_cpu() {
        use std::io::Write;
        let (r0, _w0) = nonblocking_pipe();
        let (r1, mut w1) = nonblocking_pipe();
        let mut pipes = [r0, r1];
        let mut page = [0u8; 64];
        let mut got = Vec::new();
        w1.write_all(b"page").unwrap();
        let any = drain_cpus(&mut pipes, &mut page, |cpu, b| got.push((cpu, b.to_vec())));
        assert!(any.unwrap());
        assert_eq!(got, [(1, b"page".to_vec())]);
        // Drained: the next round finds nothing, which is how the reader
        // knows it may stop.
        assert!(!drain_cpus(&mut pipes, &mut page, |_, _| panic!("no pages")).unwrap());
    }

    /// A scripted `trace_pipe`: each read takes the next step; reading past
    /// the script is a failure of the reader under test.
    struct Script(std::collections::VecDeque<std::io::Result<&'static [u8]>>);

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let step = self.0.pop_front().expect("read past the script")?;
            buf[..step.len()].copy_from_slice(step);
            Ok(step.len())
        }
    }

    #[test]
    fn the_text_reader_retries_interrupted_reads_and_stops_when_drained() {
        use std::io::Error as IoError;
        let stop = AtomicBool::new(true);
        let script = Script(
            [
                Err(IoError::from(ErrorKind::Interrupted)),
                Ok(&b"xvmm-9 [001] d..1. 100: kvm_exit: vcpu 0 reason io rip 0x1\n"[..]),
                Ok(&b"xvmm-9 [001] d..1. 130: kvm_entry: vcpu 0, rip 0x1\n"[..]),
                Err(IoError::from(ErrorKind::WouldBlock)),
            ]
            .into(),
        );
        let (agg, reader) = read_text(script, &stop, "why".into()).unwrap();
        assert_eq!(reader, TraceReader::Text { why: "why".into() });
        let io = &agg.summary()[0];
        assert_eq!((io.reason.as_str(), io.exit_to_entry.min), ("io", 30));
        // A real error ends the reader with it, not retried.
        let failing = Script([Err(IoError::other("gone"))].into());
        let e = read_text(failing, &stop, String::new()).unwrap_err();
        assert_eq!(e.to_string(), "gone");
        let e = reader_result(Some(Ok(Err(e)))).err().unwrap();
        assert_eq!(
            e.to_string(),
            Error::Tracing("reading the trace: gone".into()).to_string()
        );
        let e = reader_result(None).err().unwrap();
        assert!(e.to_string().contains("trace reader thread failed"), "{e}");
    }

    /// trace_pipe merges the CPUs: a `CPU:N [LOST]` line opens its window
    /// after CPU N's last line, not after the last line of all.
    #[test]
    fn the_text_reader_opens_a_loss_after_its_own_cpus_last_event() {
        let stop = AtomicBool::new(true);
        let text = b"x-7 [000] d..1. 100: kvm_exit: vcpu 0 reason io rip 0x1
x-7 [000] d..1. 110: kvm_entry: vcpu 0, rip 0x1
x-8 [001] d..1. 200: kvm_exit: vcpu 1 reason io rip 0x1
x-8 [001] d..1. 400: kvm_entry: vcpu 1, rip 0x1
CPU:0 [LOST 4 EVENTS]
x-7 [000] d..1. 500: kvm_exit: vcpu 0 reason io rip 0x1
";
        let script = Script([Ok(&text[..]), Err(ErrorKind::WouldBlock.into())].into());
        let (agg, _) = read_text(script, &stop, String::new()).unwrap();
        assert_eq!(agg.finish(4).trace.lost, [(110, 500)]);
    }

    #[test]
    fn the_raw_reader_waits_for_stop_and_counts_corrupt_pages() {
        use std::io::Write;
        let decoder = example_decoder().unwrap();
        let (r0, _w0) = nonblocking_pipe();
        let (r1, mut w1) = nonblocking_pipe();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || read_raw(&decoder, &mut [r0, r1], &stop))
        };
        // Nothing to read yet: the reader keeps waiting.
        std::thread::sleep(Duration::from_millis(50));
        w1.write_all(&[0; 8]).unwrap(); // too short for a page header
        stop.store(true, Ordering::Release);
        let (agg, reader) = reader.join().unwrap().unwrap();
        assert_eq!(reader, TraceReader::Raw { corrupt_pages: 1 });
        // The page's loss is marked, without a count.
        let done = agg.finish(0);
        assert_eq!((done.lost, done.trace.lost), (0, vec![(0, u64::MAX)]));
    }

    /// A directory laid out like an instance's `per_cpu`, stats as the
    /// kernel prints them.
    #[test]
    fn lost_events_sum_every_cpus_overruns_and_drops() {
        let dir = std::env::temp_dir().join(format!("xvmm-overrun-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(lost_events(&dir), (0, 0));
        for (cpu, overrun) in [(0, 3), (1, 0), (2, 40)] {
            let d = dir.join(format!("per_cpu/cpu{cpu}"));
            fs::create_dir_all(&d).unwrap();
            let stats = format!("entries: 5\noverrun: {overrun}\ncommit overrun: 7\nbytes: 96\n");
            fs::write(d.join("stats"), stats).unwrap();
        }
        // 3 + 0 + 40 overruns and 7 commit overruns on each of the three.
        assert_eq!(lost_events(&dir), (43, 21));
        let d = dir.join("per_cpu/cpu1");
        let stats = "overrun: 1\ncommit overrun: 0\ndropped events: 5\nread events: 9\n";
        fs::write(d.join("stats"), stats).unwrap();
        assert_eq!(lost_events(&dir), (3 + 1 + 40, 14 + 5));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_instance_counts_as_removed_once_it_is_gone() {
        let dir = std::env::temp_dir().join(format!("xvmm-remove-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("busy/inside")).unwrap();
        fs::create_dir_all(dir.join("empty")).unwrap();
        assert!(remove_instance(&dir.join("empty")));
        assert!(!dir.join("empty").exists());
        // Already gone (removed by another start): nothing left to undo.
        assert!(remove_instance(&dir.join("empty")));
        // Refused (like an instance with a file open): still recorded.
        assert!(!remove_instance(&dir.join("busy")));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A private instance for a test, removed again when dropped.
    struct TestInstance(PathBuf, Change);

    impl Drop for TestInstance {
        fn drop(&mut self) {
            let _ = fs::write(self.0.join("tracing_on"), "0");
            let _ = fs::write(self.0.join("events/raw_syscalls/sys_enter/enable"), "0");
            if fs::remove_dir(&self.0).is_ok() {
                journal::forget(&self.1);
            }
        }
    }

    /// Tests that touch tracefs start where a fresh machine does: in a
    /// private mount namespace without tracefs (nothing leaks to the host).
    fn fresh_tracefs() -> FsUse {
        xvmm_host::host_state::namespace::enter_private_mount_namespace()
            .expect("the suite runs as root: a private mount namespace");
        tracefs().expect("tracefs mounts in the private namespace")
    }

    /// getppid calls of this thread, alternating between the CPUs so the
    /// per-CPU streams have to be merged.
    fn syscalls_on_every_cpu(rounds: usize) {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        for round in 0..rounds {
            // SAFETY: a cpu_set_t on the stack, this thread's own affinity.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(round % cpus, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            }
            for _ in 0..200 {
                // SAFETY: getppid has no arguments and cannot fail.
                unsafe { libc::getppid() };
            }
        }
        crate::affinity::unpin_helper_thread();
    }

    /// (ts, pid, syscall number) of every sys_enter in the text `trace`.
    fn text_sys_enters(instance: &Path) -> Vec<(u64, i32, i64)> {
        let text = fs::read_to_string(instance.join("trace")).unwrap();
        text.lines()
            .filter_map(xvmm_host::tracefs::parse_record)
            .filter_map(|r| {
                let nr = r.body.strip_prefix("sys_enter: NR ")?.split(' ').next()?;
                Some((r.ts, r.pid, nr.parse().ok()?))
            })
            .collect()
    }

    /// The same from every CPU's `trace_pipe_raw`, merged by time.
    fn raw_sys_enters(instance: &Path) -> Vec<(u64, i32, i64)> {
        use xvmm_host::tracefs_raw::{EventFormat, Page, PageLayout};
        let events = instance.join("events");
        let header = super::super::raw::read_in_one(&events.join("header_page")).unwrap();
        let layout = PageLayout::parse(&header).unwrap();
        let format = fs::read_to_string(events.join("raw_syscalls/sys_enter/format")).unwrap();
        let format = EventFormat::parse(&format).unwrap();
        let mut pipes = open_cpu_pipes(instance).unwrap();
        let mut merge = CpuMerge::new(pipes.len());
        let mut page = vec![0; layout.page_size()];
        for (cpu, pipe) in pipes.iter_mut().enumerate() {
            drain_pipe(pipe, &mut page, |bytes| {
                let page = Page::parse(&layout, bytes).unwrap();
                for r in page.records() {
                    let r = r.unwrap();
                    assert_eq!(r.id(), Some(format.id));
                    let pid = i32::try_from(format.signed("common_pid", r.data).unwrap()).unwrap();
                    let nr = format.signed("id", r.data).unwrap();
                    merge.push(cpu, r.ts, (r.ts, pid, nr));
                }
            })
            .unwrap();
        }
        let mut out = Vec::new();
        merge.release_all(|e| out.push(e));
        out
    }

    /// The binary pages of a real tracefs instance against its text: the
    /// same raw_syscalls:sys_enter events, times, threads and numbers.
    #[test]
    fn raw_pages_decode_the_events_the_text_trace_shows() {
        let tracefs = fresh_tracefs();
        let name = format!("xvmm-{}-rawtest", std::process::id());
        let (path, recorded) = make_instance(tracefs.root(), &name).unwrap();
        let instance = TestInstance(path, recorded);
        let i = &instance.0;
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        write_file(&i.join("trace_clock"), "x86-tsc").unwrap();
        let event = i.join("events/raw_syscalls/sys_enter");
        write_file(&event.join("filter"), &format!("common_pid == {tid}")).unwrap();
        write_file(&event.join("enable"), "1").unwrap();
        write_file(&i.join("tracing_on"), "1").unwrap();
        syscalls_on_every_cpu(20);
        write_file(&i.join("tracing_on"), "0").unwrap();
        // `trace` leaves the buffer as it is; the pipes then consume it.
        let text = text_sys_enters(i);
        let raw = raw_sys_enters(i);
        let getppid = raw.iter().filter(|e| e.2 == libc::SYS_getppid).count();
        assert!(getppid >= 20 * 200, "{getppid} getppid calls decoded");
        assert!(raw.iter().all(|e| e.1 == tid));
        assert_eq!(raw.len(), text.len());
        assert_eq!(raw, text);
        println!("{} sys_enter events: binary and text agree", raw.len());
    }

    /// Sum of one line of every CPU's `stats`, e.g. "dropped events".
    fn stat_sum(instance: &Path, key: &str) -> u64 {
        let cpus = fs::read_dir(instance.join("per_cpu")).unwrap();
        cpus.flatten()
            .map(|cpu| fs::read_to_string(cpu.path().join("stats")).unwrap())
            .flat_map(|s| {
                let value = s
                    .lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'));
                value.and_then(|v| v.trim().parse::<u64>().ok())
            })
            .sum()
    }

    /// A real instance with a one-page buffer nobody reads and a busy loop
    /// of traced syscalls: the buffer must lose events, dropping the new
    /// ones with overwrite off and overwriting the old with it on, and
    /// `lost_events` must count them either way.
    #[test]
    fn a_forced_loss_is_counted_whether_the_buffer_overwrites_or_drops() {
        let tracefs = fresh_tracefs();
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        for (overwrite, kind) in [("0", "dropped events"), ("1", "overrun")] {
            let name = format!("xvmm-{}-losstest{overwrite}", std::process::id());
            let (path, recorded) = make_instance(tracefs.root(), &name).unwrap();
            let instance = TestInstance(path, recorded);
            let i = &instance.0;
            write_file(&i.join("options/overwrite"), overwrite).unwrap();
            write_file(&i.join("buffer_size_kb"), "1").unwrap();
            let event = i.join("events/raw_syscalls/sys_enter");
            write_file(&event.join("filter"), &format!("common_pid == {tid}")).unwrap();
            write_file(&event.join("enable"), "1").unwrap();
            write_file(&i.join("tracing_on"), "1").unwrap();
            syscalls_on_every_cpu(500);
            write_file(&i.join("tracing_on"), "0").unwrap();
            let lost = stat_sum(i, kind);
            assert!(
                lost > 0,
                "overwrite {overwrite}: no {kind} in a full buffer"
            );
            let (overrun, unmarked) = lost_events(i);
            let counted = overrun + unmarked;
            assert!(
                counted >= lost,
                "overwrite {overwrite}: lost_events counted {counted} of {lost} {kind}"
            );
            println!("overwrite {overwrite}: {lost} {kind}, {counted} counted lost");
            // And a trace that lost them vouches for no window of its run.
            let done = ExitAggregator::default().finish_counted(overrun, unmarked);
            assert_eq!(done.lost, counted);
            if unmarked > 0 {
                assert_eq!(done.trace.lost, [(0, u64::MAX)]);
            }
        }
    }

    /// Needs root and tracefs (both present on the build machines): the
    /// instance is created, configured with the x86-tsc clock, and removed again,
    /// leaving the global trace clock untouched.
    #[test]
    fn instance_is_private_and_removed() {
        let tracefs = fresh_tracefs();
        let root = tracefs.root();
        let global_clock = fs::read_to_string(root.join("trace_clock")).unwrap();
        let tracer = ExitTracer::start(&[i32::try_from(std::process::id()).unwrap()]).unwrap();
        let path = tracer.instance_path().to_path_buf();
        let clock = fs::read_to_string(path.join("trace_clock")).unwrap();
        assert!(clock.contains("[x86-tsc]"), "instance clock: {clock}");
        let overwrite = fs::read_to_string(path.join("options/overwrite")).unwrap();
        assert_eq!(
            overwrite.trim(),
            "1",
            "overwritten events are marked on pages"
        );
        let summary = tracer.finish().unwrap();
        assert!(summary.exits.is_empty(), "no vCPU ran, no exits expected");
        if std::env::var_os("XVMM_TRACE_TEXT").is_none() {
            assert_eq!(summary.reader, TraceReader::Raw { corrupt_pages: 0 });
        }
        assert!(!path.exists(), "instance not removed");
        // Only hosts with CONFIG_KVM_ASYNC_PF have these tracepoints.
        let async_pf = AsyncPfEvent::ALL
            .iter()
            .all(|e| root.join("events/kvm").join(e.tracepoint()).is_dir());
        assert_eq!(summary.async_pf_traced, async_pf);
        assert_eq!(summary.lost, 0);
        assert_eq!(
            fs::read_to_string(root.join("trace_clock")).unwrap(),
            global_clock
        );
        let journal = journal::dir().join(format!("journal-{}.json", std::process::id()));
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(journal).unwrap_or_default();
        assert!(
            !text.contains(&format!("\"{name}\"")),
            "still recorded: {text}"
        );
        drop(tracefs);
        let table = xvmm_host::host_state::mounts::mount_table().unwrap();
        assert!(
            table.iter().all(|m| m.fstype != "tracefs"),
            "the mount this test's namespace made goes with its last user"
        );
    }
}
