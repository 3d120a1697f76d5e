//! Which host exits fell into which sample: the join of a guest's per-sample
//! stamps with the host's exit trace on one [`Mapping`].
//!
//! The rule: an exit belongs to a segment of a sample when its `kvm_exit`,
//! mapped to guest time, lies in the segment's window, `[opening stamp,
//! closing stamp)`: u2k from the user stamp before to the kernel's entry
//! stamp, in_kernel between the kernel stamps, k2u from the kernel's exit
//! stamp to the user stamp after, the round trip from user stamp to user
//! stamp. A sample whose window the trace cannot vouch for (events lost
//! there, an offset rewrite inside it, stamps out of order or unfilled, on a
//! vCPU the trace does not know) is unattributable: counted, never exit-free.
//!
//! Exits are searched by binary search in per-vCPU arrays sorted by guest
//! time, so a run is `O((samples + exits) log exits)`.

use crate::stats::Stats;
use crate::timeline::Mapping;
use crate::{bootstrap, Crossing, Interval, MedianCi, Report, Sample, UNFILLED};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub use super::exit_log::{ExitLog, HostExitEvent};

/// What the host traced during a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostTrace {
    /// Exit reason names, indexed by [`HostExitEvent::reason`].
    pub reasons: Vec<String>,
    pub exits: ExitLog,
    /// Host-time windows `[from, to]` in which the ring buffer lost events.
    pub lost: Vec<(u64, u64)>,
}

/// Exits of one reason inside a segment.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct ReasonCost {
    pub count: u64,
    /// Host TSC ticks from `kvm_exit` to `kvm_entry`, summed.
    pub host_ticks: u64,
}

/// The host's part of one segment of a crossing.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct SegmentHost {
    /// Samples looked at: every sample the guest sent.
    pub samples: u64,
    /// Samples with at least one exit in the segment.
    pub samples_with_exits: u64,
    /// Samples the trace cannot vouch for (see the module text).
    pub unattributable: u64,
    /// Exits by reason.
    pub exits: BTreeMap<String, ReasonCost>,
    pub host_ticks_total: u64,
    /// The corrected values of the exit-free samples.
    pub exit_free: Stats,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_free_median_ci: Option<MedianCi>,
    /// Over the samples with exits: their corrected values minus the
    /// exit-free median, summed (what their exits appear to have cost the
    /// guest), and their exits' host time in guest ticks, summed.
    pub excess_ticks: i64,
    pub excess_host_ticks: u64,
    /// Why the segment could not be attributed at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The round trip only: its [`SLOWEST_SAMPLES`] slowest attributable
    /// samples with the exits inside each, slowest first (where every tick
    /// of those went; a traced run keeps every sample's stamps, the trace's
    /// events are kept for these alone). Absent from older files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slowest: Vec<TracedSample>,
    /// The round trip of a crossing that spans CPUs only
    /// ([`Crossing::spans_cpus`]): the other vCPUs' exits inside its
    /// samples' windows. Apart from `exits`, which hold the sample's own
    /// vCPU's and are what the decomposition shares out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_vcpus: Option<OtherVcpus>,
}

/// Exits of the vCPUs other than a sample's own, inside its window.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct OtherVcpus {
    /// Attributable samples looked at.
    pub samples: u64,
    /// Of those, the samples with at least one such exit.
    pub samples_with_exits: u64,
    /// Exits by reason.
    pub exits: BTreeMap<String, ReasonCost>,
    pub host_ticks_total: u64,
}

/// Samples per crossing whose exits a traced report keeps.
pub const SLOWEST_SAMPLES: usize = 8;
/// Exits kept per kept sample; the rest are counted.
pub const SAMPLE_EXITS: usize = 32;

/// One sample with the exits inside its round trip.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct TracedSample {
    /// Its stamps (guest TSC).
    pub sample: Sample,
    /// Its round trip, corrected (guest ticks).
    pub ticks: u64,
    /// The first [`SAMPLE_EXITS`] exits in it, in guest-time order.
    pub exits: Vec<SampleExit>,
    /// Exits in it past those.
    #[serde(default)]
    pub exits_left_out: u64,
}

/// One traced exit inside a sample.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct SampleExit {
    pub reason: String,
    /// `kvm_exit` mapped onto the guest's TSC.
    pub guest_tsc: i64,
    /// `kvm_exit` to `kvm_entry`, host ticks.
    pub host_ticks: u64,
    /// The same in guest ticks (the mapping's rate).
    pub guest_ticks: u64,
}

impl SegmentHost {
    /// Exits by reason, most host time first (how every renderer lists them).
    pub fn reasons_by_host_time(&self) -> Vec<(&str, &ReasonCost)> {
        by_host_time(&self.exits)
    }
}

impl OtherVcpus {
    /// Exits by reason, most host time first.
    pub fn reasons_by_host_time(&self) -> Vec<(&str, &ReasonCost)> {
        by_host_time(&self.exits)
    }
}

fn by_host_time(exits: &BTreeMap<String, ReasonCost>) -> Vec<(&str, &ReasonCost)> {
    let mut list: Vec<(&str, &ReasonCost)> = exits.iter().map(|(r, c)| (r.as_str(), c)).collect();
    list.sort_by_key(|(_, c)| std::cmp::Reverse(c.host_ticks));
    list
}

/// Picks one segment's interval of a crossing.
pub type SegmentPick = fn(&Crossing) -> &Option<Interval>;

/// The segments attribution fills, in the order reports show them.
pub const SEGMENTS: [(&str, SegmentPick); 4] = [
    ("u2k", |c| &c.u2k),
    ("in_kernel", |c| &c.in_kernel),
    ("k2u", |c| &c.k2u),
    ("round_trip", |c| &c.round_trip),
];

/// Exits of one vCPU, sorted by mapped guest time.
#[derive(Default)]
struct VcpuExits {
    guest_exit: Vec<i128>,
    host_ticks: Vec<u64>,
    reason: Vec<u16>,
}

impl VcpuExits {
    /// Sorts the three columns by guest time, ties in the order pushed.
    fn sort_by_guest_time(&mut self) {
        if self.guest_exit.is_sorted() {
            return;
        }
        let mut order: Vec<usize> = (0..self.guest_exit.len()).collect();
        order.sort_by_key(|&i| self.guest_exit[i]);
        self.guest_exit = order.iter().map(|&i| self.guest_exit[i]).collect();
        self.host_ticks = order.iter().map(|&i| self.host_ticks[i]).collect();
        self.reason = order.iter().map(|&i| self.reason[i]).collect();
    }

