//! xperf's command line, shared by xperf, which parses it, and xvmm, which
//! writes it for the built-in xperf: the crossing run's options as one type
//! ([`XperfArgs`], with [`XperfArgs::parse`] and [`XperfArgs::to_argv`]),
//! the bounds both sides check, and the one splitter of `--name value` /
//! `--name=value` words ([`Words`]) that xperf's subcommands use too.
//!
//! Parsed by hand rather than with clap: xperf is often a guest's PID 1 with
//! its arguments from the kernel command line, it is built static for
//! guests, and every error must be one line.

use std::path::PathBuf;

/// Upper bound for any count (`--samples`, `--warmup`, `--null-samples`;
/// probes' and characterize's too): the page-fault region is one page per
/// sample.
pub const MAX_COUNT: u64 = 1_000_000;
/// Rounds by default (`--rounds`; characterize's crossings too).
pub const DEFAULT_ROUNDS: u32 = 3;
/// Samples per crossing and round by default (`--samples`).
pub const DEFAULT_SAMPLES: u64 = 10_000;
/// Upper bound for `--rounds`.
pub const MAX_ROUNDS: u32 = 100;
/// Upper bound for `--calibrate`.
pub const MAX_CALIBRATIONS: u64 = 4096;
/// Upper bound for the length of `--run-id`.
pub const MAX_RUN_ID: usize = 64;
/// Upper bound for `--host-miss` (pages per round).
pub const MAX_HOST_MISS_PAGES: u64 = 10_000;

/// Words of a command line, taken one option at a time.
pub struct Words<I> {
    rest: I,
}

impl<I: Iterator<Item = String>> Words<I> {
    pub fn new(words: impl IntoIterator<IntoIter = I>) -> Self {
        Words {
            rest: words.into_iter(),
        }
    }

    /// The next word as an option name, with the value written inline after
    /// `=` (only for a word that starts with `--`).
    pub fn next_option(&mut self) -> Option<(String, Option<String>)> {
        let word = self.rest.next()?;
        Some(match word.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                (name.to_string(), Some(value.to_string()))
            }
            _ => (word, None),
        })
    }

    /// An option's value: the one written inline, else the next word.
    pub fn value(&mut self, inline: Option<String>) -> Option<String> {
        inline.or_else(|| self.rest.next())
    }
}

/// `value` as a count of `name` within `min..=max`; `Err` is the usage
/// line.
pub fn count(name: &str, value: &str, min: u64, max: u64) -> Result<u64, String> {
    let n: u64 = value
        .parse()
        .map_err(|_| format!("{name} needs a whole number, got {value:?}"))?;
    if !(min..=max).contains(&n) {
        return Err(format!("{name} must be between {min} and {max}, got {n}"));
    }
    Ok(n)
}

/// `value` as a CPU number.
pub fn cpu(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .map_err(|_| format!("--cpu needs a CPU number, got {value:?}"))
}

/// The options of xperf's crossing run (no subcommand), each as given:
/// `None` or `false` leaves xperf's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XperfArgs {
    pub samples: Option<u64>,
    pub warmup: Option<u64>,
    pub null_samples: Option<u64>,
    pub rounds: Option<u32>,
    pub cpu: Option<u32>,
    pub raw: bool,
    pub json: Option<PathBuf>,
    /// Calibration exits to take (under xvmm `--trace`).
    pub calibrate: Option<u64>,
    /// Echoed in the report, so that the VMM can tell its own run's results.
    pub run_id: Option<String>,
    /// pf-host-miss pages per round (under xvmm `--host-fault-delay`).
    pub host_miss: Option<u64>,
    /// The interrupt path's crossings too (a cross-CPU wake-up, a TLB
    /// shootdown), on two CPUs.
    pub interrupt_path: bool,
}

/// What a crossing run's command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Run(XperfArgs),
    Help,
    Version,
}

