//! The Intel MultiProcessor table (MP specification 1.4) that tells a Linux
//! guest how many vCPUs it has and how ISA interrupts reach them.
//!
//! Why an MP table and not ACPI's MADT: the guest kernel is a tinyconfig
//! without `CONFIG_ACPI` (ACPI adds some 700 KiB and its own boot work);
//! `CONFIG_X86_MPPARSE`, which it keeps, finds this table by scanning
//! 0xf0000..0x100000, so no boot-protocol field points at it. Its limits (an
//! 8-bit APIC id, no x2APIC entries) cap a guest at [`MAX_VCPUS`].
//!
//! Contents: one processor entry per vCPU (APIC id = vCPU index, the first
//! one the boot processor), one ISA bus, KVM's in-kernel I/O APIC at
//! 0xfec00000, an entry per ISA IRQ naming its I/O APIC pin as KVM's default
//! GSI routing wires it (IRQ 0, the PIT, on pin 2; IRQ n on pin n otherwise;
//! the 8259's ExtINT on pin 0, IRQ 2 the cascade), and LINT0 = ExtINT / LINT1 = NMI on every
//! local APIC.

use crate::layout;
use crate::{Error, Result};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Most vCPUs the table can describe: APIC ids 0..=253, with the I/O APIC's
/// id the next one and 0xff meaning "every local APIC".
pub const MAX_VCPUS: u8 = 254;

/// Where the floating pointer goes: the start of the BIOS area Linux scans.
pub const MPTABLE_GPA: u64 = layout::MP_TABLE_GPA;

const SPEC_REV: u8 = 4;
const LAPIC_GPA: u32 = 0xfee0_0000;
const IOAPIC_GPA: u32 = 0xfec0_0000;
/// What KVM's local APIC version register reads (an integrated APIC).
const LAPIC_VERSION: u8 = 0x14;
/// What KVM's I/O APIC version register reads.
const IOAPIC_VERSION: u8 = 0x11;
/// ISA IRQs routed through the I/O APIC.
const ISA_IRQS: u8 = 16;

const ENTRY_PROCESSOR: u8 = 0;
const ENTRY_BUS: u8 = 1;
const ENTRY_IOAPIC: u8 = 2;
const ENTRY_IO_INTERRUPT: u8 = 3;
const ENTRY_LOCAL_INTERRUPT: u8 = 4;

const CPU_ENABLED: u8 = 1;
const CPU_BOOT_PROCESSOR: u8 = 2;
const INT_VECTORED: u8 = 0;
const INT_NMI: u8 = 1;
const INT_EXTINT: u8 = 3;
const ALL_LOCAL_APICS: u8 = 0xff;
const ISA_BUS: u8 = 0;

const FLOATING_LEN: usize = 16;
const HEADER_LEN: usize = 44;

/// What the processor entries say of each vCPU (Linux only prints them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSignature {
    /// CPUID.1:EAX (family, model, stepping).
    pub signature: u32,
    /// CPUID.1:EDX (feature flags).
    pub features: u32,
}

/// The floating pointer and the configuration table right after it, as
/// the bytes that go at [`MPTABLE_GPA`].
pub fn bytes(vcpus: u8, cpu: CpuSignature) -> Result<Vec<u8>> {
    if vcpus == 0 || vcpus > MAX_VCPUS {
        return Err(Error::Guest(format!(
            "an MP table describes 1 to {MAX_VCPUS} vCPUs, not {vcpus}"
        )));
    }
    let ioapic_id = vcpus;
    let mut entries = Vec::new();
    let mut count: u16 = 0;
    for id in 0..vcpus {
        let flags = if id == 0 {
            CPU_ENABLED | CPU_BOOT_PROCESSOR
        } else {
            CPU_ENABLED
        };
        entries.extend_from_slice(&[ENTRY_PROCESSOR, id, LAPIC_VERSION, flags]);
        entries.extend_from_slice(&cpu.signature.to_le_bytes());
        entries.extend_from_slice(&cpu.features.to_le_bytes());
        entries.extend_from_slice(&[0; 8]);
        count += 1;
    }
    entries.extend_from_slice(&[ENTRY_BUS, ISA_BUS]);
    entries.extend_from_slice(b"ISA   ");
    entries.extend_from_slice(&[ENTRY_IOAPIC, ioapic_id, IOAPIC_VERSION, 1]);
    entries.extend_from_slice(&IOAPIC_GPA.to_le_bytes());
    count += 2;
    let mut io_interrupt = |kind: u8, irq: u8, pin: u8| {
        entries.extend_from_slice(&[ENTRY_IO_INTERRUPT, kind, 0, 0, ISA_BUS, irq, ioapic_id, pin]);
    };
    io_interrupt(INT_EXTINT, 0, 0);
    count += 1;
    // IRQ 2 is the 8259s' cascade: it reaches no pin.
    for irq in (0..ISA_IRQS).filter(|irq| *irq != 2) {
        io_interrupt(INT_VECTORED, irq, isa_irq_pin(irq));
        count += 1;
    }
    for (kind, lint) in [(INT_EXTINT, 0), (INT_NMI, 1)] {
        entries.extend_from_slice(&[
            ENTRY_LOCAL_INTERRUPT,
            kind,
            0,
            0,
            ISA_BUS,
            0,
            ALL_LOCAL_APICS,
            lint,
        ]);
        count += 1;
    }
    let table_len = HEADER_LEN + entries.len();
    let table_gpa = MPTABLE_GPA + FLOATING_LEN as u64;
    let mut out = Vec::with_capacity(FLOATING_LEN + table_len);
    out.extend_from_slice(b"_MP_");
    out.extend_from_slice(&u32::try_from(table_gpa).unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&[1, SPEC_REV, 0, 0, 0, 0, 0, 0]);
    out[10] = checksum(&out[..FLOATING_LEN]);
    let header = out.len();
    out.extend_from_slice(b"PCMP");
    out.extend_from_slice(&u16::try_from(table_len).unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&[SPEC_REV, 0]);
    out.extend_from_slice(b"XVMM    ");
    out.extend_from_slice(b"MICROVM     ");
    out.extend_from_slice(&[0; 6]); // no OEM table
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&LAPIC_GPA.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // no extended table
    out.extend_from_slice(&entries);
    out[header + 7] = checksum(&out[header..]);
    Ok(out)
}

