//! Port I/O devices and their dispatch.
//!
//! [`PortBus`] routes the guest's `in`/`out` exits: the UART at 0x3f8
//! ([`serial::Uart`]), the i8042 at 0x60/0x64 (no keyboard: see [`I8042_STATUS`];
//! command 0xfe = reset),
//! [`layout::PORT_EXIT`], [`layout::PORT_RESULTS_DOORBELL`], [`layout::PORT_DROP_PAGES`] and
//! [`layout::PORT_CALIBRATE`] (counted: the exit itself is the point). Unknown ports read
//! as 0xff and ignore writes; they are counted, never fatal. Whatever ends the VM
//! comes back as an [`IoEvent`] for the run loop to act on.

pub mod interval_sink;
pub mod pm_timer;
pub mod serial;

use crate::layout;
use std::sync::{Arc, Mutex};

/// What a port write asks the VMM to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoEvent {
    /// Nothing: keep running.
    Continue,
    /// The guest wrote its exit status to PORT_EXIT.
    Exit(u8),
    /// The guest pulsed the reset line (i8042 command 0xfe): a reboot.
    Reset,
    /// The guest announced `len` bytes of results in the results slot.
    Results(u32),
    /// The guest asks for this many pages of its drop-request page to be
    /// dropped on the host ([`layout::PORT_DROP_PAGES`]).
    DropPages(u32),
    /// The guest put a chunk of this many bytes of its workload's
    /// intervals in the results slot ([`layout::PORT_INTERVALS`]).
    Intervals(u32),
}

/// The first (up to) four bytes of a port write, little-endian.
fn le_u32(data: &[u8]) -> u32 {
    let mut bytes = [0u8; 4];
    let n = data.len().min(4);
    bytes[..n].copy_from_slice(&data[..n]);
    u32::from_le_bytes(bytes)
}

/// What the i8042 status port reads: output buffer full (bit 0), input buffer
/// empty (bit 1 clear). Linux's i8042 probe then drains 16 bytes and reports "No
/// controller found" at once, where a status of 0 makes it wait 0.5 s for a reply
/// to its first command; its keyboard-controller reboot (`reboot=k`) only needs
/// the input buffer empty before it writes 0xfe.
pub const I8042_STATUS: u8 = 0x01;

/// Counts of accesses to ports no device claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnknownIo {
    pub reads: u64,
    pub writes: u64,
    /// The last unknown port touched.
    pub last_port: u16,
}

/// Port I/O dispatch for one VM.
pub struct PortBus {
    /// Shared with the stdin forwarder.
    pub uart: Option<Arc<Mutex<serial::Uart>>>,
    pub unknown: UnknownIo,
    /// Writes to [`layout::PORT_CALIBRATE`].
    pub calibrations: u64,
}

impl PortBus {
    pub fn new(uart: Option<Arc<Mutex<serial::Uart>>>) -> PortBus {
        PortBus {
            uart,
            unknown: UnknownIo::default(),
            calibrations: 0,
        }
    }

    /// A bus for another vCPU of the same VM: the same devices, counts of
    /// its own.
    pub fn sharing_devices(&self) -> PortBus {
        PortBus::new(self.uart.clone())
    }

    fn uart_offset(port: u16) -> Option<u8> {
        port.checked_sub(layout::UART_PORT)
            .filter(|o| *o < layout::UART_PORT_COUNT)
            .and_then(|o| u8::try_from(o).ok())
    }

    /// Handles `in`: fills `data` (size x count bytes, guest-chosen).
    pub fn io_in(&mut self, port: u16, data: &mut [u8]) {
        data.fill(0);
        match port {
            layout::I8042_COMMAND_PORT => {
                if let Some(status) = data.first_mut() {
                    *status = I8042_STATUS;
                }
            }
            layout::I8042_DATA_PORT => {}
            _ => match (Self::uart_offset(port), &self.uart) {
                (Some(offset), Some(uart)) => {
                    // `rep insb` arrives as one exit with one byte per iteration.
                    let mut uart = uart.lock().unwrap_or_else(|e| e.into_inner());
                    for byte in data.iter_mut() {
                        *byte = uart.read(offset);
                    }
                }
                _ => {
                    data.fill(0xff);
                    self.unknown.reads += 1;
                    self.unknown.last_port = port;
                }
            },
        }
    }

