//! `xperf characterize` options, parsed by hand as xperf's own (every error
//! one line; the arguments may come from a kernel command line).

use crate::error::{Error, Result};
use std::path::PathBuf;
use std::time::Duration;
use xvmm_results::xperf_args::{self as words, Words, MAX_COUNT};

/// Samples per timed metric and per crossing by default.
pub const DEFAULT_SAMPLES: u64 = 10_000;
/// Where the report goes when there is no VMM channel and no `--json`.
pub const DEFAULT_JSON: &str = "xperf-characterize.json";

pub const USAGE: &str = "\
usage: xperf characterize [--samples N] [--cpu N] [--json FILE] [--openmetrics FILE]
                          [--every PERIOD [--jitter PERIOD]] [--node-name NAME]

Characterises this machine in about a minute or less, without root: the
hypervisor (CPUID 0x40000000, DMI, a systemd-detect-virt-like verdict,
nested virtualisation), clocks (clocksources, clock_gettime through the vDSO
and as a system call, rdtsc/rdtscp cost and trapping, TSC flags, reported
and measured TSC rate, TSC skew between CPUs), exits user space can see
(cpuid, pause loops), crossings (getppid, #PF first touch and refault; u2k
and k2u on a kernel with the xperf hooks), the interrupt path (a wake-up of
a thread on another CPU, a TLB shootdown there, a timer's lateness), steal
time and the machine.
As root the kernel log adds the kernel's TSC rate and hypervisor line.

  --samples N   samples per metric and per crossing (default 10000)
  --cpu N       CPU to measure on (default: the CPU xperf starts on)
  --json FILE   write the JSON report to FILE atomically, or to stdout after
                the table when FILE is - (default: xperf-characterize.json
                when there is no VMM results channel)
  --openmetrics FILE
                also write every figure as OpenMetrics gauges to FILE,
                atomically (for node_exporter's textfile collector: name it
                *.prom in its directory); checked before measuring
  --every PERIOD
                run again every PERIOD (e.g. 900, 90s, 15m, 6h; 1s to 7d)
                until stopped, replacing the files each time (a Kubernetes
                DaemonSet's container; see docs/fleet.md). SIGTERM or SIGINT
                stops it at once with status 0 (also as a container's PID 1),
                removing the --openmetrics file so that its figures do not
                read as current. Without it, run once
  --jitter PERIOD
                with --every: wait a random time below PERIOD before the
                first run, so that nodes started together do not all
                measure at once (e.g. 60s)
  --node-name NAME
                the node's name, recorded in the JSON report (a DaemonSet
                gives it from the downward API: spec.nodeName)
  -h, --help    this text";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub samples: u64,
    pub cpu: Option<u32>,
    pub json: Option<PathBuf>,
    /// `--openmetrics FILE`: the figures for Prometheus.
    pub openmetrics: Option<PathBuf>,
    /// `--every PERIOD`: run again after each PERIOD, until stopped.
    pub every: Option<Duration>,
    /// `--jitter PERIOD`: a random wait below it before the first run.
    pub jitter: Option<Duration>,
    /// `--node-name NAME`: recorded in the report.
    pub node_name: Option<String>,
    /// `--help` was asked for.
    pub help: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            samples: DEFAULT_SAMPLES,
            cpu: None,
            json: None,
            openmetrics: None,
            every: None,
            jitter: None,
            node_name: None,
            help: false,
        }
    }
}

/// Parses the arguments after `characterize`.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options> {
    let mut opts = Options::default();
    let mut args = Words::new(args);
    while let Some((name, inline)) = args.next_option() {
        let mut value = || {
            args.value(inline.clone())
                .ok_or_else(|| Error::Usage(format!("characterize {name} needs a value")))
        };
        match name.as_str() {
            "--samples" => {
                opts.samples =
                    words::count("--samples", &value()?, 1, MAX_COUNT).map_err(Error::Usage)?
            }
            "--cpu" => opts.cpu = Some(words::cpu(&value()?).map_err(Error::Usage)?),
            "--json" => {
                let v = value()?;
                if v.is_empty() {
                    return Err(Error::Usage("--json needs a file name".into()));
                }
                opts.json = Some(PathBuf::from(v));
            }
            "--openmetrics" => {
                let path = xvmm_results::render::openmetrics::destination(&value()?)
                    .map_err(|e| Error::Usage(format!("--openmetrics {e}")))?;
                opts.openmetrics = Some(path);
            }
            "--every" => opts.every = Some(period(&value()?).map_err(Error::Usage)?),
            "--jitter" => opts.jitter = Some(period(&value()?).map_err(Error::Usage)?),
            "--node-name" => opts.node_name = Some(node_name(&value()?)?),
            "-h" | "--help" if inline.is_none() => opts.help = true,
            other => {
                return Err(Error::Usage(format!(
                    "characterize: unknown argument {other:?} (try xperf characterize --help)"
                )))
            }
        }
    }
    if opts.jitter.is_some() && opts.every.is_none() {
        return Err(Error::Usage(
            "--jitter spreads repeated runs: give --every too".into(),
        ));
    }
    Ok(opts)
}

/// Longest `--node-name`: a Kubernetes node name is a DNS subdomain (253).
pub const MAX_NODE_NAME: usize = 253;

