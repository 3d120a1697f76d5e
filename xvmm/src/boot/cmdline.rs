//! The kernel command line: default, length limits, placement.

use crate::layout;
use crate::{Error, Result};

/// Linux's x86 `COMMAND_LINE_SIZE` (bytes including the NUL). PVH has no header
/// field saying how much a kernel accepts, so this is the limit for PVH boots.
pub const PVH_CMDLINE_SIZE: usize = 2048;
/// Limit for boot protocols older than 2.06, which have no `cmdline_size` field.
pub const LEGACY_CMDLINE_SIZE: usize = 256;

/// The default command line: serial console, reboot through the keyboard controller
/// (which xvmm sees), reboot right after a panic, and where the results slot is.
pub fn default_cmdline() -> String {
    format!(
        "console=ttyS0 reboot=k panic=-1 {}={:#x},{:#x}",
        layout::CMDLINE_RESULTS_PARAM,
        layout::RESULTS_GPA,
        layout::RESULTS_SIZE
    )
}

/// Checks `cmdline` against `size` (the protocol's limit in bytes including the
/// terminating NUL) and returns it NUL-terminated.
pub fn encode(cmdline: &str, size: usize, limit_source: &str) -> Result<Vec<u8>> {
    if cmdline.contains('\0') {
        return Err(Error::Cmdline("command line contains a NUL byte".into()));
    }
    let max = size
        .min(xvmm_results::num::usize_from(layout::CMDLINE_MAX_SIZE))
        .saturating_sub(1);
    if cmdline.len() > max {
        return Err(Error::Cmdline(format!(
            "command line is {} bytes, the kernel accepts at most {max} ({limit_source})",
            cmdline.len()
        )));
    }
    let mut bytes = Vec::with_capacity(cmdline.len() + 1);
    bytes.extend_from_slice(cmdline.as_bytes());
    bytes.push(0);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_the_results_slot() {
        assert_eq!(
            default_cmdline(),
            "console=ttyS0 reboot=k panic=-1 xvmm.results=0xd0000000,0x1000000"
        );
    }

    #[test]
    fn limits() {
        assert_eq!(encode("ab", 3, "x").unwrap(), b"ab\0");
        let err = encode("abc", 3, "cmdline_size 2").unwrap_err().to_string();
        assert_eq!(
            err,
            "cmdline: command line is 3 bytes, the kernel accepts at most 2 (cmdline_size 2)"
        );
        assert!(encode("a\0b", 100, "x").is_err());
        // A kernel's huge cmdline_size is capped by the room xvmm reserves.
        let long = "a".repeat(xvmm_results::num::usize_from(layout::CMDLINE_MAX_SIZE));
        assert!(encode(&long, usize::MAX, "x").is_err());
    }
}