    /// Where each of a sample's stamps (in order) falls among `vcpu`'s exits: the
    /// first exit at or after it (u2k_u, u2k_k, k2u_k, k2u_u; the kernel
    /// stamps take the user stamp's place in a round-trip-only sample). A
    /// segment's exits are then the range between two of them, so a sample
    /// costs four searches for its four segments, each starting where the
    /// one before ended.
    fn bounds(&self, s: &Sample, split: bool, hint: usize) -> [usize; 4] {
        let exits = &self.guest_exit;
        let u2k_u = first_at_or_after(exits, hint, i128::from(s.u2k_u));
        let (u2k_k, k2u_k) = if split {
            let u2k_k = first_at_or_after(exits, u2k_u, i128::from(s.u2k_k));
            (u2k_k, first_at_or_after(exits, u2k_k, i128::from(s.k2u_k)))
        } else {
            (u2k_u, u2k_u)
        };
        let k2u_u = first_at_or_after(exits, k2u_k, i128::from(s.k2u_u));
        [u2k_u, u2k_k, k2u_k, k2u_u]
    }
}

/// The first index of `sorted` whose value is at least `x`, as
/// `partition_point` finds it, searched forward from `hint` in growing
/// steps (samples come in time order, so the next answer is near the last).
fn first_at_or_after(sorted: &[i128], hint: usize, x: i128) -> usize {
    let hint = hint.min(sorted.len());
    if hint > 0 && sorted[hint - 1] >= x {
        return sorted[..hint].partition_point(|&g| g < x);
    }
    // sorted[..hint] < x: find a step past which the answer lies.
    let (mut lo, mut step) = (hint, 1usize);
    loop {
        let probe = lo.saturating_add(step).min(sorted.len());
        if probe == sorted.len() || sorted[probe] >= x {
            return lo + sorted[lo..probe].partition_point(|&g| g < x);
        }
        lo = probe; // sorted[probe] < x too: the next range may start there
        step = step.saturating_mul(2);
    }
}

/// The guest-time windows of a report's samples, per vCPU, merged where
/// they overlap: `[u2k_u, k2u_u)`, which holds every segment. The windows
/// of crossings that span CPUs hold the exits of every vCPU.
struct SampleWindows {
    by_vcpu: BTreeMap<u32, Vec<(u64, u64)>>,
    every_vcpu: Vec<(u64, u64)>,
}

impl SampleWindows {
    fn of(report: &Report, single_vcpu: Option<u32>) -> SampleWindows {
        let mut by_vcpu: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        let mut every_vcpu = Vec::new();
        for c in &report.crossings {
            let samples = c.samples.iter().flatten();
            for s in samples.filter(|s| s.u2k_u < s.k2u_u) {
                if c.spans_cpus {
                    every_vcpu.push((s.u2k_u, s.k2u_u));
                } else if let Some(vcpu) = s.cpu.or(single_vcpu) {
                    by_vcpu.entry(vcpu).or_default().push((s.u2k_u, s.k2u_u));
                }
            }
        }
        by_vcpu.values_mut().for_each(merge_windows);
        merge_windows(&mut every_vcpu);
        SampleWindows {
            by_vcpu,
            every_vcpu,
        }
    }

    fn holds(&self, vcpu: u32, guest: i128) -> bool {
        // A stamp is a u64: a time outside that range is in no window.
        let Ok(guest) = u64::try_from(guest) else {
            return false;
        };
        let inside = |windows: &[(u64, u64)]| {
            let after = windows.partition_point(|w| w.0 <= guest);
            after > 0 && guest < windows[after - 1].1
        };
        self.by_vcpu.get(&vcpu).is_some_and(|w| inside(w)) || inside(&self.every_vcpu)
    }
}

/// Sorts `windows` and merges, in place, those that touch.
fn merge_windows(windows: &mut Vec<(u64, u64)>) {
    windows.sort_unstable();
    let mut kept = 0;
    for i in 0..windows.len() {
        let (a, b) = windows[i];
        if kept > 0 && a <= windows[kept - 1].1 {
            windows[kept - 1].1 = windows[kept - 1].1.max(b);
        } else {
            windows[kept] = (a, b);
            kept += 1;
        }
    }
    windows.truncate(kept);
}

/// The trace prepared for lookups.
pub struct Index<'a> {
    trace: &'a HostTrace,
    mapping: &'a Mapping,
    vcpus: BTreeMap<u32, VcpuExits>,
    /// Every vCPU the trace saw, kept exits or not.
    known: BTreeSet<u32>,
    /// Guest times no sample may touch, sorted by start: where events were
    /// lost, and where an offset change leaves the offset in force unknown.
    unvouched: Vec<(i128, i128)>,
}

impl<'a> Index<'a> {
    /// Every exit of the trace, for lookups.
    pub fn new(trace: &'a HostTrace, mapping: &'a Mapping) -> Index<'a> {
        Index::keeping(trace, mapping, |_, _| true)
    }

    /// The exits that can fall into a sample of `report`: those inside a
    /// sample's round trip on their vCPU (`single_vcpu` for samples that
    /// name none). Attribution gives what [`Index::new`] gives, and a run
    /// of millions of exits, most of them between samples, holds only the
    /// few inside them.
    pub fn for_report(
        trace: &'a HostTrace,
        mapping: &'a Mapping,
        report: &Report,
        single_vcpu: Option<u32>,
    ) -> Index<'a> {
        let windows = SampleWindows::of(report, single_vcpu);
        Index::keeping(trace, mapping, |vcpu, guest| windows.holds(vcpu, guest))
    }

    fn keeping(
        trace: &'a HostTrace,
        mapping: &'a Mapping,
        keep: impl Fn(u32, i128) -> bool,
    ) -> Index<'a> {
        let mut known = BTreeSet::new();
        let mut vcpus: BTreeMap<u32, VcpuExits> = BTreeMap::new();
        let mut last_vcpu = None;
        for e in &trace.exits {
            if last_vcpu != Some(e.vcpu) {
                known.insert(e.vcpu);
                last_vcpu = Some(e.vcpu);
            }
            let guest = mapping.to_guest(e.exit);
            if keep(e.vcpu, guest) {
                let v = vcpus.entry(e.vcpu).or_default();
                v.guest_exit.push(guest);
                v.host_ticks.push(e.entry.saturating_sub(e.exit));
                v.reason.push(e.reason);
            }
        }
        // Exits come nearly in time order (by entry): sorted in place, with
        // no copy of the trace beside the index.
        vcpus.values_mut().for_each(VcpuExits::sort_by_guest_time);
        // Each lost window under the offsets in force in it.
        let mut unvouched: Vec<(i128, i128)> = trace
            .lost
            .iter()
            .flat_map(|&(a, b)| mapping.guest_ranges(a, b))
            .chain(mapping.jumps())
            .collect();
        unvouched.sort_unstable();
        Index {
            trace,
            mapping,
            vcpus,
            known,
            unvouched,
        }
    }

    /// Whether `[a, b]` touches a guest time no sample may touch.
    fn unvouched_within(&self, a: i128, b: i128) -> bool {
        // Windows are short and few; any window starting before b and ending after a.
        let before_end = self.unvouched.partition_point(|w| w.0 <= b);
        self.unvouched[..before_end].iter().any(|w| w.1 >= a)
    }

    /// Whether the trace cannot vouch for a sample's whole window (see the
    /// module text).
    fn unattributable(&self, s: &Sample, vcpu: Option<u32>) -> bool {
        let Some(vcpu) = vcpu else { return true };
        if !self.known.contains(&vcpu) && !self.known.is_empty() {
            return true;
        }
        self.unvouched_within(i128::from(s.u2k_u), i128::from(s.k2u_u))
    }
}

