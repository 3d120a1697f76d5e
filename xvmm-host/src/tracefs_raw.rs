//! tracefs's binary ring-buffer pages (`per_cpu/cpuN/trace_pipe_raw`),
//! decoded: the page layout from `events/header_page`, each event's fields
//! from its `format` file, and the records of one page with their
//! timestamps and the kernel's note of events it dropped before the page.
//! Pure functions over bytes and text, so a fuzz target can call them; the
//! layout follows `kernel/trace/ring_buffer.c`.
//!
//! Numbers in a page are in the byte order of the kernel that wrote it,
//! which is this machine's: the reader runs where the tracer runs.

use std::borrow::Cow;
use std::fmt;

/// The commit word's flags (`RB_MISSED_EVENTS`, `RB_MISSED_STORED`): the
/// kernel dropped events before this page, and stored how many after its
/// data. The bits below them hold the size of the data.
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;
const COMMIT_SIZE: u64 = MISSED_STORED - 1;
/// The event header's `type_len` values past the data lengths.
const MAX_DATA_TYPE_LEN: u32 = 28;
const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
/// Bits of the header's time delta; an extend's second word holds the rest.
const TS_SHIFT: u32 = 27;
/// An absolute stamp holds 59 bits; the top five come from the running time.
const TS_MSB: u64 = 0xf8 << 56;
/// Largest page accepted from `header_page` (sub-buffers go up to 1 MiB).
const MAX_PAGE: usize = 1 << 24;

/// A `header_page` or `format` file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError(pub String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

/// One `field:TYPE NAME; offset:N; size:N; signed:N;` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

impl Field {
    /// The field's value in `data`, zero-extended; `None` if `data` is too
    /// short or the field is not an integer of 1, 2, 4 or 8 bytes.
    pub fn unsigned(&self, data: &[u8]) -> Option<u64> {
        let bytes = data.get(self.offset..self.offset.checked_add(self.size)?)?;
        Some(match self.size {
            1 => u64::from(bytes[0]),
            2 => u64::from(u16::from_ne_bytes(bytes.try_into().ok()?)),
            4 => u64::from(u32::from_ne_bytes(bytes.try_into().ok()?)),
            8 => u64::from_ne_bytes(bytes.try_into().ok()?),
            _ => return None,
        })
    }

    /// The field's value, sign-extended when the format says it is signed.
    pub fn signed(&self, data: &[u8]) -> Option<i64> {
        let v = self.unsigned(data)?;
        if !self.signed {
            // An unsigned field of 8 bytes reads as its two's-complement bits.
            return Some(v.cast_signed());
        }
        // unsigned() checked the range and that the size is 1, 2, 4 or 8.
        let bytes = &data[self.offset..self.offset + self.size];
        Some(match self.size {
            1 => i64::from(i8::from_ne_bytes([bytes[0]])),
            2 => i64::from(i16::from_ne_bytes(bytes.try_into().ok()?)),
            4 => i64::from(i32::from_ne_bytes(bytes.try_into().ok()?)),
            _ => i64::from_ne_bytes(bytes.try_into().ok()?),
        })
    }
}

fn number(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// Parses a field line; `None` for any other line.
fn parse_field(line: &str) -> Option<Field> {
    let mut parts = line.trim().strip_prefix("field:")?.split(';');
    let decl = parts.next()?.trim();
    // "unsigned long args[6]" is named "args".
    let last = decl.rsplit(char::is_whitespace).next()?;
    let name = last.split('[').next()?.to_string();
    let mut value = |key: &str| number(parts.next()?.trim().strip_prefix(key)?);
    let offset = usize::try_from(value("offset:")?).ok()?;
    let size = usize::try_from(value("size:")?).ok()?;
    let signed = value("signed:")? != 0;
    (!name.is_empty()).then_some(Field {
        name,
        offset,
        size,
        signed,
    })
}

fn parse_fields(text: &str) -> Vec<Field> {
    text.lines().filter_map(parse_field).collect()
}

/// Where a page's time stamp, commit word and data lie (`events/header_page`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageLayout {
    timestamp: Field,
    commit: Field,
    data_offset: usize,
    page_size: usize,
}

impl PageLayout {
    pub fn parse(header_page: &str) -> Result<PageLayout, FormatError> {
        let fields = parse_fields(header_page);
        let find = |name: &str| {
            fields
                .iter()
                .find(|f| f.name == name)
                .cloned()
                .ok_or_else(|| FormatError(format!("header_page has no {name} field")))
        };
        let (timestamp, commit, data) = (find("timestamp")?, find("commit")?, find("data")?);
        let page_size = data.offset.saturating_add(data.size);
        let fits = |f: &Field| f.offset + f.size <= data.offset;
        if timestamp.size != 8 || !matches!(commit.size, 4 | 8) {
            return Err(FormatError(format!(
                "header_page: a {}-byte timestamp and a {}-byte commit word (8 and 4 or 8 expected)",
                timestamp.size, commit.size
            )));
        }
        if !fits(&timestamp) || !fits(&commit) || data.size == 0 || page_size > MAX_PAGE {
            return Err(FormatError(format!(
                "header_page: data at {} of {} bytes does not follow the header",
                data.offset, data.size
            )));
        }
        Ok(PageLayout {
            timestamp,
            commit,
            data_offset: data.offset,
            page_size,
        })
    }

    /// The size of one page, header included: the size of a whole read.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Moves a page's start (its header's timestamp, which its events'
    /// deltas count from) by `by` ticks, wrapping: a recorded page replayed
    /// as if later. Events after an absolute time stamp keep their times.
    /// False when the page is too short or the field is not 8 bytes.
    pub fn shift_page(&self, page: &mut [u8], by: u64) -> bool {
        let f = &self.timestamp;
        let Some(at) = page.get_mut(f.offset..f.offset + 8).filter(|_| f.size == 8) else {
            return false;
        };
        let mut ts = [0; 8];
        ts.copy_from_slice(at);
        at.copy_from_slice(&u64::from_le_bytes(ts).wrapping_add(by).to_le_bytes());
        true
    }
}