/// A value outside xperf's bounds: the flag, the value and the bounds, for
/// the caller to word (xvmm says it of its own flag, xperf of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfRange {
    pub flag: &'static str,
    pub value: u64,
    pub min: u64,
    pub max: u64,
}

impl XperfArgs {
    /// Parses the words after the program name (no subcommand); `Err` is
    /// the usage line.
    pub fn parse<I: Iterator<Item = String>>(
        words: impl IntoIterator<IntoIter = I>,
    ) -> Result<Parsed, String> {
        let mut a = XperfArgs::default();
        let mut words = Words::new(words);
        while let Some((name, inline)) = words.next_option() {
            match name.as_str() {
                "--raw" | "--interrupt-path" | "-h" | "--help" | "-V" | "--version" => {
                    if inline.is_some() {
                        return Err(format!("{name} takes no value"));
                    }
                    match name.as_str() {
                        "--raw" => a.raw = true,
                        "--interrupt-path" => a.interrupt_path = true,
                        "-h" | "--help" => return Ok(Parsed::Help),
                        _ => return Ok(Parsed::Version),
                    }
                }
                "--samples" | "--warmup" | "--null-samples" | "--rounds" | "--cpu" | "--json"
                | "--calibrate" | "--run-id" | "--host-miss" => {
                    let value = words
                        .value(inline)
                        .ok_or_else(|| format!("{name} needs a value"))?;
                    a.set(&name, &value)?;
                }
                other => return Err(format!("unknown argument {other:?} (try --help)")),
            }
        }
        Ok(Parsed::Run(a))
    }

    /// Sets the option `name` (one that takes a value) from `value`.
    fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        match name {
            "--samples" => self.samples = Some(count(name, value, 1, MAX_COUNT)?),
            "--warmup" => self.warmup = Some(count(name, value, 0, MAX_COUNT)?),
            "--null-samples" => self.null_samples = Some(count(name, value, 1, MAX_COUNT)?),
            "--rounds" => {
                let n = count(name, value, 1, u64::from(MAX_ROUNDS))?;
                // count() kept it at most MAX_ROUNDS.
                self.rounds = Some(u32::try_from(n).unwrap_or(MAX_ROUNDS));
            }
            "--cpu" => self.cpu = Some(cpu(value)?),
            "--json" => {
                if value.is_empty() {
                    return Err("--json needs a file name".into());
                }
                self.json = Some(PathBuf::from(value));
            }
            "--calibrate" => self.calibrate = Some(count(name, value, 0, MAX_CALIBRATIONS)?),
            "--run-id" => self.run_id = Some(run_id(value)?),
            _ => self.host_miss = Some(count(name, value, 0, MAX_HOST_MISS_PAGES)?),
        }
        Ok(())
    }

    /// The samples a crossing run takes of each crossing, every round
    /// together, with xperf's defaults for what is not given: what a host
    /// that wrote these options asked for.
    pub fn samples_per_crossing(&self) -> u64 {
        self.samples
            .unwrap_or(DEFAULT_SAMPLES)
            .saturating_mul(u64::from(self.rounds.unwrap_or(DEFAULT_ROUNDS)))
    }

    /// The first count outside xperf's bounds, if any: what xvmm checks
    /// before it boots a guest whose xperf would refuse it.
    pub fn out_of_range(&self) -> Option<OutOfRange> {
        let bounds = [
            ("--samples", self.samples, 1, MAX_COUNT),
            ("--warmup", self.warmup, 0, MAX_COUNT),
            ("--null-samples", self.null_samples, 1, MAX_COUNT),
            (
                "--rounds",
                self.rounds.map(u64::from),
                1,
                u64::from(MAX_ROUNDS),
            ),
            ("--calibrate", self.calibrate, 0, MAX_CALIBRATIONS),
            ("--host-miss", self.host_miss, 0, MAX_HOST_MISS_PAGES),
        ];
        bounds.into_iter().find_map(|(flag, value, min, max)| {
            let value = value?;
            (!(min..=max).contains(&value)).then_some(OutOfRange {
                flag,
                value,
                min,
                max,
            })
        })
    }

    /// The options as xperf's words, which [`XperfArgs::parse`] reads back
    /// as `self`.
    pub fn to_argv(&self) -> Vec<String> {
        let mut argv = Vec::new();
        let mut push = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                argv.extend([name.to_string(), v]);
            }
        };
        push("--samples", self.samples.map(|n| n.to_string()));
        push("--warmup", self.warmup.map(|n| n.to_string()));
        push("--null-samples", self.null_samples.map(|n| n.to_string()));
        push("--rounds", self.rounds.map(|n| n.to_string()));
        push("--cpu", self.cpu.map(|n| n.to_string()));
        push(
            "--json",
            self.json.as_ref().map(|p| p.display().to_string()),
        );
        push("--host-miss", self.host_miss.map(|n| n.to_string()));
        push("--calibrate", self.calibrate.map(|n| n.to_string()));
        push("--run-id", self.run_id.clone());
        if self.raw {
            argv.push("--raw".into());
        }
        if self.interrupt_path {
            argv.push("--interrupt-path".into());
        }
        argv
    }
}

