//! The guest -> VMM channel: guest-visible port numbers and the shared results
//! buffer. Shared by the VMM and every guest (microguest, xvmm-init, xperf).

/// Port a guest writes one byte to in order to end the VM; the byte becomes
/// xvmm's exit status (0 = success).
pub const PORT_EXIT: u16 = 0x501;

/// Port a guest writes a 32-bit length to once it has put that many bytes of
/// results (a JSON [`crate::Report`]) at [`RESULTS_GPA`].
pub const PORT_RESULTS_DOORBELL: u16 = 0x504;

/// Port a guest writes a 32-bit index to, between two TSC stamps of its own,
/// so that the host's trace of the exit can be placed on the guest's
/// timeline (`xvmm_results::timeline`). The VMM only counts these writes.
pub const PORT_CALIBRATE: u16 = 0x508;

/// Port a guest writes a 32-bit length to once it has put that many bytes
/// of its workload's closed intervals at [`RESULTS_GPA`]
/// ([`crate::schema::interval_stream`]); the VMM copies them out before the
/// guest runs on, so the buffer is free again when the write returns.
pub const PORT_INTERVALS: u16 = 0x510;

/// Guest physical address of the shared results buffer: a dedicated memory
/// slot in the 32-bit MMIO hole, marked reserved in the E820 map.
pub const RESULTS_GPA: u64 = 0xd000_0000;

/// Size of the shared results buffer.
pub const RESULTS_SIZE: u64 = 16 << 20;

/// Kernel command-line parameter through which the VMM tells a Linux guest
/// where the buffer is: `xvmm.results=<gpa hex>,<size hex>`.
pub const CMDLINE_RESULTS_PARAM: &str = "xvmm.results";

/// The word by which the VMM tells a Linux guest's `/init` (the built-in
/// xperf) that it is a VM's init: `xvmm_init=1` on the kernel command line,
/// which the kernel hands to init as the environment variable
/// [`INIT_ENV`]`=1` (an unknown `name=value` without a dot). Being PID 1 is
/// not enough: a container's PID 1 must stay a normal program.
pub const INIT_WORD: &str = "xvmm_init=1";
/// The environment variable [`INIT_WORD`] becomes.
pub const INIT_ENV: &str = "xvmm_init";

/// Port a guest writes a 32-bit page count to once it has put that many
/// guest-physical page addresses in the drop-request page: it asks the VMM to
/// drop those pages' host backing (`xvmm --host-fault-delay`), so that the
/// guest's next touch of each faults on the host.
pub const PORT_DROP_PAGES: u16 = 0x50c;

/// Offset of the drop-request page in the results buffer: its last page,
/// which a report never reaches before the requests are over (results are
/// written once, at the end).
pub const DROP_REQUEST_OFFSET: u64 = RESULTS_SIZE - 4096;

/// Bytes before the addresses in the drop-request page: the VMM's answer
/// ([`DropAnswer`], an i64), then 8 reserved bytes.
pub const DROP_REQUEST_HEADER: usize = 16;

/// Most pages one request may name (what fits in the page).
#[allow(clippy::cast_possible_truncation, reason = "(4096 - 16) / 8 = 510")]
pub const DROP_REQUEST_MAX: u32 = ((4096 - DROP_REQUEST_HEADER) / 8) as u32;

/// Guest page size of every address in a request.
pub const GUEST_PAGE: u64 = 4096;

/// Why the VMM refused a drop request. A request refused by its checks is
/// not acted on; one the host fails half way may have dropped its first pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropRefusal {
    /// The VMM was not started with `--host-fault-delay`.
    NotEnabled,
    /// 0 or more than [`DROP_REQUEST_MAX`] pages.
    Count(u32),
    /// An address that is not a page boundary.
    Unaligned(u64),
    /// A page that is not wholly inside guest RAM (the results slot included).
    OutsideRam(u64),
    /// The host failed to drop a page (an madvise or userfaultfd error).
    HostFailed,
    /// The VM has dropped this many separate page runs already.
    Limit(u64),
}

impl DropRefusal {
    /// The code the VMM writes back (negative; positive answers are counts).
    pub fn code(self) -> i64 {
        match self {
            DropRefusal::NotEnabled => -1,
            DropRefusal::Count(_) => -2,
            DropRefusal::Unaligned(_) => -3,
            DropRefusal::OutsideRam(_) => -4,
            DropRefusal::HostFailed => -5,
            DropRefusal::Limit(_) => -6,
        }
    }

    /// What an answer code means, for the guest (which gets only the code).
    pub fn describe(code: i64) -> &'static str {
        match code {
            0 => "no answer: the VMM is not xvmm or too old",
            -1 => "not started with --host-fault-delay",
            -2 => "a count of 0 or over the maximum",
            -3 => "an address not page aligned",
            -4 => "a page outside guest RAM",
            -5 => "the host failed to drop the pages",
            -6 => "too many separate page runs dropped in this VM",
            _ => "an unknown answer",
        }
    }
}

impl std::fmt::Display for DropRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DropRefusal::NotEnabled => {
                write!(f, "the VMM does not drop pages (no --host-fault-delay)")
            }
            DropRefusal::Count(n) => {
                write!(f, "{n} pages asked for; 1 to {DROP_REQUEST_MAX} allowed")
            }
            DropRefusal::Unaligned(a) => write!(f, "address {a:#x} is not page aligned"),
            DropRefusal::OutsideRam(a) => write!(f, "page {a:#x} is not inside guest RAM"),
            DropRefusal::HostFailed => write!(f, "the host could not drop the pages"),
            DropRefusal::Limit(n) => {
                write!(f, "more than {n} separate page runs dropped in this VM")
            }
        }
    }
}

