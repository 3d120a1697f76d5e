//! How long work tells its caller where it is. Libraries never print: a kernel
//! build, a microguest run or a Linux boot reports through this trait, and the
//! application layer decides what (if anything) a person sees.

/// Receives progress from long work. Implementations must be cheap: `step` is
/// called between measurement phases, never inside one.
pub trait Progress: Sync {
    /// A stage of `total` steps begins (a new bar, for a terminal).
    fn begin(&self, what: &str, total: u64);
    /// One step is done; `next` names what comes now.
    fn step(&self, next: &str);
    /// A one-line status message ("extracting linux-source-6.12.tar.xz").
    fn message(&self, text: &str);
    /// The stage is over (clears the bar).
    fn finish(&self);
}

/// Progress nobody looks at: tests, the harness, `--quiet`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Progress for Silent {
    fn begin(&self, _what: &str, _total: u64) {}
    fn step(&self, _next: &str) {}
    fn message(&self, _text: &str) {}
    fn finish(&self) {}
}
