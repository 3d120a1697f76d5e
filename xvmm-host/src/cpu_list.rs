//! CPU lists as the kernel writes them in sysfs and `taskset -c` takes
//! them ("0-3,8,10-11"): one strict reader for xvmm's `--pin` and for
//! xperf's reading of `/sys/devices/system/cpu/online`.

/// The CPUs `text` names, in the order given: comma-separated CPU numbers
/// and inclusive ranges, surrounding white space ignored. Every part must
/// be a number or a range that does not run backwards, and the list may
/// name at most `max` CPUs; `Err` says which part broke the rule, in words
/// a usage line can carry.
pub fn parse(text: &str, max: usize) -> Result<Vec<u32>, String> {
    let cpu = |t: &str| {
        t.parse::<u32>()
            .map_err(|_| format!("{t:?} is not a CPU number"))
    };
    let mut cpus: Vec<u32> = Vec::new();
    for part in text.trim().split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (cpu(a)?, cpu(b)?),
            None => (cpu(part)?, cpu(part)?),
        };
        if a > b {
            return Err(format!("{part:?} runs backwards"));
        }
        let span = usize::try_from(b - a).unwrap_or(usize::MAX);
        if span >= max || cpus.len().saturating_add(span) >= max {
            return Err(format!("names more than {max} CPUs"));
        }
        cpus.extend(a..=b);
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_as_the_kernel_writes_them() {
        assert_eq!(parse("0-3,8,10-11\n", 64).unwrap(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse("2", 1).unwrap(), [2]);
        assert_eq!(parse("4-7,1", 64).unwrap(), [4, 5, 6, 7, 1]);
        assert_eq!(parse("3-3", 1).unwrap(), [3]);
        assert_eq!(parse("0-1023", 1024).unwrap().len(), 1024);
        assert_eq!(parse("4294967295", 1).unwrap(), [u32::MAX]);
    }

    #[test]
    fn a_bad_part_or_too_many_cpus_is_one_line_naming_it() {
        for (bad, says) in [
            ("", "\"\" is not a CPU number"),
            ("a", "\"a\" is not a CPU number"),
            ("1,", "\"\" is not a CPU number"),
            ("-1", "\"\" is not a CPU number"),
            ("1-", "\"\" is not a CPU number"),
            ("0x1", "\"0x1\" is not a CPU number"),
            ("1 ,2", "\"1 \" is not a CPU number"),
            ("2-1", "\"2-1\" runs backwards"),
            ("0-1024", "names more than 1024 CPUs"),
            ("0-1023,5", "names more than 1024 CPUs"),
            ("0-4294967295", "names more than 1024 CPUs"),
        ] {
            assert_eq!(parse(bad, 1024).unwrap_err(), says, "{bad:?}");
        }
        assert!(parse("0,1", 1).is_err());
    }
}
