//! Port I/O dispatch (`devices::PortBus`): guest-chosen ports and data of
//! any length, with the UART feeding a console watch and the console escaper
//! as in a `--kernel` run. Each access must give what the port means and
//! nothing else; unclaimed ports read all ones and are counted.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, Mutex};
use xvmm::devices::serial::{ConsoleCapture, ConsoleWatch, Uart};
use xvmm::devices::{IoEvent, PortBus, I8042_STATUS};
use xvmm::layout;
use xvmm_fuzz::assert_terminal_safe;
use xvmm_host::escape::ConsoleEscaper;

#[derive(Arbitrary, Debug)]
enum Access {
    In { port: u16, len: u16 },
    Out { port: u16, data: Vec<u8> },
}

fn is_uart(port: u16) -> bool {
    (layout::UART_PORT..layout::UART_PORT + layout::UART_PORT_COUNT).contains(&port)
}

fuzz_target!(|input: (bool, Vec<Access>)| {
    let (with_uart, accesses) = input;
    let capture = ConsoleCapture::default();
    let uart = with_uart.then(|| {
        let (watch, _panic) = ConsoleWatch::new(capture.clone());
        Arc::new(Mutex::new(Uart::new(Box::new(watch)).unwrap()))
    });
    let mut bus = PortBus::new(uart);
    let (mut unknown_reads, mut unknown_writes) = (0, 0);
    for access in accesses {
        match access {
            Access::In { port, len } => {
                // KVM hands at most a page per exit.
                let mut data = vec![0x5a; usize::from(len) % 4097];
                bus.io_in(port, &mut data);
                match port {
                    layout::I8042_COMMAND_PORT if !data.is_empty() => {
                        assert_eq!(data[0], I8042_STATUS);
                        assert!(data[1..].iter().all(|&b| b == 0));
                    }
                    layout::I8042_COMMAND_PORT | layout::I8042_DATA_PORT => {
                        assert!(data.iter().all(|&b| b == 0))
                    }
                    p if is_uart(p) && with_uart => {}
                    _ => {
                        assert!(data.iter().all(|&b| b == 0xff));
                        unknown_reads += 1;
                    }
                }
            }
            Access::Out { port, data } => {
                let data = &data[..data.len().min(4096)];
                let first = data.first().copied().unwrap_or(0);
                let event = bus.io_out(port, data);
                let mut le = [0u8; 4];
                le[..data.len().min(4)].copy_from_slice(&data[..data.len().min(4)]);
                let expected = match port {
                    layout::PORT_EXIT => IoEvent::Exit(first),
                    layout::PORT_RESULTS_DOORBELL => IoEvent::Results(u32::from_le_bytes(le)),
                    layout::PORT_DROP_PAGES => IoEvent::DropPages(u32::from_le_bytes(le)),
                    layout::PORT_INTERVALS => IoEvent::Intervals(u32::from_le_bytes(le)),
                    // Counted apart (the exit itself is the point).
                    layout::PORT_CALIBRATE => IoEvent::Continue,
                    layout::I8042_COMMAND_PORT if first == layout::I8042_CMD_RESET => {
                        IoEvent::Reset
                    }
                    p => {
                        if !(p == layout::I8042_COMMAND_PORT
                            || p == layout::I8042_DATA_PORT
                            || is_uart(p) && with_uart)
                        {
                            unknown_writes += 1;
                        }
                        IoEvent::Continue
                    }
                };
                assert_eq!(event, expected, "out to {port:#x} of {data:?}");
            }
        }
    }
    bus.flush();
    assert_eq!(
        (bus.unknown.reads, bus.unknown.writes),
        (unknown_reads, unknown_writes)
    );
    let mut escaper = ConsoleEscaper::new();
    let shown = escaper.escape(&capture.contents()) + &escaper.finish();
    assert_terminal_safe(&shown, &['\n', '\r', '\t'], "console");
});
