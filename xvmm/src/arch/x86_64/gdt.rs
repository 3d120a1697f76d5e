//! GDT descriptors: encoding and conversion to KVM's `kvm_segment`. Pure, tested.

use kvm_bindings::kvm_segment;

/// Flags (bits 8..16 = access byte, 12..16 of the high nibble = G/DB/L/AVL) of
/// common flat segments, in the layout [`gdt_entry`] takes.
pub mod flags {
    /// 64-bit code, present, DPL 0, readable, long mode, 4 KiB granularity.
    pub const CODE64_KERNEL: u16 = 0xa09b;
    /// 32-bit code, present, DPL 0, readable, 32-bit default, 4 KiB granularity.
    pub const CODE32_KERNEL: u16 = 0xc09b;
    /// Data, present, DPL 0, writable, 32-bit, 4 KiB granularity.
    pub const DATA_KERNEL: u16 = 0xc093;
    /// 64-bit code, DPL 3.
    pub const CODE64_USER: u16 = 0xa0fb;
    /// Data, DPL 3.
    pub const DATA_USER: u16 = 0xc0f3;
    /// Available 64-bit TSS, present.
    pub const TSS64: u16 = 0x0089;
}

/// Encodes a segment descriptor from `flags` (see [`flags`]), `base` and a 20-bit `limit`.
pub const fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    ((base as u64 & 0xff00_0000) << 32)
        | ((base as u64 & 0x00ff_ffff) << 16)
        | (limit as u64 & 0x0000_ffff)
        | ((limit as u64 & 0x000f_0000) << 32)
        | ((flags as u64 & 0xf0ff) << 40)
}

fn base(entry: u64) -> u64 {
    ((entry >> 16) & 0x00ff_ffff) | ((entry >> 32) & 0xff00_0000)
}

fn raw_limit(entry: u64) -> u32 {
    // Two masked parts of 16 and 20 bits: each fits.
    ((entry & 0xffff) as u32) | (((entry >> 32) & 0xf_0000) as u32)
}

/// Converts a descriptor at GDT index `index` into the `kvm_segment` KVM wants
/// (selector = index * 8 with the descriptor's DPL as RPL; limit in bytes).
pub fn kvm_segment_from_gdt(entry: u64, index: u8) -> kvm_segment {
    let g = ((entry >> 55) & 1) as u8;
    let raw = raw_limit(entry);
    // With 4 KiB granularity the limit counts pages, and the low 12 bits are all ones.
    let limit = if g == 1 { (raw << 12) | 0xfff } else { raw };
    let dpl = ((entry >> 45) & 3) as u8;
    let present = ((entry >> 47) & 1) as u8;
    kvm_segment {
        base: base(entry),
        limit,
        selector: (u16::from(index) * 8) | u16::from(dpl),
        type_: ((entry >> 40) & 0xf) as u8,
        present,
        dpl,
        db: ((entry >> 54) & 1) as u8,
        s: ((entry >> 44) & 1) as u8,
        l: ((entry >> 53) & 1) as u8,
        g,
        avl: ((entry >> 52) & 1) as u8,
        padding: 0,
        unusable: u8::from(present == 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_encodings() {
        // Values every x86-64 boot GDT uses.
        assert_eq!(
            gdt_entry(flags::CODE64_KERNEL, 0, 0xfffff),
            0x00af_9b00_0000_ffff
        );
        assert_eq!(
            gdt_entry(flags::DATA_KERNEL, 0, 0xfffff),
            0x00cf_9300_0000_ffff
        );
        assert_eq!(
            gdt_entry(flags::CODE32_KERNEL, 0, 0xfffff),
            0x00cf_9b00_0000_ffff
        );
        assert_eq!(
            gdt_entry(flags::TSS64, 0x1234_5678, 0x67),
            0x1200_8934_5678_0067
        );
    }

    #[test]
    fn segment_conversion_round_trips_fields() {
        let code = kvm_segment_from_gdt(gdt_entry(flags::CODE64_KERNEL, 0, 0xfffff), 1);
        assert_eq!(code.selector, 8);
        assert_eq!(
            (code.l, code.db, code.g, code.s, code.present),
            (1, 0, 1, 1, 1)
        );
        assert_eq!(code.type_, 0xb);
        assert_eq!(code.limit, 0xffff_ffff);
        assert_eq!(code.unusable, 0);

        let user = kvm_segment_from_gdt(gdt_entry(flags::DATA_USER, 0, 0xfffff), 4);
        assert_eq!((user.dpl, user.selector), (3, 0x23));

        let tss = kvm_segment_from_gdt(gdt_entry(flags::TSS64, 0xdead_b000, 0x67), 3);
        assert_eq!(
            (tss.base, tss.limit, tss.g, tss.s, tss.type_),
            (0xdead_b000, 0x67, 0, 0, 9)
        );

        let null = kvm_segment_from_gdt(0, 0);
        assert_eq!((null.present, null.unusable), (0, 1));
    }
}
