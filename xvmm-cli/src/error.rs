//! The application's own error: each library's error kept whole, and one
//! exit status for each ([`crate::exit::code`]). The libraries do not know
//! one another's errors (xvmm does not depend on xvmm-kernel); they meet
//! here, in the one layer that runs both.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// From the VMM: a run, the microguest, a report read or written, the
    /// output files.
    Vmm(xvmm::Error),
    /// From building a kernel or checking its hooks (`xvmm kernel`).
    Kernel(xvmm_kernel::Error),
}

impl Error {
    /// The VMM's error in the command line's terms ([`crate::cli::in_flag_terms`]).
    pub fn in_flag_terms(self) -> Error {
        match self {
            Error::Vmm(e) => Error::Vmm(crate::cli::in_flag_terms(e)),
            other => other,
        }
    }
}

impl From<xvmm::Error> for Error {
    fn from(e: xvmm::Error) -> Error {
        Error::Vmm(e)
    }
}

impl From<xvmm_kernel::Error> for Error {
    fn from(e: xvmm_kernel::Error) -> Error {
        Error::Kernel(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Vmm(e) => e.fmt(f),
            Error::Kernel(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::Error;

    /// A kernel builder's error reads as it did when xvmm mapped it onto its
    /// own kinds ("build: ...", "kernel: ...", "io: ..."), and fails the
    /// command with status 1.
    #[test]
    fn a_kernel_builder_error_keeps_its_text_and_fails_with_status_one() {
        for (e, text) in [
            (xvmm_kernel::Error::Build("b".into()), "build: b"),
            (xvmm_kernel::Error::Image("i".into()), "kernel: i"),
            (xvmm_kernel::Error::Io("o".into()), "io: o"),
        ] {
            let ours = Error::from(e);
            assert_eq!(ours.to_string(), text);
            assert_eq!(crate::exit::code(&ours), crate::exit::ERROR);
        }
    }

    #[test]
    fn a_vmm_error_keeps_its_text_and_its_status() {
        let e = Error::from(xvmm::Error::Usage("x".into()));
        assert_eq!(e.to_string(), "usage: x");
        assert_eq!(crate::exit::code(&e), crate::exit::USAGE);
    }
}
