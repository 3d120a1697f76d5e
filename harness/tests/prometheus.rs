//! `xperf characterize --openmetrics` read by a real Prometheus: Debian's
//! `prometheus-node-exporter` (textfile collector on a temporary directory)
//! and `prometheus` (scraping it every second), both installed by
//! `harness/setup.sh`, started here on loopback ports picked at run time and
//! stopped when the test ends. The series Prometheus answers over its HTTP
//! API must equal the JSON report of the same invocation, figure by figure.
//! An xperf killed with SIGKILL at any point of its run must never leave a
//! partial `*.prom` file (node_exporter's scrape error stays 0), and a
//! malformed file must make that same gauge 1, so the check can fail.
//!
//! Fails loudly when either program is missing.

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvmm_results::characterize::Metric;
use xvmm_results::Report;

const NODE_EXPORTER: &str = "prometheus-node-exporter";
const PROMETHEUS: &str = "prometheus";
/// How long a series may take to reach Prometheus (a 1 s scrape).
const APPEAR: Duration = Duration::from_secs(60);

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
        panic!("{name} is not installed: harness/setup.sh installs Debian's {name} package")
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

/// The body of `GET path` on the loopback `port`; `None` until it answers 200.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    head.lines()
        .next()
        .filter(|status| status.contains(" 200 "))?;
    Some(body.to_string())
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