/// One event's `format` file: its id, its fields and its print format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    pub id: u16,
    pub fields: Vec<Field>,
    /// The `__print_symbolic` tables of the print format.
    pub symbols: Vec<Symbolic>,
}

impl EventFormat {
    pub fn parse(text: &str) -> Result<EventFormat, FormatError> {
        let line_value = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
        };
        let name = line_value("name:")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| FormatError("format: no name".into()))?;
        let id = line_value("ID:")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| FormatError(format!("format of {name}: no ID below 65536")))?;
        let fields = parse_fields(text);
        // Records are told apart by this before their format is known.
        let common_type = fields.iter().find(|f| f.name == "common_type");
        if common_type.is_none_or(|f| (f.offset, f.size) != (0, 2)) {
            return Err(FormatError(format!(
                "format of {name}: common_type is not the first two bytes"
            )));
        }
        Ok(EventFormat {
            name: name.to_string(),
            id,
            fields,
            symbols: line_value("print fmt:").map_or_else(Vec::new, symbolic_tables),
        })
    }

    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// `name`'s value in a record of this event, zero-extended.
    pub fn unsigned(&self, name: &str, data: &[u8]) -> Option<u64> {
        self.field(name)?.unsigned(data)
    }

    /// `name`'s value, sign-extended if the field is signed.
    pub fn signed(&self, name: &str, data: &[u8]) -> Option<i64> {
        self.field(name)?.signed(data)
    }

    /// `name` as the text trace prints it through a `__print_symbolic`
    /// table: the table's name for the value, else the value as `0x<hex>`.
    /// The first table on the field whose guard holds decides; `None` if no
    /// table applies or the field is missing.
    pub fn symbol(&self, name: &str, data: &[u8]) -> Option<Cow<'_, str>> {
        let holds = |g: &Guard| match g {
            Guard::Always => true,
            Guard::Equals(f, v) => self.unsigned(f, data) == Some(*v),
            Guard::Differs(f, v) => self.unsigned(f, data).is_some_and(|x| x != *v),
        };
        let table = self
            .symbols
            .iter()
            .find(|t| t.field == name && holds(&t.guard))?;
        let value = self.unsigned(name, data)? & table.mask;
        Some(match table.names.iter().find(|(v, _)| *v == value) {
            Some((_, n)) => Cow::Borrowed(n),
            None => Cow::Owned(format!("0x{value:x}")),
        })
    }
}

/// When a `__print_symbolic` table applies, from the `(REC->f == v) ? table
/// : other` around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    Always,
    Equals(String, u64),
    Differs(String, u64),
}

/// One `__print_symbolic(REC->field [& mask], { value, "name" }, ...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbolic {
    pub field: String,
    pub mask: u64,
    pub guard: Guard,
    pub names: Vec<(u64, String)>,
}

/// A table value: a sum such as `0x040 + 13`, or `-1` (the kernel compares
/// as unsigned long, so -1 is all ones).
fn symbol_value(text: &str) -> Option<u64> {
    text.split('+').try_fold(0u64, |sum, term| {
        let t = term.trim();
        let v = match t.strip_prefix('-') {
            Some(n) => number(n)?.wrapping_neg(),
            None => number(t)?,
        };
        Some(sum.wrapping_add(v))
    })
}

/// `REC->field` or `REC->field & mask` -> (field, mask).
fn symbolic_subject(text: &str) -> Option<(String, u64)> {
    let rest = text.trim().strip_prefix("REC->")?;
    let (name, mask) = match rest.split_once('&') {
        Some((n, m)) => (n.trim(), number(m)?),
        None => (rest.trim(), u64::MAX),
    };
    let ident = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ident.then(|| (name.to_string(), mask))
}

/// The entries after the subject: `{ v, "name" }, ...)`; the end of the
/// call is returned with them.
fn symbolic_entries(text: &str) -> Option<(Vec<(u64, String)>, usize)> {
    let mut names = Vec::new();
    let mut at = 0;
    loop {
        let rest = &text[at..];
        let skip = rest.len() - rest.trim_start_matches([' ', ',', '\t']).len();
        at += skip;
        match text[at..].chars().next()? {
            ')' => return Some((names, at + 1)),
            '{' => {
                let close = at + text[at..].find('}')?;
                let (value, name) = text[at + 1..close].split_once(',')?;
                let name = name.trim().strip_prefix('"')?.strip_suffix('"')?;
                names.push((symbol_value(value)?, name.to_string()));
                at = close + 1;
            }
            _ => return None,
        }
    }
}

/// The guard of a table from the text before it: `(REC->f == v) ?` makes
/// it apply when f is v; `:` after a guarded table, when it is not.
fn guard_before(before: &str, previous: Option<&Guard>) -> Guard {
    let t = before.trim_end();
    if let Some(cond) = t.strip_suffix('?') {
        let cond = cond.trim_end().trim_end_matches(')');
        let cond = &cond[cond.rfind("REC->").map_or(0, |i| i + 5)..];
        if let Some((f, v)) = cond.split_once("==") {
            if let Some(v) = number(v) {
                return Guard::Equals(f.trim().to_string(), v);
            }
        }
    } else if t.ends_with(':') {
        if let Some(Guard::Equals(f, v)) = previous {
            return Guard::Differs(f.clone(), *v);
        }
    }
    Guard::Always
}

