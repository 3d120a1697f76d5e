//! The workload's trace records, from the binary pages of its tracefs
//! instance, and the tasks it follows.
//!
//! Two stages, because the pages of different CPUs arrive out of time
//! order: [`Decoder`] turns one CPU's page into [`Raw`] events as the
//! kernel wrote them (fed to the per-CPU merge); [`Follow`] takes them in
//! time order, keeps the set of the workload's tasks (the command, and
//! every task a followed task forks) and gives the interval builder its
//! records: a `sched_switch` concerns two tasks and becomes a switch out
//! and a switch in of whichever of them is followed.
//!
//! The pages come from the kernel, but a corrupt or hostile page (a fuzz
//! target feeds them) must cost a counted loss, never a panic.

use std::collections::{BTreeMap, HashMap, HashSet};
use xvmm_host::tracefs_raw::{EventFormat, Field, Missed, Page, PageLayout};
use xvmm_results::stats::workload::{Event, Record, RESET_NR};

/// The events the workload tracer enables (group, event), the vectors'
/// entries and exits aside ([`is_vector_event`]).
pub const EVENTS: [(&str, &str); 5] = [
    ("raw_syscalls", "sys_enter"),
    ("raw_syscalls", "sys_exit"),
    ("exceptions", "page_fault_user"),
    ("sched", "sched_switch"),
    ("sched", "sched_process_fork"),
];

/// The return probe's event name (in the trace session's group): a user
/// fault's end.
pub const FAULT_DONE: &str = "workload_fault_done";

/// Whether `irq_vectors` event `name` opens or closes an interrupt
/// (`local_timer_entry`, ...; not the vector allocator's events).
pub fn is_vector_event(name: &str) -> bool {
    name.ends_with("_entry") || name.ends_with("_exit")
}

/// One event as the kernel recorded it, before the tasks are sorted out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raw {
    SysEnter {
        nr: u32,
    },
    SysExit {
        nr: u32,
    },
    FaultUser {
        error_code: u64,
    },
    FaultDone,
    IrqEntry {
        vector: u8,
    },
    IrqExit {
        vector: u8,
    },
    Switch {
        prev: i32,
        next: i32,
    },
    Fork {
        child: i32,
    },
    /// The CPU's ring buffer dropped events before this point.
    Lost,
}

/// A raw event with its time, CPU and the task it ran in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamped {
    pub ts: u64,
    pub cpu: u32,
    pub pid: i32,
    pub raw: Raw,
}

/// What a format's records decode to, and the fields that takes.
#[derive(Clone, Debug)]
enum Shape {
    Sys { enter: bool, id: Field },
    Fault { error_code: Field },
    FaultDone,
    Irq { entry: bool, vector: Field },
    Switch { prev: Field, next: Field },
    Fork { child: Field },
}

#[derive(Clone, Debug)]
struct Known {
    shape: Shape,
    pid: Field,
    /// Of an interrupt's entry: the tracepoint's name less `_entry`.
    irq_name: Option<String>,
}

/// The shape of a format, by its name (and group, for the probe).
fn shape_of(f: &EventFormat) -> Option<Shape> {
    let field = |n: &str| f.field(n).cloned();
    Some(match f.name.as_str() {
        "sys_enter" => Shape::Sys {
            enter: true,
            id: field("id")?,
        },
        "sys_exit" => Shape::Sys {
            enter: false,
            id: field("id")?,
        },
        "page_fault_user" => Shape::Fault {
            error_code: field("error_code")?,
        },
        "sched_switch" => Shape::Switch {
            prev: field("prev_pid")?,
            next: field("next_pid")?,
        },
        "sched_process_fork" => Shape::Fork {
            child: field("child_pid")?,
        },
        FAULT_DONE => Shape::FaultDone,
        name if name.ends_with("_entry") => Shape::Irq {
            entry: true,
            vector: field("vector")?,
        },
        name if name.ends_with("_exit") => Shape::Irq {
            entry: false,
            vector: field("vector")?,
        },
        _ => return None,
    })
}

/// How one page decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCount {
    /// Records of known events.
    pub events: u64,
    /// Events the kernel said it dropped before the page (0 when it could
    /// not say how many).
    pub lost: u64,
    /// The page, or its tail, did not decode (a loss was marked).
    pub corrupt: bool,
}

