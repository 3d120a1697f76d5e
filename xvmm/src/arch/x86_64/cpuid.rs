//! Guest CPUID: what KVM supports (KVM_GET_SUPPORTED_CPUID), edited for this VM.
//!
//! [`build`] asks KVM; [`edit`] is the pure part (unit-tested without KVM):
//! - leaf 1: hypervisor bit, APIC id, logical processor count;
//! - leaves 0xB / 0x1F: x2APIC topology (one thread per core, `nr_vcpus` cores);
//! - 0x40000000: KVM signature "KVMKVMKVM\0\0\0", max hypervisor leaf 0x40000010;
//! - 0x40000001: KVM PV features as KVM offers them, async-PF bits only on request;
//! - 0x40000010: TSC frequency in kHz (EAX) and APIC bus frequency in kHz (EBX);
//! - 0x80000007 EDX bit 8: invariant TSC when the host has it;
//! - 0x80000002..4: the host's brand string (KVM reports these leaves as 0, so
//!   without it a guest names its CPU "AMD 17/01" and reports lose the model).

use crate::{Error, Result};
use kvm_bindings::{
    kvm_cpuid_entry2, CpuId, KVM_CPUID_FLAG_SIGNIFCANT_INDEX, KVM_MAX_CPUID_ENTRIES,
};
use kvm_ioctls::Kvm;

/// KVM paravirtual feature bits (CPUID 0x40000001 EAX), from Linux
/// `arch/x86/include/uapi/asm/kvm_para.h` (kvm-bindings lacks them).
pub mod kvm_feature {
    pub const CLOCKSOURCE: u32 = 0;
    pub const NOP_IO_DELAY: u32 = 1;
    pub const MMU_OP: u32 = 2;
    pub const CLOCKSOURCE2: u32 = 3;
    pub const ASYNC_PF: u32 = 4;
    pub const STEAL_TIME: u32 = 5;
    pub const PV_EOI: u32 = 6;
    pub const PV_UNHALT: u32 = 7;
    pub const PV_TLB_FLUSH: u32 = 9;
    pub const ASYNC_PF_VMEXIT: u32 = 10;
    pub const PV_SEND_IPI: u32 = 11;
    pub const POLL_CONTROL: u32 = 12;
    pub const PV_SCHED_YIELD: u32 = 13;
    pub const ASYNC_PF_INT: u32 = 14;
    pub const MSI_EXT_DEST_ID: u32 = 15;
    pub const HC_MAP_GPA_RANGE: u32 = 16;
    pub const MIGRATION_CONTROL: u32 = 17;
    pub const CLOCKSOURCE_STABLE_BIT: u32 = 24;
}

/// The three async page fault feature bits; Linux >= 5.8 uses async PF only with
/// ASYNC_PF_INT.
pub const ASYNC_PF_FEATURES: u32 = (1 << kvm_feature::ASYNC_PF)
    | (1 << kvm_feature::ASYNC_PF_VMEXIT)
    | (1 << kvm_feature::ASYNC_PF_INT);

/// Hypervisor CPUID leaves.
pub const LEAF_HYPERVISOR: u32 = 0x4000_0000;
pub const LEAF_KVM_FEATURES: u32 = 0x4000_0001;
pub const LEAF_TIMING: u32 = 0x4000_0010;
/// "KVMKVMKVM\0\0\0" as EBX, ECX, EDX.
pub const KVM_SIGNATURE: [u32; 3] = [0x4b4d_564b, 0x564b_4d56, 0x0000_004d];
/// KVM's emulated APIC bus runs at 1 GHz (one tick per ns).
pub const APIC_BUS_KHZ: u32 = 1_000_000;

const LEAF1_ECX_TSC_DEADLINE: u32 = 1 << 24;
const LEAF1_ECX_HYPERVISOR: u32 = 1 << 31;
const LEAF_80000007_EDX_INVARIANT_TSC: u32 = 1 << 8;

