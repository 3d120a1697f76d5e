//! The guest side of xvmm, shared by every program that runs inside an xvmm
//! guest (xperf, xvmm-init, l1-init): thin checked wrappers of the system
//! calls a PID 1 needs ([`sys`]) and the channel to the VMM ([`channel`]:
//! the results buffer and doorbell, the exit port). Errors are one line.

pub mod channel;
pub mod drop_pages;
pub mod sys;

/// A failed system call or an unusable channel, as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A system call failed: what was done and errno's text.
    Sys(String),
    /// The `xvmm.results=` parameter or the results channel is unusable.
    Channel(String),
}

impl Error {
    /// The last system call failed while doing `what`.
    pub fn last_os(what: &str) -> Error {
        Error::Sys(format!("{what}: {}", std::io::Error::last_os_error()))
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // The message may quote the kernel command line or a path: shown
            // escaped, it stays one line that cannot drive a terminal.
            Error::Sys(m) | Error::Channel(m) => f.write_str(&xvmm_host::escape::visible(m)),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
