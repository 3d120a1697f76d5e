//! `host-state record` (the suite's first step) undoes what dead xvmm and
//! xperf processes left before it reads the host, so that a journal a
//! killed earlier run left is not taken for the state to come back to
//! (the suite's first xvmm undoes it, and the end would differ).

use std::path::Path;
use std::process::Command;

/// Runs `host-state VERB FILE` with its journals in `dir`; fails with its
/// stderr unless it succeeds.
fn host_state(verb: &str, file: &Path, dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_host-state"))
        .arg(verb)
        .arg(file)
        .env("XVMM_STATE_DIR", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "host-state {verb}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_dead_process_journal_is_undone_before_the_state_is_recorded() {
    let dir = std::env::temp_dir().join(format!("xvmm-host-state-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // A PID above any pid_max: that process cannot be alive.
    let journal = dir.join("journal-99999999.json");
    std::fs::write(
        &journal,
        r#"{"tool":"xvmm","pid":99999999,"start_time":1,"changes":[]}"#,
    )
    .unwrap();
    let file = dir.with_extension("start");
    host_state("record", &file, &dir);
    assert!(
        !journal.exists(),
        "the dead process's journal is still there"
    );
    let recorded = std::fs::read_to_string(&file).unwrap();
    assert!(recorded.contains("journals\t\n"), "{recorded}");
    // And the check against it holds.
    host_state("check", &file, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&file);
}