fn query(port: u16, promql: &str) -> Vec<Series> {
    let path = format!("/api/v1/query?query={}", url_encoded(promql));
    let Some(body) = http_get(port, &path) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{body}");
    let mut out = Vec::new();
    for r in v["data"]["result"].as_array().unwrap() {
        let labels = r["metric"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        out.push((labels, r["value"][1].as_str().unwrap().parse().unwrap()));
    }
    out
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

    /// node_exporter's own verdict on the directory, read from it directly.
    fn scrape_error(&self) -> f64 {
        let body = http_get(self.node_port, "/metrics").expect("node_exporter answers");
        let line = body
            .lines()
            .find(|l| l.starts_with("node_textfile_scrape_error "))
            .expect("node_textfile_scrape_error is exported");
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self._daemons.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn static_xperf() -> PathBuf {
    xvmm_harness::build::build_static(&["xperf"])
        .expect("static xperf builds")
        .join("xperf")
}

fn characterize(xperf: &Path, json: &Path, prom: &Path) -> Command {
    let mut cmd = Command::new(xperf);
    cmd.args(["characterize", "--samples", "2000", "--json"])
        .arg(json)
        .arg("--openmetrics")
        .arg(prom)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// The series name a metric of the JSON must have (the test's own reading
/// of the naming README gives), its unit scale and its extra label.
fn expected_name(m: &Metric) -> (String, f64, Option<(String, String)>) {
    let (base, label) = match m.name.split_once(' ') {
        Some((base, pair)) => (base, Some(("cpus".to_string(), pair.to_string()))),
        None => (m.name.as_str(), None),
    };
    let (unit, scale) = match m.unit.as_str() {
        "kHz" => ("hertz", 1000.0),
        u if u.starts_with("ticks") => ("ticks", 1.0),
        u => (u, 1.0),
    };
    let base = base.replace("khz", "rate").replace('-', "_");
    (format!("xperf_{}_{base}_{unit}", m.group), scale, label)
}

/// Every JSON figure against the series Prometheus holds; the number compared.
fn compare_with_json(report: &Report, all: &[Series]) -> usize {
    let find = |name: &str, extra: &[(&str, &str)]| -> Vec<f64> {
        all.iter()
            .filter(|(l, _)| {
                l["__name__"] == name
                    && extra
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, v)| *v)
            .collect()
    };
    let mut compared = 0;
    for m in &report.characterize.as_ref().unwrap().metrics {
        let (name, scale, label) = expected_name(m);
        let mut extra: Vec<(&str, &str)> = Vec::new();
        if let Some((k, v)) = &label {
            extra.push((k, v));
        }
        if let Some(s) = m.measured() {
            for (q, want) in [
                ("0", s.min),
                ("0.5", s.median),
                ("0.99", s.p99),
                ("1", s.max),
            ] {
                let mut l = extra.clone();
                l.push(("quantile", q));
                assert_eq!(find(&name, &l), [want as f64 * scale], "{name} {l:?}");
                compared += 1;
            }
            let mean = name.replacen(&format!("_{}", name.rsplit('_').next().unwrap()), "", 1);
            let unit = name.rsplit('_').next().unwrap();
            let mean_name = format!("{mean}_mean_{unit}");
            assert_eq!(find(&mean_name, &extra), [s.mean * scale], "{mean_name}");
            assert_eq!(find(&format!("{mean}_samples"), &extra), [s.count as f64]);
            compared += 2;
        } else if let (Some(n), false) = (m.number, m.unit.is_empty()) {
            assert_eq!(find(&name, &extra), [n * scale], "{name}");
            compared += 1;
        } else if m.reason.is_some() {
            let metric = name
                .trim_start_matches("xperf_")
                .rsplit_once('_')
                .map_or(name.as_str(), |(n, _)| n)
                .to_string();
            let found = find("xperf_metric_unavailable", &[("metric", &metric)]);
            assert_eq!(found, [1.0], "{} not named unavailable ({metric})", m.name);
            compared += 1;
        }
    }
    compared
}

#[test]
fn prometheus_holds_what_xperf_characterize_measured() {
    let xperf = static_xperf();
    let stack = stack("values");
    let json = stack.dir.join("characterize.json");
    let prom = stack.textfiles().join("xperf.prom");
    let out = characterize(&xperf, &json, &prom).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = Report::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let text = std::fs::read_to_string(&prom).unwrap();
    let lines = text.lines().filter(|l| !l.starts_with('#')).count();
    let all = eventually("the xperf series reach Prometheus", || {
        let all = query(stack.prom_port, r#"{__name__=~"xperf_.+"}"#);
        (all.len() == lines).then_some(all)
    });
    let compared = compare_with_json(&report, &all);
    println!(
        "{} series in Prometheus, {compared} figures equal to the JSON's",
        all.len()
    );
    assert!(compared > 50, "only {compared} figures compared");
    // The machine labels every series as the JSON says it.
    let machine = report.machine.as_ref().unwrap();
    for (labels, _) in &all {
        assert_eq!(labels["kernel"], machine.kernel_release);
        assert_eq!(labels["clocksource"], machine.clocksource);
        assert_eq!(labels["job"], "node");
    }
    // PromQL on it, as README's alert rule does: the cpuid exit's median in
    // seconds is the ticks over the rate.
    let seconds = query(
        stack.prom_port,
        r#"xperf_exits_cpuid_ticks{quantile="0.5"} / ignoring(quantile) xperf_tsc_hz"#,
    );
    let cpuid = report
        .characterize
        .as_ref()
        .unwrap()
        .metric("cpuid")
        .unwrap();
    let want = cpuid.measured().unwrap().median as f64 / (machine.tsc_khz as f64 * 1000.0);
    assert_eq!(seconds.len(), 1);
    assert!(
        (seconds[0].1 - want).abs() <= want * 1e-12,
        "{} vs {want}",
        seconds[0].1
    );
    assert_eq!(stack.scrape_error(), 0.0);
}

#[test]
fn a_killed_xperf_never_leaves_a_partial_file_and_a_bad_one_is_caught() {
    let xperf = static_xperf();
    let stack = stack("kill");
    let dir = stack.textfiles();
    let prom = dir.join("xperf.prom");
    let json = stack.dir.join("characterize.json");
    // One whole run: the file exists, and how long a run takes.
    let started = Instant::now();
    let out = characterize(&xperf, &json, &prom).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let whole = started.elapsed();
    // SIGKILL at points spread over a run, the last ones near its end where
    // the file is written.
    let mut finished = 0;
    for fraction in [0.1, 0.4, 0.7, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.03] {
        let mut child = characterize(&xperf, &json, &prom).spawn().unwrap();
        std::thread::sleep(whole.mul_f64(fraction));
        let _ = child.kill();
        let status = child.wait().unwrap();
        finished += usize::from(status.success());
        let text = std::fs::read_to_string(&prom).unwrap();
        assert!(
            text.ends_with("# EOF\n"),
            "partial file after a kill at {fraction}"
        );
        let proms: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".prom"))
            .collect();
        assert_eq!(proms, ["xperf.prom"], "after a kill at {fraction}");
    }
    println!("10 runs killed over a {whole:?} run; {finished} had finished first");
    // Prometheus and node_exporter saw no parse error throughout.
    eventually("a scrape after the kills", || {
        let q = query(stack.prom_port, "node_textfile_scrape_error");
        (q.len() == 1).then_some(())
    });
    assert_eq!(stack.scrape_error(), 0.0);
    // The control: a malformed file is what the gauge reports.
    std::fs::write(dir.join("bad.prom"), "xperf_broken{quantile=\"0.5\" 12\n").unwrap();
    assert_eq!(stack.scrape_error(), 1.0, "a malformed file is not caught");
    std::fs::remove_file(dir.join("bad.prom")).unwrap();
    assert_eq!(stack.scrape_error(), 0.0);
}