/// Decodes the workload instance's pages.
#[derive(Clone, Debug)]
pub struct Decoder {
    layout: PageLayout,
    by_id: HashMap<u16, Known>,
    /// Each interrupt vector's name, from the first entry that named it.
    vectors: BTreeMap<u8, String>,
}

impl Decoder {
    /// From `events/header_page` and the enabled events' `format` texts;
    /// refused when a format lacks a field its records need, or none is an
    /// event this decoder knows.
    pub fn new(header_page: &str, formats: &[&str]) -> Result<Decoder, String> {
        let layout = PageLayout::parse(header_page).map_err(|e| e.to_string())?;
        let mut by_id = HashMap::new();
        for text in formats {
            let f = EventFormat::parse(text).map_err(|e| e.to_string())?;
            let shape = shape_of(&f).ok_or_else(|| {
                format!(
                    "{}: not an event of the workload, or a field missing",
                    f.name
                )
            })?;
            let pid = f
                .field("common_pid")
                .cloned()
                .ok_or_else(|| format!("{}: no common_pid", f.name))?;
            let irq_name = f.name.strip_suffix("_entry").map(str::to_string);
            by_id.insert(
                f.id,
                Known {
                    shape,
                    pid,
                    irq_name,
                },
            );
        }
        if by_id.is_empty() {
            return Err("no event formats".into());
        }
        Ok(Decoder {
            layout,
            by_id,
            vectors: BTreeMap::new(),
        })
    }

    pub fn page_size(&self) -> usize {
        self.layout.page_size()
    }

    /// The name of an interrupt vector seen so far (`vector_0xNN` if none).
    pub fn vector_name(&self, vector: u8) -> String {
        self.vectors
            .get(&vector)
            .cloned()
            .unwrap_or_else(|| format!("vector_0x{vector:02x}"))
    }

    /// Decodes one page of `cpu` into `out`, a [`Raw::Lost`] first when the
    /// kernel dropped events before it, and one where it stops decoding.
    pub fn decode_page(
        &mut self,
        cpu: u32,
        bytes: &[u8],
        mut out: impl FnMut(Stamped),
    ) -> PageCount {
        let mut count = PageCount::default();
        let lost = |ts| Stamped {
            ts,
            cpu,
            pid: 0,
            raw: Raw::Lost,
        };
        let Ok(page) = Page::parse(&self.layout, bytes) else {
            count.corrupt = true;
            out(lost(0));
            return count;
        };
        match page.missed {
            Missed::None => {}
            Missed::Unknown => out(lost(page.timestamp)),
            Missed::Count(n) => {
                count.lost = n;
                out(lost(page.timestamp));
            }
        }
        let mut last = page.timestamp;
        for record in page.records() {
            let Ok(record) = record else {
                count.corrupt = true;
                out(lost(last));
                break;
            };
            last = record.ts;
            let Some(known) = record.id().and_then(|id| self.by_id.get(&id)) else {
                continue;
            };
            let Some((pid, raw)) = decode(known, record.data) else {
                continue;
            };
            if let (Raw::IrqEntry { vector }, Some(name)) = (raw, &known.irq_name) {
                self.vectors.entry(vector).or_insert_with(|| name.clone());
            }
            count.events += 1;
            out(Stamped {
                ts: record.ts,
                cpu,
                pid,
                raw,
            });
        }
        count
    }
}

