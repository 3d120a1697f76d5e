//! The guest results channel: a guest fills the results slot and rings the
//! doorbell port with a length (`devices::PortBus::io_out`), xvmm reads that
//! many bytes (`vm::read_results_bytes`) and parses them (`vm::parse_results`).
//! Input: a byte choosing the doorbell write (0: the length of what follows,
//! as an honest guest; 1-5: the next 0-4 bytes as they are), then what the
//! guest put in the slot.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::{Mutex, OnceLock};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use xvmm::devices::{IoEvent, PortBus};
use xvmm::{layout, vm};
use xvmm_fuzz::{assert_one_line, assert_terminal_safe, knob};

/// The results slot alone, and how many bytes the last input left in it.
fn slot() -> &'static Mutex<(GuestMemoryMmap, usize)> {
    static SLOT: OnceLock<Mutex<(GuestMemoryMmap, usize)>> = OnceLock::new();
    SLOT.get_or_init(|| {
        let region = (
            GuestAddress(layout::RESULTS_GPA),
            xvmm_results::num::usize_from(layout::RESULTS_SIZE),
        );
        Mutex::new((GuestMemoryMmap::from_ranges(&[region]).unwrap(), 0))
    })
}

fuzz_target!(|data: &[u8]| {
    let (mode, rest) = knob(data);
    let raw = usize::from(mode % 6).saturating_sub(1).min(rest.len());
    let (raw_doorbell, contents) = rest.split_at(raw);
    let contents = &contents[..contents
        .len()
        .min(xvmm_results::num::usize_from(layout::RESULTS_SIZE))];
    let honest = u32::try_from(contents.len())
        .expect("at most RESULTS_SIZE")
        .to_le_bytes();
    let doorbell = if mode % 6 == 0 {
        &honest[..]
    } else {
        raw_doorbell
    };
    let mut guard = slot().lock().unwrap();
    let (memory, dirty) = &mut *guard;
    // Each input starts from a zeroed slot, like a fresh guest.
    memory
        .write_slice(&vec![0; *dirty], GuestAddress(layout::RESULTS_GPA))
        .unwrap();
    memory
        .write_slice(contents, GuestAddress(layout::RESULTS_GPA))
        .unwrap();
    *dirty = contents.len();
    let mut bus = PortBus::new(None);
    let IoEvent::Results(len) = bus.io_out(layout::PORT_RESULTS_DOORBELL, doorbell) else {
        panic!("the doorbell port did not announce results");
    };
    let bytes = match vm::read_results_bytes(memory, u64::from(len)) {
        Ok(bytes) => bytes,
        Err(e) => {
            assert!(u64::from(len) > layout::RESULTS_SIZE, "{e}");
            return assert_one_line(&e.to_string(), "read_results_bytes");
        }
    };
    assert_eq!(bytes.len(), len as usize);
    match vm::parse_results(&bytes) {
        Ok(report) => {
            report.check_schema().unwrap();
            assert_terminal_safe(&xvmm_results::render::report(&report), &['\n'], "render");
        }
        Err(e) => assert_one_line(&e.to_string(), "parse_results"),
    }
});