/// A node name as Kubernetes allows it: lower-case letters, digits, `-` and
/// `.`, at most [`MAX_NODE_NAME`]. An unexpanded `$(NODE_NAME)` (the
/// manifest's env missing) is refused by name.
fn node_name(text: &str) -> Result<String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    if text.is_empty() || text.len() > MAX_NODE_NAME || !text.chars().all(allowed) {
        return Err(Error::Usage(format!(
            "--node-name {:?}: a node name is 1 to {MAX_NODE_NAME} of a-z, 0-9, '-' and '.' \
             (is the container's NODE_NAME set from the downward API?)",
            xvmm_host::escape::visible(text)
        )));
    }
    Ok(text.to_string())
}

/// A random time in [0, `bound`), from the kernel's random source (the
/// clock's nanoseconds if that fails: spreading needs no secrecy).
pub fn random_below(bound: Duration) -> Duration {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom fills at most `bytes.len()` bytes of a local.
    let filled = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    let random = if usize::try_from(filled) == Ok(bytes.len()) {
        u64::from_ne_bytes(bytes)
    } else {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.map_or(0, |d| u64::from(d.subsec_nanos()))
    };
    let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(random.checked_rem(nanos).unwrap_or(0))
}

/// Shortest and longest `--every`.
pub const EVERY_BOUNDS: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(7 * 24 * 3600));

/// A period: whole seconds, or a number with `s`, `m`, `h` or `d`.
pub fn period(text: &str) -> std::result::Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "--every {text:?}: give seconds, or a number with s, m, h or d"
            ))
        }
    };
    let secs = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("--every {text:?} is not a period"))?;
    let (lo, hi) = EVERY_BOUNDS;
    let d = Duration::from_secs(secs);
    if d < lo || d > hi {
        return Err(format!("--every {text:?} is out of range: 1s to 7d"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_below_its_bound_and_spreads() {
        let bound = Duration::from_secs(60);
        let draws: Vec<Duration> = (0..200).map(|_| random_below(bound)).collect();
        assert!(draws.iter().all(|d| *d < bound), "{draws:?}");
        // 200 draws over 60 s: both halves get some (a constant would not).
        let low = draws.iter().filter(|d| d.as_secs() < 30).count();
        assert!((20..=180).contains(&low), "{low} of 200 in the lower half");
        assert_eq!(random_below(Duration::ZERO), Duration::ZERO);
    }

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_in_both_styles_and_defaults() {
        assert_eq!(parse(strings(&[])).unwrap(), Options::default());
        let o = parse(strings(&["--samples=500", "--cpu", "1", "--json", "-"])).unwrap();
        assert_eq!(
            (o.samples, o.cpu, o.json.as_deref()),
            (500, Some(1), Some(std::path::Path::new("-")))
        );
        assert_eq!((o.openmetrics.as_ref(), o.every), (None, None));
        // Both bounds are periods: 1 s and 7 d.
        for (text, secs) in [
            ("1", 1),
            ("900", 900),
            ("90s", 90),
            ("15m", 900),
            ("6h", 21_600),
            ("7d", 604_800),
        ] {
            let o = parse(strings(&["--every", text])).unwrap();
            assert_eq!(o.every, Some(Duration::from_secs(secs)), "{text}");
        }
        let o = parse(strings(&[
            "--every",
            "15m",
            "--jitter=60s",
            "--node-name",
            "n-1.x",
        ]))
        .unwrap();
        assert_eq!(
            (o.jitter, o.node_name.as_deref()),
            (Some(Duration::from_secs(60)), Some("n-1.x"))
        );
        let o = parse(strings(&["--openmetrics=/d/xperf.prom"])).unwrap();
        assert_eq!(
            o.openmetrics.as_deref(),
            Some(std::path::Path::new("/d/xperf.prom"))
        );
        assert!(parse(strings(&["-h"])).unwrap().help);
    }

    #[test]
    fn bad_options_are_one_line_usage_errors() {
        for bad in [
            &["--samples"][..],
            &["--samples", "0"],
            &["--samples", "x"],
            &["--cpu", "-1"],
            &["--json="],
            &["--openmetrics"],
            &["--openmetrics="],
            &["--openmetrics", "-"],
            &["--every"],
            &["--every", "0"],
            &["--every", "8d"],
            &["--every", "15 m"],
            &["--every", "m"],
            &["--every", "1.5h"],
            &["--every", "99999999999999999999"],
            &["--jitter", "60s"],
            &["--every", "1m", "--jitter"],
            &["--every", "1m", "--jitter", "0"],
            &["--node-name", ""],
            &["--node-name", "$(NODE_NAME)"],
            &["--node-name", "Node\x1b[2J"],
            &["--raw"],
            &["--help=1"],
            &["extra"],
        ] {
            let err = parse(strings(bad)).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}");
            assert!(!err.to_string().contains('\n'), "{bad:?}");
        }
        let err = parse(strings(&["--node-name", "$(NODE_NAME)"])).unwrap_err();
        assert!(err.to_string().contains("downward API"), "{err}");
        // A DNS subdomain's 253 characters are a node name; 254 are not.
        let longest = "a".repeat(MAX_NODE_NAME);
        let o = parse(strings(&["--node-name", &longest])).unwrap();
        assert_eq!(o.node_name.as_deref(), Some(longest.as_str()));
        let too_long = "a".repeat(MAX_NODE_NAME + 1);
        assert!(parse(strings(&["--node-name", &too_long])).is_err());
        // Only a `--` option carries an inline value: another argument with
        // `=` is named whole.
        for bad in ["extra=1", "-h=1"] {
            let err = parse(strings(&[bad])).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }
}