/// One record's event; `None` when a field does not fit its record.
fn decode(known: &Known, data: &[u8]) -> Option<(i32, Raw)> {
    let pid = i32::try_from(known.pid.signed(data)?).ok()?;
    let pid_of = |f: &Field| i32::try_from(f.signed(data)?).ok();
    let raw = match &known.shape {
        Shape::Sys { enter, id } => {
            let id = id.signed(data)?;
            match (*enter, u32::try_from(id)) {
                (true, Ok(nr)) => Raw::SysEnter { nr },
                (false, Ok(nr)) if nr != RESET_NR => Raw::SysExit { nr },
                // rt_sigreturn's exit says -1: it closes the open call.
                (false, _) if id == -1 => Raw::SysExit { nr: RESET_NR },
                // Another negative or a huge number is no system call
                // (x32's bit 30 fits; the table names what it knows).
                _ => return None,
            }
        }
        Shape::Fault { error_code } => Raw::FaultUser {
            error_code: error_code.unsigned(data)?,
        },
        Shape::FaultDone => Raw::FaultDone,
        Shape::Irq { entry, vector } => {
            let vector = u8::try_from(vector.signed(data)?).ok()?;
            if *entry {
                Raw::IrqEntry { vector }
            } else {
                Raw::IrqExit { vector }
            }
        }
        Shape::Switch { prev, next } => Raw::Switch {
            prev: pid_of(prev)?,
            next: pid_of(next)?,
        },
        Shape::Fork { child } => Raw::Fork {
            child: pid_of(child)?,
        },
    };
    Some((pid, raw))
}

/// The workload's tasks, and its records in time order.
#[derive(Clone, Debug, Default)]
pub struct Follow {
    tasks: HashSet<i32>,
}

impl Follow {
    /// Following `root` (the command) and what it forks.
    pub fn new(root: i32) -> Follow {
        Follow {
            tasks: HashSet::from([root]),
        }
    }

    /// The tasks followed so far.
    pub fn tasks(&self) -> usize {
        self.tasks.len()
    }

    /// The tasks followed so far, by pid.
    pub fn pids(&self) -> Vec<i32> {
        self.tasks.iter().copied().collect()
    }

    /// Whether `pid` is one of the workload's tasks.
    pub fn follows(&self, pid: i32) -> bool {
        self.tasks.contains(&pid)
    }

    /// The builder's records for one event, in time order with the rest.
    pub fn push(&mut self, s: &Stamped, mut out: impl FnMut(Record)) {
        let record = |pid, event| Record {
            ts: s.ts,
            cpu: s.cpu,
            pid,
            event,
        };
        let event = match s.raw {
            Raw::Lost => return out(record(0, Event::Lost)),
            Raw::Fork { child } => {
                if self.follows(s.pid) {
                    self.tasks.insert(child);
                }
                return;
            }
            Raw::Switch { prev, next } => {
                if self.follows(prev) {
                    out(record(prev, Event::SwitchOut));
                }
                if self.follows(next) {
                    out(record(next, Event::SwitchIn));
                }
                return;
            }
            Raw::SysEnter { nr } => Event::SysEnter { nr },
            Raw::SysExit { nr } => Event::SysExit { nr },
            Raw::FaultUser { error_code } => Event::FaultUser { error_code },
            Raw::FaultDone => Event::FaultDone,
            Raw::IrqEntry { vector } => Event::IrqEntry { vector },
            Raw::IrqExit { vector } => Event::IrqExit { vector },
        };
        // The instance's pid filter passes only followed tasks' events;
        // one that is not (a task that was followed before its pid was
        // reused) is left out.
        if self.follows(s.pid) {
            out(record(s.pid, event));
        }
    }
}

const COMMON: &str = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
";
/// Linux 6.12's x86-64 `events/header_page`.
pub const EXAMPLE_HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;
";

/// Linux 6.12's x86-64 formats of the workload's events (fields as the
/// kernel lays them out), the return probe's, and one vector pair: for
/// tests, the bench and the fuzz target.
pub fn example_formats() -> Vec<String> {
    let f = |name: &str, id: u16, fields: &str| {
        format!("name: {name}\nID: {id}\nformat:\n{COMMON}{fields}\nprint fmt: \"\"\n")
    };
    vec![
        f("sys_enter", 21, "\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n"),
        f("sys_exit", 20, "\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n"),
        f("page_fault_user", 120, "\tfield:unsigned long address;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:unsigned long ip;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:unsigned long error_code;\toffset:24;\tsize:8;\tsigned:0;\n"),
        f("sched_switch", 300, "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n"),
        f("sched_process_fork", 301, "\tfield:char parent_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:char child_comm[16];\toffset:28;\tsize:16;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:44;\tsize:4;\tsigned:1;\n"),
        f(FAULT_DONE, 2000, "\tfield:unsigned long __probe_func;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:unsigned long __probe_ret_ip;\toffset:16;\tsize:8;\tsigned:0;\n"),
        f("local_timer_entry", 400, "\tfield:int vector;\toffset:8;\tsize:4;\tsigned:1;\n"),
        f("local_timer_exit", 401, "\tfield:int vector;\toffset:8;\tsize:4;\tsigned:1;\n"),
    ]
}

