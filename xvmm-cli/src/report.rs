//! `xvmm report FILE... -o OUT [--markdown]`: result files as one HTML page
//! (or Markdown). The destination is checked before any file is read and
//! written once, atomically, when the page is complete: a bad input or a
//! failure leaves nothing at `-o`.

use super::cli::ReportArgs;
use super::input;
use super::output::Stdout;
use super::progress::Terminal;
use std::path::Path;
use xvmm::progress::Progress;
use xvmm::{Error, Result};
use xvmm_report::{self as report, Input};

/// Where the page goes, checked before reading.
enum Destination {
    Stdout,
    File(xvmm_host::Output),
}

fn destination(path: &Path) -> Result<Destination> {
    if path == Path::new("-") {
        return Ok(Destination::Stdout);
    }
    xvmm_host::Output::prepare(path)
        .map(Destination::File)
        .map_err(|e| Error::Io(format!("cannot write {}: {e}", path.display())))
}

/// The name a file is shown under: its file name (the column headers number
/// the files, so two of the same name stay apart).
fn label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Reads and checks every file; the first bad one is the error.
fn read_inputs(files: &[std::path::PathBuf], progress: &dyn Progress) -> Result<Vec<Input>> {
    progress.begin("reading result files", files.len() as u64);
    let mut inputs = Vec::with_capacity(files.len());
    for path in files {
        progress.step(&label(path));
        let report = input::read_report(path, "result file")?;
        inputs.push(Input {
            label: label(path),
            report,
        });
    }
    progress.finish();
    Ok(inputs)
}

pub fn report(args: &ReportArgs, stdout: &Stdout) -> Result<()> {
    let out = destination(&args.output)?;
    let progress = Terminal::new(false);
    let inputs = read_inputs(&args.files, &progress)?;
    let page = if args.markdown {
        report::markdown(&inputs, &progress)
    } else {
        report::html(&inputs, &progress)
    };
    match out {
        Destination::Stdout => {
            stdout.print(&page);
            Ok(())
        }
        Destination::File(out) => {
            out.commit(page.as_bytes())
                .map_err(|e| Error::Io(format!("cannot write {}: {e}", args.output.display())))?;
            stdout.print(&format!(
                "report of {} file(s) written to {} ({} bytes)\n",
                inputs.len(),
                args.output.display(),
                page.len()
            ));
            Ok(())
        }
    }
}
