//! One error type for the whole VMM. Every variant renders as a single line that
//! names the problem; the application layer prints it and maps it to an exit
//! status (`app::exit`), never panics.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// /dev/kvm missing, not accessible, or an ioctl on it failed.
    Kvm(String),
    /// The kernel image is missing, unreadable, corrupt or of the wrong kind.
    Kernel(String),
    /// The initrd is missing, unreadable or does not fit.
    Initrd(String),
    /// The kernel command line is invalid or too long.
    Cmdline(String),
    /// Guest memory cannot be set up as asked.
    Memory(String),
    /// The guest did something that ends the run (triple fault, emulation failure,
    /// unexpected exception, malformed results).
    Guest(String),
    /// The guest ended the VM with this non-zero status (through PORT_EXIT);
    /// xvmm's exit status is derived from it (README, "Exit status").
    GuestExit(u8),
    /// The guest did not finish within the timeout.
    Timeout(String),
    /// Stopped by a signal (SIGINT, SIGTERM or SIGHUP: its number).
    Interrupted(i32),
    /// Building a kernel or an initramfs failed.
    Build(String),
    /// Host-side tracing could not be set up or restored.
    Tracing(String),
    /// The userfaultfd fault server (`--host-fault-delay`) cannot start or failed.
    HostFault(String),
    /// A host file operation failed.
    Io(String),
    /// Invalid combination of command-line arguments.
    Usage(String),
    /// A run setting the library was given is outside what it accepts, or
    /// does not fit this host or kernel. Named in the library's terms: the
    /// application names the flag that set it ([`Setting`]).
    Invalid { setting: Setting, text: String },
    /// A self-check the command exists to make came out false (its result
    /// is delivered first).
    Check(String),
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
            Error::Kvm(m) => write!(f, "kvm: {m}"),
            Error::Kernel(m) => write!(f, "kernel: {m}"),
            Error::Initrd(m) => write!(f, "initrd: {m}"),
            Error::Cmdline(m) => write!(f, "cmdline: {m}"),
            Error::Memory(m) => write!(f, "memory: {m}"),
            Error::Guest(m) => write!(f, "guest: {m}"),
            Error::GuestExit(s) => write!(f, "guest: exited with status {s}"),
            Error::Timeout(m) => write!(f, "timeout: {m}"),
            Error::Interrupted(signal) => write!(f, "interrupted by {}", signal_name(*signal)),
            Error::Build(m) => write!(f, "build: {m}"),
            Error::Tracing(m) => write!(f, "tracing: {m}"),
            Error::HostFault(m) => write!(f, "host faults: {m}"),
            Error::Io(m) => write!(f, "io: {m}"),
            Error::Usage(m) => write!(f, "usage: {m}"),
            Error::Invalid { setting, text } => {
                write!(f, "{}: {} {text}", setting.kind(), setting.name())
            }
            Error::Check(m) => write!(f, "check failed: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// A setting of a run, as the library knows it. The library's messages name
/// it this way; the application knows which flag set it and names that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Samples,
    Warmup,
    Rounds,
    Timeout,
    MemoryMib,
    PinCpu,
    TscKhz,
    HostFaultDelay,
    Cpus,
}

impl Setting {
    /// Its name in the library's messages.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Samples => "samples",
            Setting::Warmup => "warm-up iterations",
            Setting::Rounds => "rounds",
            Setting::Timeout => "timeout",
            Setting::MemoryMib => "guest memory",
            Setting::PinCpu => "CPU to pin to",
            Setting::TscKhz => "guest TSC rate (kHz)",
            Setting::HostFaultDelay => "host fault delay",
            Setting::Cpus => "vCPUs",
        }
    }

    /// The kind of error a bad value is: guest memory that does not fit is
    /// a memory error (exit status 1), the rest usage errors (2).
    pub fn kind(self) -> &'static str {
        match self {
            Setting::MemoryMib => "memory",
            _ => "usage",
        }
    }

    /// `Error::Invalid` for this setting.
    pub fn invalid(self, text: impl Into<String>) -> Error {
        Error::Invalid {
            setting: self,
            text: text.into(),
        }
    }
}

/// "SIGINT" for 2, and so on for the signals xvmm stops on.
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        s => format!("signal {s}"),
    }
}

pub type Result<T> = std::result::Result<T, Error>;
