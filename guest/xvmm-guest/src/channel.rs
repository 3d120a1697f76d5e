//! Getting the report out: an atomic file write on bare metal, or the VMM's
//! results channel in a guest started by xvmm (`xvmm.results=GPA,SIZE` on the
//! kernel command line, the buffer reached through /dev/mem, a doorbell port).

use crate::sys;
use crate::{Error, Result};
use xvmm_results::channel::{
    CMDLINE_RESULTS_PARAM, PORT_EXIT, PORT_INTERVALS, PORT_RESULTS_DOORBELL, RESULTS_SIZE,
};

/// Guest pages are 4 KiB: the buffer must start on one.
const PAGE_SIZE: u64 = 4096;

/// The results buffer the VMM announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultsRegion {
    pub gpa: u64,
    pub size: u64,
}

fn parse_hex(text: &str) -> Option<u64> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    u64::from_str_radix(digits, 16).ok()
}

/// Finds `xvmm.results=<gpa hex>,<size hex>` in a kernel command line (the last
/// one wins, as for the kernel's own parameters). `Ok(None)` when absent.
pub fn parse_results_param(cmdline: &str) -> Result<Option<ResultsRegion>> {
    let prefix = format!("{CMDLINE_RESULTS_PARAM}=");
    let Some(value) = cmdline
        .split_whitespace()
        .filter_map(|word| word.strip_prefix(prefix.as_str()))
        .next_back()
    else {
        return Ok(None);
    };
    let bad = |why: &str| Error::Channel(format!("{prefix}{value}: {why}"));
    let (gpa, size) = value
        .split_once(',')
        .ok_or_else(|| bad("expected <gpa hex>,<size hex>"))?;
    let gpa = parse_hex(gpa).ok_or_else(|| bad("address is not hexadecimal"))?;
    let size = parse_hex(size).ok_or_else(|| bad("size is not hexadecimal"))?;
    if gpa & (PAGE_SIZE - 1) != 0 {
        return Err(bad("address is not page-aligned"));
    }
    if size == 0 || size > RESULTS_SIZE {
        return Err(bad(&format!("size must be 1..={RESULTS_SIZE:#x} bytes")));
    }
    if gpa.checked_add(size).is_none() || i64::try_from(gpa + size).is_err() {
        return Err(bad("region does not fit in the physical address space"));
    }
    Ok(Some(ResultsRegion { gpa, size }))
}

/// Reads /proc/cmdline and looks for the results parameter.
pub fn results_region_from_proc() -> Result<Option<ResultsRegion>> {
    match std::fs::read_to_string("/proc/cmdline") {
        Ok(text) => parse_results_param(&text),
        // Without /proc we cannot be in a guest xvmm prepared for us.
        Err(_) => Ok(None),
    }
}

/// A shared mapping of guest-physical memory through /dev/mem (the VMM's
/// buffer), unmapped on drop.
pub struct PhysMapping {
    base: *mut u8,
    len: usize,
}

impl PhysMapping {
    /// Maps `len` bytes at guest-physical `gpa`, read-write.
    pub fn new(gpa: u64, len: u64) -> Result<PhysMapping> {
        let map_len = usize::try_from(len)
            .map_err(|_| Error::Channel("buffer size does not fit in usize".into()))?;
        let offset = libc::off_t::try_from(gpa)
            .map_err(|_| Error::Channel("buffer address does not fit in off_t".into()))?;
        // SAFETY: open a NUL-terminated path; checked below.
        let fd = unsafe { libc::open(c"/dev/mem".as_ptr(), libc::O_RDWR | libc::O_SYNC) };
        if fd < 0 {
            return Err(Error::last_os("open /dev/mem"));
        }
        // SAFETY: a shared mapping of the announced region, whose size and
        // offset the callers bounded by the channel's limits; checked for
        // MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset,
            )
        };
        // SAFETY: closing the descriptor we opened; a mapping keeps its own reference.
        unsafe { libc::close(fd) };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os(&format!(
                "mmap of /dev/mem at {gpa:#x}+{len:#x}"
            )));
        }
        Ok(PhysMapping {
            base: base.cast(),
            len: map_len,
        })
    }

    /// The first byte of the mapping (valid for its length while it lives).
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }
}

impl Drop for PhysMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Copies the report into the VMM's buffer and rings the doorbell with its length.
pub fn send_to_vmm(region: ResultsRegion, json: &str) -> Result<()> {
    let len = json.len() as u64;
    if len > region.size {
        return Err(Error::Channel(format!(
            "report is {len} bytes, the buffer holds {}",
            region.size
        )));
    }
    let len32 = u32::try_from(len)
        .map_err(|_| Error::Channel(format!("report of {len} bytes exceeds the doorbell's u32")))?;
    let buffer = PhysMapping::new(region.gpa, region.size)?;
    // SAFETY: json.len() <= region.size == the mapped length.
    unsafe { std::ptr::copy_nonoverlapping(json.as_ptr(), buffer.as_ptr(), json.len()) };
    drop(buffer);
    sys::ioperm(PORT_RESULTS_DOORBELL, 4)?;
    sys::outl(PORT_RESULTS_DOORBELL, len32);
    Ok(())
}