    /// Handles `out` of `data` (size x count bytes, guest-chosen).
    pub fn io_out(&mut self, port: u16, data: &[u8]) -> IoEvent {
        let first = data.first().copied().unwrap_or(0);
        match port {
            layout::PORT_EXIT => IoEvent::Exit(first),
            layout::PORT_RESULTS_DOORBELL => IoEvent::Results(le_u32(data)),
            layout::PORT_DROP_PAGES => IoEvent::DropPages(le_u32(data)),
            layout::PORT_INTERVALS => IoEvent::Intervals(le_u32(data)),
            layout::PORT_CALIBRATE => {
                self.calibrations += 1;
                IoEvent::Continue
            }
            layout::I8042_COMMAND_PORT if first == layout::I8042_CMD_RESET => IoEvent::Reset,
            layout::I8042_COMMAND_PORT | layout::I8042_DATA_PORT => IoEvent::Continue,
            _ => {
                match (Self::uart_offset(port), &self.uart) {
                    (Some(offset), Some(uart)) => {
                        // `rep outsb` arrives as one exit carrying every byte.
                        let mut uart = uart.lock().unwrap_or_else(|e| e.into_inner());
                        for &byte in data {
                            uart.write(offset, byte);
                        }
                    }
                    _ => {
                        self.unknown.writes += 1;
                        self.unknown.last_port = port;
                    }
                }
                IoEvent::Continue
            }
        }
    }

    /// Flushes console output.
    pub fn flush(&self) {
        if let Some(uart) = &self.uart {
            uart.lock().unwrap_or_else(|e| e.into_inner()).flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch() {
        let mut bus = PortBus::new(None);
        assert_eq!(bus.io_out(layout::PORT_EXIT, &[7]), IoEvent::Exit(7));
        assert_eq!(
            bus.io_out(layout::PORT_RESULTS_DOORBELL, &0x1234u32.to_le_bytes()),
            IoEvent::Results(0x1234)
        );
        assert_eq!(
            bus.io_out(layout::PORT_RESULTS_DOORBELL, &[5]),
            IoEvent::Results(5)
        );
        assert_eq!(
            bus.io_out(layout::PORT_DROP_PAGES, &3u32.to_le_bytes()),
            IoEvent::DropPages(3)
        );
        assert_eq!(bus.io_out(0x64, &[0xfe]), IoEvent::Reset);
        assert_eq!(bus.io_out(0x64, &[0xaa]), IoEvent::Continue);
        assert_eq!(
            bus.io_out(layout::PORT_CALIBRATE, &7u32.to_le_bytes()),
            IoEvent::Continue
        );
        assert_eq!(bus.calibrations, 1);
        let mut status = [0x55u8];
        bus.io_in(0x64, &mut status);
        assert_eq!(status, [I8042_STATUS]);
        let mut data = [0x55u8];
        bus.io_in(0x60, &mut data);
        assert_eq!(data, [0]);
        assert_eq!(bus.unknown, UnknownIo::default());
    }

    #[test]
    fn string_io_reaches_the_uart_byte_by_byte() {
        let cap = serial::ConsoleCapture::default();
        let uart = serial::Uart::new(Box::new(cap.clone())).unwrap();
        let mut bus = PortBus::new(Some(Arc::new(Mutex::new(uart))));
        assert_eq!(
            bus.io_out(layout::UART_PORT, b"rep outsb\n"),
            IoEvent::Continue
        );
        assert_eq!(cap.contents(), b"rep outsb\n");
        // Line status register: transmitter empty (bits 5, 6), read twice.
        let mut lsr = [0u8; 2];
        bus.io_in(layout::UART_PORT + 5, &mut lsr);
        assert_eq!(lsr, [0x60, 0x60]);
    }

    #[test]
    fn unknown_ports_read_ff_and_are_counted() {
        let mut bus = PortBus::new(None);
        let mut d = [0u8; 4];
        bus.io_in(0xcfc, &mut d);
        assert_eq!(d, [0xff; 4]);
        // Without a UART its ports are unknown too.
        assert_eq!(bus.io_out(0x3f8, b"a"), IoEvent::Continue);
        assert_eq!(bus.io_out(0x80, &[]), IoEvent::Continue);
        assert_eq!(
            bus.unknown,
            UnknownIo {
                reads: 1,
                writes: 2,
                last_port: 0x80
            }
        );
    }
}
