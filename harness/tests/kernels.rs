//! The harness's kernel builds through the real cache (`$XVMM_CACHE` or
//! `~/.cache/xvmm`; ./test.sh builds both flavours before the tests run).
//! The `xvmm kernel build` command line itself is tested in
//! `xvmm-cli/tests/kernel_cli.rs`.

use std::time::Instant;
use xvmm::progress::Silent;
use xvmm_kernel::Flavour as KernelFlavour;
use xvmm_kernel::{self as kernel, BuildRequest};

#[test]
fn second_build_is_a_fast_cache_hit_with_the_requested_options() {
    if std::env::var("XVMM_SKIP_HARNESS").is_ok_and(|v| v == "1") {
        eprintln!(
            "{}",
            xvmm_host::skip::record("XVMM_SKIP_HARNESS=1: kernel build test skipped")
        );
        return;
    }
    for flavour in [KernelFlavour::Guest, KernelFlavour::Host] {
        let first = kernel::build(&BuildRequest::new(flavour), &Silent).expect("kernel builds");
        let started = Instant::now();
        let again = kernel::build(&BuildRequest::new(flavour), &Silent).expect("kernel builds");
        let took = started.elapsed();
        assert!(
            again.cached,
            "{flavour:?}: second build was not a cache hit"
        );
        assert_eq!(first.key, again.key);
        assert!(
            took.as_secs_f64() < 1.0,
            "{flavour:?}: cache hit took {took:?}"
        );
        assert!(again
            .bzimage
            .metadata()
            .map(|m| m.len() > 100_000)
            .unwrap_or(false));
        assert!(again
            .vmlinux
            .metadata()
            .map(|m| m.len() > 1_000_000)
            .unwrap_or(false));
        let config = std::fs::read_to_string(&again.config).expect("config readable");
        for opt in [
            "CONFIG_PVH=y",
            "CONFIG_SERIAL_8250_CONSOLE=y",
            "CONFIG_KVM_GUEST=y",
        ] {
            assert!(
                config.lines().any(|l| l == opt),
                "{flavour:?}: {opt} missing"
            );
        }
        if flavour == KernelFlavour::Host {
            for opt in ["CONFIG_KVM=y", "CONFIG_KVM_AMD=y", "CONFIG_KVM_INTEL=y"] {
                assert!(config.lines().any(|l| l == opt), "host: {opt} missing");
            }
        }
    }
}

/// The patch series' "a NOP when off" claim, checked on both patched builds
/// of each series (6.12 and 6.1): every hook site (the #PF and SYSCALL entry
/// ALTERNATIVEs, the jump labels in the entry assembly and in the C delivery
/// code) is a NOP as linked, and the unpatched kernel has none.
#[test]
fn patched_kernels_have_every_hook_site_a_nop_when_off() {
    if std::env::var("XVMM_SKIP_HARNESS").is_ok_and(|v| v == "1") {
        eprintln!(
            "{}",
            xvmm_host::skip::record("XVMM_SKIP_HARNESS=1: kernel hook-site test skipped")
        );
        return;
    }
    use xvmm_kernel::hooks::{self, HookKind};
    use xvmm_kernel::LinuxVersion;
    for (version, flavour) in LinuxVersion::ALL
        .into_iter()
        .flat_map(|v| [(v, KernelFlavour::Guest), (v, KernelFlavour::Host)])
    {
        let request = BuildRequest {
            patched: true,
            version,
            ..BuildRequest::new(flavour)
        };
        let built = kernel::build(&request, &Silent).expect("patched kernel builds");
        let vmlinux = std::fs::read(&built.vmlinux).expect("vmlinux readable");
        let sites = hooks::find(&vmlinux).expect("hook sites found");
        let flavour = (version.name(), flavour);
        eprint!("{flavour:?}:\n{}", hooks::table(&sites));
        assert!(sites.iter().all(|s| s.is_nop()), "{flavour:?}");
        // Two entry ALTERNATIVEs, two return jump labels, five in C.
        assert_eq!(sites.len(), 9, "{flavour:?}");
        let at = |kind: HookKind, symbol: &str| {
            sites
                .iter()
                .any(|s| s.kind == kind && s.location.starts_with(&format!("{symbol}+")))
        };
        // The two entry stamps sit before the CR3 switch: boot-time
        // alternatives, never runtime jump labels.
        for symbol in ["asm_exc_page_fault", "entry_SYSCALL_64"] {
            assert!(at(HookKind::Alternative, symbol), "{flavour:?}: {symbol}");
            assert!(!at(HookKind::JumpLabel, symbol), "{flavour:?}: {symbol}");
        }
        for symbol in [
            "syscall_return_via_sysret",
            "swapgs_restore_regs_and_return_to_usermode",
            "do_syscall_64",
            "exc_page_fault",
        ] {
            assert!(at(HookKind::JumpLabel, symbol), "{flavour:?}: {symbol}");
        }
        if version != LinuxVersion::V6_12 {
            continue;
        }
        let plain =
            kernel::build(&BuildRequest::new(flavour.1), &Silent).expect("plain kernel builds");
        let err = hooks::find(&std::fs::read(&plain.vmlinux).expect("vmlinux readable"))
            .expect_err("an unpatched kernel has no hook sites");
        assert!(err.to_string().contains("no xperf_stamps_key"), "{err}");
    }
}