/// Chunks of a workload's intervals to the VMM through the results buffer
/// ([`PORT_INTERVALS`]): each is copied out by the VMM during the port
/// write, so the buffer is free again when [`IntervalChannel::send`]
/// returns. The report, sent last, overwrites what is left.
pub struct IntervalChannel {
    buffer: PhysMapping,
    size: u64,
}

impl IntervalChannel {
    pub fn open(region: ResultsRegion) -> Result<IntervalChannel> {
        let buffer = PhysMapping::new(region.gpa, region.size)?;
        sys::ioperm(PORT_INTERVALS, 4)?;
        Ok(IntervalChannel {
            buffer,
            size: region.size,
        })
    }

    /// The largest chunk the buffer takes.
    pub fn capacity(&self) -> usize {
        usize::try_from(self.size).unwrap_or(usize::MAX)
    }

    pub fn send(&self, bytes: &[u8]) -> Result<()> {
        let len = u32::try_from(bytes.len())
            .ok()
            .filter(|_| bytes.len() <= self.capacity())
            .ok_or_else(|| {
                Error::Channel(format!(
                    "a chunk of {} bytes does not fit the buffer's {}",
                    bytes.len(),
                    self.size
                ))
            })?;
        // SAFETY: bytes.len() <= size, the mapped length.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.buffer.as_ptr(), bytes.len());
        }
        sys::outl(PORT_INTERVALS, len);
        Ok(())
    }
}

/// Tells the VMM to end the VM with `code` as its exit status, once the
/// console has sent everything written to it.
pub fn exit_vm(code: u8) -> Result<()> {
    sys::ioperm(PORT_EXIT, 1)?;
    sys::drain_console();
    sys::outb(PORT_EXIT, code);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_parameter_parses_with_and_without_prefix() {
        let line = "console=ttyS0 xvmm.results=0xd0000000,0x1000000 rdinit=/init\n";
        assert_eq!(
            parse_results_param(line).unwrap(),
            Some(ResultsRegion {
                gpa: 0xd000_0000,
                size: 0x100_0000
            })
        );
        assert_eq!(
            parse_results_param("xvmm.results=d0000000,1000").unwrap(),
            Some(ResultsRegion {
                gpa: 0xd000_0000,
                size: 0x1000
            })
        );
        assert_eq!(parse_results_param("console=ttyS0 quiet").unwrap(), None);
        // The last occurrence wins.
        let twice = "xvmm.results=0x1000,0x1000 xvmm.results=0x2000,0x2000";
        assert_eq!(
            parse_results_param(twice).unwrap().map(|r| r.gpa),
            Some(0x2000)
        );
    }

    #[test]
    fn results_parameter_rejects_bad_values() {
        for bad in [
            "xvmm.results=",
            "xvmm.results=0xd0000000",
            "xvmm.results=zz,0x1000",
            "xvmm.results=0xd0000000,",
            "xvmm.results=0xd0000001,0x1000",
            "xvmm.results=0xd0000000,0",
            "xvmm.results=0xd0000000,0x1000001",
            "xvmm.results=0xfffffffffffff000,0x1000",
        ] {
            let err = parse_results_param(bad).unwrap_err();
            assert!(matches!(err, Error::Channel(_)), "{bad}: {err}");
            assert!(!err.to_string().contains('\n'));
        }
    }

    /// Found by fuzzing (fuzz/fuzz_targets/results_param.rs): a control
    /// character in the parameter reached the terminal raw in the error.
    #[test]
    fn bad_values_are_shown_escaped() {
        let err = parse_results_param("xvmm.results=0xd00000\u{10}0,0x1000").unwrap_err();
        assert_eq!(
            err.to_string(),
            "xvmm.results=0xd00000\\x100,0x1000: address is not hexadecimal"
        );
    }

    /// From a fuzz run (fuzz/seeds/results_param/crash-parameter-inside-a-word;
    /// the target's check was the one at fault): only a whole word starting
    /// with `xvmm.results=` is the parameter, not one that holds it.
    #[test]
    fn the_parameter_inside_another_word_is_not_the_parameter() {
        assert_eq!(
            parse_results_param("exvmm.results=d0000000,1000 x=xvmm.results=0,0"),
            Ok(None)
        );
        let last = parse_results_param("xvmm.results=d0000000,1000 exvmm.results=zz").unwrap();
        assert_eq!(last.map(|r| r.gpa), Some(0xd000_0000));
    }

    #[test]
    fn oversized_report_is_refused_before_touching_dev_mem() {
        let region = ResultsRegion {
            gpa: 0xd000_0000,
            size: 4,
        };
        let err = send_to_vmm(region, "12345").unwrap_err();
        assert!(err.to_string().contains("5 bytes"), "{err}");
    }
}
