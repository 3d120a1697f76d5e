//! A kernel file (bzImage or PVH ELF vmlinux): `boot::image::inspect`, then
//! `boot::plan` for several guest sizes, then `boot::load` (linux-loader's own
//! parse of the same bytes) into a 64 MiB guest when the plan fits it.
//! Input: one byte of knobs (initrd pages, command-line length), then the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Cursor;
use std::sync::OnceLock;
use vm_memory::{GuestAddress, GuestMemoryMmap};
use xvmm::boot::{self, image};
use xvmm::layout;
use xvmm_fuzz::{assert_one_line, knob};

const MEM: u64 = 64 << 20;
static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

fn guest() -> &'static (GuestMemoryMmap, Vec<layout::RamRange>) {
    static GUEST: OnceLock<(GuestMemoryMmap, Vec<layout::RamRange>)> = OnceLock::new();
    GUEST.get_or_init(|| {
        let ram = layout::ram_ranges(MEM);
        let ranges: Vec<_> = ram
            .iter()
            .map(|r| (GuestAddress(r.start), xvmm_results::num::usize_from(r.size)))
            .collect();
        (GuestMemoryMmap::from_ranges(&ranges).unwrap(), ram)
    })
}

fuzz_target!(|data: &[u8]| {
    let (knobs, kernel) = knob(data);
    let image = match image::inspect(kernel) {
        Ok(image) => image,
        Err(e) => return assert_one_line(&e.to_string(), "inspect"),
    };
    let initrd_size = (knobs & 0xf != 0).then(|| u64::from(knobs & 0xf) * 0x1_0000);
    let cmdline = "c".repeat(usize::from(knobs >> 4) * 200);
    for mem in [MEM, 2 << 20, 3 << 30, 6 << 30] {
        let plan = match boot::plan(image, mem, initrd_size, &cmdline) {
            Ok(plan) => plan,
            Err(e) => {
                assert_one_line(&e.to_string(), "plan");
                continue;
            }
        };
        let low_end = layout::low_ram_end(mem);
        assert!(plan.kernel_end <= low_end, "{plan:?} in {mem:#x}");
        assert_eq!(plan.cmdline.last(), Some(&0));
        if let Some(place) = plan.initrd {
            assert_eq!(Some(place.size), initrd_size);
            assert!(place.addr >= plan.kernel_end, "{plan:?}");
            assert!(place
                .addr
                .checked_add(place.size)
                .is_some_and(|e| e <= low_end));
        }
        if mem != MEM {
            continue;
        }
        let (memory, ram) = guest();
        let mut initrd =
            Cursor::new(&ZEROS[..xvmm_results::num::usize_from(initrd_size.unwrap_or(0))]);
        let loaded = boot::load(
            memory,
            ram,
            &plan,
            Some(&mut Cursor::new(kernel)),
            plan.initrd.map(|_| &mut initrd),
        );
        if let Err(e) = loaded {
            assert_one_line(&e.to_string(), "load");
        }
    }
});
