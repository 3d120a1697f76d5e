//! The binary reader of the host trace: every CPU's `trace_pipe_raw` pages,
//! decoded by `xvmm_host::tracefs_raw`, turned into the [`TraceEvent`]s
//! the text reader would have parsed from the same events, and merged
//! across CPUs by time (a vCPU thread may migrate, and the aggregator pairs
//! each thread's exit with its next entry).

use super::parse::{AsyncPfEvent, TraceEvent, TRACED_EVENTS};
use std::cell::RefCell;
use std::fs::File;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::Arc;
pub use xvmm_host::tracefs_pipes::{drain_pipe, open_cpu_pipes, CpuMerge};
use xvmm_host::tracefs_raw::{EventFormat, Field, Missed, Page, PageLayout};

/// The record of a traced event as the [`TraceEvent`] its text line parses
/// to; `None` for other events and records missing a field. One arm per
/// traced event.
fn raw_event(format: &EventFormat, ts: u64, data: &[u8]) -> Option<TraceEvent> {
    let u32_of = |name| u32::try_from(format.unsigned(name, data)?).ok();
    let tid = i32::try_from(format.signed("common_pid", data)?).ok()?;
    match format.name.as_str() {
        "kvm_exit" => Some(TraceEvent::Exit {
            tid,
            vcpu: u32_of("vcpu_id")?,
            ts,
            reason: exit_reason(format, data)?,
        }),
        "kvm_entry" => Some(TraceEvent::Entry {
            tid,
            vcpu: u32_of("vcpu_id")?,
            ts,
        }),
        "kvm_pio" => Some(TraceEvent::Pio {
            tid,
            write: format.unsigned("rw", data)? != 0,
            port: u16::try_from(format.unsigned("port", data)?).ok()?,
            value: u32_of("val")?,
        }),
        "kvm_write_tsc_offset" => Some(TraceEvent::TscOffset {
            ts,
            vcpu: u32_of("vcpu_id")?,
            // The bits of an i64, as the text reader reads them.
            offset: format.unsigned("next_tsc_offset", data)?.cast_signed(),
        }),
        name => AsyncPfEvent::from_tracepoint(name).map(|kind| TraceEvent::AsyncPf { kind, ts }),
    }
}

/// The exit reason as the text reader sees it: the first word of what the
/// print format's table for this ISA prints (`DE excp` reads as `DE`).
fn exit_reason(format: &EventFormat, data: &[u8]) -> Option<Arc<str>> {
    let reason = match format.symbol("exit_reason", data) {
        Some(name) => name.split_whitespace().next()?.into(),
        None => format!("0x{:x}", format.unsigned("exit_reason", data)?).into(),
    };
    Some(reason)
}

/// Fields a `kvm_exit` reason depends on: the reason's own and those its
/// print format's guards read (`isa` on x86); at most this many are cached.
const REASON_KEY: usize = 4;

/// What decoding the frequent events needs, looked up once per format
/// rather than by field name for every record (issue 25: the decoder's
/// rate), and each exit reason's name made once per distinct key.
#[derive(Debug, Clone, Default)]
struct FastPath {
    /// Index of `kvm_exit`'s and `kvm_entry`'s formats, their `common_pid`
    /// and `vcpu_id` fields.
    exit: Option<(usize, Field, Field)>,
    entry: Option<(usize, Field, Field)>,
    /// The fields whose values decide an exit's reason name.
    reason_fields: Vec<Field>,
    reasons: RefCell<foldhash::HashMap<[u64; REASON_KEY], Arc<str>>>,
}

impl FastPath {
    fn new(formats: &[EventFormat]) -> FastPath {
        let ids = |name: &str| {
            let i = formats.iter().position(|f| f.name == name)?;
            let f = &formats[i];
            Some((
                i,
                f.field("common_pid")?.clone(),
                f.field("vcpu_id")?.clone(),
            ))
        };
        let reason_fields = formats
            .iter()
            .find(|f| f.name == "kvm_exit")
            .map(reason_fields)
            .unwrap_or_default();
        FastPath {
            exit: ids("kvm_exit"),
            entry: ids("kvm_entry"),
            reason_fields,
            reasons: RefCell::default(),
        }
    }

