//! A test that cannot run on this machine says so where the suite's
//! summary sees it: `./test.sh` points `XVMM_SKIP_LOG` at a file, each skip
//! appends one line to it, and the summary lists them and counts them apart
//! from the tests that passed (cargo counts a test that returned early as
//! passed).

use std::io::Write;

/// The variable naming the skip log.
pub const LOG_VAR: &str = "XVMM_SKIP_LOG";

/// Records that the running test is skipped for `reason` (the test's name
/// is its thread's, as libtest names them) and returns the line to print,
/// `SKIPPED <test>: <reason>`.
pub fn record(reason: &str) -> String {
    record_to(
        std::env::var_os(LOG_VAR)
            .as_deref()
            .map(std::path::Path::new),
        reason,
    )
}

fn record_to(log: Option<&std::path::Path>, reason: &str) -> String {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_string();
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| s.split('-').next().unwrap_or_default().to_string())
        .unwrap_or_default();
    let reason = reason.replace('\n', " ");
    let line = format!("SKIPPED {binary}::{test}: {reason}");
    if let Some(path) = log {
        // O_APPEND keeps lines of parallel tests whole.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            return format!("{line} (not recorded in {}: {e})", path.display());
        }
    }
    line
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_skip_names_the_test_and_its_reason_in_the_log() {
        let log = std::env::temp_dir().join(format!("xvmm-skip-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let line = super::record_to(Some(&log), "no /dev/kvm here\nreally");
        let want =
            "SKIPPED xvmm_host::skip::tests::a_skip_names_the_test_and_its_reason_in_the_log: \
                    no /dev/kvm here really";
        assert_eq!(line, want);
        super::record_to(Some(&log), "again");
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert_eq!(text.lines().next(), Some(want));
        std::fs::remove_file(&log).unwrap();
    }
}
