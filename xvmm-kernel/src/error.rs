//! What a kernel build or a hook check can fail with. The application maps
//! these onto its own error (and exit status); the texts are the ones
//! `xvmm` prints after `xvmm: `.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Fetching sources, configuring or building failed, or the request
    /// cannot be built (no cache directory, a bad patch file).
    Build(String),
    /// A vmlinux is not one the hook checker can read, or lacks the series.
    Image(String),
    /// A file or directory operation failed.
    Io(String),
}

impl Error {
    /// Wraps an I/O error with what was being done and to which path.
    pub fn io(what: &str, path: &std::path::Path, err: std::io::Error) -> Error {
        Error::Io(format!("{what} {}: {err}", path.display()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Build(m) => write!(f, "build: {m}"),
            Error::Image(m) => write!(f, "kernel: {m}"),
            Error::Io(m) => write!(f, "io: {m}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn each_kind_is_named_as_xvmm_names_it() {
        let io = Error::io(
            "reading",
            std::path::Path::new("/x"),
            std::io::Error::from_raw_os_error(2),
        );
        assert_eq!(
            io.to_string(),
            "io: reading /x: No such file or directory (os error 2)"
        );
        assert_eq!(Error::Build("b".into()).to_string(), "build: b");
        assert_eq!(Error::Image("i".into()).to_string(), "kernel: i");
    }
}
