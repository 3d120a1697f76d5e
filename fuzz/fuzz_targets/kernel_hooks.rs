//! `xvmm kernel hooks`: the hook finder over a vmlinux (`kernel::hooks::find`)
//! and its table. Sites hold the bytes at their address: 2 or 5 for a jump
//! label, the entry's length for an alternative.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm_fuzz::{assert_one_line, assert_terminal_safe};
use xvmm_kernel::hooks::{self, HookKind};

fuzz_target!(|data: &[u8]| {
    let sites = match hooks::find(data) {
        Ok(sites) => sites,
        Err(e) => return assert_one_line(&e.to_string(), "find"),
    };
    for s in &sites {
        match s.kind {
            HookKind::JumpLabel => assert!(matches!(s.bytes.len(), 2 | 5), "{s:?}"),
            HookKind::Alternative => assert!(s.bytes.len() <= 255, "{s:?}"),
        }
    }
    assert!(sites.windows(2).all(|w| w[0].address <= w[1].address));
    let table = hooks::table(&sites);
    assert_eq!(table.lines().count(), sites.len());
    assert_terminal_safe(&table, &['\n'], "hooks table");
});
