//! The built-in bare-metal microguest: xvmm's default run (no `--kernel`).
//!
//! xvmm builds long mode, GDT, TSS, IDT and page tables itself; the guest
//! ([`guest`]) is a CPL3 measurement loop per kind plus minimal CPL0 handlers.
//! Each measurement runs in its own small VM ([`machine`]); [`measure`] turns
//! the stamps into an `xvmm_results::Report` (environment `microguest`).
//!
//! - [`layout`]: the guest's address space and control block.
//! - [`tables`]: GDT/TSS/IDT/page-table encoding (pure).
//! - [`guest`]: the guest code (assembly) and its entry points.
//! - [`machine`]: one VM per phase, the exit loop, host stamps around KVM_RUN.
//! - [`measure`]: phases -> crossings, exits, null overhead; host facts.
//! - [`verify`]: the properties every report must have (shared by tests).

pub mod guest;
pub mod layout;
pub mod machine;
pub mod measure;
pub mod tables;
pub mod verify;

pub use measure::{measure, Measured, Options};

use crate::app::cli::RunArgs;
use crate::progress::{Progress, Silent};
use crate::{Error, Result};
use std::io::Write;
use std::path::Path;

/// Samples per crossing by default: a few seconds on real hardware and under
/// this machine's emulated CPL0 (~20 us per crossing).
pub const DEFAULT_SAMPLES: u64 = 10_000;
pub const DEFAULT_WARMUP: u64 = 1_000;

/// `xvmm` without `--kernel`: measure, print the tables, write the JSON.
pub fn run(args: &RunArgs) -> Result<()> {
    let opts = Options::from_args(args)?;
    if let Some(cpu) = args.pin {
        crate::vcpu::pin_current_thread(cpu)?;
    }
    // A bar only for long runs, and only for a person watching.
    let show_bar = !args.quiet
        && opts.samples >= DEFAULT_SAMPLES
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let bar;
    let progress: &dyn Progress = if show_bar {
        bar = Bar::new();
        &bar
    } else {
        &Silent
    };
    let timeout = std::time::Duration::from_secs(args.timeout);
    let measured = measure::measure(&opts, timeout, progress)?;
    let report = measured.report;
    let to_stdout = args.json.as_deref() == Some(Path::new("-"));
    // The file first: a table that cannot be printed must not lose the results.
    if let Some(path) = args.json.as_deref().filter(|p| *p != Path::new("-")) {
        write_json(path, &report.to_json_pretty())?;
    }
    let table = crate::report::microguest_tables(&report);
    if args.quiet {
        // --quiet: the JSON (if asked for) is the only output.
    } else if to_stdout {
        // Keep stdout pure JSON; the table goes to stderr.
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    if to_stdout {
        write_json(Path::new("-"), &report.to_json_pretty())?;
    }
    // A run stopped by --timeout or Ctrl-C still wrote what it measured.
    match measured.stopped {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// [`Progress`] as an indicatif bar on stderr. (To move to the app layer,
/// which alone should know the terminal.)
struct Bar(indicatif::ProgressBar);

impl Bar {
    fn new() -> Bar {
        let style =
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        Bar(indicatif::ProgressBar::new(0).with_style(style))
    }
}

impl Progress for Bar {
    fn begin(&self, _what: &str, total: u64) {
        self.0.set_length(total);
        self.0.reset();
    }
    fn step(&self, next: &str) {
        self.0.set_message(next.to_string());
        self.0.inc(1);
    }
    fn message(&self, text: &str) {
        self.0.set_message(text.to_string());
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// Writes `text` to `path` atomically (temporary file + rename), or to stdout for "-".
pub fn write_json(path: &Path, text: &str) -> Result<()> {
    if path == Path::new("-") {
        let mut out = std::io::stdout().lock();
        return out
            .write_all(text.as_bytes())
            .and_then(|_| out.write_all(b"\n"))
            .map_err(|e| Error::Io(format!("cannot write the JSON to stdout: {e}")));
    }
    crate::linux::write_atomically(path, format!("{text}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_written_atomically_and_errors_are_one_line() {
        let dir = std::env::temp_dir().join(format!("xvmm-mg-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.json");
        write_json(&path, "{}").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}\n");
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
        let err = write_json(&dir.join("missing/out.json"), "{}")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("io: cannot write") && !err.contains('\n'),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