/// What to put into the guest's CPUID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuidOptions {
    /// Offer KVM asynchronous page faults (the three ASYNC_PF* bits).
    pub async_pf: bool,
    /// Guest TSC frequency for leaf 0x40000010.
    pub tsc_khz: u32,
    /// This vCPU's APIC id.
    pub apic_id: u8,
    /// Number of vCPUs in the VM (topology leaves).
    pub nr_vcpus: u8,
    /// The host CPU has an invariant TSC (CPUID 0x80000007 EDX bit 8).
    pub host_invariant_tsc: bool,
    /// The in-kernel LAPIC can run its timer in TSC-deadline mode
    /// (KVM_CAP_TSC_DEADLINE_TIMER with an irqchip). KVM before 6.14 leaves
    /// the bit out of KVM_GET_SUPPORTED_CPUID; without it Linux calibrates
    /// the LAPIC timer against the PIT, which costs a nested guest ~0.5 s.
    pub tsc_deadline_timer: bool,
    /// The host's processor brand string (CPUID 0x80000002..4, 48 bytes as 12
    /// registers), passed through so the guest names the same CPU.
    pub host_brand: Option<[u32; 12]>,
}

/// The host's processor brand string leaves, if the CPU has them.
pub fn host_brand() -> Option<[u32; 12]> {
    if std::arch::x86_64::__cpuid(0x8000_0000).eax < 0x8000_0004 {
        return None;
    }
    let mut regs = [0u32; 12];
    for (i, leaf) in (0x8000_0002u32..=0x8000_0004).enumerate() {
        let r = std::arch::x86_64::__cpuid(leaf);
        regs[i * 4..i * 4 + 4].copy_from_slice(&[r.eax, r.ebx, r.ecx, r.edx]);
    }
    Some(regs)
}

/// Whether the host CPU reports an invariant TSC.
pub fn host_has_invariant_tsc() -> bool {
    let max_ext = std::arch::x86_64::__cpuid(0x8000_0000).eax;
    if max_ext < 0x8000_0007 {
        return false;
    }
    let edx = std::arch::x86_64::__cpuid(0x8000_0007).edx;
    edx & LEAF_80000007_EDX_INVARIANT_TSC != 0
}

/// Builds the guest CPUID from what KVM supports, edited by [`edit`].
pub fn build(kvm: &Kvm, opts: &CpuidOptions) -> Result<CpuId> {
    let supported = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(|e| Error::Kvm(format!("KVM_GET_SUPPORTED_CPUID failed: {e}")))?;
    let mut entries = supported.as_slice().to_vec();
    edit(&mut entries, opts)?;
    CpuId::from_entries(&entries)
        .map_err(|e| Error::Kvm(format!("too many CPUID entries ({}): {e:?}", entries.len())))
}

/// Whether these entries give the guest XSAVE (leaf 1, ECX bit 26), which
/// CR4.OSXSAVE, and so XSETBV, needs.
pub fn has_xsave(entries: &[kvm_cpuid_entry2]) -> bool {
    entries
        .iter()
        .any(|e| e.function == 1 && e.index == 0 && e.ecx & (1 << 26) != 0)
}

/// Whether these entries give the guest IA32_TSC_ADJUST (leaf 7 subleaf 0,
/// EBX bit 1); without it KVM answers an access with #GP.
pub fn has_tsc_adjust(entries: &[kvm_cpuid_entry2]) -> bool {
    entries
        .iter()
        .any(|e| e.function == 7 && e.index == 0 && e.ebx & (1 << 1) != 0)
}

/// Whether these entries give the guest x2APIC (leaf 1 ECX bit 21).
pub fn has_x2apic(entries: &[kvm_cpuid_entry2]) -> bool {
    has_bit(entries, 1, |e| e.ecx, 21)
}