fn run_id(value: &str) -> Result<String, String> {
    let hex = value.bytes().all(|b| b.is_ascii_hexdigit());
    if value.is_empty() || value.len() > MAX_RUN_ID || !hex {
        return Err(format!("--run-id takes 1 to {MAX_RUN_ID} hex digits"));
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<Parsed, String> {
        XperfArgs::parse(words.iter().map(|w| w.to_string()))
    }

    fn run(words: &[&str]) -> XperfArgs {
        match parse(words) {
            Ok(Parsed::Run(a)) => a,
            other => panic!("{words:?} gave {other:?}"),
        }
    }

    #[test]
    fn both_value_styles_and_every_option() {
        assert_eq!(run(&[]), XperfArgs::default());
        let a = run(&[
            "--samples",
            "50",
            "--warmup=0",
            "--null-samples",
            "7",
            "--rounds=4",
            "--cpu",
            "1",
            "--raw",
            "--json=a.json",
            "--calibrate",
            "256",
            "--run-id",
            "00ff",
            "--host-miss",
            "200",
            "--interrupt-path",
        ]);
        let want = XperfArgs {
            samples: Some(50),
            warmup: Some(0),
            null_samples: Some(7),
            rounds: Some(4),
            cpu: Some(1),
            raw: true,
            json: Some("a.json".into()),
            calibrate: Some(256),
            run_id: Some("00ff".into()),
            host_miss: Some(200),
            interrupt_path: true,
        };
        assert_eq!(a, want);
        assert_eq!(parse(&["--help"]), Ok(Parsed::Help));
        assert_eq!(parse(&["-h"]), Ok(Parsed::Help));
        assert_eq!(parse(&["-V"]), Ok(Parsed::Version));
        assert_eq!(parse(&["--version"]), Ok(Parsed::Version));
    }

    #[test]
    fn every_bound_is_refused_one_past_it_and_taken_at_it() {
        for (flag, min, max) in [
            ("--samples", 1, MAX_COUNT),
            ("--warmup", 0, MAX_COUNT),
            ("--null-samples", 1, MAX_COUNT),
            ("--rounds", 1, u64::from(MAX_ROUNDS)),
            ("--calibrate", 0, MAX_CALIBRATIONS),
            ("--host-miss", 0, MAX_HOST_MISS_PAGES),
        ] {
            for ok in [min, max] {
                let a = run(&[flag, &ok.to_string()]);
                assert_eq!(a.out_of_range(), None, "{flag} {ok}");
            }
            let over = parse(&[flag, &(max + 1).to_string()]).unwrap_err();
            assert_eq!(
                over,
                format!("{flag} must be between {min} and {max}, got {}", max + 1)
            );
            if min > 0 {
                assert!(parse(&[flag, &(min - 1).to_string()]).is_err(), "{flag}");
            }
        }
    }

    #[test]
    fn out_of_range_names_the_first_flag_outside_its_bounds() {
        let a = XperfArgs {
            samples: Some(MAX_COUNT + 1),
            rounds: Some(0),
            ..XperfArgs::default()
        };
        let e = a.out_of_range().unwrap();
        assert_eq!(
            (e.flag, e.value, e.min, e.max),
            ("--samples", MAX_COUNT + 1, 1, MAX_COUNT)
        );
        let a = XperfArgs {
            rounds: Some(MAX_ROUNDS + 1),
            ..XperfArgs::default()
        };
        assert_eq!(a.out_of_range().unwrap().flag, "--rounds");
        let a = XperfArgs {
            warmup: Some(0),
            host_miss: Some(MAX_HOST_MISS_PAGES + 1),
            ..XperfArgs::default()
        };
        assert_eq!(a.out_of_range().unwrap().flag, "--host-miss");
        let a = XperfArgs {
            calibrate: Some(MAX_CALIBRATIONS + 1),
            ..XperfArgs::default()
        };
        assert_eq!(a.out_of_range().unwrap().flag, "--calibrate");
        let a = XperfArgs {
            null_samples: Some(0),
            ..XperfArgs::default()
        };
        assert_eq!(a.out_of_range().unwrap().flag, "--null-samples");
    }

    #[test]
    fn to_argv_reads_back_as_the_same_options() {
        let every = XperfArgs {
            samples: Some(9),
            warmup: Some(0),
            null_samples: Some(3),
            rounds: Some(2),
            cpu: Some(5),
            raw: true,
            json: Some("-".into()),
            calibrate: Some(256),
            run_id: Some("abc123".into()),
            host_miss: Some(200),
            interrupt_path: true,
        };
        for a in [XperfArgs::default(), every.clone()] {
            assert_eq!(
                run(&a.to_argv().iter().map(String::as_str).collect::<Vec<_>>()),
                a
            );
        }
        assert!(XperfArgs::default().to_argv().is_empty());
        assert_eq!(
            XperfArgs {
                samples: Some(2000),
                warmup: Some(0),
                raw: true,
                ..XperfArgs::default()
            }
            .to_argv(),
            ["--samples", "2000", "--warmup", "0", "--raw"]
        );
    }

    #[test]
    fn bad_words_are_one_line_errors() {
        for bad in [
            &["--samples"][..],
            &["--samples", "0"],
            &["--samples", "-3"],
            &["--rounds", "101"],
            &["--cpu", "x"],
            &["--raw=1"],
            &["--help=x"],
            &["--json", ""],
            &["--frobnicate"],
            &["--run-id", "not hex"],
            &["--run-id", ""],
            &["--run-id", &"a".repeat(MAX_RUN_ID + 1)],
            &["stray"],
        ] {
            let e = parse(bad).unwrap_err();
            assert!(!e.contains('\n'), "{bad:?}: {e}");
        }
        assert_eq!(parse(&["--raw=1"]).unwrap_err(), "--raw takes no value");
        assert_eq!(parse(&["--cpu"]).unwrap_err(), "--cpu needs a value");
        assert!(run(&["--run-id", &"a".repeat(MAX_RUN_ID)]).run_id.is_some());
    }

    #[test]
    fn words_split_inline_values_only_after_a_double_dash() {
        let mut w = Words::new(["--a=1", "-b=2", "c", "--d"].map(String::from));
        assert_eq!(w.next_option(), Some(("--a".into(), Some("1".into()))));
        assert_eq!(w.next_option(), Some(("-b=2".into(), None)));
        assert_eq!(w.value(None), Some("c".into()));
        assert_eq!(w.next_option(), Some(("--d".into(), None)));
        assert_eq!(w.value(Some("x".into())), Some("x".into()));
        assert_eq!(w.value(None), None);
        assert_eq!(w.next_option(), None);
    }
}
