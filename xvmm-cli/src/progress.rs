//! What a person sees of long work: indicatif bars on a terminal, status
//! lines on stderr, nothing with `--quiet`.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;
use xvmm::progress::Progress;

/// Progress on stderr: a bar (or a spinner when the number of steps is not
/// known) on a terminal, plain `xvmm: ...` status lines otherwise.
pub struct Terminal {
    bar: Mutex<Option<ProgressBar>>,
    /// Draw bars (stderr is a terminal and the user did not ask for quiet).
    bars: bool,
    /// Print status lines at all.
    messages: bool,
}

impl Terminal {
    /// `quiet`: nothing at all. Otherwise bars only when stderr is a terminal.
    pub fn new(quiet: bool) -> Terminal {
        Terminal {
            bar: Mutex::new(None),
            bars: !quiet && std::io::stderr().is_terminal(),
            messages: !quiet,
        }
    }

    fn bar(&self) -> std::sync::MutexGuard<'_, Option<ProgressBar>> {
        self.bar.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Progress for Terminal {
    fn begin(&self, what: &str, total: u64) {
        if !self.bars {
            return;
        }
        let bar = if total == 0 {
            let bar = ProgressBar::new_spinner();
            bar.enable_steady_tick(Duration::from_millis(200));
            if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix} {msg} [{elapsed}]")
            {
                bar.set_style(style);
            }
            bar
        } else {
            let bar = ProgressBar::new(total);
            if let Ok(style) =
                ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} {msg} [{elapsed}]")
            {
                bar.set_style(style);
            }
            bar
        };
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.set_prefix(what.to_string());
        if let Some(old) = self.bar().replace(bar) {
            old.finish_and_clear();
        }
    }

    fn step(&self, next: &str) {
        if let Some(bar) = &*self.bar() {
            bar.set_message(next.to_string());
            bar.inc(1);
        }
    }

    fn message(&self, text: &str) {
        if !self.messages {
            return;
        }
        let line = format!("xvmm: {}", xvmm_host::escape::visible(text));
        match &*self.bar() {
            Some(bar) => bar.println(line),
            None => super::output::eprint(&format!("{line}\n")),
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.bar().take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.finish();
    }
}
