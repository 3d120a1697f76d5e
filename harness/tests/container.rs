//! The Kubernetes manifests' `xperf` container, run by a real OCI runtime
//! (`crun`) as a node would run it: the image's root built from
//! deploy/Containerfile, an OCI config made from the container's spec by
//! `xvmm_harness::oci` (command and args with `$(VAR)` expanded, env with the
//! downward API, user, read-only root, capabilities, noNewPrivileges,
//! volumes, the runtime's default seccomp profile), xperf as PID 1 of its own
//! namespaces. A real node_exporter reads the volume's directory.
//!
//! For every manifest under deploy/kubernetes/ with a container named
//! `xperf` (the hostPath DaemonSet, the sidecar variant), [`check`] asks:
//! both files appear; the running xperf is PID 1 with the config's ids, no
//! capability, no_new_privs and a seccomp filter (its /proc status);
//! node_exporter (standing in for the node's, or the sidecar) serves every
//! series of the .prom file with `node_textfile_scrape_error 0`, and a real
//! Prometheus scraping it holds every one of them; a second period replaces them; `crun
//! kill ID TERM` ends the container within the pod's
//! `terminationGracePeriodSeconds` with status 0 and the .prom file (and so
//! its series) gone. The control: the same container told it is a VM's init
//! (`xvmm_init=1` in its environment, as xvmm's kernel command line gives)
//! cannot work in a container, and the same checker must say that no file
//! appeared.
//!
//! The one deviation from the manifests is the schedule: `--every` becomes
//! [`PERIOD`] and `--jitter` [`JITTER`], so that a second period happens
//! within the test. Needs root, crun, containers-common's seccomp.json and
//! prometheus-node-exporter (harness/setup.sh installs them); fails, naming
//! what is missing, without them.

use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvmm_harness::oci::{self, Bundle, Container, Image, PodFacts};
use yaml_rust2::{Yaml, YamlLoader};

/// The node name the downward API gives (`fieldRef: spec.nodeName`).
const NODE: &str = "test-node";
/// Replaces the manifest's `--every` (15m): the test must see a second run.
const PERIOD: &str = "3s";
/// Replaces the manifest's `--jitter` (a random wait before the first run,
/// up to a minute): the shortest xperf accepts.
const JITTER: &str = "1s";
/// For the first files: the jitter and one run (1.5 s here), on a shared
/// 2-core machine that may be compiling.
const APPEAR: Duration = Duration::from_secs(60);
/// For the second files after the first ones: [`PERIOD`] and one run.
const AGAIN: Duration = Duration::from_secs(60);
/// For node_exporter to show what the directory holds (it reads it on
/// every scrape).
const SCRAPE: Duration = Duration::from_secs(10);
/// The control's bound: an xperf that measures writes well within it.
const CONTROL_APPEAR: Duration = Duration::from_secs(20);

fn repo() -> PathBuf {
    xvmm_harness::build::workspace_root()
}

/// A YAML node as JSON, as the API server holds a manifest.
fn json_of(y: &Yaml) -> Value {
    match y {
        Yaml::Real(s) => s.parse::<f64>().map_or(Value::Null, Value::from),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::String(s) => Value::from(s.as_str()),
        Yaml::Boolean(b) => Value::from(*b),
        Yaml::Array(a) => a.iter().map(json_of).collect(),
        Yaml::Hash(h) => h
            .iter()
            .map(|(k, v)| {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    other => json_of(other).to_string(),
                };
                (key, json_of(v))
            })
            .collect::<serde_json::Map<_, _>>()
            .into(),
        Yaml::Alias(_) | Yaml::Null | Yaml::BadValue => Value::Null,
    }
}

/// Every document under deploy/kubernetes/ with a container named `xperf`,
/// with its file's name.
fn manifests() -> Vec<(String, Value)> {
    let dir = repo().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        for doc in docs.iter().map(json_of) {
            if oci::pod_container(&doc, "xperf").is_some() {
                out.push((name.clone(), doc));
            }
        }
    }
    assert!(
        out.iter().any(|(f, _)| f == "xperf-daemonset.yaml"),
        "no xperf container in deploy/kubernetes/xperf-daemonset.yaml"
    );
    out
}