/// One segment of a sample: its window from the stamps, and which two of
/// the stamps' exit bounds ([`VcpuExits::bounds`]) open and close it.
type Window = (fn(&Sample) -> (u64, u64), (usize, usize));

/// The segments of a split crossing, with the interval each one fills.
const SPLIT_SEGMENTS: [(&str, Window); 4] = [
    ("u2k", (|s| (s.u2k_u, s.u2k_k), (0, 1))),
    ("in_kernel", (|s| (s.u2k_k, s.k2u_k), (1, 2))),
    ("k2u", (|s| (s.k2u_k, s.k2u_u), (2, 3))),
    ("round_trip", (|s| (s.u2k_u, s.k2u_u), (0, 3))),
];

/// A sample's segment, measured: its corrected value and its exits.
/// (24 bytes: a run can place millions.)
struct Placed {
    /// Index into the samples.
    at: u32,
    vcpu: u32,
    value: u64,
    /// Its exits: a range of its vCPU's.
    first_exit: u32,
    past_exits: u32,
}

impl Placed {
    fn exits(&self) -> std::ops::Range<usize> {
        self.first_exit as usize..self.past_exits as usize
    }
}

/// Fills `host` on every segment of every crossing with kept samples; the
/// vCPU of a sample is its CPU, or `single_vcpu` when it has none. For a
/// recording replayed, where what the host asked for is not known: each
/// crossing's own `samples_requested` bounds its samples.
pub fn attribute(report: &mut Report, index: &Index, single_vcpu: Option<u32>) {
    attribute_asked(report, index, single_vcpu, None);
}

/// [`attribute`] for the host that asked the guest for `asked` samples per
/// crossing, every round together: a crossing holding more, or saying more
/// were requested, is refused whatever the guest's report says.
pub fn attribute_asked(
    report: &mut Report,
    index: &Index,
    single_vcpu: Option<u32>,
    asked: Option<u64>,
) {
    for c in &mut report.crossings {
        attribute_crossing(c, index, single_vcpu, asked);
    }
}

fn interval_mut<'c>(c: &'c mut Crossing, name: &str) -> Option<&'c mut Interval> {
    match name {
        "u2k" => c.u2k.as_mut(),
        "in_kernel" => c.in_kernel.as_mut(),
        "k2u" => c.k2u.as_mut(),
        _ => c.round_trip.as_mut(),
    }
}

/// Why a crossing's samples cannot be attributed at all: more samples than
/// were requested, the host's `asked` (where known) bounding the guest's
/// own `samples_requested` (both count every round).
fn refusal(c: &Crossing, samples: &[Sample], asked: Option<u64>) -> Option<String> {
    let held = samples.len() as u64;
    let untrusted = "the guest's results are not trusted";
    match asked {
        Some(a) if c.samples_requested > a => Some(format!(
            "the guest says {} were requested, the host asked for {a}: {untrusted}",
            c.samples_requested
        )),
        Some(a) if held > a => Some(format!(
            "{held} samples where the host asked for {a}: {untrusted}"
        )),
        _ => (held > c.samples_requested).then(|| {
            format!(
                "{held} samples where {} were requested: {untrusted}",
                c.samples_requested
            )
        }),
    }
}

fn attribute_crossing(
    c: &mut Crossing,
    index: &Index,
    single_vcpu: Option<u32>,
    asked: Option<u64>,
) {
    let Some(samples) = c.samples.take() else {
        return;
    };
    let refused = refusal(c, &samples, asked);
    let all = samples;
    let samples = in_statistics(&all, &c.samples_rejected);
    let split = samples.iter().any(|s| s.u2k_k != UNFILLED);
    let spans_cpus = c.spans_cpus;
    // What each sample is, once for all its segments.
    let judged = judge_all(&samples, split, index, single_vcpu);
    // One buffer for every segment's placed samples.
    let mut placed = Vec::with_capacity(samples.len());
    for (name, window) in SPLIT_SEGMENTS {
        if !split && name != "round_trip" {
            continue;
        }
        let Some(interval) = interval_mut(c, name) else {
            continue;
        };
        interval.host = Some(match &refused {
            Some(why) => SegmentHost {
                reason: Some(why.clone()),
                ..Default::default()
            },
            None => {
                let keep = name == "round_trip";
                let segment = (window, keep);
                let mut host =
                    segment_host(&samples, &judged, segment, interval, (index, &mut placed));
                if keep && spans_cpus {
                    host.other_vcpus = Some(other_vcpus(&samples, &judged, index));
                }
                host
            }
        });
    }
    c.samples = Some(all);
}

/// The samples the producer did not reject: the set the statistics, and so
/// the decomposition against them, are over.
fn in_statistics<'s>(samples: &'s [Sample], rejected: &[u64]) -> std::borrow::Cow<'s, [Sample]> {
    if rejected.is_empty() {
        // The usual case: no copy of a million samples.
        return std::borrow::Cow::Borrowed(samples);
    }
    let rejected: std::collections::HashSet<u64> = rejected.iter().copied().collect();
    (0u64..)
        .zip(samples)
        .filter(|(i, _)| !rejected.contains(i))
        .map(|(_, s)| *s)
        .collect()
}

/// What a sample is to attribution, whatever the segment.
#[derive(Clone, Copy)]
enum Judged {
    /// Stamps out of order or unfilled, or a window the trace cannot
    /// vouch for: counted, never exit-free.
    Unattributable,
    /// Attributable, on this vCPU, its stamps at these exit bounds.
    On(u32, [u32; 4]),
}

/// Every sample judged, and placed among its vCPU's exits.
fn judge_all(
    samples: &[Sample],
    split: bool,
    index: &Index,
    single_vcpu: Option<u32>,
) -> Vec<Judged> {
    // Where the last sample of each vCPU started: the next search's hint.
    let mut hints: BTreeMap<u32, usize> = BTreeMap::new();
    samples
        .iter()
        .map(|s| {
            let vcpu = s.cpu.or(single_vcpu);
            match vcpu {
                Some(v) if attributable(s, split, index, vcpu) => {
                    let hint = hints.entry(v).or_insert(0);
                    let bounds = index
                        .vcpus
                        .get(&v)
                        .map_or([0; 4], |e| e.bounds(s, split, *hint));
                    *hint = bounds[0];
                    // A vCPU's exits are capped far below 2^32.
                    Judged::On(v, bounds.map(|b| u32::try_from(b).unwrap_or(u32::MAX)))
                }
                _ => Judged::Unattributable,
            }
        })
        .collect()
}

fn attributable(s: &Sample, split: bool, index: &Index, vcpu: Option<u32>) -> bool {
    let ordered = if split {
        s.validate().is_ok()
    } else {
        s.u2k_u < s.k2u_u && s.k2u_u != crate::UNFILLED
    };
    ordered && !index.unattributable(s, vcpu)
}

