//! The guest's serial console: where its output goes (the caller's writer,
//! watched for a kernel panic line) and, optionally, what feeds its input.

use crate::devices::serial::{ConsoleOut, ConsoleWatch, Uart};
use std::io::Read;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A source of keystrokes for the guest (a terminal's stdin).
pub type ConsoleFeed = Box<dyn Read + Send>;

/// The console as the caller wires it.
pub struct Console {
    /// What the guest transmits goes here (the caller escapes it for a
    /// terminal; the guest is untrusted).
    pub out: ConsoleOut,
    /// Forwarded to the guest's receive FIFO, when given.
    pub input: Option<ConsoleFeed>,
}

/// The first "Kernel panic" line the guest printed, once it has.
pub type PanicLine = Arc<OnceLock<String>>;

/// Wraps `out` so that a panic line is noticed.
pub fn watch(out: ConsoleOut) -> (ConsoleOut, PanicLine) {
    let (watch, panic) = ConsoleWatch::new(out);
    (Box::new(watch), panic)
}

/// Forwards `feed` to the UART on a thread of its own until `feed` ends.
pub fn forward_input(uart: Arc<Mutex<Uart>>, mut feed: ConsoleFeed) {
    let spawned = std::thread::Builder::new()
        .name("xvmm-stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok(n) = feed.read(&mut buf) {
                if n == 0 {
                    return;
                }
                let mut pending = &buf[..n];
                while !pending.is_empty() {
                    let taken = uart
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .enqueue_input(pending);
                    pending = &pending[taken..];
                    if !pending.is_empty() {
                        // The guest has not drained its FIFO yet.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        });
    // Without input forwarding the guest still runs; nothing to report.
    drop(spawned);
}