    /// An exit's reason through the cache: the slow path once per key. A
    /// record too short for a key field (a guard's field may lie past the
    /// reason's) is named by the slow path, uncached, which then reads its
    /// guards as not holding, as it always does.
    fn reason(&self, format: &EventFormat, data: &[u8]) -> Option<Arc<str>> {
        let mut key = [0u64; REASON_KEY];
        for (k, f) in key.iter_mut().zip(&self.reason_fields) {
            match f.unsigned(data) {
                Some(v) => *k = v,
                None => return exit_reason(format, data),
            }
        }
        if let Some(r) = self.reasons.borrow().get(&key) {
            return Some(Arc::clone(r));
        }
        let reason = exit_reason(format, data)?;
        self.reasons.borrow_mut().insert(key, Arc::clone(&reason));
        Some(reason)
    }
}

/// `exit_reason` and every field a guard of its tables reads, or nothing
/// (no cache) when there are more than [`REASON_KEY`].
fn reason_fields(format: &EventFormat) -> Vec<Field> {
    use xvmm_host::tracefs_raw::Guard;
    let mut names = vec!["exit_reason"];
    for t in format.symbols.iter().filter(|t| t.field == "exit_reason") {
        if let Guard::Equals(f, _) | Guard::Differs(f, _) = &t.guard {
            if !names.contains(&f.as_str()) {
                names.push(f);
            }
        }
    }
    let fields: Option<Vec<Field>> = names.iter().map(|n| format.field(n).cloned()).collect();
    fields.filter(|f| f.len() <= REASON_KEY).unwrap_or_default()
}

/// A tracefs file's text, read as tracefs must be read
/// ([`xvmm_host::file::read_in_large_reads`]): `header_page` answers
/// only a read from offset 0.
pub(super) fn read_in_one(path: &Path) -> std::io::Result<String> {
    let bytes = xvmm_host::file::read_in_large_reads(File::open(path)?)?;
    String::from_utf8(bytes).map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))
}

/// What the binary pages of one instance need: the page layout and the
/// traced events' formats.
///
/// Send, not Sync: it caches exit reasons as it decodes (one reader thread
/// owns it).
#[derive(Debug, Clone)]
pub struct RawDecoder {
    layout: PageLayout,
    formats: Vec<EventFormat>,
    fast: FastPath,
}

/// How one page decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageOutcome {
    Whole,
    /// The page (or its tail from some record on) could not be decoded;
    /// a lost window was marked in its place.
    Corrupt,
}

