//! README's boot figures (Benchmarks, `boot`), checked in the nested harness
//! with the bench's own plan and arithmetic (`xvmm_benches::boot`): 5
//! alternating rounds of xvmm, QEMU microvm and QEMU pc in one L1 boot
//! (10-15 minutes on the loaded build machine). Timings are TCG-emulated and
//! swing with the build machine's load (xvmm's time to `/init` varied from
//! 2.7 to 11.8 s within one L1 boot at load 6-7), so each bound is README's
//! figure with the margin three bench runs showed (0.90-1.10x, 0.49x,
//! 3.18-3.30 MiB), not the target, which is not met (README,
//! Benchmarks, `boot`). Set XVMM_SKIP_HARNESS=1 to skip.

use std::time::Duration;
use xvmm_benches::boot::{self, Figures};
use xvmm_harness as harness;

/// xvmm / microvm, VMM start to `/init`: README's median with margin.
const INIT_VS_MICROVM_MAX: f64 = 1.3;
/// xvmm / microvm, VMM start to the kernel's first console byte.
const FIRST_BYTE_VS_MICROVM_MAX: f64 = 0.8;
/// xvmm's resident memory besides guest RAM at `/init`, MiB.
const OVERHEAD_MIB_MAX: f64 = 3.6;

#[test]
fn boot_figures_hold_against_microvm() {
    if harness::skipped("boot claims") {
        return;
    }
    let plan = boot::plan(5);
    let run = harness::prepare()
        .and_then(|a| Ok((harness::l1_initramfs(&a, &plan, true)?, a)))
        .and_then(|(cpio, a)| {
            // About 2.5 min with the build; a limit four times that lets
            // an L1 that hangs busy (once, 2026-11-29: no console for 25
            // min) get its second boot within CI's time.
            harness::run_l1(&a, &cpio, "boot-claims", Duration::from_secs(10 * 60))
        })
        .unwrap_or_else(|e| panic!("nested harness could not run: {e}"));
    let f = Figures::of(&run);
    eprintln!("{}\n{f:?}", run.summary("boot claims"));
    let check = |what: &str, v: Option<f64>, max: f64| {
        let v =
            v.unwrap_or_else(|| panic!("{what}: no figure (runs failed; {})", run.log.display()));
        assert!(
            v <= max,
            "{what}: {v:.2} > {max} (log {})",
            run.log.display()
        );
    };
    check(
        "xvmm/microvm to /init",
        f.init_vs_microvm,
        INIT_VS_MICROVM_MAX,
    );
    check(
        "xvmm/microvm to the first console byte",
        f.first_byte_vs_microvm,
        FIRST_BYTE_VS_MICROVM_MAX,
    );
    check("xvmm overhead MiB", f.xvmm_overhead_mib, OVERHEAD_MIB_MAX);
    // Every xvmm run printed its pre-kernel profile (--verbose).
    assert!(
        boot::profile(&run)
            .iter()
            .any(|(p, _)| p == "in all before the guest's first instruction"),
        "no pre-kernel profile in {}",
        run.log.display()
    );
}