/// The I/O APIC pin of ISA IRQ `irq` under KVM's default GSI routing.
fn isa_irq_pin(irq: u8) -> u8 {
    if irq == 0 {
        2
    } else {
        irq
    }
}

/// The byte that makes `bytes` sum to 0 (mod 256) once written in place of
/// a 0 checksum field.
fn checksum(bytes: &[u8]) -> u8 {
    bytes
        .iter()
        .fold(0u8, |sum, b| sum.wrapping_add(*b))
        .wrapping_neg()
}

/// Writes the table for `vcpus` vCPUs into guest memory.
pub fn write(memory: &GuestMemoryMmap, vcpus: u8, cpu: CpuSignature) -> Result<()> {
    let table = bytes(vcpus, cpu)?;
    memory
        .write_slice(&table, GuestAddress(MPTABLE_GPA))
        .map_err(|e| Error::Memory(format!("cannot write the MP table: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROCESSOR_LEN: usize = 20;
    const SMALL_ENTRY_LEN: usize = 8;

    const CPU: CpuSignature = CpuSignature {
        signature: 0x00b0_0f20,
        features: 0x178b_fbff,
    };

    fn sums_to_zero(bytes: &[u8]) -> bool {
        bytes.iter().fold(0u8, |s, b| s.wrapping_add(*b)) == 0
    }

    /// The entries as a reader of the specification would walk them: (type,
    /// bytes), by each type's length.
    fn entries(table: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let count = u16::from_le_bytes([table[34], table[35]]);
        let mut at = HEADER_LEN;
        let mut out = Vec::new();
        for _ in 0..count {
            let len = if table[at] == ENTRY_PROCESSOR {
                PROCESSOR_LEN
            } else {
                SMALL_ENTRY_LEN
            };
            out.push((table[at], table[at..at + len].to_vec()));
            at += len;
        }
        assert_eq!(at, table.len(), "the count covers the whole table");
        out
    }

    #[test]
    fn the_floating_pointer_points_at_a_valid_table() {
        let all = bytes(2, CPU).unwrap();
        let (floating, table) = all.split_at(FLOATING_LEN);
        assert_eq!(&floating[..4], b"_MP_");
        let pointer = u32::from_le_bytes(floating[4..8].try_into().unwrap());
        assert_eq!(u64::from(pointer), MPTABLE_GPA + 16);
        assert_eq!((floating[8], floating[9], floating[11]), (1, 4, 0));
        assert!(sums_to_zero(floating));
        assert_eq!(&table[..4], b"PCMP");
        assert_eq!(
            usize::from(u16::from_le_bytes([table[4], table[5]])),
            table.len()
        );
        assert_eq!(table[6], 4);
        assert!(sums_to_zero(table));
        assert_eq!(
            u32::from_le_bytes(table[36..40].try_into().unwrap()),
            0xfee0_0000
        );
    }

    /// Every byte of a two-vCPU table's entries, as the specification lays
    /// them out: a checksum written anywhere but its field would still sum
    /// to zero, so the bytes themselves are checked.
    #[test]
    fn a_two_vcpu_table_holds_exactly_its_entries() {
        let all = bytes(2, CPU).unwrap();
        let table = &all[FLOATING_LEN..];
        let cpu = |id: u8, flags: u8| {
            let mut e = vec![ENTRY_PROCESSOR, id, 0x14, flags];
            e.extend_from_slice(&CPU.signature.to_le_bytes());
            e.extend_from_slice(&CPU.features.to_le_bytes());
            e.extend_from_slice(&[0; 8]);
            e
        };
        let mut want = cpu(0, 3);
        want.extend(cpu(1, 1));
        want.extend_from_slice(&[ENTRY_BUS, 0, b'I', b'S', b'A', b' ', b' ', b' ']);
        want.extend_from_slice(&[ENTRY_IOAPIC, 2, 0x11, 1, 0, 0, 0xc0, 0xfe]);
        want.extend_from_slice(&[ENTRY_IO_INTERRUPT, INT_EXTINT, 0, 0, 0, 0, 2, 0]);
        for (irq, pin) in [(0, 2)]
            .into_iter()
            .chain((1..16).filter(|i| *i != 2).map(|i| (i, i)))
        {
            want.extend_from_slice(&[ENTRY_IO_INTERRUPT, 0, 0, 0, 0, irq, 2, pin]);
        }
        want.extend_from_slice(&[ENTRY_LOCAL_INTERRUPT, INT_EXTINT, 0, 0, 0, 0, 0xff, 0]);
        want.extend_from_slice(&[ENTRY_LOCAL_INTERRUPT, INT_NMI, 0, 0, 0, 0, 0xff, 1]);
        assert_eq!(&table[HEADER_LEN..], want.as_slice());
        assert_eq!(&table[8..28], b"XVMM    MICROVM     ");
        assert_eq!(
            u16::from_le_bytes([table[34], table[35]]),
            2 + 2 + 1 + 15 + 2
        );
        assert_eq!(
            table[7],
            checksum(&[&table[..7], &[0], &table[8..]].concat())
        );
    }

    #[test]
    fn every_vcpu_has_an_enabled_processor_entry_and_only_the_first_boots() {
        for n in [1u8, 2, 7, MAX_VCPUS] {
            let all = bytes(n, CPU).unwrap();
            let cpus: Vec<Vec<u8>> = entries(&all[FLOATING_LEN..])
                .into_iter()
                .filter(|(t, _)| *t == ENTRY_PROCESSOR)
                .map(|(_, e)| e)
                .collect();
            assert_eq!(cpus.len(), usize::from(n));
            for (i, e) in cpus.iter().enumerate() {
                assert_eq!(usize::from(e[1]), i, "APIC id = vCPU index");
                let boots = e[3] & CPU_BOOT_PROCESSOR != 0;
                assert_eq!(boots, i == 0);
                assert!(e[3] & CPU_ENABLED != 0);
                assert_eq!(u32::from_le_bytes(e[4..8].try_into().unwrap()), 0x00b0_0f20);
            }
        }
    }

    #[test]
    fn isa_irqs_reach_the_pins_kvm_routes_them_to() {
        let all = bytes(3, CPU).unwrap();
        let list = entries(&all[FLOATING_LEN..]);
        let ioapic = list.iter().find(|(t, _)| *t == ENTRY_IOAPIC).unwrap();
        assert_eq!(ioapic.1[1], 3, "the I/O APIC's id follows the vCPUs'");
        assert_eq!(
            u32::from_le_bytes(ioapic.1[4..8].try_into().unwrap()),
            0xfec0_0000
        );
        let routes: Vec<(u8, u8, u8)> = list
            .iter()
            .filter(|(t, _)| *t == ENTRY_IO_INTERRUPT)
            .map(|(_, e)| (e[1], e[5], e[7]))
            .collect();
        assert!(routes.contains(&(INT_EXTINT, 0, 0)));
        assert!(routes.contains(&(INT_VECTORED, 0, 2)), "the PIT on pin 2");
        assert!(routes.contains(&(INT_VECTORED, 4, 4)), "the UART's IRQ 4");
        assert!(!routes.iter().any(|r| r.1 == 2), "no route for the cascade");
        assert_eq!(routes.len(), 16);
        let locals: Vec<(u8, u8, u8)> = list
            .iter()
            .filter(|(t, _)| *t == ENTRY_LOCAL_INTERRUPT)
            .map(|(_, e)| (e[1], e[6], e[7]))
            .collect();
        assert_eq!(locals, [(INT_EXTINT, 0xff, 0), (INT_NMI, 0xff, 1)]);
    }

    #[test]
    fn counts_the_table_cannot_hold_are_refused() {
        assert!(bytes(0, CPU).is_err());
        assert!(bytes(MAX_VCPUS + 1, CPU).is_err());
        // The largest table stays inside the scanned BIOS area.
        let most = bytes(MAX_VCPUS, CPU).unwrap();
        assert!(MPTABLE_GPA + most.len() as u64 <= layout::HIMEM_START);
    }

    #[test]
    fn the_table_lands_where_linux_scans() {
        let memory = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        write(&memory, 2, CPU).unwrap();
        let mut sig = [0u8; 4];
        memory.read_slice(&mut sig, GuestAddress(0xf0000)).unwrap();
        assert_eq!(&sig, b"_MP_");
    }
}