/// `window`: the segment's, and whether to keep its slowest samples' exits.
fn segment_host(
    samples: &[Sample],
    judged: &[Judged],
    ((window, (open, close)), keep_slowest): (Window, bool),
    interval: &Interval,
    (index, placed): (&Index, &mut Vec<Placed>),
) -> SegmentHost {
    let correction = interval.correction.unwrap_or(0);
    let mut host = SegmentHost::default();
    placed.clear();
    for (at, (s, j)) in samples.iter().zip(judged).enumerate() {
        let (vcpu, bounds) = match *j {
            Judged::Unattributable => {
                host.samples += 1;
                host.unattributable += 1;
                continue;
            }
            Judged::On(vcpu, bounds) => (vcpu, bounds),
        };
        host.samples += 1;
        let (a, b) = window(s);
        let (first_exit, past_exits) = (bounds[open], bounds[close]);
        placed.push(Placed {
            // Samples per crossing are bounded far below 2^32.
            at: u32::try_from(at).unwrap_or(u32::MAX),
            vcpu,
            value: (b - a).saturating_sub(correction),
            first_exit,
            past_exits,
        });
    }
    summarise(&mut host, placed, index);
    if keep_slowest {
        host.slowest = slowest(samples, placed, index);
    }
    host
}

/// The [`SLOWEST_SAMPLES`] slowest of `placed`, slowest first, with their
/// exits; linear in the samples (a selection, then a sort of the few).
fn slowest(samples: &[Sample], placed: &mut [Placed], index: &Index) -> Vec<TracedSample> {
    let n = SLOWEST_SAMPLES.min(placed.len());
    if n == 0 {
        return Vec::new();
    }
    // With n == placed.len() this orders nothing the sort below does not;
    // n - 1 < placed.len() always.
    placed.select_nth_unstable_by_key(n - 1, |p| std::cmp::Reverse(p.value));
    let top = &mut placed[..n];
    top.sort_by_key(|p| (std::cmp::Reverse(p.value), p.at));
    top.iter()
        .map(|p| {
            // A sample without exits may be on a vCPU the trace never saw.
            let range = index.vcpus.get(&p.vcpu).map(|v| (v, p.exits()));
            let exits = range
                .into_iter()
                .flat_map(|(v, r)| r.map(move |i| (v, i)))
                .take(SAMPLE_EXITS)
                .map(|(v, i)| SampleExit {
                    reason: reason_name(index, v.reason[i]).to_string(),
                    guest_tsc: i64::try_from(v.guest_exit[i]).unwrap_or(i64::MAX),
                    host_ticks: v.host_ticks[i],
                    guest_ticks: index.mapping.scale_duration(v.host_ticks[i]),
                })
                .collect();
            TracedSample {
                sample: samples[p.at as usize],
                ticks: p.value,
                exits,
                exits_left_out: p.exits().len().saturating_sub(SAMPLE_EXITS) as u64,
            }
        })
        .collect()
}

fn reason_name<'a>(index: &Index<'a>, reason: u16) -> &'a str {
    index
        .trace
        .reasons
        .get(usize::from(reason))
        .map_or("unknown", String::as_str)
}

/// Values a confidence interval is computed from at most: the bootstrap's
/// cost is 200 times its input, and 1 M exit-free samples would take
/// seconds per segment.
pub const CI_MAX_VALUES: usize = 100_000;

/// The median's CI over evenly spaced values, at most [`CI_MAX_VALUES`]:
/// fewer values give a wider interval, never a narrower one.
fn thinned_median_ci(values: &[u64]) -> Option<MedianCi> {
    let step = values.len().div_ceil(CI_MAX_VALUES).max(1);
    if step == 1 {
        return bootstrap::median_ci(values);
    }
    let thinned: Vec<u64> = values.iter().step_by(step).copied().collect();
    bootstrap::median_ci(&thinned)
}

/// The exits of every vCPU but its own inside each attributable sample's
/// round trip, `[u2k_u, k2u_u)` as for its own.
fn other_vcpus(samples: &[Sample], judged: &[Judged], index: &Index) -> OtherVcpus {
    let mut out = OtherVcpus::default();
    let mut by_reason: Vec<ReasonCost> = Vec::new();
    for (s, j) in samples.iter().zip(judged) {
        let Judged::On(own, _) = *j else { continue };
        out.samples += 1;
        let (a, b) = (i128::from(s.u2k_u), i128::from(s.k2u_u));
        let mut any = false;
        for (_, v) in index.vcpus.iter().filter(|(&v, _)| v != own) {
            let from = v.guest_exit.partition_point(|&g| g < a);
            let past = v.guest_exit.partition_point(|&g| g < b);
            for i in from..past {
                any = true;
                add_cost(&mut by_reason, v.reason[i], v.host_ticks[i]);
                out.host_ticks_total = out.host_ticks_total.saturating_add(v.host_ticks[i]);
            }
        }
        out.samples_with_exits += u64::from(any);
    }
    name_reasons(&by_reason, index, &mut out.exits);
    out
}

/// One exit of reason number `reason` added to `by_reason`.
fn add_cost(by_reason: &mut Vec<ReasonCost>, reason: u16, host_ticks: u64) {
    let r = usize::from(reason);
    if by_reason.len() <= r {
        by_reason.resize(r + 1, ReasonCost::default());
    }
    let cost = &mut by_reason[r];
    cost.count += 1;
    cost.host_ticks = cost.host_ticks.saturating_add(host_ticks);
}

/// Costs by reason number into `named`, by reason name: reasons that share
/// a name (every unknown one) add up under it.
fn name_reasons(by_reason: &[ReasonCost], index: &Index, named: &mut BTreeMap<String, ReasonCost>) {
    for (r, cost) in by_reason.iter().enumerate().filter(|(_, c)| c.count > 0) {
        let reason = u16::try_from(r).unwrap_or(u16::MAX);
        let entry = named
            .entry(reason_name(index, reason).to_string())
            .or_default();
        entry.count += cost.count;
        entry.host_ticks = entry.host_ticks.saturating_add(cost.host_ticks);
    }
}

