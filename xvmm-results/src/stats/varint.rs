//! LEB128 varints and zigzag differences: the compact logs' encoding
//! (exits, intervals, exits waiting for their interval).

/// A difference taken with wrapping, as a small number when it is small
/// either way: the sign bit moved to bit 0.
pub fn zigzag(v: u64) -> u64 {
    (v << 1) ^ 0u64.wrapping_sub(v >> 63)
}

pub fn unzigzag(v: u64) -> u64 {
    (v >> 1) ^ 0u64.wrapping_sub(v & 1)
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v.to_le_bytes()[0] | 0x80);
        v >>= 7;
    }
    out.push(v.to_le_bytes()[0]);
}

/// The varint at `*at`, moving past it; `None` when the bytes end inside
/// one or it runs past 64 bits.
pub fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}