/// Every `__print_symbolic` table of a print format that can be read;
/// others are left out (their values then print as hex).
pub fn symbolic_tables(print_fmt: &str) -> Vec<Symbolic> {
    const CALL: &str = "__print_symbolic(";
    let mut tables: Vec<Symbolic> = Vec::new();
    let mut from = 0;
    while let Some(rel) = print_fmt[from..].find(CALL) {
        let start = from + rel + CALL.len();
        let guard = guard_before(
            &print_fmt[from..from + rel],
            tables.last().map(|t| &t.guard),
        );
        from = start;
        let Some(comma) = print_fmt[start..].find(',') else {
            break;
        };
        let Some((field, mask)) = symbolic_subject(&print_fmt[start..start + comma]) else {
            continue;
        };
        let Some((names, end)) = symbolic_entries(&print_fmt[start + comma..]) else {
            continue;
        };
        from = start + comma + end;
        tables.push(Symbolic {
            field,
            mask,
            guard,
            names,
        });
    }
    tables
}

/// What the kernel noted on a page about events it dropped before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    None,
    /// Some were dropped; the page had no room to say how many.
    Unknown,
    Count(u64),
}

/// A page that cannot be decoded at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageError {
    /// Shorter than the page header.
    Short,
    /// The commit word claims more data than the page holds.
    Commit { size: u64 },
}

/// One page of a CPU's ring buffer: its header, and its data.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// The time of the page's first event, which the deltas start from.
    pub timestamp: u64,
    pub missed: Missed,
    data: &'a [u8],
}

impl<'a> Page<'a> {
    pub fn parse(layout: &PageLayout, bytes: &'a [u8]) -> Result<Page<'a>, PageError> {
        let timestamp = layout.timestamp.unsigned(bytes).ok_or(PageError::Short)?;
        let commit = layout.commit.unsigned(bytes).ok_or(PageError::Short)?;
        let size = commit & COMMIT_SIZE;
        let data = usize::try_from(size)
            .ok()
            .filter(|&s| s <= layout.page_size - layout.data_offset)
            .and_then(|s| bytes.get(layout.data_offset..layout.data_offset + s))
            .ok_or(PageError::Commit { size })?;
        let missed = if commit & MISSED_EVENTS == 0 {
            Missed::None
        } else if commit & MISSED_STORED == 0 {
            Missed::Unknown
        } else {
            // The count is an unsigned long right after the data.
            let count = Field {
                name: String::new(),
                offset: layout.data_offset + data.len(),
                size: layout.commit.size,
                signed: false,
            };
            count.unsigned(bytes).map_or(Missed::Unknown, Missed::Count)
        };
        Ok(Page {
            timestamp,
            missed,
            data,
        })
    }

    /// The page's data records in order; a malformed event ends the page
    /// with one `Err`.
    pub fn records(&self) -> Records<'a> {
        Records {
            data: self.data,
            at: 0,
            ts: self.timestamp,
            done: false,
        }
    }
}

/// One data record: its time and its bytes (the event's fields, from
/// `common_type` on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRecord<'a> {
    pub ts: u64,
    pub data: &'a [u8],
}

impl RawRecord<'_> {
    /// The event id: `common_type`, the first two bytes of every event
    /// ([`EventFormat::parse`] checks each format agrees).
    pub fn id(&self) -> Option<u16> {
        Some(u16::from_ne_bytes(self.data.get(..2)?.try_into().ok()?))
    }
}

/// A page's data is malformed from this offset on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt {
    pub offset: usize,
}

/// The records of a page ([`Page::records`]).
#[derive(Debug, Clone)]
pub struct Records<'a> {
    data: &'a [u8],
    at: usize,
    ts: u64,
    done: bool,
}

