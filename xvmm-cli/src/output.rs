//! Where results go, and what happens when they cannot get there.
//!
//! - stdout: a broken pipe (`xvmm | head`) ends output quietly; any other
//!   failure (`> /dev/full`, a full disk, a stdout closed at start: `>&-`)
//!   is remembered and reported once at the end. Either way the run goes
//!   on, so that results are still written and host state is still restored.
//! - `--json` destinations are checked and opened before anything is measured
//!   ([`JsonOutput::prepare`]). If one still fails at the end, the JSON goes to
//!   a fallback file whose path is printed: a measurement is never lost.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use xvmm::{Error, Result};

#[derive(Debug)]
enum Health {
    Fine,
    BrokenPipe,
    Failed(io::Error),
}

/// The process's stdout, shared by the app and the guest console writer.
#[derive(Clone, Debug)]
pub struct Stdout {
    health: Arc<Mutex<Health>>,
}

impl Default for Stdout {
    fn default() -> Self {
        Stdout::new()
    }
}

impl Stdout {
    pub fn new() -> Stdout {
        Stdout {
            health: Arc::new(Mutex::new(Health::Fine)),
        }
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `bytes` unless stdout already failed; a failure is recorded.
    pub fn write_bytes(&self, bytes: &[u8]) {
        let mut health = self.health();
        if !matches!(*health, Health::Fine) {
            return;
        }
        let written = if xvmm_host::stdio::stdout_was_closed() {
            Err(xvmm_host::stdio::closed_error())
        } else {
            let mut out = io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        };
        if let Err(e) = written {
            *health = if e.kind() == io::ErrorKind::BrokenPipe {
                Health::BrokenPipe
            } else {
                Health::Failed(e)
            };
        }
    }

    pub fn print(&self, text: &str) {
        self.write_bytes(text.as_bytes());
    }

    /// Whether everything written so far arrived.
    pub fn is_fine(&self) -> bool {
        matches!(*self.health(), Health::Fine)
    }

    /// The error to end with: a failed stdout is one; a broken pipe is not
    /// (the reader left, as `head` does).
    pub fn outcome(&self) -> Result<()> {
        match &*self.health() {
            Health::Failed(e) => Err(Error::Io(format!("cannot write to stdout: {e}"))),
            _ => Ok(()),
        }
    }
}

/// Writes to stderr, ignoring failure: there is nowhere left to complain.
pub fn eprint(text: &str) {
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

/// A `--json` destination, checked before measuring.
#[derive(Debug)]
pub enum JsonOutput {
    Stdout,
    File {
        path: PathBuf,
        out: xvmm_host::Output,
    },
}

impl JsonOutput {
    /// `-` is stdout; anything else must be writable now.
    pub fn prepare(path: &Path) -> Result<JsonOutput> {
        if path == Path::new("-") {
            return Ok(JsonOutput::Stdout);
        }
        let out = prepared(path)?;
        Ok(JsonOutput::File {
            path: path.to_path_buf(),
            out,
        })
    }

    pub fn is_stdout(&self) -> bool {
        matches!(self, JsonOutput::Stdout)
    }

    /// Writes `json` (a newline is added). If the destination fails, the
    /// JSON goes to a fallback file and the error names both.
    pub fn deliver(self, json: &str, stdout: &Stdout) -> Result<()> {
        let text = format!("{json}\n");
        let (what, failure) = match self {
            JsonOutput::Stdout => {
                stdout.print(&text);
                if stdout.is_fine() {
                    return Ok(());
                }
                ("stdout".to_string(), "it is closed or failing".to_string())
            }
            JsonOutput::File { path, out } => match out.commit(text.as_bytes()) {
                Ok(()) => return Ok(()),
                Err(e) => (path.display().to_string(), e.to_string()),
            },
        };
        Err(saved_instead(
            ("the results", "xvmm-results"),
            &what,
            &failure,
            &text,
        ))
    }
}

/// A file destination checked and opened now, before anything is measured.
fn prepared(path: &Path) -> Result<xvmm_host::Output> {
    xvmm_host::Output::prepare(path)
        .map_err(|e| Error::Io(format!("cannot write {}: {e}", path.display())))
}

/// `text` (`what_text`, e.g. "the results") that could not be written to
/// `to` saved to a fallback file named from `prefix`; the error names both.
fn saved_instead((what_text, prefix): (&str, &str), to: &str, failure: &str, text: &str) -> Error {
    match xvmm_host::file::save_fallback(prefix, text.as_bytes()) {
        Ok(saved) => Error::Io(format!(
            "cannot write {what_text} to {to} ({failure}); they were saved to {}",
            saved.display()
        )),
        Err(e) => Error::Io(format!(
            "cannot write {what_text} to {to} ({failure}), nor to a fallback file ({e})"
        )),
    }
}

/// An `--openmetrics` destination, checked before measuring.
#[derive(Debug)]
pub struct MetricsOutput {
    path: PathBuf,
    out: xvmm_host::Output,
}

impl MetricsOutput {
    pub fn prepare(path: &Path) -> Result<MetricsOutput> {
        let out = prepared(path)?;
        Ok(MetricsOutput {
            path: path.to_path_buf(),
            out,
        })
    }

    /// Replaces the file atomically with `report`'s figures under `xvmm_`;
    /// on failure the text goes to a fallback file and the error names both.
    pub fn deliver(self, report: &xvmm_results::Report) -> Result<()> {
        let text = xvmm_results::render::openmetrics::openmetrics(report, "xvmm");
        let failure = match self.out.commit(text.as_bytes()) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let to = self.path.display().to_string();
        Err(saved_instead(
            ("the OpenMetrics", "xvmm-openmetrics"),
            &to,
            &failure.to_string(),
            &text,
        ))
    }
}

/// `FILE.compare.json` next to a `--json FILE`.
pub fn comparison_path(json: &Path) -> PathBuf {
    let mut name = json.as_os_str().to_owned();
    name.push(".compare.json");
    name.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unwritable_destination_fails_before_measuring() {
        let err = JsonOutput::prepare(Path::new("/nonexistent/dir/x.json")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("io: cannot write /nonexistent/dir/x.json: ") && !text.contains('\n'),
            "{text}"
        );
    }

    #[test]
    fn a_destination_failing_at_the_end_falls_back_to_a_file() {
        let out = JsonOutput::prepare(Path::new("/dev/full")).unwrap();
        let err = out
            .deliver("{\"x\": 1}", &Stdout::new())
            .unwrap_err()
            .to_string();
        let saved = err
            .split("they were saved to ")
            .nth(1)
            .unwrap_or_else(|| panic!("no fallback named: {err}"));
        assert_eq!(std::fs::read_to_string(saved).unwrap(), "{\"x\": 1}\n");
        std::fs::remove_file(saved).unwrap();
    }

    #[test]
    fn comparison_file_sits_beside_the_json() {
        assert_eq!(
            comparison_path(Path::new("out/vm.json")),
            Path::new("out/vm.json.compare.json")
        );
    }
}