/// The static xperf that the Containerfile's COPY names, built as
/// deploy/build-image.sh builds it.
fn static_xperf() -> PathBuf {
    xvmm_harness::build::build_static(&["xperf"])
        .unwrap_or_else(|e| {
            panic!(
                "{e}: build it with RUSTFLAGS=\"-C target-feature=+crt-static\" cargo build \
                 --release --target x86_64-unknown-linux-gnu -p xperf"
            )
        })
        .join("xperf")
}

/// A COPY source in the build context (the repository, as
/// build-image.sh runs `podman build ... .`), `target/` being cargo's.
fn copy_source(src: &str) -> PathBuf {
    match (
        src.strip_prefix("target/"),
        std::env::var_os("CARGO_TARGET_DIR"),
    ) {
        (Some(rest), Some(target)) => PathBuf::from(target).join(rest),
        _ => repo().join(src),
    }
}

/// The image deploy/Containerfile describes, checked to copy the static
/// xperf this test built.
fn image() -> Image {
    let xperf = static_xperf();
    let path = repo().join("deploy/Containerfile");
    let text = std::fs::read_to_string(&path).unwrap();
    let image = Image::from_containerfile(&text).unwrap_or_else(|e| panic!("deploy/{e}"));
    let copies_xperf = image.copies.iter().any(|(src, _)| {
        std::fs::canonicalize(copy_source(src)).ok() == std::fs::canonicalize(&xperf).ok()
    });
    assert!(
        copies_xperf,
        "deploy/Containerfile does not copy {}",
        xperf.display()
    );
    image
}

/// The value of `flag` in `args` (`--flag VALUE` or `--flag=VALUE`).
fn option(args: &[String], flag: &str) -> Option<String> {
    let eq = format!("{flag}=");
    args.iter()
        .enumerate()
        .find_map(|(i, a)| match a.strip_prefix(&eq) {
            Some(v) => Some(v.to_string()),
            None if a == flag => args.get(i + 1).cloned(),
            None => None,
        })
}

/// Sets the value of `flag` where `args` has one; whether it had.
fn replace_option(args: &mut [String], flag: &str, value: &str) -> bool {
    let eq = format!("{flag}=");
    let at = args.iter().position(|a| a == flag || a.starts_with(&eq));
    match at {
        Some(i) if args[i] == flag && i + 1 < args.len() => args[i + 1] = value.to_string(),
        Some(i) => args[i] = format!("{eq}{value}"),
        None => return false,
    }
    true
}

fn process_args(config: &Value) -> Vec<String> {
    serde_json::from_value(config["process"]["args"].clone()).unwrap()
}

/// One manifest's xperf container, ready to run: its bundle (config
/// written) and where its files appear on the host.
struct Pod {
    bundle: Bundle,
    prom: PathBuf,
    json: PathBuf,
    grace: Duration,
}

/// The bundle of `doc`'s xperf container with the test's schedule, and
/// `extra_env` added to its environment.
fn prepare(tag: &str, doc: &Value, image: &Image, extra_env: &[&str]) -> Pod {
    let (pod, container) = oci::pod_container(doc, "xperf").unwrap();
    let facts = PodFacts::for_workload(doc, NODE);
    let dir = std::env::temp_dir().join(format!("xvmm-container-{}-{tag}", std::process::id()));
    let mut bundle = Bundle::prepare(&dir, image, copy_source, pod, container, &facts)
        .unwrap_or_else(|e| panic!("{tag}: {e}"));
    let mut args = process_args(&bundle.config);
    // The deviation: the schedule, so that a second period comes within
    // the test (see PERIOD and JITTER); --jitter only where the manifest
    // has one.
    assert!(
        replace_option(&mut args, "--every", PERIOD),
        "{tag}: the xperf container does not repeat (--every): {args:?}"
    );
    replace_option(&mut args, "--jitter", JITTER);
    bundle.config["process"]["args"] = args.clone().into();
    let env = bundle.config["process"]["env"].as_array_mut().unwrap();
    env.extend(extra_env.iter().map(|e| Value::from(*e)));
    bundle.write().unwrap();
    let host = |flag: &str| {
        let inside = option(&args, flag).unwrap_or_else(|| panic!("{tag}: no {flag} in {args:?}"));
        bundle
            .host_path(&inside)
            .unwrap_or_else(|| panic!("{tag}: {flag} {inside} lies in no volume"))
    };
    let (prom, json) = (host("--openmetrics"), host("--json"));
    // Kubernetes' default when the pod gives none.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
    Pod {
        bundle,
        prom,
        json,
        grace: Duration::from_secs(grace),
    }
}

