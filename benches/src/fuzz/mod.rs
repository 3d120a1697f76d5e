//! Driving the libFuzzer targets in `fuzz/` (cargo-fuzz): which targets
//! there are, their seeds ([`seeds`]) and what libFuzzer reports of a run
//! ([`RunStats`]). Used by `src/bin/fuzz.rs` (the bench, and `./test.sh`'s
//! short run of every target).

pub mod seeds;

/// One fuzz target: its name (`fuzz/fuzz_targets/<name>.rs`) and what it
/// parses.
pub struct Target {
    pub name: &'static str,
    pub parses: &'static str,
}

/// Every target. A new parser of untrusted input adds a file in
/// `fuzz/fuzz_targets/`, a `[[bin]]` in `fuzz/Cargo.toml`, a line here and
/// its seeds in [`seeds::for_target`].
pub const TARGETS: &[Target] = &[
    Target {
        name: "kernel_image",
        parses: "bzImage / PVH ELF inspect, boot plan, load",
    },
    Target {
        name: "elf_reader",
        parses: "the ELF reader, in memory and streamed",
    },
    Target {
        name: "kernel_hooks",
        parses: "xvmm kernel hooks: hook sites of a vmlinux",
    },
    Target {
        name: "static_binary",
        parses: "the static-xperf check, against an ELF model",
    },
    Target {
        name: "report",
        parses: "result files: parse, render, compare, HTML",
    },
    Target {
        name: "openmetrics",
        parses: "result files as OpenMetrics text (label escaping, names)",
    },
    Target {
        name: "results_channel",
        parses: "the guest's results doorbell and slot",
    },
    Target {
        name: "trace_line",
        parses: "--trace: trace_pipe lines and pairing",
    },
    Target {
        name: "trace_raw_page",
        parses: "--trace: trace_pipe_raw pages, formats, pairing",
    },
    Target {
        name: "initramfs",
        parses: "the cpio writer against an independent reader",
    },
    Target {
        name: "xperf_args",
        parses: "xperf's command line",
    },
    Target {
        name: "results_param",
        parses: "xperf's xvmm.results= parameter",
    },
    Target {
        name: "machine_facts",
        parses: "/proc, sysfs and kernel-log facts (characterize)",
    },
    Target {
        name: "port_bus",
        parses: "port I/O dispatch, UART, console",
    },
    Target {
        name: "vm_exit",
        parses: "the exit loop's handling of each exit (MMIO too)",
    },
    Target {
        name: "workload_pages",
        parses: "xperf workload's trace pages, tasks and intervals",
    },
    Target {
        name: "interval_stream",
        parses: "a guest's interval stream to the VMM, and the join",
    },
    Target {
        name: "microguest_stamps",
        parses: "the microguest's stamp words, the IPI receiver's too",
    },
    Target {
        name: "console_escape",
        parses: "terminal escaping of reports and console",
    },
    Target {
        name: "drop_request",
        parses: "the guest's page-drop requests (--host-fault-delay)",
    },
    Target {
        name: "trace_record",
        parses: "tracefs text records (xperf probes, --trace)",
    },
    Target {
        name: "cli_args",
        parses: "xvmm's command line and its value parsers",
    },
    Target {
        name: "init_plan",
        parses: "the harness's test plan and step results",
    },
];

/// What libFuzzer said about one run of a target.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RunStats {
    pub execs: u64,
    pub execs_per_sec: u64,
    /// Coverage points (libFuzzer's `cov:`, edges of the instrumented code).
    pub coverage: u64,
    /// libFuzzer's features (`ft:`): edges with hit counts and more.
    pub features: u64,
    /// Inputs in the corpus at the end.
    pub corpus: u64,
    pub peak_rss_mb: u64,
    /// Inputs written as crash, timeout, leak or out-of-memory artifacts.
    pub crashes: Vec<String>,
}

fn number_after(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Reads libFuzzer's output (run with `-print_final_stats=1`).
pub fn parse_output(text: &str) -> RunStats {
    let mut stats = RunStats::default();
    for line in text.lines() {
        if let Some(n) = number_after(line, "stat::number_of_executed_units:") {
            stats.execs = n;
        } else if let Some(n) = number_after(line, "stat::average_exec_per_sec:") {
            stats.execs_per_sec = n;
        } else if let Some(n) = number_after(line, "stat::peak_rss_mb:") {
            stats.peak_rss_mb = n;
        } else if line.starts_with('#') && line.contains(" cov: ") {
            stats.coverage = number_after(line, " cov: ").unwrap_or(stats.coverage);
            stats.features = number_after(line, " ft: ").unwrap_or(stats.features);
            stats.corpus = number_after(line, " corp: ").unwrap_or(stats.corpus);
        } else if let Some(path) = line.split("Test unit written to ").nth(1) {
            stats.crashes.push(path.trim().to_string());
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libfuzzer_statistics_and_crashes() {
        let out = "INFO: Seed: 1\n\
            #2\tINITED cov: 40 ft: 41 corp: 1/1b exec/s: 0 rss: 30Mb\n\
            #65536\tpulse  cov: 120 ft: 300 corp: 20/400b lim: 4 exec/s: 32768 rss: 40Mb\n\
            #70000\tDONE   cov: 125 ft: 310 corp: 22/410b lim: 4 exec/s: 35000 rss: 41Mb\n\
            ==1== ERROR: libFuzzer: deadly signal\n\
            artifact_prefix='a/'; Test unit written to a/crash-abc\n\
            stat::number_of_executed_units: 70000\n\
            stat::average_exec_per_sec:     35000\n\
            stat::new_units_added:          21\n\
            stat::peak_rss_mb:              41\n";
        assert_eq!(
            parse_output(out),
            RunStats {
                execs: 70000,
                execs_per_sec: 35000,
                coverage: 125,
                features: 310,
                corpus: 22,
                peak_rss_mb: 41,
                crashes: vec!["a/crash-abc".into()],
            }
        );
    }

    #[test]
    fn every_target_has_a_source_file_and_a_bin() {
        let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap();
        for t in TARGETS {
            assert!(
                fuzz.join(format!("fuzz_targets/{}.rs", t.name)).is_file(),
                "{}",
                t.name
            );
            assert!(
                manifest.contains(&format!("name = \"{}\"", t.name)),
                "{}",
                t.name
            );
        }
        let files = std::fs::read_dir(fuzz.join("fuzz_targets"))
            .unwrap()
            .count();
        assert_eq!(
            files,
            TARGETS.len(),
            "a target file is missing from TARGETS"
        );
    }
}