fn word(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

/// An absolute stamp's 59 bits, completed from the running time as the
/// kernel does (`rb_fix_abs_ts`).
fn absolute(stamp: u64, running: u64) -> u64 {
    if running & TS_MSB == 0 {
        return stamp;
    }
    let full = stamp | (running & TS_MSB);
    if full < running {
        full.wrapping_add(1 << 59)
    } else {
        full
    }
}

impl<'a> Records<'a> {
    /// Decodes the event at `self.at`: `Ok(Some)` for a data record,
    /// `Ok(None)` for a time or padding event, `Err` if it does not fit.
    fn step(&mut self) -> Result<Option<RawRecord<'a>>, Corrupt> {
        let corrupt = Corrupt { offset: self.at };
        let header = word(self.data, self.at).ok_or(corrupt)?;
        let (type_len, delta) = (header & 31, u64::from(header >> 5));
        let array0 = word(self.data, self.at + 4);
        match type_len {
            0 => {
                // array[0] counts itself and the data after it.
                let len = array0.ok_or(corrupt)? as usize;
                let end = (self.at + 4).checked_add(len).ok_or(corrupt)?;
                let data = self.data.get(self.at + 8..end).ok_or(corrupt)?;
                self.at = end.checked_add(3).ok_or(corrupt)? & !3;
                self.ts = self.ts.wrapping_add(delta);
                Ok(Some(RawRecord { ts: self.ts, data }))
            }
            1..=MAX_DATA_TYPE_LEN => {
                let end = self.at + 4 + 4 * type_len as usize;
                let data = self.data.get(self.at + 4..end).ok_or(corrupt)?;
                self.at = end;
                self.ts = self.ts.wrapping_add(delta);
                Ok(Some(RawRecord { ts: self.ts, data }))
            }
            TYPE_PADDING if delta == 0 => {
                // A null event: nothing more on this page.
                self.at = self.data.len();
                Ok(None)
            }
            TYPE_PADDING => {
                // A discarded event; the kernel's reader skips its delta too.
                let len = array0.ok_or(corrupt)? as usize;
                let end = (self.at + 4).checked_add(len).ok_or(corrupt)?;
                if end > self.data.len() || len < 4 {
                    return Err(corrupt);
                }
                self.at = end.checked_add(3).ok_or(corrupt)? & !3;
                Ok(None)
            }
            TYPE_TIME_EXTEND => {
                let extend = (u64::from(array0.ok_or(corrupt)?) << TS_SHIFT) | delta;
                self.ts = self.ts.wrapping_add(extend);
                self.at += 8;
                Ok(None)
            }
            _ => {
                let stamp = (u64::from(array0.ok_or(corrupt)?) << TS_SHIFT) | delta;
                self.ts = absolute(stamp, self.ts);
                self.at += 8;
                Ok(None)
            }
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RawRecord<'a>, Corrupt>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done && self.at < self.data.len() {
            match self.step() {
                Ok(Some(record)) => return Some(Ok(record)),
                Ok(None) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// Builds pages in the kernel's layout: for tests, benchmarks, fuzz seeds
/// and the reader's start-up self-check. Writes that do not fit are refused
/// (`false`), as the kernel moves on to the next page.
#[derive(Debug, Clone)]
pub struct PageWriter {
    page: Vec<u8>,
    layout: PageLayout,
    at: usize,
}

impl PageWriter {
    pub fn new(layout: &PageLayout, timestamp: u64) -> PageWriter {
        let mut page = vec![0; layout.page_size];
        let ts = layout.timestamp.offset;
        page[ts..ts + 8].copy_from_slice(&timestamp.to_ne_bytes());
        PageWriter {
            page,
            layout: layout.clone(),
            at: layout.data_offset,
        }
    }

    fn put(&mut self, words: &[u32], payload: &[u8]) -> bool {
        let len = 4 * words.len() + payload.len().next_multiple_of(4);
        if self.at + len > self.layout.page_size {
            return false;
        }
        for w in words {
            self.page[self.at..self.at + 4].copy_from_slice(&w.to_ne_bytes());
            self.at += 4;
        }
        self.page[self.at..self.at + payload.len()].copy_from_slice(payload);
        self.at += payload.len().next_multiple_of(4);
        true
    }

    /// A data event as the kernel writes it: its length in the header up
    /// to 112 bytes, in a word of its own beyond. `delta` keeps 27 bits.
    pub fn event(&mut self, delta: u32, payload: &[u8]) -> bool {
        match u32::try_from(payload.len().div_ceil(4)) {
            Ok(words @ 1..=MAX_DATA_TYPE_LEN) => self.put(&[(delta << 5) | words], payload),
            _ => self.long_event(delta, payload),
        }
    }

    /// A data event with its length in a word of its own.
    pub fn long_event(&mut self, delta: u32, payload: &[u8]) -> bool {
        let Ok(len) = u32::try_from(payload.len() + 4) else {
            return false;
        };
        self.put(&[delta << 5, len], payload)
    }

    /// A time extend: the next event's delta does not fit in 27 bits.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "the format keeps 27 + 32 bits of the delta: the rest is cut off as the kernel does"
    )]
    pub fn time_extend(&mut self, delta: u64) -> bool {
        let low = (delta as u32 & ((1 << TS_SHIFT) - 1)) << 5;
        self.put(&[low | TYPE_TIME_EXTEND, (delta >> TS_SHIFT) as u32], &[])
    }

    /// An absolute time stamp (59 bits kept).
    #[allow(
        clippy::cast_possible_truncation,
        reason = "the format keeps 27 + 32 bits of the stamp: the rest is cut off as the kernel does"
    )]
    pub fn time_stamp(&mut self, ts: u64) -> bool {
        let low = (ts as u32 & ((1 << TS_SHIFT) - 1)) << 5;
        self.put(&[low | TYPE_TIME_STAMP, (ts >> TS_SHIFT) as u32], &[])
    }

    /// A discarded event of `len` bytes after its header (a multiple of 4,
    /// at least 4); `delta` must not be 0, which would end the page.
    pub fn padding(&mut self, delta: u32, len: u32) -> bool {
        let pad = vec![0; (len as usize).saturating_sub(4)];
        self.put(&[(delta << 5) | TYPE_PADDING, len], &pad)
    }

    /// Arbitrary words and bytes, for malformed pages.
    pub fn raw(&mut self, bytes: &[u8]) -> bool {
        self.put(&[], bytes)
    }

    /// The page: the commit word set to the data written, with the missed
    /// events flag and, if it fits, their count.
    pub fn finish(mut self, missed: Missed) -> Vec<u8> {
        let size = (self.at - self.layout.data_offset) as u64;
        let count_size = self.layout.commit.size;
        let mut commit = size;
        match missed {
            Missed::None => {}
            Missed::Unknown => commit |= MISSED_EVENTS,
            Missed::Count(n) if self.at + count_size <= self.layout.page_size => {
                self.page[self.at..self.at + count_size].copy_from_slice(&ne_bytes(n, count_size));
                commit |= MISSED_EVENTS | MISSED_STORED;
            }
            Missed::Count(_) => commit |= MISSED_EVENTS,
        }
        let c = self.layout.commit.offset;
        self.page[c..c + count_size].copy_from_slice(&ne_bytes(commit, count_size));
        self.page
    }
}

/// `value` cut to an integer of `size` bytes (1, 2, 4 or 8) in this
/// machine's byte order.
#[allow(
    clippy::cast_possible_truncation,
    reason = "cutting `value` to `size` bytes is the point"
)]
fn ne_bytes(value: u64, size: usize) -> Vec<u8> {
    match size {
        1 => vec![value as u8],
        2 => (value as u16).to_ne_bytes().to_vec(),
        4 => (value as u32).to_ne_bytes().to_vec(),
        _ => value.to_ne_bytes().to_vec(),
    }
}

/// A record of `format` with the given field values (the rest zero), as
/// the kernel would write it: `common_type` is the event's id.
pub fn encode_record(format: &EventFormat, values: &[(&str, u64)]) -> Vec<u8> {
    let len = format
        .fields
        .iter()
        .map(|f| f.offset + f.size)
        .max()
        .unwrap_or(0);
    let mut data = vec![0u8; len];
    let id = u64::from(format.id);
    for (name, value) in std::iter::once(&("common_type", id)).chain(values) {
        if let Some(f) = format
            .field(name)
            .filter(|f| matches!(f.size, 1 | 2 | 4 | 8))
        {
            data[f.offset..f.offset + f.size].copy_from_slice(&ne_bytes(*value, f.size));
        }
    }
    data
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    reason = "test data: field bit patterns, small sizes and seeds cut to bytes on purpose"
)]
mod tests {
    use super::*;