/// Debian's node_exporter with only the textfile collector, on a loopback
/// port picked now; killed and reaped when dropped.
struct NodeExporter {
    child: Child,
    port: u16,
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node_exporter(textfiles: &Path) -> NodeExporter {
    let program = oci::program("prometheus-node-exporter", "prometheus-node-exporter")
        .unwrap_or_else(|e| panic!("{e}"));
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(program)
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args(["--collector.disable-defaults", "--collector.textfile"])
        .arg(format!(
            "--collector.textfile.directory={}",
            textfiles.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("prometheus-node-exporter does not start: {e}"));
    let exporter = NodeExporter { child, port };
    let start = Instant::now();
    while exporter.metrics().is_none() {
        assert!(start.elapsed() < SCRAPE, "node_exporter does not answer");
        std::thread::sleep(Duration::from_millis(100));
    }
    exporter
}

impl NodeExporter {
    /// The body of `GET /metrics`, once it answers 200.
    fn metrics(&self) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(SCRAPE)).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .ok()?;
        let mut reply = String::new();
        s.read_to_string(&mut reply).ok()?;
        let (head, body) = reply.split_once("\r\n\r\n")?;
        head.lines().next().filter(|l| l.contains(" 200 "))?;
        Some(body.to_string())
    }
}

/// Debian's Prometheus scraping one node_exporter every second, on a
/// loopback port picked now, its data in a directory removed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How long Prometheus may take to start and scrape.
const PROMETHEUS_READY: Duration = Duration::from_secs(60);

fn prometheus(exporter: &NodeExporter) -> Result<Prometheus, String> {
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let program = oci::program("prometheus", "prometheus")?;
    let dir = std::env::temp_dir().join(format!("xvmm-crun-prom-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let config = dir.join("prometheus.yml");
    let scrape = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: node\n    \
         static_configs:\n      - targets: ['127.0.0.1:{}']\n",
        exporter.port
    );
    std::fs::write(&config, scrape).map_err(|e| e.to_string())?;
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let child = Command::new(program)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("prometheus does not start: {e}"))?;
    Ok(Prometheus { child, port, dir })
}

impl Prometheus {
    /// `GET PATH` on the API; the body of a 200 answer.
    fn get(&self, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(SCRAPE)).ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        s.write_all(request.as_bytes()).ok()?;
        let mut reply = String::new();
        s.read_to_string(&mut reply).ok()?;
        let (head, body) = reply.split_once("\r\n\r\n")?;
        head.lines().next().filter(|l| l.contains(" 200 "))?;
        Some(body.to_string())
    }

    /// The metric names Prometheus holds under `prefix`.
    fn names(&self, prefix: &str) -> BTreeSet<String> {
        let query =
            format!("/api/v1/label/__name__/values?match[]=%7B__name__%3D~%22{prefix}.%2A%22%7D");
        let body = self.get(&query).unwrap_or_default();
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect()
    }
}