/// A decoder of [`EXAMPLE_HEADER_PAGE`] and [`example_formats`].
pub fn example_decoder() -> Decoder {
    let f = example_formats();
    let texts: Vec<&str> = f.iter().map(String::as_str).collect();
    Decoder::new(EXAMPLE_HEADER_PAGE, &texts).expect("the example formats decode")
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_host::tracefs_raw::{encode_record, PageWriter};

    fn decoder() -> Decoder {
        example_decoder()
    }

    fn format(name: &str) -> EventFormat {
        let f = example_formats();
        let text = f
            .iter()
            .find(|t| t.starts_with(&format!("name: {name}\n")))
            .unwrap();
        EventFormat::parse(text).unwrap()
    }

    /// A record to write: its time delta, its event and its fields.
    type Spec<'a> = (u32, &'a str, &'a [(&'a str, u64)]);

    /// A page of the given records.
    fn page(records: &[Spec]) -> Vec<u8> {
        let layout = PageLayout::parse(EXAMPLE_HEADER_PAGE).unwrap();
        let mut w = PageWriter::new(&layout, 1000);
        for (delta, name, fields) in records {
            assert!(w.event(*delta, &encode_record(&format(name), fields)));
        }
        w.finish(Missed::None)
    }

    #[test]
    fn a_page_gives_each_event_with_its_task_and_time() {
        let mut d = decoder();
        let bytes = page(&[
            (0, "sys_enter", &[("common_pid", 7), ("id", 0)]),
            (
                5,
                "page_fault_user",
                &[("common_pid", 7), ("error_code", 6)],
            ),
            (3, FAULT_DONE, &[("common_pid", 7)]),
            (
                2,
                "local_timer_entry",
                &[("common_pid", 7), ("vector", 0xec)],
            ),
            (
                1,
                "local_timer_exit",
                &[("common_pid", 7), ("vector", 0xec)],
            ),
            (4, "sys_exit", &[("common_pid", 7), ("id", 0)]),
            (
                1,
                "sched_switch",
                &[("common_pid", 7), ("prev_pid", 7), ("next_pid", 0)],
            ),
            (
                1,
                "sched_process_fork",
                &[("common_pid", 7), ("parent_pid", 7), ("child_pid", 9)],
            ),
        ]);
        let mut got = Vec::new();
        let count = d.decode_page(3, &bytes, |s| got.push(s));
        assert_eq!(
            count,
            PageCount {
                events: 8,
                lost: 0,
                corrupt: false
            }
        );
        let raws: Vec<(u64, Raw)> = got.iter().map(|s| (s.ts, s.raw)).collect();
        assert_eq!(
            raws,
            [
                (1000, Raw::SysEnter { nr: 0 }),
                (1005, Raw::FaultUser { error_code: 6 }),
                (1008, Raw::FaultDone),
                (1010, Raw::IrqEntry { vector: 0xec }),
                (1011, Raw::IrqExit { vector: 0xec }),
                (1015, Raw::SysExit { nr: 0 }),
                (1016, Raw::Switch { prev: 7, next: 0 }),
                (1017, Raw::Fork { child: 9 }),
            ]
        );
        assert!(got.iter().all(|s| s.cpu == 3 && s.pid == 7));
        assert_eq!(d.vector_name(0xec), "local_timer");
        assert_eq!(d.vector_name(0xfd), "vector_0xfd");
    }

    #[test]
    fn lost_and_corrupt_pages_mark_a_loss_on_their_cpu() {
        let mut d = decoder();
        let layout = PageLayout::parse(EXAMPLE_HEADER_PAGE).unwrap();
        let mut w = PageWriter::new(&layout, 50);
        assert!(w.event(
            0,
            &encode_record(&format("sys_enter"), &[("common_pid", 1), ("id", 1)])
        ));
        let bytes = w.finish(Missed::Count(12));
        let mut got = Vec::new();
        let count = d.decode_page(1, &bytes, |s| got.push(s));
        assert_eq!((count.events, count.lost), (1, 12));
        assert_eq!((got[0].raw, got[0].ts, got[0].cpu), (Raw::Lost, 50, 1));
        got.clear();
        let count = d.decode_page(2, &[1, 2, 3], |s| got.push(s));
        assert!(count.corrupt);
        assert_eq!((got.len(), got[0].raw, got[0].cpu), (1, Raw::Lost, 2));
        // A negative system call number is no call: skipped, not wrapped;
        // an exit's -1 is rt_sigreturn's reset number.
        got.clear();
        let bytes = page(&[
            (0, "sys_enter", &[("common_pid", 1), ("id", u64::MAX)]),
            (
                0,
                "sys_enter",
                &[("common_pid", 1), ("id", (-2i64).cast_unsigned())],
            ),
            (
                0,
                "sys_exit",
                &[("common_pid", 1), ("id", (-2i64).cast_unsigned())],
            ),
            (
                0,
                "sys_exit",
                &[("common_pid", 1), ("id", u64::from(RESET_NR))],
            ),
            (0, "sys_exit", &[("common_pid", 1), ("id", u64::MAX)]),
        ]);
        assert_eq!(d.decode_page(0, &bytes, |s| got.push(s)).events, 1);
        assert_eq!(got[0].raw, Raw::SysExit { nr: RESET_NR });
    }

    #[test]
    fn a_format_without_the_fields_its_records_need_is_refused() {
        let bad = format!("name: sys_enter\nID: 21\nformat:\n{COMMON}\nprint fmt: \"\"\n");
        let err = Decoder::new(EXAMPLE_HEADER_PAGE, &[&bad]).unwrap_err();
        assert!(err.contains("sys_enter"), "{err}");
        assert!(Decoder::new(EXAMPLE_HEADER_PAGE, &[]).is_err());
        // The vector allocator's events carry a vector too, and are no
        // interrupt's entry or exit.
        let alloc = format!(
            "name: vector_alloc\nID: 22\nformat:\n{COMMON}\tfield:unsigned int vector;\toffset:12;\tsize:4;\tsigned:0;\n\nprint fmt: \"\"\n"
        );
        let err = Decoder::new(EXAMPLE_HEADER_PAGE, &[&alloc]).unwrap_err();
        assert!(err.starts_with("vector_alloc: not an event"), "{err}");
        assert_eq!(example_decoder().page_size(), 4096);
        assert!(is_vector_event("reschedule_entry") && !is_vector_event("vector_alloc"));
    }

    fn stamped(ts: u64, pid: i32, raw: Raw) -> Stamped {
        Stamped {
            ts,
            cpu: 0,
            pid,
            raw,
        }
    }

    #[test]
    fn forks_of_followed_tasks_are_followed_and_switches_split_by_task() {
        let mut f = Follow::new(10);
        let mut out = Vec::new();
        let mut push = |f: &mut Follow, s| f.push(&s, |r| out.push((r.pid, r.event)));
        push(&mut f, stamped(1, 10, Raw::Fork { child: 11 }));
        push(&mut f, stamped(2, 99, Raw::Fork { child: 12 }));
        push(&mut f, stamped(3, 10, Raw::Switch { prev: 10, next: 11 }));
        push(&mut f, stamped(4, 11, Raw::Switch { prev: 11, next: 12 }));
        push(&mut f, stamped(5, 12, Raw::SysEnter { nr: 1 }));
        push(&mut f, stamped(6, 11, Raw::SysEnter { nr: 1 }));
        push(&mut f, stamped(7, 0, Raw::Lost));
        assert_eq!(f.tasks(), 2);
        let mut pids = f.pids();
        pids.sort_unstable();
        assert_eq!(pids, [10, 11]);
        assert!(f.follows(11) && !f.follows(12));
        assert_eq!(
            out,
            [
                (10, Event::SwitchOut),
                (11, Event::SwitchIn),
                (11, Event::SwitchOut),
                (11, Event::SysEnter { nr: 1 }),
                (0, Event::Lost),
            ]
        );
    }
}
