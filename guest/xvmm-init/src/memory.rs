//! Splitting a process's resident memory into its largest mapping (for a VMM:
//! guest RAM) and everything else, from `/proc/PID/smaps`.

/// Resident KiB of the largest mapping (by size) and of all other mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RssSplit {
    pub largest_size_kib: u64,
    pub largest_rss_kib: u64,
    pub other_rss_kib: u64,
}

fn kib(line: &str, key: &str) -> Option<u64> {
    line.strip_prefix(key)?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

/// One mapping of smaps: its address range, its path (None when
/// anonymous), and its size and resident KiB.
struct Map<'a> {
    start: u64,
    end: u64,
    /// Mapped read-write, as guest RAM is.
    writable: bool,
    path: Option<&'a str>,
    size: u64,
    rss: u64,
}

/// The mapping a smaps header line starts, if `line` is one.
fn header(line: &str) -> Option<Map<'_>> {
    let mut f = line.split_whitespace();
    let (a, b) = f.next()?.split_once('-')?;
    let start = u64::from_str_radix(a, 16).ok()?;
    let end = u64::from_str_radix(b, 16).ok()?;
    let writable = f.next()?.starts_with("rw");
    // Range, perms, offset, device, inode; then the path, which may hold
    // spaces.
    let mut rest = line;
    for _ in 0..5 {
        rest = rest.trim_start();
        rest = &rest[rest.find(char::is_whitespace).unwrap_or(rest.len())..];
    }
    let path = Some(rest.trim()).filter(|p| !p.is_empty());
    Some(Map {
        start,
        end,
        writable,
        path,
        size: 0,
        rss: 0,
    })
}

/// Parses smaps text; `None` if it holds no mapping.
///
/// Guest RAM is the largest mapping, together with the mappings of the
/// VMM's `inputs` (its kernel and initrd files, which a VMM may map into
/// guest RAM rather than copy) that continue it without a gap, and the
/// anonymous guest RAM on their far side: a chain of adjacent mappings
/// where each anonymous link follows an input's mapping, so that the VMM's
/// own anonymous memory next to guest RAM (a thread's stack) is not taken.
pub fn split_rss(smaps: &str, inputs: &[&str]) -> Option<RssSplit> {
    let mut maps: Vec<Map> = Vec::new();
    for line in smaps.lines() {
        if let Some(m) = header(line) {
            maps.push(m);
        } else if let Some(m) = maps.last_mut() {
            if let Some(v) = kib(line, "Size:") {
                m.size = v;
            } else if let Some(v) = kib(line, "Rss:") {
                m.rss = v;
            }
        }
    }
    let (idx, _) = maps.iter().enumerate().max_by_key(|(_, m)| m.size)?;
    // A VMM that reads its kernel through a read-only mapping (QEMU's ELF
    // loader) keeps a copy source, not guest RAM.
    let input = |m: &Map| m.writable && m.path.is_some_and(|p| inputs.contains(&p));
    // `outer` continues guest RAM from its neighbour `inner`.
    let continues =
        |outer: &Map, inner: &Map| input(outer) || (outer.path.is_none() && input(inner));
    let mut first = idx;
    while first > 0
        && maps[first - 1].end == maps[first].start
        && continues(&maps[first - 1], &maps[first])
    {
        first -= 1;
    }
    let mut last = idx;
    while last + 1 < maps.len()
        && maps[last].end == maps[last + 1].start
        && continues(&maps[last + 1], &maps[last])
    {
        last += 1;
    }
    let guest = &maps[first..=last];
    let total: u64 = maps.iter().map(|m| m.rss).sum();
    let guest_rss: u64 = guest.iter().map(|m| m.rss).sum();
    Some(RssSplit {
        largest_size_kib: guest.iter().map(|m| m.size).sum(),
        largest_rss_kib: guest_rss,
        other_rss_kib: total - guest_rss,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_largest_mapping_from_the_rest() {
        let smaps = "\
55d0c0000000-55d0c0100000 r-xp 00000000 00:02 12 /bin/xvmm
Size:               1024 kB
Rss:                 800 kB
Pss:                 800 kB
7f0000000000-7f0010000000 rw-p 00000000 00:00 0 
Size:             262144 kB
Rss:               40000 kB
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
Rss:                  12 kB
";
        assert_eq!(
            split_rss(smaps, &[]),
            Some(RssSplit {
                largest_size_kib: 262144,
                largest_rss_kib: 40000,
                other_rss_kib: 812
            })
        );
        assert_eq!(split_rss("", &[]), None);
    }

    #[test]
    fn a_kernel_mapped_into_guest_ram_is_guest_ram() {
        // Thread stack, guest RAM below the kernel, two kernel segments
        // mapped from its file with anonymous RAM between, guest RAM above,
        // then another anonymous mapping.
        let smaps = "\
7f0000000000-7f0000200000 rw-p 00000000 00:00 0 
Rss:                  16 kB
7f0000200000-7f0001200000 rw-p 00000000 00:00 0 
Size:              16384 kB
Rss:                 100 kB
7f0001200000-7f0001400000 rw-p 00200000 00:02 7 /l2/vmlinux
Size:               2048 kB
Rss:                1000 kB
7f0001400000-7f0001500000 rw-p 00000000 00:00 0 
Size:               1024 kB
Rss:                  20 kB
7f0001500000-7f0001600000 rw-p 00500000 00:02 7 /l2/vmlinux
Size:               1024 kB
Rss:                 500 kB
7f0001600000-7f0010200000 rw-p 00000000 00:00 0 
Size:             241664 kB
Rss:               40000 kB
7f0010200000-7f0010400000 rw-p 00000000 00:00 0 
Size:               2048 kB
Rss:                   8 kB
";
        let split = split_rss(smaps, &["/l2/vmlinux", "/l2/init.cpio"]).unwrap();
        assert_eq!(
            (split.largest_rss_kib, split.other_rss_kib),
            (100 + 1000 + 20 + 500 + 40000, 16 + 8)
        );
        assert_eq!(split.largest_size_kib, 16384 + 2048 + 1024 + 1024 + 241664);
        // Without the kernel named as an input only the largest is guest RAM.
        let split = split_rss(smaps, &[]).unwrap();
        assert_eq!(split.largest_rss_kib, 40000);
        // Nor when the kernel is mapped read-only (a copy source).
        let read_only = smaps.replace("rw-p 00500000", "r--p 00500000");
        let split = split_rss(&read_only, &["/l2/vmlinux"]).unwrap();
        assert_eq!(split.largest_rss_kib, 40000);
    }
}