/// Whether these entries give the guest IA32_PRED_CMD's IBPB command:
/// Intel's leaf 7 EDX bit 26 (IBRS and IBPB) or AMD's leaf 0x80000008 EBX
/// bit 12. Without it KVM answers a write with #GP.
pub fn has_ibpb(entries: &[kvm_cpuid_entry2]) -> bool {
    has_bit(entries, 7, |e| e.edx, 26) || has_bit(entries, 0x8000_0008, |e| e.ebx, 12)
}

/// Whether these entries let the guest set IA32_SPEC_CTRL.IBRS: Intel's
/// leaf 7 EDX bit 26 or AMD's leaf 0x80000008 EBX bit 14.
pub fn has_ibrs(entries: &[kvm_cpuid_entry2]) -> bool {
    has_bit(entries, 7, |e| e.edx, 26) || has_bit(entries, 0x8000_0008, |e| e.ebx, 14)
}

/// Whether these entries give the guest IA32_ARCH_CAPABILITIES (leaf 7
/// EDX bit 29), whose bit 7 says whether IA32_TSX_CTRL exists.
pub fn has_arch_capabilities(entries: &[kvm_cpuid_entry2]) -> bool {
    has_bit(entries, 7, |e| e.edx, 29)
}

/// Bit `bit` of one register of leaf `function`, subleaf 0.
fn has_bit(
    entries: &[kvm_cpuid_entry2],
    function: u32,
    register: fn(&kvm_cpuid_entry2) -> u32,
    bit: u32,
) -> bool {
    entries
        .iter()
        .any(|e| e.function == function && e.index == 0 && register(e) & (1 << bit) != 0)
}

/// Finds the entry for `function`/`index` (index ignored unless significant).
pub fn find_mut(
    entries: &mut [kvm_cpuid_entry2],
    function: u32,
    index: u32,
) -> Option<&mut kvm_cpuid_entry2> {
    entries.iter_mut().find(|e| {
        e.function == function
            && (e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX == 0 || e.index == index)
    })
}

/// Sets (replacing or appending) one entry.
pub fn upsert(entries: &mut Vec<kvm_cpuid_entry2>, entry: kvm_cpuid_entry2) {
    let significant = entry.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX != 0;
    match entries
        .iter_mut()
        .find(|e| e.function == entry.function && (!significant || e.index == entry.index))
    {
        Some(e) => *e = entry,
        None => entries.push(entry),
    }
}

fn entry(function: u32, index: u32, flags: u32, regs: [u32; 4]) -> kvm_cpuid_entry2 {
    kvm_cpuid_entry2 {
        function,
        index,
        flags,
        eax: regs[0],
        ebx: regs[1],
        ecx: regs[2],
        edx: regs[3],
        padding: [0; 3],
    }
}

/// Edits KVM's supported CPUID for this VM (see the module docs). Fails if async
/// PF is asked for but KVM does not offer it.
pub fn edit(entries: &mut Vec<kvm_cpuid_entry2>, opts: &CpuidOptions) -> Result<()> {
    let nr_vcpus = u32::from(opts.nr_vcpus.max(1));
    let apic_id = u32::from(opts.apic_id);
    if let Some(leaf1) = find_mut(entries, 1, 0) {
        leaf1.ecx |= LEAF1_ECX_HYPERVISOR;
        if opts.tsc_deadline_timer {
            leaf1.ecx |= LEAF1_ECX_TSC_DEADLINE;
        } else {
            leaf1.ecx &= !LEAF1_ECX_TSC_DEADLINE;
        }
        leaf1.ebx = (leaf1.ebx & 0x0000_ffff) | (nr_vcpus << 16) | (apic_id << 24);
    }
    set_topology(entries, nr_vcpus, apic_id);
    set_kvm_leaves(entries, opts)?;
    if let Some(brand) = opts.host_brand {
        set_brand(entries, &brand);
    }
    if opts.host_invariant_tsc {
        set_invariant_tsc(entries);
    }
    Ok(())
}