/// What the VMM wrote back into the request page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropAnswer {
    /// Every page named was dropped.
    Dropped(u32),
    /// The request was refused with this code ([`DropRefusal::code`]).
    Refused(i64),
}

impl DropAnswer {
    pub fn encode(self) -> i64 {
        match self {
            DropAnswer::Dropped(n) => i64::from(n),
            DropAnswer::Refused(code) => code,
        }
    }

    /// The answer in `word`; 0 (the guest's "no answer yet") is refused too.
    pub fn decode(word: i64) -> DropAnswer {
        match u32::try_from(word) {
            Ok(n) if n > 0 => DropAnswer::Dropped(n),
            _ => DropAnswer::Refused(word),
        }
    }
}

/// The pages of a drop request: `count` (from the port write, so the guest
/// cannot change it after the VMM looked) little-endian u64 addresses after
/// the header of `page`, each page aligned and wholly inside one of `ram`
/// (`(start, size)` ranges). The guest is untrusted: every address is checked
/// and the first bad one refuses the whole request.
pub fn parse_drop_request(
    page: &[u8],
    count: u32,
    ram: &[(u64, u64)],
) -> Result<Vec<u64>, DropRefusal> {
    if count == 0 || count > DROP_REQUEST_MAX {
        return Err(DropRefusal::Count(count));
    }
    let body = page.get(DROP_REQUEST_HEADER..).unwrap_or(&[]);
    let mut pages = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let bytes = body
            .get(i * 8..i * 8 + 8)
            .ok_or(DropRefusal::Count(count))?;
        let gpa = u64::from_le_bytes(bytes.try_into().map_err(|_| DropRefusal::Count(count))?);
        if gpa % GUEST_PAGE != 0 {
            return Err(DropRefusal::Unaligned(gpa));
        }
        let inside = ram.iter().any(|&(start, size)| {
            gpa >= start
                && gpa
                    .checked_add(GUEST_PAGE)
                    .is_some_and(|end| end <= start.saturating_add(size))
        });
        if !inside {
            return Err(DropRefusal::OutsideRam(gpa));
        }
        pages.push(gpa);
    }
    Ok(pages)
}

#[cfg(test)]
mod drop_tests {
    use super::*;

    fn request(gpas: &[u64]) -> Vec<u8> {
        let mut page = vec![0u8; 4096];
        for (i, g) in gpas.iter().enumerate() {
            let at = DROP_REQUEST_HEADER + i * 8;
            page[at..at + 8].copy_from_slice(&g.to_le_bytes());
        }
        page
    }

    const RAM: &[(u64, u64)] = &[(0, 0x8000_0000), (0x1_0000_0000, 0x1000_0000)];

    #[test]
    fn good_requests_name_their_pages() {
        let page = request(&[0x1000, 0x7fff_f000, 0x1_0fff_f000]);
        assert_eq!(
            parse_drop_request(&page, 3, RAM),
            Ok(vec![0x1000, 0x7fff_f000, 0x1_0fff_f000])
        );
        // The count comes from the port: addresses after it are not read.
        assert_eq!(parse_drop_request(&page, 1, RAM), Ok(vec![0x1000]));
    }

    #[test]
    fn bad_requests_are_refused_whole() {
        let page = request(&[0x1000, 0x2001]);
        assert_eq!(
            parse_drop_request(&page, 2, RAM),
            Err(DropRefusal::Unaligned(0x2001))
        );
        // The hole, the results slot, past the end, the wrap-around page.
        for gpa in [0x8000_0000, RESULTS_GPA, 0x1_1000_0000, !0xfff] {
            assert_eq!(
                parse_drop_request(&request(&[gpa]), 1, RAM),
                Err(DropRefusal::OutsideRam(gpa)),
                "{gpa:#x}"
            );
        }
        assert_eq!(
            parse_drop_request(&page, 0, RAM),
            Err(DropRefusal::Count(0))
        );
        let over = DROP_REQUEST_MAX + 1;
        assert_eq!(
            parse_drop_request(&page, over, RAM),
            Err(DropRefusal::Count(over))
        );
        // A page shorter than the count says.
        assert_eq!(
            parse_drop_request(&page[..24], 2, RAM),
            Err(DropRefusal::Count(2))
        );
    }

    #[test]
    fn answers_round_trip_and_zero_is_no_answer() {
        for a in [
            DropAnswer::Dropped(1),
            DropAnswer::Dropped(DROP_REQUEST_MAX),
        ] {
            assert_eq!(DropAnswer::decode(a.encode()), a);
        }
        for refusal in [
            DropRefusal::OutsideRam(0),
            DropRefusal::Limit(5),
            DropRefusal::NotEnabled,
        ] {
            let refused = DropAnswer::Refused(refusal.code());
            assert_eq!(DropAnswer::decode(refused.encode()), refused);
            assert_ne!(DropRefusal::describe(refusal.code()), "an unknown answer");
        }
        assert_eq!(DropAnswer::decode(0), DropAnswer::Refused(0));
        assert_eq!(DropAnswer::decode(i64::MAX), DropAnswer::Refused(i64::MAX));
    }
}
