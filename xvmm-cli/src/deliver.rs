//! What every measuring run writes at its end, in one place: the JSON first
//! (a table that cannot be printed must not cost the results), then the
//! tables: on stdout, or on stderr when stdout carries the JSON; with
//! `--quiet`, nothing but the JSON.

use super::output::{self, JsonOutput, Stdout};
use xvmm::Result;
use xvmm_results::{render, Report};

/// Writes `report` as JSON to `json` (if any) and prints its tables followed
/// by `extra` (more tables: host exits, a comparison).
pub fn report(
    report: &Report,
    extra: &str,
    json: Option<JsonOutput>,
    quiet: bool,
    stdout: &Stdout,
) -> Result<()> {
    let text = render::report(report) + extra;
    match json {
        Some(out) if out.is_stdout() => {
            if !quiet {
                output::eprint(&text);
            }
            out.deliver(&report.to_json_pretty(), stdout)
        }
        Some(out) => {
            let written = out.deliver(&report.to_json_pretty(), stdout);
            if !quiet {
                stdout.print(&text);
            }
            written
        }
        None => {
            if !quiet {
                stdout.print(&text);
            }
            Ok(())
        }
    }
}
