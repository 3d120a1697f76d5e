//! `xperf characterize --openmetrics` read by a real Prometheus: Debian's
//! `prometheus-node-exporter` (textfile collector on a temporary directory)
//! and `prometheus` (scraping it every second), both installed by
//! `harness/setup.sh`, started here on loopback ports picked at run time and
//! stopped when the test ends.
//!
//! - The series Prometheus answers over its HTTP API equal the JSON report
//!   of the same invocation, figure by figure and statistic by statistic
//!   (stddev included), under the names docs/metrics.md gives: a table
//!   written here maps each JSON metric to its family and labels, durations
//!   are the JSON's ticks over `xperf_tsc_frequency_hertz` (compared with a
//!   relative tolerance), and no series is left unexplained.
//! - `promtool check metrics` accepts the file xperf wrote, and refuses the
//!   old format (a `quantile` label on gauges).
//! - An xperf killed with SIGKILL at any point of its run never leaves a
//!   partial `*.prom` file: node_exporter serves every series, with no
//!   scrape error. The control: a writer that rewrites the file in place,
//!   killed midway, fails that same check.
//! - Every PromQL expression of deploy/grafana/xperf-dashboard.json (its
//!   variables given concrete values) returns data from a real run; the
//!   control: a misspelt metric is reported as returning none.
//!
//! Fails loudly when a program is missing.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvmm_results::characterize::Metric;
use xvmm_results::{Report, Stats};

const NODE_EXPORTER: &str = "prometheus-node-exporter";
const PROMETHEUS: &str = "prometheus";
const PROMTOOL: &str = "promtool";
/// How long a series may take to reach Prometheus (a 1 s scrape).
const APPEAR: Duration = Duration::from_secs(60);
/// Relative tolerance of a figure converted to seconds or hertz: the
/// exporter and this test multiply in different orders.
const TOLERANCE: f64 = 1e-9;
/// docs/metrics.md's reason codes.
const REASON_CODES: [&str; 7] = [
    "no_kernel_hooks",
    "unsupported",
    "not_permitted",
    "not_readable",
    "not_reported",
    "no_samples",
    "failed",
];

/// A background program, killed and reaped when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn program(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("{name} is not installed: harness/setup.sh installs it (Debian's prometheus and prometheus-node-exporter packages)")
    })
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn start(name: &'static str, args: &[String], log: &Path) -> Daemon {
    let log = std::fs::File::create(log).unwrap();
    let child = Command::new(program(name))
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{name} does not start: {e}"));
    Daemon(child)
}

