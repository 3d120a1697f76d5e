//! 16550 UART (vm-superio) whose interrupt is an EventFd, meant to be registered
//! as an irqfd for [`crate::layout::UART_IRQ`].

use crate::{Error, Result};
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use vm_superio::{serial::NoEvents, Serial, Trigger};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Raises the UART interrupt by writing to an EventFd.
pub struct EventFdTrigger(EventFd);

impl Trigger for EventFdTrigger {
    type E = std::io::Error;
    fn trigger(&self) -> std::io::Result<()> {
        self.0.write(1)
    }
}

/// Where the guest console goes.
pub type ConsoleOut = Box<dyn Write + Send>;

/// Console output kept in memory, shared between the UART and whoever wants
/// to read what the guest printed (embedders of the library, tests).
#[derive(Clone, Default)]
pub struct ConsoleCapture(Arc<Mutex<Vec<u8>>>);

impl ConsoleCapture {
    /// Everything written so far.
    pub fn contents(&self) -> Vec<u8> {
        self.0.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

impl Write for ConsoleCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The start of the line Linux prints when it panics.
const PANIC_MARKER: &[u8] = b"Kernel panic - not syncing";
/// Longest console line kept for panic detection.
const MAX_LINE: usize = 512;

/// Passes console output through while watching for a Linux panic line, so that a
/// panic followed by the reboot `panic=-1` asks for is not taken for a clean reboot.
pub struct ConsoleWatch<W: Write> {
    inner: W,
    line: Vec<u8>,
    panic: Arc<OnceLock<String>>,
}

impl<W: Write> ConsoleWatch<W> {
    /// Wraps `inner`; the panic line, once seen, appears in the returned cell.
    pub fn new(inner: W) -> (ConsoleWatch<W>, Arc<OnceLock<String>>) {
        let panic = Arc::new(OnceLock::new());
        let watch = ConsoleWatch {
            inner,
            line: Vec::with_capacity(MAX_LINE),
            panic: Arc::clone(&panic),
        };
        (watch, panic)
    }

    fn end_line(&mut self) {
        if let Some(pos) = self
            .line
            .windows(PANIC_MARKER.len())
            .position(|w| w == PANIC_MARKER)
        {
            let text = String::from_utf8_lossy(&self.line[pos..]);
            let _ = self.panic.set(text.trim_end().to_string());
        }
        self.line.clear();
    }
}

impl<W: Write> Write for ConsoleWatch<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            if b == b'\n' {
                self.end_line();
            } else if self.line.len() < MAX_LINE {
                self.line.push(b);
            }
        }
        // The guest must not stall on a closed or failing stdout.
        let _ = self.inner.write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A UART at some base port; offsets 0..8 are its registers.
pub struct Uart {
    serial: Serial<EventFdTrigger, NoEvents, ConsoleOut>,
}

impl Uart {
    /// A UART writing what the guest transmits to `out`.
    pub fn new(out: ConsoleOut) -> Result<Uart> {
        let evt = EventFd::new(EFD_NONBLOCK)
            .map_err(|e| Error::Io(format!("cannot create the UART eventfd: {e}")))?;
        Ok(Uart {
            serial: Serial::new(EventFdTrigger(evt), out),
        })
    }

    /// The interrupt EventFd (register it with KVM_IRQFD).
    pub fn interrupt_evt(&self) -> &EventFd {
        &self.serial.interrupt_evt().0
    }

    /// Guest read of register `offset`.
    pub fn read(&mut self, offset: u8) -> u8 {
        self.serial.read(offset)
    }

    /// Guest write of register `offset`. Output errors (a closed stdout, say) do not
    /// concern the guest and are ignored.
    pub fn write(&mut self, offset: u8, value: u8) {
        let _ = self.serial.write(offset, value);
    }

    /// Queues host input for the guest; returns how many bytes fit in the FIFO.
    pub fn enqueue_input(&mut self, bytes: &[u8]) -> usize {
        self.serial.enqueue_raw_bytes(bytes).unwrap_or(0)
    }

    /// Flushes buffered console output.
    pub fn flush(&mut self) {
        let _ = self.serial.writer_mut().flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_line_is_detected() {
        let cap = ConsoleCapture::default();
        let (mut watch, panic) = ConsoleWatch::new(cap.clone());
        watch.write_all(b"[    0.1] booting\n[    0.2] Kernel panic - not syncing: VFS: Unable to mount root\n").unwrap();
        assert_eq!(
            panic.get().map(String::as_str),
            Some("Kernel panic - not syncing: VFS: Unable to mount root")
        );
        assert!(cap.contents().starts_with(b"[    0.1] booting"));
        let (mut watch, panic) = ConsoleWatch::new(std::io::sink());
        watch.write_all(b"all fine\n").unwrap();
        assert!(panic.get().is_none());
    }

    #[test]
    fn transmits_and_receives() {
        let cap = ConsoleCapture::default();
        let mut uart = Uart::new(Box::new(cap.clone())).unwrap();
        for b in b"hi\n" {
            uart.write(0, *b);
        }
        assert_eq!(cap.contents(), b"hi\n");
        // Enable the received-data interrupt, queue input, read it back.
        uart.write(1, 0x01);
        assert_eq!(uart.enqueue_input(b"x"), 1);
        assert_eq!(uart.interrupt_evt().read().unwrap(), 1);
        assert_eq!(uart.read(5) & 1, 1, "LSR data ready");
        assert_eq!(uart.read(0), b'x');
        assert_eq!(uart.read(5) & 1, 0);
    }
}