/// Exit-free statistics, exits by reason and the excess of samples with exits.
fn summarise(host: &mut SegmentHost, placed: &[Placed], index: &Index) {
    let free: Vec<u64> = placed
        .iter()
        .filter(|p| p.exits().is_empty())
        .map(|p| p.value)
        .collect();
    host.exit_free = Stats::from_samples(&free);
    host.exit_free_median_ci = thinned_median_ci(&free);
    let free_median = i64::try_from(host.exit_free.median).unwrap_or(i64::MAX);
    // By reason number first: naming each exit's reason in the map cost an
    // allocation per exit.
    let mut by_reason: Vec<ReasonCost> = Vec::new();
    for p in placed.iter().filter(|p| !p.exits().is_empty()) {
        host.samples_with_exits += 1;
        let v = &index.vcpus[&p.vcpu];
        let mut ticks = 0u64;
        for i in p.exits() {
            add_cost(&mut by_reason, v.reason[i], v.host_ticks[i]);
            ticks = ticks.saturating_add(v.host_ticks[i]);
        }
        host.host_ticks_total = host.host_ticks_total.saturating_add(ticks);
        host.excess_host_ticks = host
            .excess_host_ticks
            .saturating_add(index.mapping.scale_duration(ticks));
        if !free.is_empty() {
            host.excess_ticks = host
                .excess_ticks
                .saturating_add(i64::try_from(p.value).unwrap_or(i64::MAX) - free_median);
        }
    }
    name_reasons(&by_reason, index, &mut host.exits);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::OffsetChange;
    use crate::{Corrections, Crossing, Environment, Method};

    fn sample(base: u64, cpu: Option<u32>) -> Sample {
        Sample {
            u2k_u: base,
            u2k_k: base + 100,
            k2u_k: base + 300,
            k2u_u: base + 400,
            cpu,
            interrupts: None,
        }
    }

    fn report(samples: Vec<Sample>) -> Report {
        let mut r = Report::new(
            "test".into(),
            Environment::LinuxVm,
            Default::default(),
            Method::standard(0, samples.len() as u64),
        );
        let n = samples.len() as u64;
        let mut c = Crossing::from_samples("c", n, &samples, &Corrections::default(), true);
        c.samples = Some(samples);
        r.crossings.push(c);
        r
    }

    fn exit(host: u64, ticks: u64, reason: u16) -> HostExitEvent {
        HostExitEvent {
            vcpu: 0,
            exit: host,
            entry: host + ticks,
            reason,
        }
    }

    fn trace(exits: Vec<HostExitEvent>) -> HostTrace {
        HostTrace {
            reasons: vec!["npf".into(), "intr".into()],
            exits: exits.into(),
            lost: Vec::new(),
        }
    }

    fn host<'r>(r: &'r Report, segment: &str) -> &'r SegmentHost {
        let c = &r.crossings[0];
        let i = match segment {
            "u2k" => &c.u2k,
            "in_kernel" => &c.in_kernel,
            "k2u" => &c.k2u,
            _ => &c.round_trip,
        };
        i.as_ref().unwrap().host.as_ref().unwrap()
    }

    /// The galloping search finds what `partition_point` finds, from any
    /// hint: before the answer, after it (time going back), past the end.
    #[test]
    fn first_at_or_after_agrees_with_partition_point_from_any_hint() {
        let mut x = 7u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        for len in [0usize, 1, 2, 3, 7, 64, 1000] {
            let mut sorted: Vec<i128> = (0..len).map(|_| i128::from(next() % 500)).collect();
            sorted.sort_unstable();
            for _ in 0..300 {
                let want = i128::from(next() % 520) - 10;
                let hint = usize::try_from(next() % (len as u64 + 3)).unwrap();
                assert_eq!(
                    first_at_or_after(&sorted, hint, want),
                    sorted.partition_point(|&g| g < want),
                    "len {len} hint {hint} x {want}"
                );
            }
        }
    }

    /// The index of a report's samples alone attributes as the whole
    /// trace's does (two vCPUs, exits mostly between samples, a vCPU whose
    /// exits all fall outside samples: still known), and holds fewer exits.
    #[test]
    fn the_report_index_attributes_as_the_whole_trace_does() {
        let mut samples: Vec<Sample> = (0..400u64)
            .map(|k| sample(10_000 + k * 1_000, Some((k % 2) as u32)))
            .collect();
        samples.push(sample(900_000, Some(2)));
        samples.push(sample(950_000, Some(3)));
        let exits: Vec<HostExitEvent> = (0..900u64)
            .map(|i| HostExitEvent {
                vcpu: (i % 3) as u32,
                ..exit(9_000 + i * 467, 20 + i % 50, (i % 2) as u16)
            })
            .chain([HostExitEvent {
                vcpu: 2,
                ..exit(10, 5, 0)
            }])
            .collect();
        let t = trace(exits);
        let m = Mapping::unscaled(-7);
        let mut whole = report(samples.clone());
        let full = Index::new(&t, &m);
        attribute(&mut whole, &full, None);
        let mut own = report(samples);
        let filtered = Index::for_report(&t, &m, &own, None);
        attribute(&mut own, &filtered, None);
        assert_eq!(own, whole);
        let held = |i: &Index| i.vcpus.values().map(|v| v.guest_exit.len()).sum::<usize>();
        assert!(
            held(&filtered) * 2 < held(&full),
            "{} of {}",
            held(&filtered),
            held(&full)
        );
        let rt = host(&own, "round_trip");
        assert_eq!(
            rt.unattributable, 1,
            "vCPU 3 is unknown, vCPU 2 known: {rt:?}"
        );
        assert!(
            rt.samples_with_exits > 100 && rt.exit_free.count > 100,
            "{rt:?}"
        );
    }

    /// Samples of two vCPUs, interleaved, one of them going back in time:
    /// each exit counted in its own vCPU's sample, by the same rule as one
    /// vCPU's.
    #[test]
    fn interleaved_vcpus_and_samples_out_of_time_order_find_their_exits() {
        let samples = vec![
            sample(5000, Some(1)),
            sample(1000, Some(0)),
            sample(1000, Some(1)),
            sample(3000, Some(0)),
            sample(2000, Some(0)),
        ];
        let mut r = report(samples);
        let on = |vcpu, host, reason| HostExitEvent {
            vcpu,
            ..exit(host, 10, reason)
        };
        let t = trace(vec![
            on(1, 5050, 0),
            on(0, 1050, 0),
            on(1, 1150, 1),
            on(0, 3350, 1),
            on(0, 2000, 0),
            on(1, 3000, 0),
        ]);
        attribute(&mut r, &Index::new(&t, &Mapping::unscaled(0)), None);
        let rt = host(&r, "round_trip");
        assert_eq!((rt.samples, rt.samples_with_exits), (5, 5), "{rt:?}");
        assert_eq!((rt.exits["npf"].count, rt.exits["intr"].count), (3, 2));
        let u2k = host(&r, "u2k");
        assert_eq!((u2k.samples_with_exits, u2k.exits["npf"].count), (3, 3));
        assert_eq!(host(&r, "in_kernel").exits["intr"].count, 1);
        assert_eq!(host(&r, "k2u").exits["intr"].count, 1);
    }

    #[test]
    fn exits_land_in_the_segment_that_contains_them_boundaries_included() {
        // Samples at guest 1000, 2000, 3000, 4000; guest = host - 500.
        let samples: Vec<Sample> = (1..=4).map(|k| sample(k * 1000, Some(0))).collect();
        let mut r = report(samples);
        // One exit at the opening stamp of sample 1's u2k (counts), one at
        // sample 2's kernel entry stamp (in_kernel, not u2k), one at sample
        // 3's closing user stamp (belongs to nothing: the window is open
        // there).
        let t = trace(vec![
            exit(1000 + 500, 60, 0),
            exit(2100 + 500, 30, 1),
            exit(3400 + 500, 30, 1),
        ]);
        let m = Mapping::unscaled(-500);
        attribute(&mut r, &Index::new(&t, &m), None);
        let u2k = host(&r, "u2k");
        assert_eq!((u2k.samples, u2k.samples_with_exits), (4, 1));
        assert_eq!(u2k.exits["npf"].count, 1);
        assert_eq!(u2k.exits["npf"].host_ticks, 60);
        assert_eq!(u2k.exit_free.count, 3);
        let ik = host(&r, "in_kernel");
        assert_eq!((ik.samples_with_exits, ik.exits["intr"].count), (1, 1));
        assert_eq!(host(&r, "k2u").samples_with_exits, 0);
        let rt = host(&r, "round_trip");
        assert_eq!((rt.samples_with_exits, rt.host_ticks_total), (2, 90));
    }

    /// Issue 24, item 4b: the round trip keeps its slowest samples, with
    /// the exits inside each (mapped onto the guest's TSC); no other segment
    /// does, and the file reads back.
    #[test]
    fn the_slowest_samples_keep_their_exits() {
        // Twelve samples 1000 apart, sample k's round trip 400 + k ticks.
        let samples: Vec<Sample> = (1..=12)
            .map(|k| {
                let mut s = sample(k * 1000, Some(0));
                s.k2u_u += k;
                s
            })
            .collect();
        let mut r = report(samples);
        // Two exits in sample 12 (u2k and in_kernel), one in sample 3.
        let t = trace(vec![
            exit(12_010 + 500, 60, 0),
            exit(12_150 + 500, 30, 1),
            exit(3_010 + 500, 7, 1),
        ]);
        let m = Mapping::unscaled(-500);
        attribute(&mut r, &Index::new(&t, &m), None);
        let rt = host(&r, "round_trip");
        assert_eq!(rt.slowest.len(), SLOWEST_SAMPLES);
        let ticks: Vec<u64> = rt.slowest.iter().map(|s| s.ticks).collect();
        assert_eq!(ticks, (5..=12).rev().map(|k| 400 + k).collect::<Vec<_>>());
        let first = &rt.slowest[0];
        assert_eq!(first.sample.u2k_u, 12_000);
        let exits: Vec<(&str, i64, u64)> = first
            .exits
            .iter()
            .map(|e| (e.reason.as_str(), e.guest_tsc, e.host_ticks))
            .collect();
        assert_eq!(exits, [("npf", 12_010, 60), ("intr", 12_150, 30)]);
        assert!(rt.slowest[1..].iter().all(|s| s.exits.is_empty()));
        assert!(host(&r, "u2k").slowest.is_empty());
        let back = Report::from_json(&r.to_json_pretty()).unwrap();
        assert_eq!(back.crossings[0].round_trip, r.crossings[0].round_trip);
    }

    /// Three round-trip-only samples on vCPU 0, at guest 1000..1400,
    /// 2000..2400 and 3000..3400.
    fn round_trips_on_vcpu_0() -> Vec<Sample> {
        (1..=3)
            .map(|k| Sample {
                u2k_k: UNFILLED,
                k2u_k: UNFILLED,
                ..sample(k * 1000, Some(0))
            })
            .collect()
    }

    /// Round-trip-only samples (no kernel stamps): only the round trip is
    /// attributed, and it is.
    #[test]
    fn round_trip_only_samples_attribute_the_round_trip_alone() {
        let samples = round_trips_on_vcpu_0();
        let mut r = report(samples);
        let t = trace(vec![exit(2200, 40, 0)]);
        attribute(&mut r, &Index::new(&t, &Mapping::unscaled(0)), None);
        let rt = host(&r, "round_trip");
        assert_eq!((rt.samples, rt.samples_with_exits), (3, 1), "{rt:?}");
        assert_eq!(rt.exits["npf"].host_ticks, 40);
        assert_eq!(rt.unattributable, 0);
        let c = &r.crossings[0];
        for i in [&c.u2k, &c.in_kernel, &c.k2u] {
            assert!(i.as_ref().is_none_or(|i| i.host.is_none()), "{i:?}");
        }
        // Returned before it left, at the same tick, or never: each one
        // unattributable, the good one still attributed.
        let good = Sample {
            u2k_k: UNFILLED,
            k2u_k: UNFILLED,
            ..sample(1000, Some(0))
        };
        let bad = [(2000, 1990), (3000, 3000), (4000, UNFILLED)];
        let mut samples = vec![good];
        samples.extend(bad.iter().map(|&(u2k_u, k2u_u)| Sample {
            u2k_u,
            k2u_u,
            ..good
        }));
        let mut r = report(samples.clone());
        r.crossings[0].samples = Some(samples);
        attribute(&mut r, &Index::new(&t, &Mapping::unscaled(0)), None);
        let rt = host(&r, "round_trip");
        assert_eq!((rt.samples, rt.unattributable), (4, 3), "{rt:?}");
        assert_eq!(rt.exit_free.count, 1, "{rt:?}");
    }

    /// A crossing that spans CPUs (a wake-up timed on vCPU 0): vCPU 1's
    /// exits inside a sample's window are its "other vCPUs" exits, those
    /// outside are not, and vCPU 0's own stay what the decomposition sees;
    /// the report's index keeps vCPU 1's exits for it. The same samples
    /// without the mark see none of vCPU 1's.
    #[test]
    fn a_crossing_that_spans_cpus_places_the_other_vcpus_exits_apart() {
        let samples = round_trips_on_vcpu_0();
        let on = |vcpu, host, ticks, reason| HostExitEvent {
            vcpu,
            ..exit(host, ticks, reason)
        };
        // Sample 1000..1400: own npf, vCPU 1 intr twice. 2000..2400: vCPU 1
        // npf at the closing stamp (outside). 3000..3400: vCPU 1 intr at the
        // opening stamp (inside); vCPU 1 npf between samples.
        let t = trace(vec![
            on(0, 1100, 30, 0),
            on(1, 1200, 50, 1),
            on(1, 1300, 70, 1),
            on(1, 2400, 90, 0),
            on(1, 2700, 11, 0),
            on(1, 3000, 13, 1),
        ]);
        let m = Mapping::unscaled(0);
        // The whole trace indexed and the report's windows only: the same.
        for (spans, whole) in [(true, true), (true, false), (false, true), (false, false)] {
            let mut r = report(samples.clone());
            r.crossings[0].spans_cpus = spans;
            let index = if whole {
                Index::new(&t, &m)
            } else {
                Index::for_report(&t, &m, &r, Some(0))
            };
            attribute(&mut r, &index, Some(0));
            let rt = host(&r, "round_trip");
            assert_eq!((rt.samples_with_exits, rt.exits.len()), (1, 1), "{rt:?}");
            assert_eq!(rt.exits["npf"].host_ticks, 30);
            let Some(o) = &rt.other_vcpus else {
                assert!(!spans, "{rt:?}");
                continue;
            };
            assert!(spans);
            assert_eq!((o.samples, o.samples_with_exits), (3, 2), "{o:?}");
            assert_eq!(o.exits.len(), 1, "{o:?}");
            assert_eq!(
                (o.exits["intr"].count, o.exits["intr"].host_ticks),
                (3, 133)
            );
            assert_eq!(o.host_ticks_total, 133);
        }
    }

    /// Up to [`CI_MAX_VALUES`] the interval is the bootstrap's over every
    /// value; beyond, over every `step`-th value only.
    #[test]
    fn the_median_ci_thins_only_beyond_its_limit() {
        let small: Vec<u64> = (0..1000).map(|i| (i * 7919) % 1000).collect();
        assert_eq!(thinned_median_ci(&small), bootstrap::median_ci(&small));
        assert!(thinned_median_ci(&small).is_some());
        // Spread values (an LCG): a third of them give a wider interval.
        let mut x = 1u64;
        let big: Vec<u64> = (0..2 * CI_MAX_VALUES + 1)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) % 1_000_000
            })
            .collect();
        let every_third: Vec<u64> = big.iter().step_by(3).copied().collect();
        let thinned = thinned_median_ci(&big);
        assert_eq!(thinned, bootstrap::median_ci(&every_third));
        assert_ne!(thinned, bootstrap::median_ci(&big));
    }

    #[test]
    fn lost_windows_offset_changes_and_bad_stamps_make_samples_unattributable() {
        let mut samples: Vec<Sample> = (1..=5).map(|k| sample(k * 1000, Some(0))).collect();
        samples[4].k2u_k = samples[4].u2k_k - 1; // out of order: unattributable
        let mut r = report(samples);
        let mut t = trace(vec![]);
        t.lost = vec![(1050, 1060)]; // inside sample 1 (offset 0)
        let mut m = Mapping::unscaled(0);
        m.changes = vec![OffsetChange {
            host_tsc: 3200,
            offset: 0,
        }];
        attribute(&mut r, &Index::new(&t, &m), None);
        let rt = host(&r, "round_trip");
        assert_eq!(rt.samples, 5);
        assert_eq!(rt.unattributable, 3);
        assert_eq!(rt.exit_free.count, 2, "unattributable is never exit-free");
    }

    #[test]
    fn samples_on_an_unknown_vcpu_or_without_one_are_unattributable() {
        let samples = vec![sample(1000, Some(3)), sample(2000, None)];
        let mut r = report(samples.clone());
        let t = trace(vec![exit(10, 5, 0)]);
        let m = Mapping::unscaled(0);
        attribute(&mut r, &Index::new(&t, &m), None);
        assert_eq!(host(&r, "u2k").unattributable, 2);
        // With one vCPU named for samples without a CPU, the second counts.
        let mut r = report(samples);
        attribute(&mut r, &Index::new(&t, &m), Some(0));
        assert_eq!(host(&r, "u2k").unattributable, 1);
    }

    #[test]
    fn more_samples_than_requested_refuse_the_crossing() {
        let samples: Vec<Sample> = (1..=4).map(|k| sample(k * 1000, Some(0))).collect();
        let mut r = report(samples);
        r.crossings[0].samples_requested = 1;
        let t = trace(vec![]);
        let m = Mapping::unscaled(0);
        attribute(&mut r, &Index::new(&t, &m), None);
        let u2k = host(&r, "u2k");
        assert!(u2k.reason.as_deref().unwrap().contains("4 samples"));
        assert_eq!(u2k.samples, 0);
    }

    #[test]
    fn excess_of_samples_with_exits_is_measured_against_the_exit_free_median() {
        let mut samples: Vec<Sample> = (1..=5).map(|k| sample(k * 10_000, Some(0))).collect();
        // Sample 5's u2k took 1000 more ticks, spent in one exit of 900.
        samples[4].u2k_k += 1000;
        samples[4].k2u_k += 1000;
        samples[4].k2u_u += 1000;
        let mut r = report(samples);
        let t = trace(vec![exit(50_010, 900, 0)]);
        let m = Mapping::unscaled(0);
        attribute(&mut r, &Index::new(&t, &m), None);
        let u2k = host(&r, "u2k");
        assert_eq!(u2k.exit_free.median, 100);
        assert_eq!((u2k.excess_ticks, u2k.excess_host_ticks), (1000, 900));
    }

    #[test]
    fn a_sample_more_than_requested_over_all_rounds_is_refused() {
        // Three rounds of 4: samples_requested counts all rounds (12).
        let samples: Vec<Sample> = (1..=13).map(|k| sample(k * 1000, Some(0))).collect();
        let mut r = report(samples);
        r.method.rounds = 3;
        r.crossings[0].samples_requested = 12;
        let (t, m) = (trace(vec![]), Mapping::unscaled(0));
        attribute(&mut r, &Index::new(&t, &m), None);
        let why = host(&r, "round_trip").reason.clone();
        assert!(
            why.as_deref()
                .is_some_and(|w| w.contains("13 samples where 12")),
            "{why:?}"
        );
        // Exactly the 12 asked for are attributed.
        let mut r = report((1..=12).map(|k| sample(k * 1000, Some(0))).collect());
        r.method.rounds = 3;
        r.crossings[0].samples_requested = 12;
        attribute(&mut r, &Index::new(&t, &m), None);
        assert_eq!(host(&r, "round_trip").reason, None);
        assert_eq!(host(&r, "round_trip").samples, 12);
    }

    /// Issue item 6: a guest that says it was asked for more samples than
    /// the host asked for is not believed: the host's figure bounds what is
    /// attributed, and a claim beyond it is itself a refusal.
    #[test]
    fn the_hosts_ask_bounds_the_samples_not_the_guests_claim() {
        let (t, m) = (trace(vec![]), Mapping::unscaled(0));
        let claimed = |n: u64, requested: u64| {
            let mut r = report((1..=n).map(|k| sample(k * 1000, Some(0))).collect());
            r.crossings[0].samples_requested = requested;
            r
        };
        // 13 samples, the guest claiming the 12 the host asked for.
        let mut r = claimed(13, 12);
        attribute_asked(&mut r, &Index::new(&t, &m), None, Some(12));
        let why = host(&r, "round_trip").reason.clone().unwrap_or_default();
        assert!(
            why.contains("13 samples where the host asked for 12"),
            "{why}"
        );
        // 12 samples, but a claim of 1000: the guest's count is not the
        // host's, and nothing it sent is trusted.
        let mut r = claimed(12, 1000);
        attribute_asked(&mut r, &Index::new(&t, &m), None, Some(12));
        let why = host(&r, "round_trip").reason.clone().unwrap_or_default();
        assert!(why.contains("says 1000 were requested"), "{why}");
        // Within both: attributed.
        let mut r = claimed(12, 12);
        attribute_asked(&mut r, &Index::new(&t, &m), None, Some(12));
        assert_eq!(host(&r, "round_trip").reason, None);
        // Fewer claimed than asked (a crossing that takes fewer): its own
        // count bounds it.
        let mut r = claimed(5, 4);
        attribute_asked(&mut r, &Index::new(&t, &m), None, Some(12));
        let why = host(&r, "round_trip").reason.clone().unwrap_or_default();
        assert!(why.contains("5 samples where 4"), "{why}");
    }

    #[test]
    fn each_sample_is_judged_under_the_offset_in_force_when_it_ran() {
        // Offset 0, then -5000 from host 10_000 (guest 10_000 -> 5_000:
        // guest times 5_000..10_000 happen twice), then -3000 from host
        // 20_000 (guest 15_000 -> 17_000: 15_000..17_000 never happen).
        let mut m = Mapping::unscaled(0);
        m.changes = vec![
            OffsetChange {
                host_tsc: 10_000,
                offset: -5000,
            },
            OffsetChange {
                host_tsc: 20_000,
                offset: -3000,
            },
        ];
        let window = |a: u64, b: u64| Sample {
            u2k_u: a,
            u2k_k: a + 1,
            k2u_k: b - 1,
            k2u_u: b,
            cpu: Some(0),
            interrupts: None,
        };
        let samples = vec![
            window(1_000, 1_400),   // host 1_000: before any rewrite
            window(11_000, 11_400), // host 16_000: inside the second stretch
            window(14_800, 17_100), // host 19_800..20_100: across the second rewrite
            window(19_900, 20_100), // host 22_900: inside the third stretch
            window(9_900, 10_100),  // read before or after the first rewrite: unknown
        ];
        let mut r = report(samples);
        // One exit in each of the whole samples, at its own offset.
        let t = trace(vec![
            exit(1_100, 10, 0),
            exit(16_100, 10, 0),
            exit(22_950, 10, 0),
        ]);
        attribute(&mut r, &Index::new(&t, &m), None);
        let rt = host(&r, "round_trip");
        assert_eq!((rt.samples, rt.unattributable), (5, 2), "{rt:?}");
        assert_eq!(
            (rt.samples_with_exits, rt.exit_free.count),
            (3, 0),
            "{rt:?}"
        );
    }

    #[test]
    fn out_of_order_and_unfilled_samples_count_as_unattributable() {
        let mut samples: Vec<Sample> = (1..=4).map(|k| sample(k * 1000, Some(0))).collect();
        samples[1].k2u_k = samples[1].u2k_k - 1;
        samples[2].u2k_k = crate::UNFILLED;
        let mut r = report(samples);
        let (t, m) = (trace(vec![]), Mapping::unscaled(0));
        attribute(&mut r, &Index::new(&t, &m), None);
        for segment in ["u2k", "in_kernel", "k2u", "round_trip"] {
            let h = host(&r, segment);
            assert_eq!((h.samples, h.unattributable, h.exit_free.count), (4, 2, 2));
        }
    }

    /// A sample's window `[u2k_u, k2u_u)` per vCPU: one inside another, one
    /// reaching past another's end and one touching it are merged, so a time
    /// in any sample's window is held, its end and a gap between are not.
    #[test]
    fn sample_windows_hold_what_any_sample_spans_merged_or_not() {
        let span = |a: u64, b: u64, cpu: u32| Sample {
            u2k_u: a,
            u2k_k: a,
            k2u_k: b,
            k2u_u: b,
            cpu: Some(cpu),
            interrupts: None,
        };
        let r = report(vec![
            span(10, 20, 0),
            span(0, 100, 0),
            span(500, 510, 0),
            span(505, 600, 0),
            span(600, 650, 0),
            span(900, 950, 0),
            span(2000, 2100, 1),
        ]);
        let w = SampleWindows::of(&r, None);
        for (vcpu, t, held) in [
            (0, 0, true),
            (0, 50, true),
            (0, 99, true),
            (0, 100, false),
            (0, 300, false),
            (0, 550, true),
            (0, 620, true),
            (0, 650, false),
            (0, 900, true),
            (0, 950, false),
            (0, -1, false),
            (1, 2050, true),
            (1, 50, false),
            (2, 50, false),
        ] {
            assert_eq!(w.holds(vcpu, t), held, "vCPU {vcpu} at {t}");
        }
        assert_eq!(w.by_vcpu[&0], vec![(0, 100), (500, 650), (900, 950)]);
        assert!(w.every_vcpu.is_empty());
    }

    /// Samples the producer rejected are left out of attribution as they
    /// are of the statistics: an exit inside one counts nowhere.
    #[test]
    fn rejected_samples_are_not_attributed() {
        let mut r = report((1..=4).map(|k| sample(k * 1000, Some(0))).collect());
        r.crossings[0].samples_rejected = vec![1];
        // One exit, inside the rejected sample (guest 2000..2400).
        let t = trace(vec![exit(2_200, 10, 0)]);
        attribute(&mut r, &Index::new(&t, &Mapping::unscaled(0)), None);
        let rt = host(&r, "round_trip");
        assert_eq!(
            (rt.samples, rt.samples_with_exits, rt.exit_free.count),
            (3, 0, 3),
            "{rt:?}"
        );
        assert_eq!(r.crossings[0].samples.as_ref().map(Vec::len), Some(4));
    }

    /// The slowest samples are the [`SLOWEST_SAMPLES`] largest round trips
    /// whatever order the samples came in (here: rising, falling and
    /// scrambled), slowest first.
    #[test]
    fn the_slowest_samples_are_the_largest_in_any_order() {
        for order in 0..3u64 {
            let samples: Vec<Sample> = (0..40u64)
                .map(|i| {
                    let k = match order {
                        0 => i,
                        1 => 39 - i,
                        _ => (i * 17 + 5) % 40,
                    };
                    let mut s = sample(1_000 + i * 1_000, Some(0));
                    s.k2u_u += k * 3;
                    s
                })
                .collect();
            let want: Vec<u64> = (32..40u64).rev().map(|k| 400 + k * 3).collect();
            assert_eq!(slowest_ticks(samples), want, "order {order}");
        }
    }

    /// Fewer samples than [`SLOWEST_SAMPLES`]: all of them, slowest first.
    #[test]
    fn fewer_samples_than_the_slowest_kept_are_all_kept() {
        let samples: Vec<Sample> = [5u64, 1, 3]
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let mut s = sample(1_000 + i as u64 * 1_000, Some(0));
                s.k2u_u += k;
                s
            })
            .collect();
        assert_eq!(slowest_ticks(samples), [405, 403, 401]);
    }

    /// The round trips of the slowest samples an exit-free trace keeps.
    fn slowest_ticks(samples: Vec<Sample>) -> Vec<u64> {
        let mut r = report(samples);
        let t = trace(vec![]);
        attribute(&mut r, &Index::new(&t, &Mapping::unscaled(0)), None);
        let slowest = &host(&r, "round_trip").slowest;
        slowest.iter().map(|s| s.ticks).collect()
    }

    /// Only reasons that occurred are named, however many the trace knows.
    #[test]
    fn only_reasons_that_occurred_are_named() {
        let mut r = report(vec![sample(1_000, Some(0))]);
        // Reason 1 ("intr") inside the sample; reason 0 ("npf") nowhere.
        let t = trace(vec![exit(1_200, 10, 1)]);
        attribute(&mut r, &Index::new(&t, &Mapping::unscaled(0)), None);
        let names: Vec<&String> = host(&r, "round_trip").exits.keys().collect();
        assert_eq!(names, ["intr"]);
    }
}