/// x2APIC topology leaves 0xb and 0x1f: level 0 = SMT (1 thread per core),
/// level 1 = core.
fn set_topology(entries: &mut Vec<kvm_cpuid_entry2>, nr_vcpus: u32, apic_id: u32) {
    let max_basic = entries
        .iter()
        .find(|e| e.function == 0)
        .map_or(0, |e| e.eax);
    let core_shift = 32 - (nr_vcpus - 1).leading_zeros();
    for leaf in [0xb_u32, 0x1f] {
        if leaf > max_basic {
            continue;
        }
        entries.retain(|e| e.function != leaf);
        let flags = KVM_CPUID_FLAG_SIGNIFCANT_INDEX;
        entries.push(entry(leaf, 0, flags, [0, 1, 1 << 8, apic_id]));
        entries.push(entry(
            leaf,
            1,
            flags,
            [core_shift, nr_vcpus, (2 << 8) | 1, apic_id],
        ));
        // The first subleaf with level type 0 ends the enumeration.
        entries.push(entry(leaf, 2, flags, [0, 0, 2, apic_id]));
    }
}

/// The KVM signature, PV features (async PF only when asked for and offered)
/// and the timing leaf with the guest TSC rate.
fn set_kvm_leaves(entries: &mut Vec<kvm_cpuid_entry2>, opts: &CpuidOptions) -> Result<()> {
    let offered = find_mut(entries, LEAF_KVM_FEATURES, 0).map_or(0, |e| e.eax);
    let mut features = offered & !ASYNC_PF_FEATURES;
    if opts.async_pf {
        let wanted = ASYNC_PF_FEATURES;
        if offered & wanted != wanted {
            return Err(Error::Kvm(format!(
                "async page faults requested but KVM does not offer them (PV features {offered:#x})"
            )));
        }
        features |= wanted;
    }
    let [b, c, d] = KVM_SIGNATURE;
    upsert(
        entries,
        entry(LEAF_HYPERVISOR, 0, 0, [LEAF_TIMING, b, c, d]),
    );
    upsert(entries, entry(LEAF_KVM_FEATURES, 0, 0, [features, 0, 0, 0]));
    upsert(
        entries,
        entry(LEAF_TIMING, 0, 0, [opts.tsc_khz, APIC_BUS_KHZ, 0, 0]),
    );
    Ok(())
}

/// The host's brand string in 0x80000002..4 (KVM reports them as zero).
fn set_brand(entries: &mut Vec<kvm_cpuid_entry2>, brand: &[u32; 12]) {
    let max_ext = entries
        .iter()
        .find(|e| e.function == 0x8000_0000)
        .map_or(0, |e| e.eax);
    if max_ext >= 0x8000_0004 {
        for (function, chunk) in (0x8000_0002..).zip(brand.chunks_exact(4)) {
            let regs = [chunk[0], chunk[1], chunk[2], chunk[3]];
            upsert(entries, entry(function, 0, 0, regs));
        }
    }
}