    /// This machine's `events/header_page` (Linux 6.18, x86-64).
    const HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;
";

    /// kvm_exit's format with the tables cut short.
    const KVM_EXIT: &str = r#"name: kvm_exit
ID: 103
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:unsigned int exit_reason;	offset:8;	size:4;	signed:0;
	field:unsigned long guest_rip;	offset:16;	size:8;	signed:0;
	field:u32 isa;	offset:24;	size:4;	signed:0;
	field:unsigned int vcpu_id;	offset:56;	size:4;	signed:0;
	field:unsigned long args[6];	offset:64;	size:48;	signed:0;

print fmt: "vcpu %u reason %s%s%s rip 0x%lx", REC->vcpu_id, (REC->isa == 1) ? __print_symbolic(REC->exit_reason & 0xffff, { 0, "EXCEPTION_NMI" }, { 1, "EXTERNAL_INTERRUPT" }, { 30, "IO_INSTRUCTION" }) : __print_symbolic(REC->exit_reason, { 0x040 + 13, "GP excp" }, { 0x07b, "io" }, { 0x400, "npf" }, { 0x8000fffd, "vmgexit_hypervisor_feature" }, { -1, "invalid_guest_state" }), (REC->isa == 1 && REC->exit_reason & ~0xffff) ? " " : "", (REC->isa == 1) ? __print_flags(REC->exit_reason & ~0xffff, " ", { 0x80000000, "FAILED_VMENTRY" }) : "", REC->guest_rip
"#;

    #[test]
    fn fields_read_each_width_in_native_order_and_sign_extend_only_signed_ones() {
        let data: Vec<u8> = (0xf1..=0xf9).collect();
        let field = |offset, size, signed| Field {
            name: "f".into(),
            offset,
            size,
            signed,
        };
        let expect = |size: usize| {
            let mut b = [0u8; 8];
            b[..size].copy_from_slice(&data[1..1 + size]);
            u64::from_ne_bytes(if cfg!(target_endian = "little") {
                b
            } else {
                let mut r = [0u8; 8];
                r[8 - size..].copy_from_slice(&data[1..1 + size]);
                r
            })
        };
        for size in [1, 2, 4, 8] {
            let unsigned = expect(size);
            assert_eq!(
                field(1, size, false).unsigned(&data),
                Some(unsigned),
                "{size}"
            );
            assert_eq!(field(1, size, false).signed(&data), Some(unsigned as i64));
            // Every byte here has its top bit set: negative when signed.
            let bits = 8 * size as u32;
            let negative = (unsigned as i64).wrapping_sub(if bits < 64 { 1i64 << bits } else { 0 });
            assert!(negative < 0, "{size}");
            assert_eq!(field(1, size, true).signed(&data), Some(negative), "{size}");
            // One byte short: nothing.
            assert_eq!(
                field(data.len() - size + 1, size, false).unsigned(&data),
                None
            );
        }
        // A small positive signed value stays positive.
        assert_eq!(field(0, 2, true).signed(&[5, 0]), Some(5));
        for size in [0, 3, 16] {
            assert_eq!(field(0, size, false).unsigned(&data), None);
        }
        assert_eq!(field(usize::MAX, 2, false).unsigned(&data), None);
        assert_eq!(FormatError("no id".into()).to_string(), "no id");
    }

    fn layout() -> PageLayout {
        PageLayout::parse(HEADER_PAGE).unwrap()
    }

    fn records(page: &[u8]) -> Vec<Result<(u64, Vec<u8>), Corrupt>> {
        Page::parse(&layout(), page)
            .unwrap()
            .records()
            .map(|r| r.map(|r| (r.ts, r.data.to_vec())))
            .collect()
    }

