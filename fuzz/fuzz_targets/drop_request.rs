//! The guest's drop request (`xvmm --host-fault-delay`): a page of
//! guest-chosen addresses and a guest-chosen count, checked against guest
//! RAM by `xvmm_results::channel::parse_drop_request`. Whatever comes in, an
//! accepted request names exactly `count` page-aligned pages wholly inside
//! one RAM range, and a refused one says why in one line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm_fuzz::assert_one_line;
use xvmm_results::channel::{parse_drop_request, DropAnswer, DROP_REQUEST_MAX, GUEST_PAGE};

/// A guest's RAM as xvmm lays it out: below the 32-bit hole and above 4 GiB.
const RAM: &[(u64, u64)] = &[(0, 0xc000_0000), (0x1_0000_0000, 0x4000_0000)];

fuzz_target!(|input: (u32, Vec<u8>)| {
    let (count, page) = input;
    match parse_drop_request(&page, count, RAM) {
        Ok(pages) => {
            assert!((1..=DROP_REQUEST_MAX).contains(&count));
            assert_eq!(pages.len(), count as usize);
            for gpa in pages {
                assert_eq!(gpa % GUEST_PAGE, 0, "{gpa:#x}");
                assert!(
                    RAM.iter()
                        .any(|&(s, len)| gpa >= s && gpa + GUEST_PAGE <= s + len),
                    "{gpa:#x}"
                );
            }
            assert_eq!(
                DropAnswer::decode(DropAnswer::Dropped(count).encode()),
                DropAnswer::Dropped(count)
            );
        }
        Err(refusal) => {
            assert!(refusal.code() < 0);
            assert_one_line(&refusal.to_string(), "parse_drop_request");
            let answer = DropAnswer::Refused(refusal.code());
            assert_eq!(DropAnswer::decode(answer.encode()), answer);
        }
    }
});
