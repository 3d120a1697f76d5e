//! What every measuring run writes at its end, in one place: the JSON first
//! (a table that cannot be printed must not cost the results), then the
//! OpenMetrics file, then the tables: on stdout, or on stderr when stdout
//! carries the JSON; with `--quiet`, nothing but the JSON.

use super::output::{self, JsonOutput, MetricsOutput, Stdout};
use xvmm::Result;
use xvmm_results::{render, Report};

/// Where a run's report goes besides the terminal, each opened before it ran.
pub struct To {
    pub json: Option<JsonOutput>,
    pub metrics: Option<MetricsOutput>,
}

/// Writes `report` as JSON and OpenMetrics (where asked) and prints its
/// tables followed by `extra` (more tables: host exits, a comparison). A
/// file that fails does not stop the other from being written.
pub fn report(report: &Report, extra: &str, to: To, quiet: bool, stdout: &Stdout) -> Result<()> {
    let text = render::report(report) + extra;
    let json_on_stdout = to.json.as_ref().is_some_and(JsonOutput::is_stdout);
    if json_on_stdout && !quiet {
        output::eprint(&text);
    }
    let written = match to.json {
        Some(out) => out.deliver(&report.to_json_pretty(), stdout),
        None => Ok(()),
    };
    let metrics = match to.metrics {
        Some(out) => out.deliver(report),
        None => Ok(()),
    };
    if !json_on_stdout && !quiet {
        stdout.print(&text);
    }
    written.and(metrics)
}