impl RawDecoder {
    /// From the text of `events/header_page` and of each traced event's
    /// `format` file; refused unless every traced event's record decodes.
    pub fn new(header_page: &str, formats: &[&str]) -> Result<RawDecoder, String> {
        let layout = PageLayout::parse(header_page).map_err(|e| e.to_string())?;
        let formats = formats
            .iter()
            .map(|f| EventFormat::parse(f).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let fast = FastPath::new(&formats);
        let decoder = RawDecoder {
            layout,
            formats,
            fast,
        };
        decoder.self_check()?;
        Ok(decoder)
    }

    /// From an instance's `events` directory.
    pub fn load(events: &Path) -> Result<RawDecoder, String> {
        let read = |p: &Path| read_in_one(p).map_err(|e| format!("{}: {e}", p.display()));
        let header = read(&events.join("header_page"))?;
        let mut formats = TRACED_EVENTS
            .iter()
            .map(|e| read(&events.join("kvm").join(e).join("format")))
            .collect::<Result<Vec<_>, _>>()?;
        // The async page fault events, where the host has them (as traced).
        formats.extend(
            AsyncPfEvent::ALL
                .iter()
                .filter_map(|e| read(&events.join("kvm").join(e.tracepoint()).join("format")).ok()),
        );
        let texts: Vec<&str> = formats.iter().map(String::as_str).collect();
        RawDecoder::new(&header, &texts)
    }

    /// Every traced event is known, and a record of it written in its
    /// format decodes into an event, exit reasons through the print
    /// format's tables as the text shows them.
    fn self_check(&self) -> Result<(), String> {
        for name in TRACED_EVENTS {
            let format = self
                .formats
                .iter()
                .find(|f| f.name == name)
                .ok_or_else(|| format!("no format for {name}"))?;
            let record = xvmm_host::tracefs_raw::encode_record(format, &[("common_pid", 1)]);
            if raw_event(format, 0, &record).is_none() {
                return Err(format!("{name}'s format lacks a field the reader needs"));
            }
        }
        let exit = self.formats.iter().find(|f| f.name == "kvm_exit");
        if exit.is_some_and(|f| !f.symbols.iter().any(|t| t.field == "exit_reason")) {
            return Err("kvm_exit's print format has no exit reason table".into());
        }
        Ok(())
    }

    /// The record of format `at` through the fast path: `Some(event)` for
    /// an exit or entry (`Some(None)`: a record missing a field), `None`
    /// for another event (the caller takes the general path).
    fn fast_event(&self, at: usize, ts: u64, data: &[u8]) -> Option<Option<TraceEvent>> {
        let ids = |(tid, vcpu): (&Field, &Field)| {
            let tid = i32::try_from(tid.signed(data)?).ok()?;
            let vcpu = u32::try_from(vcpu.unsigned(data)?).ok()?;
            Some((tid, vcpu))
        };
        match (&self.fast.exit, &self.fast.entry) {
            (Some((i, tid, vcpu)), _) if *i == at && !self.fast.reason_fields.is_empty() => {
                Some(ids((tid, vcpu)).and_then(|(tid, vcpu)| {
                    let reason = self.fast.reason(&self.formats[at], data)?;
                    Some(TraceEvent::Exit {
                        tid,
                        vcpu,
                        ts,
                        reason,
                    })
                }))
            }
            (_, Some((i, tid, vcpu))) if *i == at => {
                Some(ids((tid, vcpu)).map(|(tid, vcpu)| TraceEvent::Entry { tid, vcpu, ts }))
            }
            _ => None,
        }
    }

    pub fn page_size(&self) -> usize {
        self.layout.page_size()
    }

    pub fn layout(&self) -> &PageLayout {
        &self.layout
    }

    /// The format of the traced event `name`.
    pub fn format(&self, name: &str) -> Option<&EventFormat> {
        self.formats.iter().find(|f| f.name == name)
    }

    /// Decodes one page into `out(ts, event)`: a `Lost` first if the kernel
    /// dropped events before it, then its traced events in order.
    pub fn decode_page(&self, bytes: &[u8], out: impl FnMut(u64, TraceEvent)) -> PageOutcome {
        self.decode_page_by(bytes, true, out)
    }

    /// Decodes one page of `cpu` into `merge`, each event with its CPU (for
    /// [`super::ExitAggregator::push_on`]: a loss opens its window after
    /// its own CPU's last event), as both the live reader and a recording's
    /// replay do: a page that does not decode leaves a lost window at the
    /// CPU's latest time. Returns how the page decoded and the events it
    /// held.
    pub fn decode_into(
        &self,
        cpu: usize,
        bytes: &[u8],
        merge: &mut CpuMerge<(usize, TraceEvent)>,
    ) -> (PageOutcome, u64) {
        let mut events = 0;
        let outcome = self.decode_page(bytes, |ts, ev| {
            events += 1;
            merge.push(cpu, ts, (cpu, ev));
        });
        if outcome == PageOutcome::Corrupt {
            let at = merge.latest(cpu);
            merge.push(cpu, at, (cpu, TraceEvent::Lost { count: 0 }));
        }
        (outcome, events)
    }

    /// [`RawDecoder::decode_page`] by the general path alone (every field
    /// looked up by name, every reason named afresh): the oracle the fast
    /// path is tested and fuzzed against.
    pub fn decode_page_general(
        &self,
        bytes: &[u8],
        out: impl FnMut(u64, TraceEvent),
    ) -> PageOutcome {
        self.decode_page_by(bytes, false, out)
    }

    fn decode_page_by(
        &self,
        bytes: &[u8],
        fast: bool,
        mut out: impl FnMut(u64, TraceEvent),
    ) -> PageOutcome {
        let Ok(page) = Page::parse(&self.layout, bytes) else {
            return PageOutcome::Corrupt;
        };
        match page.missed {
            Missed::None => {}
            // How many is unknown; the per-CPU overrun counters still count them.
            Missed::Unknown => out(page.timestamp, TraceEvent::Lost { count: 0 }),
            Missed::Count(count) => out(page.timestamp, TraceEvent::Lost { count }),
        }
        let mut last = page.timestamp;
        for record in page.records() {
            let Ok(record) = record else {
                out(last, TraceEvent::Lost { count: 0 });
                return PageOutcome::Corrupt;
            };
            last = record.ts;
            let Some(id) = record.id() else { continue };
            let Some(at) = self.formats.iter().position(|f| f.id == id) else {
                continue;
            };
            let quick = fast.then(|| self.fast_event(at, record.ts, record.data));
            let event = match quick.flatten() {
                Some(event) => event,
                None => raw_event(&self.formats[at], record.ts, record.data),
            };
            if let Some(event) = event {
                out(record.ts, event);
            }
        }
        PageOutcome::Whole
    }
}

/// Linux 6.18's x86-64 `events/header_page`.
pub const EXAMPLE_HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;
";
const EXAMPLE_COMMON: &str = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
";

/// Linux 6.18's x86-64 kvm formats of the traced events, their exit
/// reason tables cut short: for tests, the bench and the fuzz target.
pub fn example_formats() -> Vec<String> {
    let exit = "name: kvm_exit\nID: 103\nformat:\n{COMMON}
\tfield:unsigned int exit_reason;\toffset:8;\tsize:4;\tsigned:0;
\tfield:unsigned long guest_rip;\toffset:16;\tsize:8;\tsigned:0;
\tfield:u32 isa;\toffset:24;\tsize:4;\tsigned:0;
\tfield:unsigned int vcpu_id;\toffset:56;\tsize:4;\tsigned:0;

print fmt: \"vcpu %u reason %s%s%s rip 0x%lx\", REC->vcpu_id, (REC->isa == 1) ? __print_symbolic(REC->exit_reason & 0xffff, { 1, \"EXTERNAL_INTERRUPT\" }, { 30, \"IO_INSTRUCTION\" }) : __print_symbolic(REC->exit_reason, { 0x040 + 13, \"GP excp\" }, { 0x07b, \"io\" }, { 0x400, \"npf\" }), (REC->isa == 1 && REC->exit_reason & ~0xffff) ? \" \" : \"\", (REC->isa == 1) ? __print_flags(REC->exit_reason & ~0xffff, \" \", { 0x80000000, \"FAILED_VMENTRY\" }) : \"\", REC->guest_rip\n";
    let entry = "name: kvm_entry\nID: 115\nformat:\n{COMMON}
\tfield:unsigned int vcpu_id;\toffset:8;\tsize:4;\tsigned:0;
\tfield:unsigned long rip;\toffset:16;\tsize:8;\tsigned:0;\n";
    let pio = "name: kvm_pio\nID: 110\nformat:\n{COMMON}
\tfield:unsigned int rw;\toffset:8;\tsize:4;\tsigned:0;
\tfield:unsigned int port;\toffset:12;\tsize:4;\tsigned:0;
\tfield:unsigned int size;\toffset:16;\tsize:4;\tsigned:0;
\tfield:unsigned int count;\toffset:20;\tsize:4;\tsigned:0;
\tfield:unsigned int val;\toffset:24;\tsize:4;\tsigned:0;\n";
    let offset = "name: kvm_write_tsc_offset\nID: 83\nformat:\n{COMMON}
\tfield:unsigned int vcpu_id;\toffset:8;\tsize:4;\tsigned:0;
\tfield:__u64 previous_tsc_offset;\toffset:16;\tsize:8;\tsigned:0;
\tfield:__u64 next_tsc_offset;\toffset:24;\tsize:8;\tsigned:0;\n";
    let not_present = "name: kvm_async_pf_not_present\nID: 34\nformat:\n{COMMON}
\tfield:__u64 token;\toffset:8;\tsize:8;\tsigned:0;
\tfield:__u64 gva;\toffset:16;\tsize:8;\tsigned:0;\n";
    [exit, entry, pio, offset, not_present]
        .iter()
        .map(|f| f.replace("{COMMON}", EXAMPLE_COMMON))
        .collect()
}

/// A decoder of [`EXAMPLE_HEADER_PAGE`] and [`example_formats`].
pub fn example_decoder() -> Result<RawDecoder, String> {
    let formats = example_formats();
    let texts: Vec<&str> = formats.iter().map(String::as_str).collect();
    RawDecoder::new(EXAMPLE_HEADER_PAGE, &texts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_trace::parse_line;
    use xvmm_host::tracefs_raw::{encode_record, PageWriter};

    /// Records and the text lines the kernel prints for them.
    fn records_and_lines(d: &RawDecoder) -> Vec<(Vec<u8>, String)> {
        let f = |n: &str| d.formats.iter().find(|f| f.name == n).unwrap();
        let exit = |isa, reason, text: &str| {
            let data = encode_record(
                f("kvm_exit"),
                &[
                    ("common_pid", 4242),
                    ("vcpu_id", 1),
                    ("isa", isa),
                    ("exit_reason", reason),
                ],
            );
            (
                data,
                format!("kvm_exit: vcpu 1 reason {text} rip 0xfff0 info1 0x0"),
            )
        };
        let entry = encode_record(f("kvm_entry"), &[("common_pid", 4242), ("vcpu_id", 1)]);
        let pio = [
            ("common_pid", 4242),
            ("rw", 1),
            ("port", 0x508),
            ("size", 4),
            ("count", 1),
            ("val", 42),
        ];
        let offset = [
            ("common_pid", 7),
            ("vcpu_id", 0),
            ("next_tsc_offset", (-100i64).cast_unsigned()),
        ];
        vec![
            exit(1, 30, "IO_INSTRUCTION"),
            (
                encode_record(f("kvm_pio"), &pio),
                "kvm_pio: pio_write at 0x508 size 4 count 1 val 0x2a ".into(),
            ),
            (entry.clone(), "kvm_entry: vcpu 1, rip 0xfff0".into()),
            exit(1, 0x8000_0001, "EXTERNAL_INTERRUPT FAILED_VMENTRY"),
            exit(2, 0x7b, "io"),
            exit(2, 0x4d, "GP excp"),
            exit(2, 0x400, "npf"),
            exit(2, 0x999, "0x999"),
            (entry, "kvm_entry: vcpu 1, rip 0xfff0".into()),
            (
                encode_record(f("kvm_write_tsc_offset"), &offset),
                "kvm_write_tsc_offset: vcpu=0 prev=0 next=18446744073709551516".into(),
            ),
            (
                encode_record(
                    f("kvm_async_pf_not_present"),
                    &[("common_pid", 4242), ("token", 1), ("gva", 0x1000)],
                ),
                "kvm_async_pf_not_present: token 0x1 gva 0x1000".into(),
            ),
        ]
    }

    /// Both readers give the aggregator the same events.
    fn both_readers_agree(d: &RawDecoder) {
        let cases = records_and_lines(d);
        let mut w = PageWriter::new(
            &xvmm_host::tracefs_raw::PageLayout::parse(EXAMPLE_HEADER_PAGE).unwrap(),
            1_000_000,
        );
        let mut text = Vec::new();
        for (i, (data, line)) in cases.iter().enumerate() {
            assert!(w.event(10, data));
            let pid = if line.contains("tsc_offset") { 7 } else { 4242 };
            let ts = 1_000_000 + 10 * (i as u64 + 1);
            text.push(parse_line(&format!("xvmm-{pid} [001] d..1. {ts}: {line}")).unwrap());
        }
        let mut raw = Vec::new();
        let page = w.finish(Missed::Count(3));
        let outcome = d.decode_page(&page, |_, ev| raw.push(ev));
        assert_eq!(outcome, PageOutcome::Whole);
        assert_eq!(raw[0], TraceEvent::Lost { count: 3 });
        assert_eq!(raw[1..], text[..]);
        // Again, with every reason cached, and by the general path.
        for fast in [true, false] {
            let mut again = Vec::new();
            d.decode_page_by(&page, fast, |_, ev| again.push(ev));
            assert_eq!(again, raw, "fast path {fast}");
        }
    }

    #[test]
    fn a_cached_reason_is_keyed_by_the_fields_its_guards_read() {
        let d = example_decoder().unwrap();
        let exit = d.format("kvm_exit").unwrap();
        let mut w = PageWriter::new(&d.layout, 1_000);
        // The same code under VMX (isa 1) and SVM (isa 2) names two reasons.
        for isa in [1, 2, 1, 2] {
            let r = encode_record(
                exit,
                &[("common_pid", 1), ("isa", isa), ("exit_reason", 30)],
            );
            assert!(w.event(10, &r));
        }
        let page = w.finish(Missed::None);
        let (mut fast, mut general) = (Vec::new(), Vec::new());
        d.decode_page(&page, |_, ev| fast.push(ev));
        d.decode_page_general(&page, |_, ev| general.push(ev));
        assert_eq!(fast, general);
        let names: Vec<String> = fast
            .iter()
            .map(|e| match e {
                TraceEvent::Exit { reason, .. } => reason.to_string(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(names[0], "IO_INSTRUCTION");
        assert_ne!(names[1], names[0]);
        assert_eq!((&names[2], &names[3]), (&names[0], &names[1]));
        assert_eq!(d.fast.reasons.borrow().len(), 2);
    }

    #[test]
    fn binary_records_give_the_events_their_text_lines_give() {
        both_readers_agree(&example_decoder().unwrap());
        // And with this machine's own formats, where it has them.
        let events = Path::new("/sys/kernel/tracing/events");
        match RawDecoder::load(events) {
            Ok(d) => both_readers_agree(&d),
            Err(e) => println!("skipped this machine's formats: {e}"),
        }
    }

    #[test]
    fn a_record_cut_before_a_guard_field_is_named_as_the_general_path_names_it() {
        // A kernel whose kvm_exit puts vcpu_id before isa: a record cut
        // between them has a pid, a vCPU and a reason, but no isa.
        let mut f = example_formats();
        f[0] = f[0].replace("vcpu_id;\toffset:56", "vcpu_id;\toffset:12");
        let texts: Vec<&str> = f.iter().map(String::as_str).collect();
        let d = RawDecoder::new(EXAMPLE_HEADER_PAGE, &texts).unwrap();
        let exit = d.format("kvm_exit").unwrap();
        let whole = encode_record(exit, &[("common_pid", 1), ("isa", 1), ("exit_reason", 30)]);
        let mut w = PageWriter::new(&d.layout, 1_000);
        assert!(w.event(10, &whole[..20]));
        assert!(w.event(10, &whole));
        let page = w.finish(Missed::None);
        let (mut fast, mut general) = (Vec::new(), Vec::new());
        d.decode_page(&page, |_, ev| fast.push(ev));
        d.decode_page_general(&page, |_, ev| general.push(ev));
        assert_eq!(fast, general);
        assert_eq!(fast.len(), 2, "{fast:?}");
        // Without isa no VMX table holds: the SVM table, which has no 30.
        let reason = |e: &TraceEvent| match e {
            TraceEvent::Exit { reason, .. } => reason.to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (reason(&fast[0]), reason(&fast[1])),
            ("0x1e".into(), "IO_INSTRUCTION".into())
        );
    }

    /// Exits and entries take the fast path (the general one gives the
    /// same events, at several times the cost); other events do not.
    #[test]
    fn exits_and_entries_are_decoded_by_the_fast_path() {
        let d = example_decoder().unwrap();
        let at = |name: &str| d.formats.iter().position(|f| f.name == name).unwrap();
        let entry = encode_record(
            d.format("kvm_entry").unwrap(),
            &[("common_pid", 42), ("vcpu_id", 3)],
        );
        assert_eq!(
            d.fast_event(at("kvm_entry"), 7, &entry),
            Some(Some(TraceEvent::Entry {
                tid: 42,
                vcpu: 3,
                ts: 7
            }))
        );
        let exit = encode_record(
            d.format("kvm_exit").unwrap(),
            &[("common_pid", 42), ("isa", 1), ("exit_reason", 30)],
        );
        assert!(matches!(
            d.fast_event(at("kvm_exit"), 8, &exit),
            Some(Some(TraceEvent::Exit { ts: 8, .. }))
        ));
        let other = d
            .formats
            .iter()
            .position(|f| f.name != "kvm_exit" && f.name != "kvm_entry")
            .unwrap();
        assert_eq!(d.fast_event(other, 9, &entry), None);
    }

    #[test]
    fn formats_the_reader_cannot_use_are_refused() {
        let mut f = example_formats();
        f[1] = f[1].replace("vcpu_id", "vcpu");
        let texts: Vec<&str> = f.iter().map(String::as_str).collect();
        assert!(RawDecoder::new(EXAMPLE_HEADER_PAGE, &texts)
            .unwrap_err()
            .contains("kvm_entry"));
        let mut f = example_formats();
        f[0] = f[0].replace("__print_symbolic", "__print_flags");
        let texts: Vec<&str> = f.iter().map(String::as_str).collect();
        assert!(RawDecoder::new(EXAMPLE_HEADER_PAGE, &texts)
            .unwrap_err()
            .contains("table"));
        let texts: Vec<&str> = example_formats().iter().skip(1).map(|_| "").collect();
        assert!(RawDecoder::new(EXAMPLE_HEADER_PAGE, &texts).is_err());
        assert!(RawDecoder::new("", &[]).is_err());
    }

    #[test]
    fn corrupt_pages_are_reported() {
        let d = example_decoder().unwrap();
        let mut events = Vec::new();
        assert_eq!(
            d.decode_page(&[0; 8], |_, e| events.push(e)),
            PageOutcome::Corrupt
        );
        let layout = xvmm_host::tracefs_raw::PageLayout::parse(EXAMPLE_HEADER_PAGE).unwrap();
        let mut w = PageWriter::new(&layout, 5);
        let entry = &records_and_lines(&d)[2].0;
        assert!(w.event(1, entry));
        assert!(w.raw(&[0, 0, 0, 0, 0xff, 0xff, 0, 0]));
        let outcome = d.decode_page(&w.finish(Missed::None), |_, e| events.push(e));
        assert_eq!(outcome, PageOutcome::Corrupt);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1], TraceEvent::Lost { count: 0 });
    }
}