/// Every series name of the file reaches a real Prometheus through the
/// node_exporter that serves the container's directory.
fn reached_prometheus(exporter: &NodeExporter, names: &BTreeSet<String>) -> Result<(), String> {
    let prometheus = prometheus(exporter)?;
    let start = Instant::now();
    loop {
        let held = prometheus.names("xperf_");
        let missing: Vec<&String> = names.difference(&held).collect();
        if missing.is_empty() {
            return Ok(());
        }
        if start.elapsed() > PROMETHEUS_READY {
            return Err(format!(
                "Prometheus holds {} of the file's {} series after {PROMETHEUS_READY:?}; \
                 missing {missing:?}",
                held.len(),
                names.len()
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The names of the series in an exposition (every sample line's name).
fn series_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// What [`check`] saw.
#[derive(Debug)]
struct Evidence {
    first_files: Duration,
    series: usize,
    second_files: Duration,
    stopped: Duration,
}

/// The whole story of a running xperf container, or what went wrong first.
fn check(
    c: &mut Container,
    pod: &Pod,
    exporter: &NodeExporter,
    appear: Duration,
) -> Result<Evidence, String> {
    let start = Instant::now();
    wait_for_files(c, pod, appear)?;
    let first_files = start.elapsed();
    confined(c, &pod.bundle.config)?;
    let names = served(pod, exporter)?;
    reached_prometheus(exporter, &names)?;
    let second_files = next_period(c, pod)?;
    let stopped = stop(c, pod, exporter, &names)?;
    Ok(Evidence {
        first_files,
        series: names.len(),
        second_files,
        stopped,
    })
}

/// Both files, within `bound`; an error saying that no file appeared
/// otherwise (the container gone or still running).
fn wait_for_files(c: &mut Container, pod: &Pod, bound: Duration) -> Result<(), String> {
    let start = Instant::now();
    while !(pod.prom.is_file() && pod.json.is_file()) {
        if let Some(status) = c.exited() {
            return Err(format!(
                "no file appeared: the container ended first ({status})"
            ));
        }
        if start.elapsed() > bound {
            return Err(format!(
                "no file appeared within {bound:?} ({} and {} absent), the container still running",
                pod.prom.display(),
                pod.json.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// The running xperf is what the config asks for, as its kernel says
/// (/proc/PID/status): PID 1 of its namespace, its uid and gid, no
/// capability left when the config gives none, no_new_privs and a seccomp
/// filter when the config has them.
fn confined(c: &Container, config: &Value) -> Result<(), String> {
    let pid = c.pid()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let p = &config["process"];
    let id = |v: &Value| v.as_u64().unwrap_or(u64::MAX).to_string();
    let mut wrong = Vec::new();
    let mut want = |name: &str, ok: bool| {
        if !ok {
            wrong.push(format!("{name} {:?}", field(name)));
        }
    };
    want("NSpid", field("NSpid").last() == Some(&"1"));
    want(
        "Uid",
        field("Uid").iter().all(|u| *u == id(&p["user"]["uid"])),
    );
    want(
        "Gid",
        field("Gid").iter().all(|g| *g == id(&p["user"]["gid"])),
    );
    let no_caps = p["capabilities"]["bounding"] == serde_json::json!([]);
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        want(set, !no_caps || field(set) == ["0000000000000000"]);
    }
    let nnp = if p["noNewPrivileges"] == true {
        "1"
    } else {
        "0"
    };
    want("NoNewPrivs", field("NoNewPrivs") == [nnp]);
    let filter = if config["linux"]["seccomp"].is_null() {
        "0"
    } else {
        "2"
    };
    want("Seccomp", field("Seccomp") == [filter]);
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "xperf (host pid {pid}) is not confined as its config says: {wrong:?}"
        ))
    }
}

/// The file's series names, once node_exporter serves every one of them
/// without a scrape error.
fn served(pod: &Pod, exporter: &NodeExporter) -> Result<BTreeSet<String>, String> {
    let text = std::fs::read_to_string(&pod.prom).map_err(|e| e.to_string())?;
    if !text.ends_with("# EOF\n") {
        return Err(format!("{} does not end with # EOF", pod.prom.display()));
    }
    let names = series_names(&text);
    if names.is_empty() {
        return Err(format!("{} holds no series", pod.prom.display()));
    }
    let start = Instant::now();
    loop {
        let body = exporter.metrics().unwrap_or_default();
        let serving = series_names(&body);
        let missing: Vec<&String> = names.difference(&serving).collect();
        let error = body
            .lines()
            .find_map(|l| l.strip_prefix("node_textfile_scrape_error "))
            .unwrap_or("absent");
        if missing.is_empty() && error == "0" {
            return Ok(names);
        }
        if start.elapsed() > SCRAPE {
            return Err(format!(
                "node_exporter: node_textfile_scrape_error {error}, {} of the file's {} series \
                 not served: {missing:?}",
                missing.len(),
                names.len()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// When the JSON report says its run started (its mtime if it does not
/// say), and the .prom file's inode (every write renames a new file).
fn stamps(pod: &Pod) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(&pod.json).ok()?;
    let report: Value = serde_json::from_str(&text).ok()?;
    let started = match report["characterize"]["started_unix"].as_u64() {
        Some(t) => t,
        None => u64::try_from(std::fs::metadata(&pod.json).ok()?.mtime()).ok()?,
    };
    Some((started, std::fs::metadata(&pod.prom).ok()?.ino()))
}

/// How long until a second period replaced both files.
fn next_period(c: &mut Container, pod: &Pod) -> Result<Duration, String> {
    let (started, inode) = stamps(pod).ok_or("the first files do not read back")?;
    let start = Instant::now();
    loop {
        if let Some((s, i)) = stamps(pod) {
            if s > started && i != inode {
                return Ok(start.elapsed());
            }
        }
        if let Some(status) = c.exited() {
            return Err(format!(
                "the container ended ({status}) before a second period"
            ));
        }
        if start.elapsed() > AGAIN {
            return Err(format!(
                "no second period within {AGAIN:?} of --every {PERIOD}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `crun kill ID TERM`: the container must end within the grace period
/// with status 0, its .prom file removed and so its series gone from
/// node_exporter.
fn stop(
    c: &mut Container,
    pod: &Pod,
    exporter: &NodeExporter,
    names: &BTreeSet<String>,
) -> Result<Duration, String> {
    // From before the kill: xperf may be gone by the time `crun kill` returns.
    let start = Instant::now();
    c.kill("TERM")?;
    let status = c.wait(pod.grace).ok_or(format!(
        "still running {:?} after SIGTERM (terminationGracePeriodSeconds): kubelet would SIGKILL it",
        pod.grace
    ))?;
    let stopped = start.elapsed();
    if !status.success() {
        return Err(format!("after SIGTERM the container ended with {status}"));
    }
    if pod.prom.exists() {
        return Err(format!(
            "{} is left after SIGTERM: node_exporter would export stale figures",
            pod.prom.display()
        ));
    }
    let body = exporter.metrics().unwrap_or_default();
    let serving = series_names(&body);
    let left: Vec<&String> = names.intersection(&serving).collect();
    if !left.is_empty() {
        return Err(format!("node_exporter still serves {left:?} after SIGTERM"));
    }
    Ok(stopped)
}

#[test]
fn the_manifests_xperf_containers_measure_repeat_and_stop_cleanly_under_crun() {
    let image = image();
    let mut failures = Vec::new();
    for (file, doc) in manifests() {
        let tag = file.trim_end_matches(".yaml").replace('.', "-");
        let pod = prepare(&tag, &doc, &image, &[]);
        let exporter = node_exporter(pod.prom.parent().unwrap());
        let mut c = Container::run(&pod.bundle).unwrap_or_else(|e| panic!("{e}"));
        match check(&mut c, &pod, &exporter, APPEAR) {
            Ok(e) => println!(
                "{file}: files after {:?}, {} series served, replaced {:?} later, \
                 ended {:?} after SIGTERM with status 0 and no .prom left",
                e.first_files, e.series, e.second_files, e.stopped
            ),
            Err(e) => failures.push(format!(
                "{file}: {e}\n--- the container's output ends ---\n{}",
                c.output_tail(12)
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

const DAEMONSET: &str = "xperf-daemonset.yaml";

/// The DaemonSet's document.
fn daemonset() -> Value {
    manifests()
        .into_iter()
        .find(|(f, _)| f == DAEMONSET)
        .unwrap()
        .1
}

#[test]
fn the_checker_reports_no_file_from_an_xperf_told_it_is_a_vms_init() {
    let image = image();
    let (file, doc) = (DAEMONSET, daemonset());
    // The VMM's word (xvmm puts it on the guest kernel command line, the
    // kernel hands it to init as an environment variable): xperf then
    // mounts /proc, /sys, /dev and ends the VM, none of which a container
    // without capabilities can do.
    let word = xvmm_results::channel::INIT_WORD;
    let pod = prepare("control", &doc, &image, &[word]);
    let exporter = node_exporter(pod.prom.parent().unwrap());
    let mut c = Container::run(&pod.bundle).unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let result = check(&mut c, &pod, &exporter, CONTROL_APPEAR);
    let took = start.elapsed();
    let output = c.output_tail(6);
    let err = result.expect_err("the checker passed a container that cannot work");
    println!("{file} with {word}: {err} after {took:?}\n{output}");
    assert!(err.starts_with("no file appeared"), "{err}\n{output}");
    assert!(took < CONTROL_APPEAR + Duration::from_secs(5), "{took:?}");
}

/// `xperf workload` as PID 1 of the DaemonSet's confined container (root
/// with no capability, a read-only root): it cannot trace there, and must
/// say so and why in one line with status 1, at once, not panic or hang.
#[test]
fn xperf_workload_in_a_container_without_capabilities_fails_in_one_clear_line() {
    let image = image();
    let doc = daemonset();
    let mut pod = prepare("workload", &doc, &image, &[]);
    let xperf = process_args(&pod.bundle.config)[0].clone();
    let args = [&xperf, "workload", "--json", "-", "--", &xperf, "--version"];
    pod.bundle.config["process"]["args"] = serde_json::json!(args);
    pod.bundle.write().unwrap();
    let mut c = Container::run(&pod.bundle).unwrap_or_else(|e| panic!("{e}"));
    let status = c.wait(Duration::from_secs(30));
    let out = c.output_tail(20);
    println!("{args:?} under crun: {status:?}\n{out}");
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {out}");
    // Root there, with a read-only /run: the line says so, not "run as root".
    assert!(
        lines[0].starts_with("xperf: tracing:") && lines[0].contains("as in a container"),
        "{out}"
    );
}

#[test]
fn the_generated_configs_confine_xperf_as_the_manifests_ask() {
    let image = image();
    for (file, doc) in manifests() {
        let (_, container) = oci::pod_container(&doc, "xperf").unwrap();
        let sc = &container["securityContext"];
        let tag = format!("config-{}", file.trim_end_matches(".yaml"));
        let pod = prepare(&tag, &doc, &image, &[]);
        let config = &pod.bundle.config;
        let p = &config["process"];
        let args = process_args(config);
        assert!(!args.iter().any(|a| a.contains("$(")), "{file}: {args:?}");
        if args.iter().any(|a| a.starts_with("--node-name")) {
            assert_eq!(option(&args, "--node-name").as_deref(), Some(NODE));
        }
        for set in [
            "bounding",
            "effective",
            "permitted",
            "inheritable",
            "ambient",
        ] {
            assert_eq!(
                p["capabilities"][set],
                serde_json::json!([]),
                "{file} {set}"
            );
        }
        assert_eq!(
            p["noNewPrivileges"],
            sc["allowPrivilegeEscalation"] == false
        );
        assert_eq!(config["root"]["readonly"], true, "{file}");
        assert!(p["rlimits"].is_null() && config["linux"]["resources"].is_null());
        let seccomp = &config["linux"]["seccomp"];
        assert_eq!(seccomp["defaultAction"], "SCMP_ACT_ERRNO", "{file}");
        println!(
            "{file}: uid {} gid {} groups {}, {} seccomp rules, args {args:?}",
            p["user"]["uid"],
            p["user"]["gid"],
            p["user"]["additionalGids"],
            seccomp["syscalls"].as_array().unwrap().len()
        );
    }
}
