//! Shared parts of the two static init programs:
//! - `xvmm-init`: `/init` of L2 boot-test guests (prints a marker, then does
//!   what `xvmm.init=` on the kernel command line asks).
//! - `l1-init`: `/init` of the nested harness's L1 host (runs a test plan).
//!
//! Pure parsing lives in [`action`] and [`plan`]; system calls in `xvmm_guest::sys`.

pub mod action;
pub mod memory;
pub mod plan;
pub mod record;

/// Printed to the console by `xvmm-init` as soon as it runs: proof the guest
/// kernel booted and unpacked the initramfs.
pub const MARKER: &str = "XVMM-INIT: reached /init";

/// Follows [`MARKER`] on its line with the guest's uptime in seconds
/// (`/proc/uptime`) at that moment: `XVMM-INIT: reached /init uptime=1.23`.
pub const UPTIME_KEY: &str = "uptime=";

/// The uptime carried by a marker line, if any.
pub fn marker_uptime(line: &str) -> Option<f64> {
    let rest = &line[line.find(MARKER)? + MARKER.len()..];
    rest.split_whitespace()
        .find_map(|w| w.strip_prefix(UPTIME_KEY)?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_is_read_from_the_marker_line() {
        assert_eq!(
            marker_uptime("XVMM-INIT: reached /init uptime=1.25"),
            Some(1.25)
        );
        assert_eq!(marker_uptime("x| XVMM-INIT: reached /init uptime=?"), None);
        assert_eq!(marker_uptime("XVMM-INIT: reached /init"), None);
        assert_eq!(marker_uptime("uptime=3"), None);
    }
}
