//! The one error type of xperf. Every variant renders as a single line; `main`
//! prints it as `xperf: <error>` and exits non-zero (or reports the code on the
//! VMM's exit port when running as a guest's PID 1).

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// Bad command-line arguments.
    Usage(String),
    /// A system call needed to set up or take the measurement failed.
    Sys(String),
    /// The kernel's xperf hooks misbehaved (bad magic, wrong ABI version...).
    Hooks(String),
    /// The `xvmm.results=` parameter or the results channel is unusable.
    Channel(String),
    /// Writing the results file failed.
    Output(String),
    /// tracefs, a probe or the host's tracing state (`xperf probes`).
    Tracing(String),
    /// A stop signal ended the run after what was measured was delivered.
    Stopped(i32),
    /// `xperf workload`'s command did not succeed (its report was
    /// delivered): xperf ends with the command's status.
    Command { status: i32, how: String },
}

impl Error {
    /// Exit status: 2 for usage errors, 128 + the signal for a stop, 1
    /// otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            Error::Stopped(signal) => 128 + signal,
            Error::Command { status, .. } => *status,
            _ => 1,
        }
    }

    /// A failed system call, with what was being done and errno's text.
    pub fn last_os(what: &str) -> Error {
        Error::Sys(format!("{what}: {}", std::io::Error::last_os_error()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Messages are built from single-line parts; flatten anything that is not,
        // so an error always stays one line, and escape what would reach a
        // terminal as a control (arguments and paths are anyone's bytes).
        let (kind, msg) = match self {
            Error::Usage(m) => ("usage", m),
            Error::Sys(m) => ("system", m),
            Error::Hooks(m) => ("kernel hooks", m),
            Error::Channel(m) => ("results channel", m),
            Error::Output(m) => ("output", m),
            Error::Tracing(m) => ("tracing", m),
            Error::Stopped(signal) => {
                return write!(
                    f,
                    "stopped by signal {signal}; what was measured was delivered"
                )
            }
            Error::Command { how, .. } => ("the command", how),
        };
        let flat = msg.replace('\n', " ");
        write!(f, "{kind}: {}", xvmm_host::escape::visible(&flat))
    }
}

impl std::error::Error for Error {}

impl From<xvmm_guest::Error> for Error {
    fn from(e: xvmm_guest::Error) -> Error {
        match e {
            xvmm_guest::Error::Sys(m) => Error::Sys(m),
            xvmm_guest::Error::Channel(m) => Error::Channel(m),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_render_as_one_line_and_usage_exits_two() {
        let e = Error::Usage("bad\nvalue".into());
        assert_eq!(e.to_string(), "usage: bad value");
        assert_eq!(e.exit_code(), 2);
        assert_eq!(Error::Output("x".into()).exit_code(), 1);
        assert_eq!(Error::Stopped(libc::SIGINT).exit_code(), 130);
        assert_eq!(Error::Tracing("a\nb".into()).to_string(), "tracing: a b");
    }

    /// Found by fuzzing (fuzz/fuzz_targets/xperf_args.rs): an option name
    /// with a control character reached the terminal raw in the error.
    #[test]
    fn control_characters_in_arguments_are_escaped() {
        let err = crate::args::parse(["--wa\u{1}rmup=0"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "usage: unknown argument \"--wa\\u{1}rmup\" (try --help)"
        );
        let err = crate::args::parse(["--json", "a", "--x\u{1}"]).unwrap_err();
        assert!(!err.to_string().chars().any(char::is_control), "{err}");
        let err = Error::Usage("--wa\u{1}rmup takes no value".into());
        assert_eq!(err.to_string(), "usage: --wa\\x01rmup takes no value");
        let err = crate::args::parse(["--json", "\u{1b}[2J\u{202e}", "--samples"]).unwrap_err();
        assert_eq!(err.to_string(), "usage: --samples needs a value");
        let e = Error::Output("cannot write \u{1b}]0;x\u{7}: denied".into());
        assert_eq!(e.to_string(), "output: cannot write \\x1b]0;x\\x07: denied");
    }
}