/// The status line and body of `GET path` on the loopback `port`.
fn http_get_any(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// The body of `GET path`; `None` until it answers 200.
fn http_get(port: u16, path: &str) -> Option<String> {
    let (status, body) = http_get_any(port, path)?;
    status.contains(" 200 ").then_some(body)
}

fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One series of an instant query: its labels (with `__name__`) and value.
type Series = (BTreeMap<String, String>, f64);

/// An instant query's series, or Prometheus's error.
fn try_query(port: u16, promql: &str) -> Result<Vec<Series>, String> {
    let path = format!("/api/v1/query?query={}", url_encoded(promql));
    let (_, body) = http_get_any(port, &path).ok_or("Prometheus does not answer")?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if v["status"] != "success" {
        return Err(format!("refused: {}", v["error"]));
    }
    let mut out = Vec::new();
    for r in v["data"]["result"].as_array().into_iter().flatten() {
        let labels = r["metric"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        out.push((labels, r["value"][1].as_str().unwrap().parse().unwrap()));
    }
    Ok(out)
}

fn query(port: u16, promql: &str) -> Vec<Series> {
    try_query(port, promql).unwrap_or_else(|e| panic!("{promql}: {e}"))
}

/// Polls `check` until it holds or [`APPEAR`] passes.
fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < APPEAR, "{what}: not within {APPEAR:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Node exporter and Prometheus on a fresh textfile directory.
struct Stack {
    dir: PathBuf,
    node_port: u16,
    prom_port: u16,
    // Dropped last-to-first: Prometheus, then node_exporter.
    _daemons: Vec<Daemon>,
}

fn stack(name: &str) -> Stack {
    let dir = std::env::temp_dir().join(format!("xvmm-prom-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let textfiles = dir.join("textfile");
    std::fs::create_dir_all(&textfiles).unwrap();
    let (node_port, prom_port) = (free_port(), free_port());
    let node = start(
        NODE_EXPORTER,
        &[
            format!("--web.listen-address=127.0.0.1:{node_port}"),
            "--collector.disable-defaults".into(),
            "--collector.textfile".into(),
            format!("--collector.textfile.directory={}", textfiles.display()),
        ],
        &dir.join("node_exporter.log"),
    );
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
             - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:{node_port}']\n"
        ),
    )
    .unwrap();
    let prometheus = start(
        PROMETHEUS,
        &[
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address=127.0.0.1:{prom_port}"),
        ],
        &dir.join("prometheus.log"),
    );
    eventually("node_exporter answers", || http_get(node_port, "/metrics"));
    eventually("Prometheus is ready", || http_get(prom_port, "/-/ready"));
    Stack {
        dir,
        node_port,
        prom_port,
        _daemons: vec![node, prometheus],
    }
}

impl Stack {
    fn textfiles(&self) -> PathBuf {
        self.dir.join("textfile")
    }

    fn instance(&self) -> String {
        format!("127.0.0.1:{}", self.node_port)
    }

    /// node_exporter's own verdict on the directory, read from it directly:
    /// its scrape error gauge, and how many xperf series it serves.
    fn served(&self) -> (f64, usize) {
        let body = http_get(self.node_port, "/metrics").expect("node_exporter answers");
        let line = body
            .lines()
            .find(|l| l.starts_with("node_textfile_scrape_error "))
            .expect("node_textfile_scrape_error is exported");
        let error = line.rsplit_once(' ').unwrap().1.parse().unwrap();
        (
            error,
            body.lines().filter(|l| l.starts_with("xperf_")).count(),
        )
    }

    /// Runs xperf characterize into the textfile directory; the report and
    /// the number of series the file holds.
    fn run_xperf(&self, samples: &str) -> (Report, usize) {
        let json = self.dir.join("characterize.json");
        let prom = self.textfiles().join("xperf.prom");
        characterize_once(samples, &json, &prom);
        let report = Report::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
        (
            report,
            sample_lines(&std::fs::read_to_string(&prom).unwrap()),
        )
    }

    /// Every xperf series, once Prometheus holds all `lines` of them.
    fn all_series(&self, lines: usize) -> Vec<Series> {
        eventually("the xperf series reach Prometheus", || {
            let all = query(self.prom_port, r#"{__name__=~"xperf_.+"}"#);
            (all.len() == lines).then_some(all)
        })
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self._daemons.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sample_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count()
}

fn static_xperf() -> PathBuf {
    xvmm_harness::build::build_static(&["xperf"])
        .expect("static xperf builds")
        .join("xperf")
}

fn characterize(xperf: &Path, samples: &str, json: &Path, prom: &Path) -> Command {
    let mut cmd = Command::new(xperf);
    cmd.args(["characterize", "--samples", samples, "--json"])
        .arg(json)
        .arg("--openmetrics")
        .arg(prom)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Runs the static xperf's characterize to its end; fails with its stderr.
fn characterize_once(samples: &str, json: &Path, prom: &Path) {
    let out = characterize(&static_xperf(), samples, json, prom)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How a JSON figure converts to its series.
#[derive(Clone, Copy, Debug)]
enum Scale {
    /// TSC ticks, `per` instructions a sample: seconds.
    Ticks { per: f64 },
    /// kHz: hertz.
    Khz,
    /// Nanoseconds: seconds.
    Nanoseconds,
    /// Already in the family's unit.
    Same,
}

/// Where a JSON metric goes (docs/metrics.md's table, written out here):
/// its family, the family of its sample count, its labels, its scale.
struct Expected {
    family: &'static str,
    samples: Option<&'static str>,
    labels: Vec<(&'static str, String)>,
    scale: Scale,
}

/// The crossings' interval suffixes and the `interval` label they give.
const INTERVALS: [(&str, &str); 3] = [("-u2k", "u2k"), ("-k2u", "k2u"), ("", "round_trip")];

/// `None`: a fact in words only, which has no series.
fn expected(m: &Metric) -> Option<Expected> {
    let e = |family, samples, labels, scale| {
        Some(Expected {
            family,
            samples,
            labels,
            scale,
        })
    };
    let ticks = Scale::Ticks { per: 1.0 };
    let name = m.name.clone();
    match (m.group.as_str(), m.name.as_str()) {
        ("time", "clock_gettime-vdso" | "clock_gettime-syscall" | "rdtsc" | "rdtscp") => e(
            "xperf_clock_read_duration_seconds",
            Some("xperf_clock_read_samples"),
            vec![("clock", name)],
            ticks,
        ),
        ("time", "tsc-khz-measured") => e(
            "xperf_tsc_measured_frequency_hertz",
            Some("xperf_tsc_measured_frequency_samples"),
            vec![],
            Scale::Khz,
        ),
        ("time", "tsc-khz-reported") => e(
            "xperf_tsc_reported_frequency_hertz",
            None,
            vec![("source", "cpuid".into())],
            Scale::Khz,
        ),
        ("time", "tsc-khz-kernel") => e(
            "xperf_tsc_reported_frequency_hertz",
            None,
            vec![("source", "kernel".into())],
            Scale::Khz,
        ),
        ("time", skew) if skew.starts_with("tsc-skew ") => e(
            "xperf_tsc_skew_seconds",
            Some("xperf_tsc_skew_samples"),
            vec![("cpus", skew["tsc-skew ".len()..].to_string())],
            ticks,
        ),
        ("interrupts", _) => interrupt_path(m),
        ("exits", "pause") => e(
            "xperf_pause_duration_seconds",
            Some("xperf_pause_samples"),
            vec![],
            Scale::Ticks {
                per: per_sample(&m.unit),
            },
        ),
        ("exits", exit) => e(
            "xperf_exit_duration_seconds",
            Some("xperf_exit_samples"),
            vec![("exit", exit.to_string())],
            ticks,
        ),
        ("crossings", crossing) => e(
            "xperf_crossing_duration_seconds",
            Some("xperf_crossing_samples"),
            crossing_labels(crossing),
            ticks,
        ),
        ("machine", "memory") => e("xperf_machine_memory_bytes", None, vec![], Scale::Same),
        ("machine", "steal") => e("xperf_machine_steal_ratio", None, vec![], Scale::Same),
        _ => {
            let figure = m.measured().is_some() || m.number.is_some();
            assert!(
                !figure,
                "{}/{} has figures this table does not place",
                m.group, m.name
            );
            None
        }
    }
}

/// The interrupt path's two figures (docs/metrics.md).
fn interrupt_path(m: &Metric) -> Option<Expected> {
    let (family, samples, scale) = match m.name.as_str() {
        "wakeup-cross-cpu" => (
            "xperf_cross_cpu_wakeup_duration_seconds",
            "xperf_cross_cpu_wakeup_samples",
            Scale::Ticks {
                per: per_sample(&m.unit),
            },
        ),
        "timer-wakeup" => (
            "xperf_timer_wakeup_lateness_seconds",
            "xperf_timer_wakeup_lateness_samples",
            Scale::Nanoseconds,
        ),
        "mprotect-shootdown" | "mprotect-local" => {
            let flush = if m.name == "mprotect-shootdown" {
                "remote"
            } else {
                "local"
            };
            return Some(Expected {
                family: "xperf_mprotect_duration_seconds",
                samples: Some("xperf_mprotect_samples"),
                labels: vec![("tlb_flush", flush.to_string())],
                scale: Scale::Ticks {
                    per: per_sample(&m.unit),
                },
            });
        }
        other => panic!("interrupts/{other} has no place in docs/metrics.md"),
    };
    Some(Expected {
        family,
        samples: Some(samples),
        labels: vec![],
        scale,
    })
}

/// A crossing's labels: `getppid-u2k` is getppid's u2k interval, a name
/// without a suffix its round trip.
fn crossing_labels(name: &str) -> Vec<(&'static str, String)> {
    let (base, interval) = INTERVALS
        .iter()
        .find_map(|(suffix, i)| Some((name.strip_suffix(suffix)?, *i)))
        .unwrap();
    vec![
        ("crossing", base.to_string()),
        ("interval", interval.into()),
    ]
}

/// N of a unit "ticks/N pauses" (a sample times N instructions).
fn per_sample(unit: &str) -> f64 {
    let n = unit
        .strip_prefix("ticks/")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unit {unit:?}"));
    n.parse().unwrap()
}

/// The statistic label's values and the JSON's figures for them.
fn statistics(s: &Stats) -> [(&'static str, f64); 6] {
    [
        ("min", s.min as f64),
        ("median", s.median as f64),
        ("p99", s.p99 as f64),
        ("max", s.max as f64),
        ("mean", s.mean),
        ("stddev", s.stddev),
    ]
}

/// Prometheus's series, looked up by name and labels (instance and job
/// aside); each one taken is ticked off.
struct Held {
    series: BTreeMap<(String, Vec<(String, String)>), f64>,
    taken: BTreeSet<(String, Vec<(String, String)>)>,
}

impl Held {
    fn new(all: &[Series], instance: &str) -> Held {
        let mut series = BTreeMap::new();
        for (labels, value) in all {
            assert_eq!(labels["job"], "node");
            assert_eq!(labels["instance"], instance);
            let own: Vec<(String, String)> = labels
                .iter()
                .filter(|(k, _)| !["__name__", "job", "instance"].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            series.insert((labels["__name__"].clone(), own), *value);
        }
        Held {
            series,
            taken: BTreeSet::new(),
        }
    }

    /// The value of `name{labels}`, which must exist.
    fn take(&mut self, name: &str, labels: &[(&str, String)]) -> f64 {
        let mut own: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        own.sort();
        let key = (name.to_string(), own);
        let value = *self
            .series
            .get(&key)
            .unwrap_or_else(|| panic!("Prometheus has no {key:?}"));
        self.taken.insert(key);
        value
    }

    fn unexplained(&self) -> Vec<&(String, Vec<(String, String)>)> {
        self.series
            .keys()
            .filter(|k| !self.taken.contains(*k))
            .collect()
    }
}

fn close(got: f64, want: f64, what: &str) {
    let ok = if want == 0.0 {
        got == 0.0
    } else {
        ((got - want) / want).abs() <= TOLERANCE
    };
    assert!(ok, "{what}: Prometheus {got}, JSON {want}");
}

/// One JSON metric against its series; the number of figures compared.
fn compare_metric(m: &Metric, held: &mut Held, hz: f64) -> usize {
    let what = format!("{}/{}", m.group, m.name);
    if m.measured().is_none() && m.number.is_none() && m.reason.is_some() {
        return unavailable(&what, held);
    }
    let Some(e) = expected(m) else {
        return 0;
    };
    let scale = match e.scale {
        Scale::Ticks { per } => 1.0 / (hz * per),
        Scale::Khz => 1000.0,
        Scale::Nanoseconds => 1e-9,
        Scale::Same => 1.0,
    };
    if let Some(s) = m.measured() {
        for (statistic, want) in statistics(s) {
            let mut labels = e.labels.clone();
            labels.push(("statistic", statistic.into()));
            let got = held.take(e.family, &labels);
            close(got, want * scale, &format!("{what} {statistic}"));
        }
        let samples = e
            .samples
            .unwrap_or_else(|| panic!("{what}: no samples family"));
        assert_eq!(
            held.take(samples, &e.labels),
            s.count as f64,
            "{what} samples"
        );
        return 7;
    }
    if let Some(n) = m.number.filter(|n| n.is_finite()) {
        close(held.take(e.family, &e.labels), n * scale, &what);
        return 1;
    }
    0
}

/// A metric that could not be taken: `xperf_metric_unavailable{metric,
/// reason}` is 1, the reason one of docs/metrics.md's codes.
fn unavailable(what: &str, held: &mut Held) -> usize {
    let key = |code: &str| {
        let labels = vec![
            ("metric".to_string(), what.to_string()),
            ("reason".to_string(), code.to_string()),
        ];
        ("xperf_metric_unavailable".to_string(), labels)
    };
    let reason = REASON_CODES
        .iter()
        .find(|code| held.series.contains_key(&key(code)))
        .unwrap_or_else(|| panic!("{what} is not named unavailable with a known reason"));
    let labels = [("metric", what.to_string()), ("reason", reason.to_string())];
    assert_eq!(held.take("xperf_metric_unavailable", &labels), 1.0);
    1
}

/// The run's own series: build, machine, rate, start and duration.
fn compare_run_facts(report: &Report, held: &mut Held) -> f64 {
    let version = [("version", env!("CARGO_PKG_VERSION").to_string())];
    assert_eq!(held.take("xperf_build_info", &version), 1.0);
    let m = report.machine.as_ref().unwrap();
    let hypervisor = match m.hypervisor_signature.as_str() {
        "" => "none".to_string(),
        h => h.to_string(),
    };
    let machine = [
        ("hypervisor", hypervisor),
        ("clocksource", m.clocksource.clone()),
        ("kernel", m.kernel_release.clone()),
        ("cpu_model", m.cpu_model.clone()),
    ];
    assert_eq!(held.take("xperf_machine_info", &machine), 1.0);
    let hz = held.take("xperf_tsc_frequency_hertz", &[]);
    assert_eq!(hz, m.tsc_khz as f64 * 1000.0);
    let c = report.characterize.as_ref().unwrap();
    let started = held.take("xperf_last_run_timestamp_seconds", &[]);
    assert_eq!(started, c.started_unix as f64);
    close(
        held.take("xperf_last_run_duration_seconds", &[]),
        c.seconds,
        "duration",
    );
    hz
}

#[test]
fn prometheus_holds_what_xperf_characterize_measured() {
    let stack = stack("values");
    let (report, lines) = stack.run_xperf("2000");
    let all = stack.all_series(lines);
    let mut held = Held::new(&all, &stack.instance());
    let hz = compare_run_facts(&report, &mut held);
    let metrics = &report.characterize.as_ref().unwrap().metrics;
    let compared: usize = metrics
        .iter()
        .map(|m| compare_metric(m, &mut held, hz))
        .sum();
    println!(
        "{} series in Prometheus, {compared} figures equal to the JSON's",
        all.len()
    );
    assert!(compared > 50, "only {compared} figures compared");
    assert!(
        held.unexplained().is_empty(),
        "series no JSON figure explains: {:?}",
        held.unexplained()
    );
    // PromQL on it, as the dashboard does: the cpuid exit's median, labelled
    // with the machine's CPU model by a join.
    let joined = query(
        stack.prom_port,
        r#"xperf_exit_duration_seconds{exit="cpuid",statistic="median"} * on(instance, job) group_left(cpu_model) xperf_machine_info"#,
    );
    let cpuid = metrics.iter().find(|m| m.name == "cpuid").unwrap();
    let want = cpuid.measured().unwrap().median as f64 / hz;
    assert_eq!(joined.len(), 1);
    close(joined[0].1, want, "joined cpuid median");
    let cpu_model = &report.machine.as_ref().unwrap().cpu_model;
    assert_eq!(&joined[0].0["cpu_model"], cpu_model);
    assert_eq!(stack.served().0, 0.0);
}

fn promtool_check_metrics(text: &str) -> (bool, String) {
    let mut child = Command::new(program(PROMTOOL))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn promtool_accepts_the_file_xperf_wrote_and_refuses_the_old_format() {
    let dir = std::env::temp_dir().join(format!("xvmm-promtool-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prom = dir.join("xperf.prom");
    characterize_once("300", &dir.join("c.json"), &prom);
    let text = std::fs::read_to_string(&prom).unwrap();
    let (ok, said) = promtool_check_metrics(&text);
    assert!(ok, "promtool check metrics refuses xperf's file: {said}");
    // The controls: the old format's statistics (a gauge with the reserved
    // quantile label, the machine on every series) are refused.
    let old = "# HELP xperf_exits_cpuid_ticks xperf characterize cpuid.\n\
               # TYPE xperf_exits_cpuid_ticks gauge\n\
               xperf_exits_cpuid_ticks{kernel=\"6.1.0\",quantile=\"0.5\"} 2200.0\n\
               # EOF\n";
    let (ok, said) = promtool_check_metrics(old);
    assert!(!ok, "promtool accepts a gauge with a quantile label");
    assert!(said.contains("quantile"), "{said}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whether node_exporter serves the whole file: every one of `lines` xperf
/// series, no scrape error, the file complete and alone.
fn served_whole(stack: &Stack, lines: usize) -> Result<(), String> {
    let dir = stack.textfiles();
    let (error, served) = stack.served();
    if error != 0.0 {
        return Err("node_exporter's textfile scrape error is 1".into());
    }
    if served != lines {
        return Err(format!(
            "node_exporter serves {served} xperf series of {lines}"
        ));
    }
    let text = std::fs::read_to_string(dir.join("xperf.prom")).map_err(|e| e.to_string())?;
    if !text.ends_with("# EOF\n") {
        return Err("xperf.prom does not end with # EOF".into());
    }
    let proms: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".prom"))
        .collect();
    if proms != ["xperf.prom"] {
        return Err(format!("*.prom files: {proms:?}"));
    }
    Ok(())
}

/// A writer that does what xperf must not: truncates xperf.prom and writes
/// `text` into it in place, 64 bytes every 10 ms; killed (with its shell's
/// children) once half is written.
fn write_in_place_and_kill(prom: &Path, text: &str) {
    use std::os::unix::process::CommandExt;
    let source = prom.with_extension("source");
    std::fs::write(&source, text).unwrap();
    let blocks = text.len().div_ceil(64);
    let script = "i=0; : > \"$1\"; while [ $i -lt $3 ]; do \
                  dd if=\"$2\" bs=64 skip=$i count=1 status=none >> \"$1\"; \
                  i=$((i+1)); sleep 0.01; done";
    let mut child = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(prom)
        .arg(&source)
        .arg(blocks.to_string())
        .process_group(0)
        .spawn()
        .unwrap();
    // Halfway: after its truncation (the file shorter than half), then
    // half of it written again.
    let half = u64::try_from(text.len() / 2).unwrap();
    let size = || std::fs::metadata(prom).map_or(0, |m| m.len());
    let started = Instant::now();
    while size() >= half && started.elapsed() < APPEAR {
        std::thread::sleep(Duration::from_millis(2));
    }
    while size() < half && started.elapsed() < APPEAR {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        started.elapsed() < APPEAR,
        "the in-place writer did not get halfway"
    );
    let group = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on the process group of our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(-group, libc::SIGKILL) }, 0);
    let _ = child.wait();
    std::fs::remove_file(&source).unwrap();
}

#[test]
fn a_killed_xperf_never_leaves_a_partial_file_and_an_in_place_writer_does() {
    let xperf = static_xperf();
    let stack = stack("kill");
    let dir = stack.textfiles();
    let prom = dir.join("xperf.prom");
    let json = stack.dir.join("characterize.json");
    // One whole run: the file exists, and how long a run takes.
    let started = Instant::now();
    let (_, lines) = stack.run_xperf("2000");
    let whole = started.elapsed();
    served_whole(&stack, lines).unwrap();
    // SIGKILL at points spread over a run, the last ones near its end where
    // the file is written.
    let mut finished = 0;
    for fraction in [0.1, 0.4, 0.7, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.03] {
        let mut child = characterize(&xperf, "2000", &json, &prom).spawn().unwrap();
        std::thread::sleep(whole.mul_f64(fraction));
        let _ = child.kill();
        let status = child.wait().unwrap();
        finished += usize::from(status.success());
        if let Err(e) = served_whole(&stack, lines) {
            panic!("after a kill at {fraction} of a run: {e}");
        }
    }
    println!("10 runs killed over a {whole:?} run; {finished} had finished first");
    // The control: the same check on a file rewritten in place and cut.
    let text = std::fs::read_to_string(&prom).unwrap();
    write_in_place_and_kill(&prom, &text);
    let verdict = served_whole(&stack, lines);
    println!("in-place writer killed halfway: {verdict:?}");
    assert!(verdict.is_err(), "a half-written file passes the check");
    // A malformed file is what the scrape error gauge reports.
    std::fs::write(&prom, &text).unwrap();
    served_whole(&stack, lines).unwrap();
    std::fs::write(
        dir.join("bad.prom"),
        "xperf_broken{statistic=\"median\" 12\n",
    )
    .unwrap();
    assert_eq!(stack.served().0, 1.0, "a malformed file is not caught");
}

/// Every PromQL expression of the dashboard: its panels' targets, and its
/// variables' `label_values(SERIES, LABEL)` as `count by (LABEL) (SERIES)`.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    out.push(expr.clone());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        let Some(q) = var["query"]["query"].as_str() else {
            continue;
        };
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable query {q}"));
        let (series, label) = inner.rsplit_once(',').unwrap();
        out.push(format!("count by ({}) ({series})", label.trim()));
    }
    out
}

/// A value as Grafana puts a multi-value variable into a Prometheus regex
/// (prometheusSpecialRegexEscape): each special character after `\\`.
fn regex_escaped(value: &str) -> String {
    value
        .chars()
        .flat_map(|c| {
            let special = "\\$^*{}[]'+?.()|".contains(c);
            special
                .then_some("\\\\")
                .into_iter()
                .flat_map(str::chars)
                .chain(std::iter::once(c))
        })
        .collect()
}

/// `expr` with the dashboard's variables (`$name`, `${name}`) replaced by
/// `values`; a variable without a value is an error.
fn substituted(expr: &str, values: &[(&str, String)]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = match after.strip_prefix('{') {
            Some(braced) => {
                let end = braced.find('}').ok_or(format!("unclosed ${{ in {expr}"))?;
                (&braced[..end], end + 2)
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        let (_, value) = values
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or(format!("no value for ${name} in {expr}"))?;
        out.push_str(value);
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The checker: how many series `expr` returns, or why it returns none.
fn returns_data(port: u16, expr: &str) -> Result<usize, String> {
    match try_query(port, expr)?.len() {
        0 => Err(format!("no data: {expr}")),
        n => Ok(n),
    }
}

#[test]
fn every_dashboard_query_returns_data_from_a_real_run() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/xperf-dashboard.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("dashboard JSON");
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 10, "{} queries", queries.len());
    let stack = stack("dashboard");
    let (report, lines) = stack.run_xperf("300");
    stack.all_series(lines);
    let cpu_model = &report.machine.as_ref().unwrap().cpu_model;
    let values = [
        ("node", regex_escaped(&stack.instance())),
        ("cpu_model", regex_escaped(cpu_model)),
        ("exit", "cpuid".to_string()),
        ("crossing", regex_escaped("getppid")),
        ("__range", "1h".to_string()),
        ("__rate_interval", "1m".to_string()),
        ("__interval", "15s".to_string()),
    ];
    let mut failed = Vec::new();
    for expr in &queries {
        let result = substituted(expr, &values).and_then(|q| returns_data(stack.prom_port, &q));
        match result {
            Ok(n) => println!("{n:>3} series: {expr}"),
            Err(e) => failed.push(e),
        }
    }
    assert!(
        failed.is_empty(),
        "dashboard queries:\n{}",
        failed.join("\n")
    );
    // The controls: a misspelt metric, and a variable the test has no value
    // for, are both reported.
    let misspelt = r#"xperf_exit_duraton_seconds{exit="cpuid",statistic="median"}"#;
    let verdict = returns_data(stack.prom_port, misspelt);
    assert!(
        verdict.as_ref().is_err_and(|e| e.starts_with("no data")),
        "{verdict:?}"
    );
    assert!(substituted("xperf_machine_info{instance=~\"$nodes\"}", &values).is_err());
}
