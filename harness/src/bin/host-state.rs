//! The host's tracing state around a test run (`./test.sh`, README
//! "Testing"): `host-state record FILE` saves it, after undoing what dead
//! xvmm and xperf processes left (their journals: a killed earlier run; the
//! suite's own first xvmm would undo it, and the end would then differ
//! from a start that still held it), `host-state check FILE`
//! compares the host with it and names each difference (exit 1), so a
//! suite that leaves tracefs mounted, an instance, a dynamic event, a
//! tracer, a filter, `kprobes-optimization` or a journal of host changes
//! behind fails. Reading changes nothing (see
//! `xvmm_host::host_state::snapshot`).

use std::process::ExitCode;
use xvmm_host::host_state::snapshot;

const USAGE: &str = "usage: host-state record FILE | host-state check FILE";

/// Undoes what dead xvmm and xperf processes left, one line each.
fn recover_orphans() {
    let recovery = xvmm_host::host_state::undo::recover_orphans();
    for line in recovery.messages("host-state") {
        eprintln!("{line}");
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (verb, file) = match args.as_slice() {
        [verb, file] => (verb.as_str(), file.as_str()),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if verb == "record" {
        recover_orphans();
    }
    let now = snapshot::snapshot(None);
    match verb {
        "record" => match std::fs::write(file, snapshot::to_text(&now)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("host-state: writing {file}: {e}");
                ExitCode::FAILURE
            }
        },
        "check" => {
            let before = match std::fs::read_to_string(file) {
                Ok(text) => snapshot::from_text(&text),
                Err(e) => {
                    eprintln!("host-state: reading {file}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let differences = snapshot::differences(&before, &now);
            if differences.is_empty() {
                println!("host state: as at the start ({} items compared)", now.len());
                return ExitCode::SUCCESS;
            }
            eprintln!("host state changed by the run:");
            for d in &differences {
                eprintln!("  {}", xvmm_host::escape::visible(d));
            }
            ExitCode::FAILURE
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
