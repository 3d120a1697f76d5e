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

/// Parses smaps text; `None` if it holds no mapping.
pub fn split_rss(smaps: &str) -> Option<RssSplit> {
    // (size, rss) per mapping, in file order.
    let mut maps: Vec<(u64, u64)> = Vec::new();
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        let is_header = first.split_once('-').is_some_and(|(a, b)| {
            !a.is_empty()
                && a.chars().all(|c| c.is_ascii_hexdigit())
                && b.chars().all(|c| c.is_ascii_hexdigit())
        });
        if is_header {
            maps.push((0, 0));
        } else if let Some(m) = maps.last_mut() {
            if let Some(v) = kib(line, "Size:") {
                m.0 = v;
            } else if let Some(v) = kib(line, "Rss:") {
                m.1 = v;
            }
        }
    }
    let (idx, &(size, rss)) = maps.iter().enumerate().max_by_key(|(_, m)| m.0)?;
    let other = maps
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != idx)
        .map(|(_, m)| m.1)
        .sum();
    Some(RssSplit {
        largest_size_kib: size,
        largest_rss_kib: rss,
        other_rss_kib: other,
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
            split_rss(smaps),
            Some(RssSplit {
                largest_size_kib: 262144,
                largest_rss_kib: 40000,
                other_rss_kib: 812
            })
        );
        assert_eq!(split_rss(""), None);
    }
}