    /// A padding event may end exactly at the data's end and be 4 bytes
    /// long; shorter, or running past the data, the page is corrupt from it.
    #[test]
    fn padding_lengths_are_checked_at_both_edges() {
        let word = |w: u32| w.to_ne_bytes();
        let pad = |len: u32| [word((1 << 5) | TYPE_PADDING), word(len)].concat();
        // Exactly to the end: 8 bytes of event, then nothing.
        let mut w = PageWriter::new(&layout(), 0);
        assert!(w.event(1, &[1; 4]));
        assert!(w.raw(&pad(4)));
        let r = records(&w.finish(Missed::None));
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].is_ok());
        // Too short, with data after it; and running past the data.
        for (len, after) in [(3, true), (12, false)] {
            let mut w = PageWriter::new(&layout(), 0);
            assert!(w.raw(&pad(len)));
            if after {
                assert!(w.event(1, &[1; 8]));
            }
            let r = records(&w.finish(Missed::None));
            assert_eq!(r, [Err(Corrupt { offset: 0 })], "{len}");
        }
    }

    /// The writer fills a page exactly and refuses a byte more, and
    /// reports what did not fit.
    #[test]
    fn the_writer_fills_a_page_exactly_and_no_further() {
        let l = layout();
        let mut w = PageWriter::new(&l, 0);
        assert!(!w.long_event(1, &vec![0; 4073]), "8 + 4076 > 4080");
        assert!(!w.padding(1, 8192));
        assert!(w.long_event(1, &vec![0; 4072]), "8 + 4072 = 4080");
        assert!(!w.event(1, &[1; 4]));
        let page = w.finish(Missed::Count(3));
        // No room for the count: only the flag.
        assert_eq!(Page::parse(&l, &page).unwrap().missed, Missed::Unknown);
        // A count that fits, far into the page.
        let mut w = PageWriter::new(&l, 0);
        assert!(w.long_event(1, &vec![0; 992]));
        let page = w.finish(Missed::Count(7));
        assert_eq!(Page::parse(&l, &page).unwrap().missed, Missed::Count(7));
        // Exactly full through a one-word header: 3968 + 4 + 108 = 4080.
        let mut w = PageWriter::new(&l, 0);
        assert!(w.long_event(1, &vec![0; 3960]));
        assert!(w.event(1, &[0; 108]));
        assert!(!w.event(1, &[0; 4]));
    }

    #[test]
    fn records_encode_one_byte_fields() {
        let f = EventFormat::parse(KVM_EXIT).unwrap();
        let data = encode_record(&f, &[("common_flags", 0xab), ("exit_reason", 30)]);
        assert_eq!(f.unsigned("common_flags", &data), Some(0xab));
        assert_eq!(f.unsigned("exit_reason", &data), Some(30));
        // As long as the last field's end (args: offset 64, 48 bytes).
        assert_eq!(data.len(), 112);
    }

    /// A buffer longer than the page: the commit size may still not run
    /// past the page's own end.
    #[test]
    fn a_commit_past_the_page_is_refused_even_in_a_longer_buffer() {
        let l = layout();
        let mut bytes = vec![0u8; 2 * l.page_size()];
        let commit = |bytes: &mut Vec<u8>, size: u64| {
            bytes[8..16].copy_from_slice(&size.to_ne_bytes());
        };
        commit(&mut bytes, 4080);
        assert_eq!(Page::parse(&l, &bytes).map(|p| p.data.len()), Ok(4080));
        commit(&mut bytes, 4081);
        assert_eq!(
            Page::parse(&l, &bytes).map(|p| p.data.len()),
            Err(PageError::Commit { size: 4081 })
        );
    }

    /// The kernel keeps up to 28 words' length in the event header and
    /// writes a length word only beyond: 112 bytes take 4 + 112, 116 take
    /// 4 + 4 + 116.
    #[test]
    fn the_writer_puts_lengths_up_to_112_bytes_in_the_header() {
        let l = layout();
        for (payload, size) in [(112, 116), (116, 124)] {
            let mut w = PageWriter::new(&l, 0);
            assert!(w.event(1, &vec![7; payload]));
            let page = w.finish(Missed::None);
            let p = Page::parse(&l, &page).unwrap();
            assert_eq!(p.data.len(), size, "{payload}");
            let r: Vec<_> = p.records().collect();
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].map(|r| r.data.len()), Ok(payload));
        }
    }

    #[test]
    fn a_records_id_is_its_first_two_bytes() {
        let r = |data| RawRecord { ts: 0, data };
        assert_eq!(
            r(&[0x34, 0x12, 9, 9]).id(),
            Some(u16::from_ne_bytes([0x34, 0x12]))
        );
        assert_eq!(
            r(&[0xfe, 0xff]).id(),
            Some(u16::from_ne_bytes([0xfe, 0xff]))
        );
        assert_eq!(r(&[7]).id(), None);
    }

    /// A running time within the first 2^59 ticks takes an absolute stamp
    /// as it is, whether before or after it; past that, the stamp takes the
    /// running time's top bits, and moves on a period when it would go back.
    #[test]
    fn absolute_stamps_take_the_running_times_top_bits() {
        assert_eq!(absolute(100, 200), 100);
        assert_eq!(absolute(300, 200), 300);
        let high = 3u64 << 59;
        assert_eq!(absolute(100, high + 50), high + 100);
        assert_eq!(absolute(10, high + 50), high + 10 + (1 << 59));
        // Equal to the running time is not behind it.
        assert_eq!(absolute(50, high + 50), high + 50);
    }

    #[test]
    fn header_page_gives_the_layout() {
        let l = layout();
        assert_eq!((l.page_size(), l.commit.size, l.data_offset), (4096, 8, 16));
        let bits32 = HEADER_PAGE
            .replace("size:8;\tsigned:1", "size:4;\tsigned:1")
            .replace("offset:16;\tsize:4080", "offset:12;\tsize:4084");
        let l32 = PageLayout::parse(&bits32).unwrap();
        assert_eq!((l32.page_size(), l32.commit.size), (4096, 4));
        let mut w = PageWriter::new(&l32, 7);
        assert!(w.event(3, &[1, 2, 3, 4]));
        let page = w.finish(Missed::Count(9));
        let p = Page::parse(&l32, &page).unwrap();
        assert_eq!(p.missed, Missed::Count(9));
        let r: Vec<_> = p.records().collect();
        assert_eq!(
            r,
            [Ok(RawRecord {
                ts: 10,
                data: &[1, 2, 3, 4]
            })]
        );
        for bad in [
            "",
            &HEADER_PAGE.replace("commit", "c"),
            &HEADER_PAGE.replace("size:8;\tsigned:1", "size:2;\tsigned:1"),
            &HEADER_PAGE.replace("offset:16", "offset:4"),
            &HEADER_PAGE.replace("size:4080", "size:99999999"),
        ] {
            assert!(PageLayout::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// Each of the layout's conditions refuses a header on its own, and a
    /// page of exactly the largest size is still one.
    #[test]
    fn each_layout_condition_refuses_alone() {
        let refused = |text: &str| PageLayout::parse(text).unwrap_err().to_string();
        // The commit word reaching into the data (the timestamp fits).
        let commit_over = HEADER_PAGE.replace(
            "offset:8;\tsize:8;\tsigned:1",
            "offset:12;\tsize:8;\tsigned:1",
        );
        // The timestamp reaching into the data (the commit word fits).
        let stamp_over = HEADER_PAGE.replace("offset:0;\tsize:8", "offset:10;\tsize:8");
        // No data bytes.
        let empty = HEADER_PAGE.replace("size:4080", "size:0");
        for bad in [commit_over, stamp_over, empty] {
            assert_ne!(bad, HEADER_PAGE, "fixture");
            assert!(
                refused(&bad).contains("does not follow the header"),
                "{bad:?}"
            );
        }
        let largest = HEADER_PAGE.replace("size:4080", &format!("size:{}", MAX_PAGE - 16));
        assert_eq!(PageLayout::parse(&largest).unwrap().page_size(), MAX_PAGE);
        let over = HEADER_PAGE.replace("size:4080", &format!("size:{}", MAX_PAGE - 15));
        assert!(PageLayout::parse(&over).is_err());
    }

    #[test]
    fn format_gives_id_fields_and_tables() {
        let f = EventFormat::parse(KVM_EXIT).unwrap();
        assert_eq!((f.name.as_str(), f.id), ("kvm_exit", 103));
        let pid = f.field("common_pid").unwrap();
        assert_eq!((pid.offset, pid.size, pid.signed), (4, 4, true));
        assert_eq!(f.field("args").map(|a| a.size), Some(48));
        assert_eq!(f.symbols.len(), 2, "__print_flags is not a table");
        assert_eq!(f.symbols[0].guard, Guard::Equals("isa".into(), 1));
        assert_eq!(f.symbols[1].guard, Guard::Differs("isa".into(), 1));
        assert_eq!(f.symbols[0].mask, 0xffff);
        assert_eq!(f.symbols[1].names[0], (0x4d, "GP excp".into()));
        assert_eq!(f.symbols[1].names[4].0, u64::MAX);
        for bad in ["", "name: x\nID: 70000\n", "name: x\nID: 1\n"] {
            assert!(EventFormat::parse(bad).is_err(), "{bad:?}");
        }
        assert!(EventFormat::parse(&KVM_EXIT.replace("offset:0;", "offset:2;")).is_err());
        // common_pid is signed: -5 reads back as -5, and unsigned as its bits.
        let mut record = vec![0u8; 112];
        record[4..8].copy_from_slice(&(-5i32).to_ne_bytes());
        assert_eq!(f.signed("common_pid", &record), Some(-5));
        assert_eq!(
            f.unsigned("common_pid", &record),
            Some(u64::from((-5i32) as u32))
        );
        assert_eq!(f.signed("no_such_field", &record), None);
        assert_eq!(f.signed("common_pid", &record[..6]), None);
    }

    #[test]
    fn symbols_follow_the_guard_mask_and_hex_fallback() {
        let f = EventFormat::parse(KVM_EXIT).unwrap();
        let name = |isa: u64, reason: u64| {
            let data = encode_record(&f, &[("isa", isa), ("exit_reason", reason)]);
            f.symbol("exit_reason", &data).unwrap().into_owned()
        };
        assert_eq!(name(1, 30), "IO_INSTRUCTION");
        assert_eq!(name(1, 0x8000_0001), "EXTERNAL_INTERRUPT");
        assert_eq!(name(1, 99), "0x63");
        assert_eq!(name(2, 0x7b), "io");
        assert_eq!(name(2, 0x4d), "GP excp");
        assert_eq!(name(2, 0x8000_fffd), "vmgexit_hypervisor_feature");
        // -1 is all 64 bits in the kernel's table, the field only 32.
        assert_eq!(name(2, 0xffff_ffff), "0xffffffff");
        let data = encode_record(&f, &[("exit_reason", 1)]);
        assert_eq!(f.symbol("vcpu_id", &data), None);
        assert_eq!(f.symbol("nonesuch", &data), None);
        assert!(symbolic_tables("__print_symbolic(REC->x, { 1, \"a\" }").is_empty());
        assert!(symbolic_tables("__print_symbolic(x(), { 1, \"a\" })").is_empty());
        // The subject is REC-> and one identifier: neither none nor two.
        assert!(symbolic_tables("__print_symbolic(REC->, { 1, \"a\" })").is_empty());
        assert!(symbolic_tables("__print_symbolic(REC->a->b, { 1, \"a\" })").is_empty());
        assert_eq!(
            symbolic_tables("__print_symbolic(REC->a_1, { 1, \"a\" })").len(),
            1
        );
        // Where the call ends: just past its ')'.
        let text = ", { 1, \"a\" }, { 2, \"b\" }) tail";
        let (names, end) = symbolic_entries(text).unwrap();
        assert_eq!(names.len(), 2);
        assert_eq!(&text[end..], " tail");
        // A table without entries and a long subject: read once, and the
        // search goes on after it.
        let empty = symbolic_tables(
            "__print_symbolic(REC->a_long_field_name_here, ) __print_symbolic(REC->b, { 1, \"x\" })",
        );
        assert_eq!(empty.len(), 2);
        assert!(empty[0].names.is_empty() && empty[1].field == "b");
        assert_eq!(
            symbolic_tables("__print_symbolic(REC->x, { 1 + 2, \"a\" })")[0].names[0].0,
            3
        );
    }

    #[test]
    fn events_of_every_length_form_and_their_times() {
        let mut w = PageWriter::new(&layout(), 1000);
        let short = [7u8; 4];
        let longest_compact = [8u8; 112];
        let long = [9u8; 200];
        assert!(w.event(0, &short)); // type_len 1
        assert!(w.event(5, &longest_compact)); // type_len 28
        assert!(w.event(5, &long)); // type_len 0: beyond 112 bytes
        assert!(w.long_event(1, &short)); // type_len 0 for a small one
        assert!(w.event(1, &[1, 2, 3])); // padded to a word
        let page = w.finish(Missed::None);
        let r = records(&page);
        let times: Vec<u64> = r.iter().map(|r| r.as_ref().unwrap().0).collect();
        assert_eq!(times, [1000, 1005, 1010, 1011, 1012]);
        assert_eq!(r[1].as_ref().unwrap().1, longest_compact);
        assert_eq!(r[2].as_ref().unwrap().1, long);
        assert_eq!(r[3].as_ref().unwrap().1, short);
        assert_eq!(r[4].as_ref().unwrap().1, [1, 2, 3, 0]);
    }

    #[test]
    fn time_extends_stamps_and_padding() {
        let mut w = PageWriter::new(&layout(), 100);
        assert!(w.event(10, &[1; 4])); // 110
        assert!(w.time_extend(5 << 27 | 3)); // +5*2^27+3
        assert!(w.event(0, &[2; 4]));
        assert!(w.padding(77, 12)); // discarded: its delta does not count
        assert!(w.event(2, &[3; 4]));
        assert!(w.time_stamp(0x0123_4567_89ab));
        assert!(w.event(1, &[4; 4]));
        assert!(w.raw(&TYPE_PADDING.to_ne_bytes())); // null event: page ends
        assert!(w.event(1, &[5; 4]));
        let page = w.finish(Missed::None);
        let times: Vec<u64> = records(&page).into_iter().map(|r| r.unwrap().0).collect();
        let extended = 110 + (5 << 27) + 3;
        assert_eq!(times, [110, extended, extended + 2, 0x0123_4567_89ab + 1]);
        // An absolute stamp takes its top five bits from the running time.
        let mut w = PageWriter::new(&layout(), 0xf800_0000_0000_0100);
        assert!(w.time_stamp(0x200));
        assert!(w.event(0, &[1; 4]));
        assert!(w.time_stamp(0x100));
        assert!(w.event(0, &[1; 4]));
        let times: Vec<u64> = records(&w.finish(Missed::None))
            .into_iter()
            .map(|r| r.unwrap().0)
            .collect();
        assert_eq!(times, [0xf800_0000_0000_0200, 0x100]);
    }

    /// A shifted page's events move with its start, but for those after
    /// an absolute stamp; its missed-events flag and data stay.
    #[test]
    fn a_shifted_page_starts_later_by_the_shift() {
        let l = layout();
        let mut w = PageWriter::new(&l, 1000);
        assert!(w.event(10, &[1; 4]) && w.event(5, &[2; 4]));
        assert!(w.time_stamp(50_000) && w.event(0, &[3; 4]));
        let mut page = w.finish(Missed::Count(3));
        let before = page.clone();
        assert!(l.shift_page(&mut page, 7 << 40));
        let times: Vec<u64> = records(&page).into_iter().map(|r| r.unwrap().0).collect();
        assert_eq!(times, [(7 << 40) + 1010, (7 << 40) + 1015, 50_000]);
        let p = Page::parse(&l, &page).unwrap();
        assert_eq!(
            (p.timestamp, p.missed),
            ((7 << 40) + 1000, Missed::Count(3))
        );
        assert_eq!(page[8..], before[8..], "only the start moved");
        assert!(l.shift_page(&mut page, 0u64.wrapping_sub(7 << 40)));
        assert_eq!(page, before, "a shift back restores it");
        assert!(!l.shift_page(&mut page[..7], 1), "too short");
    }

    #[test]
    fn missed_events_with_and_without_their_count() {
        let l = layout();
        let page = |missed| {
            let mut w = PageWriter::new(&l, 5);
            assert!(w.event(0, &[1; 8]));
            w.finish(missed)
        };
        for missed in [Missed::None, Missed::Unknown, Missed::Count(12345)] {
            let bytes = page(missed);
            let p = Page::parse(&l, &bytes).unwrap();
            assert_eq!(p.missed, missed);
            assert_eq!(p.records().count(), 1, "the count is not a record");
        }
        // A full page has no room for the count.
        let mut w = PageWriter::new(&l, 5);
        while w.event(0, &[1; 112]) {}
        while w.event(0, &[1; 4]) {}
        let bytes = w.finish(Missed::Count(3));
        assert_eq!(Page::parse(&l, &bytes).unwrap().missed, Missed::Unknown);
        // The kernel adds the flags to a signed long: the bits above them
        // are set too.
        let mut bytes = page(Missed::None);
        let commit = 8u64.wrapping_add(MISSED_EVENTS.wrapping_neg());
        bytes[8..16].copy_from_slice(&commit.to_ne_bytes());
        let p = Page::parse(&l, &bytes).unwrap();
        assert_eq!((p.missed, p.records().count()), (Missed::Unknown, 1));
    }

    #[test]
    fn truncated_and_garbage_pages_end_in_errors_not_panics() {
        let l = layout();
        let mut w = PageWriter::new(&l, 5);
        assert!(w.event(1, &[1; 40]));
        assert!(w.long_event(1, &[2; 300]));
        assert!(w.time_extend(1 << 40));
        assert!(w.event(1, &[3; 8]));
        let page = w.finish(Missed::Count(2));
        for cut in 0..page.len() {
            match Page::parse(&l, &page[..cut]) {
                Err(PageError::Short) => assert!(cut < 16),
                Err(PageError::Commit { size }) => assert!(cut < 16 + size as usize),
                // Cut within the stored count only: the data is whole.
                Ok(p) => {
                    assert!(cut >= 16 + p.data.len(), "cut at {cut}");
                    let count = if cut >= 16 + p.data.len() + 8 {
                        Missed::Count(2)
                    } else {
                        Missed::Unknown
                    };
                    assert_eq!((p.missed, p.records().count()), (count, 3));
                }
            }
        }
        // A commit beyond the page.
        let mut big = page.clone();
        big[8..16].copy_from_slice(&5000u64.to_ne_bytes());
        assert_eq!(
            Page::parse(&l, &big).err(),
            Some(PageError::Commit { size: 5000 })
        );
        // An event longer than the data: one error, then nothing.
        let mut w = PageWriter::new(&l, 5);
        assert!(w.event(1, &[1; 4]));
        assert!(w.raw(&[0, 0, 0, 0, 0xff, 0xff, 0, 0]));
        let r = records(&w.finish(Missed::None));
        assert_eq!(r.len(), 2);
        assert_eq!(r[1], Err(Corrupt { offset: 8 }));
        // Garbage of every kind.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut bytes = vec![0u8; 4096];
            for b in bytes.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            let commit = seed % 4200;
            bytes[8..16].copy_from_slice(&commit.to_ne_bytes());
            if let Ok(p) = Page::parse(&l, &bytes) {
                assert!(p.records().filter(Result::is_err).count() <= 1);
            }
        }
    }
}