/// Invariant TSC in 0x80000007 EDX, adding the leaf if KVM left it out.
fn set_invariant_tsc(entries: &mut Vec<kvm_cpuid_entry2>) {
    match find_mut(entries, 0x8000_0007, 0) {
        Some(e) => e.edx |= LEAF_80000007_EDX_INVARIANT_TSC,
        None => {
            let max_ext = entries.iter_mut().find(|e| e.function == 0x8000_0000);
            if let Some(max_ext) = max_ext {
                max_ext.eax = max_ext.eax.max(0x8000_0007);
                entries.push(entry(
                    0x8000_0007,
                    0,
                    0,
                    [0, 0, 0, LEAF_80000007_EDX_INVARIANT_TSC],
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xsave_is_leaf_1_ecx_bit_26() {
        let leaf1 = |ecx: u32, index: u32| kvm_cpuid_entry2 {
            function: 1,
            index,
            ecx,
            ..Default::default()
        };
        assert!(has_xsave(&[leaf1(1 << 26, 0)]));
        assert!(has_xsave(&[leaf1(0x8120_2000 | (1 << 26), 0)]));
        // PVM's leaf 1 on the build machine: no XSAVE.
        assert!(!has_xsave(&[leaf1(0x8120_2000, 0)]));
        assert!(!has_xsave(&[leaf1(1 << 27, 0)]));
        assert!(!has_xsave(&[leaf1(1 << 26, 1)]));
        let other = kvm_cpuid_entry2 {
            function: 7,
            ecx: 1 << 26,
            ..Default::default()
        };
        assert!(!has_xsave(&[other]));
        assert!(!has_xsave(&[]));
    }

    #[test]
    fn tsc_adjust_is_leaf_7_subleaf_0_ebx_bit_1() {
        let leaf7 = |ebx: u32, index: u32| kvm_cpuid_entry2 {
            function: 7,
            index,
            ebx,
            ..Default::default()
        };
        assert!(has_tsc_adjust(&[leaf7(0b10, 0)]));
        assert!(!has_tsc_adjust(&[leaf7(0b01, 0)]));
        assert!(!has_tsc_adjust(&[leaf7(0b10, 1)]));
        let leaf1 = kvm_cpuid_entry2 {
            function: 1,
            ebx: 0b10,
            ..Default::default()
        };
        assert!(!has_tsc_adjust(&[leaf1]));
    }

    /// Each speculation-control bit from its own leaf and register, Intel's
    /// and AMD's, and no other bit or subleaf.
    #[test]
    fn ibpb_ibrs_and_arch_capabilities_come_from_their_vendors_bits() {
        let leaf = |function: u32, index: u32, ebx: u32, edx: u32| kvm_cpuid_entry2 {
            function,
            index,
            ebx,
            edx,
            ..Default::default()
        };
        let intel = [leaf(7, 0, 0, 1 << 26)];
        assert!(has_ibpb(&intel) && has_ibrs(&intel));
        assert!(!has_arch_capabilities(&intel));
        let amd_ibpb = [leaf(0x8000_0008, 0, 1 << 12, 0)];
        assert!(has_ibpb(&amd_ibpb) && !has_ibrs(&amd_ibpb));
        let amd_ibrs = [leaf(0x8000_0008, 0, 1 << 14, 0)];
        assert!(!has_ibpb(&amd_ibrs) && has_ibrs(&amd_ibrs));
        assert!(has_arch_capabilities(&[leaf(7, 0, 0, 1 << 29)]));
        // The right bits in the wrong register, subleaf or leaf.
        for wrong in [
            leaf(7, 0, 1 << 26, 1 << 12 | 1 << 14),
            leaf(7, 1, 0, 1 << 26 | 1 << 29),
            leaf(0x8000_0008, 0, 1 << 26 | 1 << 29, 1 << 12 | 1 << 14),
            leaf(0x8000_0007, 0, 1 << 12 | 1 << 14, 0),
        ] {
            let w = [wrong];
            assert!(
                !has_ibpb(&w) && !has_ibrs(&w) && !has_arch_capabilities(&w),
                "{wrong:?}"
            );
        }
    }

    fn sample() -> Vec<kvm_cpuid_entry2> {
        vec![
            entry(0, 0, 0, [0x1f, 0x6874_7541, 0x444d_4163, 0x6974_6e65]),
            entry(1, 0, 0, [0xa00f11, 0xff08_0800, 0x0, 0x178bfbff]),
            entry(0xb, 0, KVM_CPUID_FLAG_SIGNIFCANT_INDEX, [1, 2, 0x100, 7]),
            entry(LEAF_HYPERVISOR, 0, 0, [0x4000_0001, 1, 2, 3]),
            entry(LEAF_KVM_FEATURES, 0, 0, [0x0100_7eff, 0, 0, 0]),
            entry(0x8000_0000, 0, 0, [0x8000_0008, 0, 0, 0]),
            entry(0x8000_0007, 0, 0, [0, 0, 0, 0]),
        ]
    }

    fn opts() -> CpuidOptions {
        CpuidOptions {
            async_pf: false,
            tsc_khz: 2_445_000,
            apic_id: 0,
            nr_vcpus: 1,
            host_invariant_tsc: true,
            tsc_deadline_timer: false,
            host_brand: None,
        }
    }

    #[test]
    fn host_brand_string_fills_the_zeroed_leaves() {
        let text = *b"AMD EPYC 7B13 64-Core Processor\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
        let mut brand = [0u32; 12];
        for (r, bytes) in brand.iter_mut().zip(text.chunks_exact(4)) {
            *r = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        let mut entries = sample();
        entries.push(entry(0x8000_0003, 0, 0, [0; 4]));
        edit(
            &mut entries,
            &CpuidOptions {
                host_brand: Some(brand),
                ..opts()
            },
        )
        .unwrap();
        let mut got = Vec::new();
        for leaf in 0x8000_0002..=0x8000_0004 {
            let e = get(&entries, leaf, 0);
            for r in [e.eax, e.ebx, e.ecx, e.edx] {
                got.extend_from_slice(&r.to_le_bytes());
            }
        }
        assert_eq!(got, text);
        assert_eq!(
            entries.iter().filter(|e| e.function == 0x8000_0003).count(),
            1,
            "replaced, not duplicated"
        );
        // A CPUID whose extended range stops short gets no brand leaves.
        let mut short = sample();
        find_mut(&mut short, 0x8000_0000, 0).unwrap().eax = 0x8000_0001;
        edit(
            &mut short,
            &CpuidOptions {
                host_brand: Some(brand),
                ..opts()
            },
        )
        .unwrap();
        assert!(short.iter().all(|e| e.function != 0x8000_0002));
    }

    #[test]
    fn tsc_deadline_follows_the_lapic_capability() {
        let mut on = sample();
        edit(
            &mut on,
            &CpuidOptions {
                tsc_deadline_timer: true,
                ..opts()
            },
        )
        .unwrap();
        assert_ne!(get(&on, 1, 0).ecx & LEAF1_ECX_TSC_DEADLINE, 0);
        // A newer KVM reports the bit itself; without an in-kernel LAPIC it must go.
        let mut off = sample();
        find_mut(&mut off, 1, 0).unwrap().ecx |= LEAF1_ECX_TSC_DEADLINE;
        edit(&mut off, &opts()).unwrap();
        assert_eq!(get(&off, 1, 0).ecx & LEAF1_ECX_TSC_DEADLINE, 0);
    }

    fn get(entries: &[kvm_cpuid_entry2], f: u32, i: u32) -> kvm_cpuid_entry2 {
        *entries
            .iter()
            .find(|e| e.function == f && e.index == i)
            .unwrap_or_else(|| panic!("leaf {f:#x}.{i} missing"))
    }

    #[test]
    fn hypervisor_leaves() {
        let mut e = sample();
        edit(&mut e, &opts()).unwrap();
        let sig = get(&e, LEAF_HYPERVISOR, 0);
        assert_eq!(sig.eax, 0x4000_0010);
        let mut bytes = Vec::new();
        for r in [sig.ebx, sig.ecx, sig.edx] {
            bytes.extend_from_slice(&r.to_le_bytes());
        }
        assert_eq!(&bytes, b"KVMKVMKVM\0\0\0");
        let timing = get(&e, LEAF_TIMING, 0);
        assert_eq!((timing.eax, timing.ebx), (2_445_000, APIC_BUS_KHZ));
        assert_ne!(get(&e, 1, 0).ecx & LEAF1_ECX_HYPERVISOR, 0);
        assert_eq!(
            get(&e, 0x8000_0007, 0).edx & LEAF_80000007_EDX_INVARIANT_TSC,
            1 << 8
        );
    }

    #[test]
    fn async_pf_only_on_request() {
        let mut e = sample();
        edit(&mut e, &opts()).unwrap();
        let off = get(&e, LEAF_KVM_FEATURES, 0).eax;
        assert_eq!(off & ASYNC_PF_FEATURES, 0);
        // Other PV features KVM offers stay.
        assert_ne!(off & (1 << kvm_feature::CLOCKSOURCE2), 0);
        assert_ne!(off & (1 << kvm_feature::CLOCKSOURCE_STABLE_BIT), 0);

        let mut e = sample();
        edit(
            &mut e,
            &CpuidOptions {
                async_pf: true,
                ..opts()
            },
        )
        .unwrap();
        assert_eq!(
            get(&e, LEAF_KVM_FEATURES, 0).eax & ASYNC_PF_FEATURES,
            ASYNC_PF_FEATURES
        );

        // KVM without ASYNC_PF_INT cannot give the guest async PF.
        let mut e = sample();
        find_mut(&mut e, LEAF_KVM_FEATURES, 0).unwrap().eax &= !(1 << kvm_feature::ASYNC_PF_INT);
        let err = edit(
            &mut e,
            &CpuidOptions {
                async_pf: true,
                ..opts()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("async page faults"), "{err}");
    }

    #[test]
    fn no_invariant_tsc_unless_the_host_has_it() {
        let mut e = sample();
        edit(
            &mut e,
            &CpuidOptions {
                host_invariant_tsc: false,
                ..opts()
            },
        )
        .unwrap();
        assert_eq!(
            get(&e, 0x8000_0007, 0).edx & LEAF_80000007_EDX_INVARIANT_TSC,
            0
        );
        // Missing leaf is added (and the extended maximum raised) when the host has it.
        let mut e = sample();
        e.retain(|x| x.function != 0x8000_0007);
        find_mut(&mut e, 0x8000_0000, 0).unwrap().eax = 0x8000_0001;
        edit(&mut e, &opts()).unwrap();
        assert_eq!(get(&e, 0x8000_0000, 0).eax, 0x8000_0007);
        assert_ne!(
            get(&e, 0x8000_0007, 0).edx & LEAF_80000007_EDX_INVARIANT_TSC,
            0
        );
    }

    #[test]
    fn topology_for_one_and_four_vcpus() {
        let mut e = sample();
        edit(&mut e, &opts()).unwrap();
        let leaf1 = get(&e, 1, 0);
        assert_eq!((leaf1.ebx >> 16) & 0xff, 1);
        assert_eq!(leaf1.ebx >> 24, 0);
        assert_eq!(leaf1.ebx & 0xffff, 0x0800, "brand/clflush bits kept");
        let smt = get(&e, 0xb, 0);
        assert_eq!((smt.eax, smt.ebx, smt.ecx, smt.edx), (0, 1, 0x100, 0));
        let core = get(&e, 0xb, 1);
        assert_eq!((core.eax, core.ebx, core.ecx), (0, 1, 0x201));
        assert_eq!(get(&e, 0xb, 2).ecx, 2);
        assert_eq!(e.iter().filter(|x| x.function == 0xb).count(), 3);
        assert_eq!(e.iter().filter(|x| x.function == 0x1f).count(), 3);

        let mut e = sample();
        edit(
            &mut e,
            &CpuidOptions {
                apic_id: 3,
                nr_vcpus: 4,
                ..opts()
            },
        )
        .unwrap();
        assert_eq!(get(&e, 1, 0).ebx >> 24, 3);
        let core = get(&e, 0x1f, 1);
        assert_eq!((core.eax, core.ebx, core.edx), (2, 4, 3));
    }
}
