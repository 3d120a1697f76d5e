//! The guest memory map (E820 for the zero page, the same entries for PVH).

use crate::layout::{self, RamRange};

pub const E820_RAM: u32 = 1;
pub const E820_RESERVED: u32 = 2;

/// One memory map entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct E820Entry {
    pub addr: u64,
    pub size: u64,
    pub kind: u32,
}

/// The memory map for `ram` (as from [`layout::ram_ranges`]): conventional memory
/// below the EBDA, the legacy hole up to 1 MiB reserved, the rest of RAM, and the
/// results slot reserved so that the guest kernel never allocates it.
pub fn memory_map(ram: &[RamRange]) -> Vec<E820Entry> {
    let mut map = Vec::new();
    for r in ram {
        if r.start == 0 {
            let low_end = r.end().min(layout::EBDA_START);
            map.push(E820Entry {
                addr: 0,
                size: low_end,
                kind: E820_RAM,
            });
            if r.end() > layout::HIMEM_START {
                map.push(E820Entry {
                    addr: layout::EBDA_START,
                    size: layout::HIMEM_START - layout::EBDA_START,
                    kind: E820_RESERVED,
                });
                map.push(E820Entry {
                    addr: layout::HIMEM_START,
                    size: r.end() - layout::HIMEM_START,
                    kind: E820_RAM,
                });
            }
        } else {
            map.push(E820Entry {
                addr: r.start,
                size: r.size,
                kind: E820_RAM,
            });
        }
    }
    map.push(E820Entry {
        addr: layout::RESULTS_GPA,
        size: layout::RESULTS_SIZE,
        kind: E820_RESERVED,
    });
    map.sort_by_key(|e| e.addr);
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_for_512_mib() {
        let map = memory_map(&layout::ram_ranges(512 << 20));
        assert_eq!(
            map,
            vec![
                E820Entry {
                    addr: 0,
                    size: 0x9_fc00,
                    kind: E820_RAM
                },
                E820Entry {
                    addr: 0x9_fc00,
                    size: 0x400 + 0x6_0000,
                    kind: E820_RESERVED
                },
                E820Entry {
                    addr: 0x10_0000,
                    size: (512 << 20) - 0x10_0000,
                    kind: E820_RAM
                },
                E820Entry {
                    addr: 0xd000_0000,
                    size: 16 << 20,
                    kind: E820_RESERVED
                },
            ]
        );
    }

    #[test]
    fn map_above_4_gib_is_sorted_and_disjoint() {
        let map = memory_map(&layout::ram_ranges(4 << 30));
        assert_eq!(map.len(), 5);
        for w in map.windows(2) {
            assert!(w[0].addr + w[0].size <= w[1].addr, "{w:x?}");
        }
        let ram: u64 = map
            .iter()
            .filter(|e| e.kind == E820_RAM)
            .map(|e| e.size)
            .sum();
        assert_eq!(ram, (4 << 30) - 0x6_0400);
        assert_eq!(
            map[4],
            E820Entry {
                addr: 1 << 32,
                size: 1 << 30,
                kind: E820_RAM
            }
        );
    }
}
