//! Reading input files a user names: only regular files, only up to a size
//! that fits the purpose (see [`xvmm_host::file::read_bounded`]).

use std::path::Path;
use xvmm::{Error, Result};
use xvmm_results::Report;

/// Largest result file read: a `--raw` run of a million samples fits.
pub const MAX_REPORT_BYTES: u64 = 256 << 20;
/// Largest vmlinux `xvmm kernel hooks` reads (a debug-info build is ~500 MiB).
pub const MAX_VMLINUX_BYTES: u64 = 1 << 30;
/// Largest file `xvmm initramfs` puts in an archive (cpio newc's limit is 4 GiB;
/// an initramfs the kernel unpacks into RAM is far smaller).
pub const MAX_INITRAMFS_FILE_BYTES: u64 = 1 << 30;

/// The bytes of `path` (at most `limit`), or one line naming `what` it is.
pub fn read_regular(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    xvmm_host::file::read_bounded(path, limit).map_err(|e| {
        let shown = path.display();
        match e.kind() {
            std::io::ErrorKind::NotFound => Error::Io(format!("{what} {shown}: no such file")),
            _ => Error::Io(format!("{what} {shown}: {e}")),
        }
    })
}

/// A result file written by xvmm or xperf, parsed and schema-checked.
pub fn read_report(path: &Path, what: &str) -> Result<Report> {
    let bytes = read_regular(path, MAX_REPORT_BYTES, what)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| Error::Io(format!("{what} {}: not UTF-8 text", path.display())))?;
    Report::from_json(text).map_err(|e| Error::Io(format!("{what} {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_what_and_where_in_one_line() {
        let err = read_report(Path::new("/nonexistent/r.json"), "report").unwrap_err();
        assert_eq!(
            err.to_string(),
            "io: report /nonexistent/r.json: no such file"
        );
        let err = read_report(Path::new("/dev/zero"), "VM report").unwrap_err();
        assert_eq!(
            err.to_string(),
            "io: VM report /dev/zero: not a regular file"
        );
        let dir = std::env::temp_dir().join(format!("xvmm-input-rep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"schema\": 1}").unwrap();
        let err = read_report(&bad, "report").unwrap_err().to_string();
        assert!(
            err.contains("results are not valid JSON") && !err.contains('\n'),
            "{err}"
        );
        std::fs::write(&bad, [0xff, 0xfe]).unwrap();
        let err = read_report(&bad, "report").unwrap_err().to_string();
        assert!(err.ends_with("not UTF-8 text"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
