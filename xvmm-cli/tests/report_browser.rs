//! A real browser renders `xvmm report`'s page: headless Chromium (Debian's
//! `chromium`, installed by `harness/setup.sh`) takes a screenshot and dumps
//! the DOM. The page must show every chart as an SVG of non-zero size, make
//! no network request and log nothing on the console; a hostile name must
//! stay text. A control page that does request and log must be caught by
//! the same checks, so that they can fail.
//!
//! Inputs: the real instances of `docs/instances/`, reports measured in the
//! nested harness (TCG-emulated, `tests/data/report/`, written by
//! `harness/tests/characterize.rs` and `xperf.rs`: a traced VM run and its
//! bare-metal side give the stacked decomposition and the timeline strip)
//! and two `xperf characterize` runs on this machine a second apart (a
//! trend).
//!
//! Fails loudly when Chromium is missing. The screenshot is
//! `target/report-browser/report.png`; with `XVMM_REPORT_PNG=PATH` (relative
//! to the workspace root) it is also copied there (README's
//! `docs/report.png` is made that way).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const WINDOW: (u32, u32) = (1280, 1800);
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

fn chromium() -> PathBuf {
    let name = std::env::var("XVMM_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(&name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "{name} is not installed: the browser test needs Debian's chromium package \
             (harness/setup.sh installs it; or set XVMM_CHROMIUM)"
        )
    })
}

fn out_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("report-browser");
    std::fs::create_dir_all(&dir).unwrap();
    // Chromium refuses a --log-net-log path with a `..` component.
    std::fs::canonicalize(&dir).unwrap()
}

/// What one headless Chromium run left: stdout (the DOM with --dump-dom),
/// stderr (the console, with --enable-logging) and the net log.
struct Browsed {
    dom: String,
    console: Vec<String>,
    page_requests: Vec<String>,
}

/// Runs Chromium on `page` with the flags a closed, headless machine needs,
/// plus `extra`; killed after [`CHROMIUM_TIMEOUT`].
fn browse(page: &Path, extra: &[String]) -> Browsed {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let dir = out_dir();
    let profile = dir.join(format!("profile-{}-{run}", std::process::id()));
    let netlog = dir.join(format!("netlog-{run}.json"));
    let _ = std::fs::remove_file(&netlog);
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--window-size={},{}", WINDOW.0, WINDOW.1))
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--log-net-log={}", netlog.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (out, err) = (read(Box::new(stdout)), read(Box::new(stderr)));
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > CHROMIUM_TIMEOUT {
            let _ = child.kill();
            panic!("chromium did not finish within {CHROMIUM_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(&profile);
    let (dom, err) = (out.join().unwrap(), err.join().unwrap());
    Browsed {
        dom,
        console: err
            .lines()
            .filter(|l| l.contains(":CONSOLE"))
            .map(String::from)
            .collect(),
        page_requests: page_requests(&netlog),
    }
}

/// URLs the page itself asked the network for: net-log requests whose
/// network isolation key is the page's (`file://`); Chromium's own
/// background requests carry another key.
fn page_requests(netlog: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(netlog).unwrap_or_default();
    // A net log killed mid-write lacks its closing brackets.
    let log: Value = serde_json::from_str(&text)
        .or_else(|_| serde_json::from_str(&format!("{}]}}", text.trim_end().trim_end_matches(','))))
        .unwrap_or_else(|e| panic!("net log {} unreadable: {e}", netlog.display()));
    let mut urls: Vec<String> = log["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter(|e| {
                    e["params"]["network_isolation_key"]
                        .as_str()
                        .is_some_and(|k| k.contains("file://"))
                })
                .filter_map(|e| e["params"]["url"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    urls.dedup();
    urls
}

/// Measures every chart once the DOM is there and writes the result into
/// the page, where --dump-dom shows it. Inserted before the page's
/// Content-Security-Policy (which forbids scripts) into a copy of the page.
const PROBE: &str = r#"<script>
document.addEventListener('DOMContentLoaded', function () {
  var charts = [];
  document.querySelectorAll('figure.chart').forEach(function (f) {
    var s = f.querySelector('svg');
    var r = s ? s.getBoundingClientRect() : { width: 0, height: 0 };
    charts.push({ kind: f.getAttribute('data-kind'), width: r.width, height: r.height,
                  marks: s ? s.querySelectorAll('rect, circle, polyline, path, line').length : 0 });
  });
  var elements = document.getElementsByTagName('*').length;
  var bytes = document.documentElement.outerHTML.length;
  var pre = document.createElement('pre');
  pre.id = 'xvmm-probe';
  pre.textContent = JSON.stringify({ charts: charts, elements: elements, dom_bytes: bytes,
    laid_out_ms: performance.now(),
    resources: performance.getEntriesByType('resource').map(function (e) { return e.name; }) });
  document.body.appendChild(pre);
});
</script>"#;

fn probed_copy(page: &Path) -> PathBuf {
    let html = std::fs::read_to_string(page).unwrap();
    let copy = page.with_file_name("probed.html");
    std::fs::write(
        &copy,
        html.replacen("<head>\n", &format!("<head>\n{PROBE}\n"), 1),
    )
    .unwrap();
    copy
}

fn probe_result(dom: &str) -> Value {
    let start = dom
        .find("<pre id=\"xvmm-probe\">")
        .expect("probe output in the DOM")
        + 21;
    let end = start + dom[start..].find("</pre>").unwrap();
    let json = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap()
}

/// Width and height of a PNG, from its IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR",
        "not a PNG"
    );
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

/// Real environments characterised (`docs/instances/`): each instance's
/// first run.
const INSTANCES: [&str; 2] = [
    "2026-11-26-firecracker-xeon-6-207/characterize.json",
    "2026-11-27-pvm-epyc-build-machine/characterize.json",
];

/// Reports to render: the real instances', the harness's (a traced VM run
/// among them, with its slowest samples' exits, and a workload's in L1 and
/// L2), and two characterizations
/// of this machine a second apart.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = root.join("tests/data/report");
    let instances = root.join("../docs/instances");
    let mut files: Vec<PathBuf> = INSTANCES.iter().map(|n| instances.join(n)).collect();
    files.extend(
        [
            "characterize-bm.json",
            "characterize-vm.json",
            "characterize-l1.json",
            "characterize-l2.json",
            "traced-bm.json",
            "traced-vm.json",
            "workload-bm.json",
            "workload-vm.json",
        ]
        .iter()
        .map(|n| data.join(n)),
    );
    for f in &files {
        assert!(f.is_file(), "test data {} missing", f.display());
    }
    for n in 1..=2 {
        let config = xperf::characterize::Config {
            samples: 1000,
            cpu: None,
            vmm_channel: false,
            node_name: None,
        };
        let report = xperf::characterize::run(&config, &xperf::characterize::Unwatched)
            .expect("characterize runs");
        let path = dir.join(format!("this-machine-{n}.json"));
        std::fs::write(&path, report.to_json_pretty()).unwrap();
        files.push(path);
        std::thread::sleep(Duration::from_millis(1100));
    }
    files
}

/// The kinds of the charts the probe measured.
fn kinds(result: &Value) -> Vec<String> {
    result["charts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

/// A copy of a real report whose crossing, note and file name are markup.
fn hostile(dir: &Path, real: &Path) -> PathBuf {
    let mut r = xvmm_results::Report::from_json(&std::fs::read_to_string(real).unwrap()).unwrap();
    r.crossings[0].name = "<script>alert(1)</script>".into();
    r.notes.push("<img src=x onerror=alert(2)>".into());
    let path = dir.join("<b>hostile<i>.json");
    std::fs::write(&path, r.to_json_pretty()).unwrap();
    path
}

fn xvmm_report(files: &[PathBuf], page: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_xvmm"))
        .arg("report")
        .args(files)
        .arg("-o")
        .arg(page)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn chromium_renders_every_chart_offline_without_console_errors() {
    let chromium = chromium(); // fail first, and loudly, without a browser
    let dir = out_dir();
    let page = dir.join("report.html");
    let files = inputs(&dir);
    xvmm_report(&files, &page);
    let html = std::fs::read_to_string(&page).unwrap();
    // Nothing in the page could fetch or run anything (the SVG namespace is a name, not a fetch).
    let stripped = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for needle in [
        "<script", "http://", "https://", "src=\"", "url(", "@import", "<link", "<iframe",
    ] {
        assert!(!stripped.contains(needle), "{needle} in the page");
    }
    let figures = html.matches("<figure class=\"chart\"").count();
    // The workload pair is set side by side, with its waterfall.
    assert!(html.contains("one workload&#39;s time in the kernel"));
    assert!(
        html.contains("Kernel time summed, bare metal to VM"),
        "no workload waterfall"
    );

    let screenshot = dir.join("report.png");
    let _ = std::fs::remove_file(&screenshot);
    let shot = browse(&page, &[format!("--screenshot={}", screenshot.display())]);
    assert!(shot.console.is_empty(), "console: {:?}", shot.console);
    assert!(
        shot.page_requests.is_empty(),
        "the page requested {:?}",
        shot.page_requests
    );
    let png = std::fs::read(&screenshot).expect("a screenshot");
    assert_eq!(png_size(&png), WINDOW);

    let dom = browse(&page, &["--dump-dom".into()]);
    assert!(dom.console.is_empty(), "console: {:?}", dom.console);
    assert!(dom.dom.contains("<svg"), "no SVG in the rendered DOM");

    let probe = browse(&probed_copy(&page), &["--dump-dom".into()]);
    let result = probe_result(&probe.dom);
    let charts = result["charts"].as_array().unwrap();
    assert_eq!(charts.len(), figures, "every figure is in the DOM");
    for kind in ["histogram", "bars", "trend", "stacked", "timeline", "boxes"] {
        assert!(
            charts.iter().any(|c| c["kind"] == kind),
            "no {kind} chart rendered"
        );
    }
    for c in charts {
        let (w, h) = (c["width"].as_f64().unwrap(), c["height"].as_f64().unwrap());
        assert!(w > 200.0 && h > 60.0, "a chart rendered at {w}x{h}: {c}");
        assert!(c["marks"].as_u64().unwrap() > 3, "an empty chart: {c}");
    }
    assert_eq!(
        result["resources"],
        Value::Array(vec![]),
        "resources loaded"
    );
    // The harness's files are TCG-emulated: the footer says so.
    assert!(html.contains("<footer>") && html.contains("Measured under QEMU TCG"));

    // A blank page of the same size compresses to far less than the report.
    let blank = dir.join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><html><body></body></html>").unwrap();
    let blank_png = dir.join("blank.png");
    browse(&blank, &[format!("--screenshot={}", blank_png.display())]);
    let blank_len = xvmm_results::num::usize_from(std::fs::metadata(&blank_png).unwrap().len());
    assert!(
        png.len() > 10 * blank_len,
        "report {} bytes, blank {blank_len}",
        png.len()
    );
    if let Some(to) = std::env::var_os("XVMM_REPORT_PNG") {
        // Relative to the workspace root (cargo runs tests in the crate's directory).
        let to = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(to);
        std::fs::copy(&screenshot, &to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    }
    println!(
        "rendered {figures} charts with {}; screenshot {}",
        chromium.display(),
        screenshot.display()
    );
}

/// Files of the fleet page.
const FLEET: usize = 1000;
/// Chromium must lay the fleet page out within this, its own start included.
const FLEET_RENDER: Duration = Duration::from_secs(10);

/// `n` characterization files: a real one (`docs/instances/`, a PVM guest
/// on a Xeon) under five instance types and three kernels, every figure
/// scaled by a factor that varies deterministically from file to file.
fn fleet_files(dir: &Path, n: usize) -> Vec<PathBuf> {
    let real = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/instances/2026-11-26-firecracker-xeon-6-207/characterize.json");
    let base = xvmm_results::Report::from_json(&std::fs::read_to_string(real).unwrap()).unwrap();
    let types = [
        ("Intel(R) Xeon(R) Processor", "KVMKVMKVM", 2_100_000, 1.0),
        ("AMD EPYC 9R14", "KVMKVMKVM", 2_600_000, 1.3),
        (
            "Intel(R) Xeon(R) Platinum 8375C",
            "Microsoft Hv",
            2_900_000,
            2.1,
        ),
        ("AMD EPYC 7B13", "VMwareVMware", 2_450_000, 1.7),
        ("Intel(R) Xeon(R) Gold 6338", "", 2_000_000, 0.2),
    ];
    std::fs::create_dir_all(dir).unwrap();
    (0..n)
        .map(|i| {
            let (cpu, hv, khz, cost) = types[i % types.len()];
            let mut r = base.clone();
            r.host.cpu_model = cpu.into();
            r.host.hypervisor_signature = hv.into();
            r.host.tsc_khz = khz;
            r.host.kernel_release = ["6.1.140", "6.6.90", "6.12.30"][i % 3].into();
            if let Some(m) = r.machine.as_mut() {
                m.hypervisor_signature = hv.into();
            }
            // 0.8 to 1.2 times the type's cost, a few files far slower.
            let spread = 0.8 + 0.4 * ((i * 7919) % 1000) as f64 / 1000.0;
            let factor = cost * spread * if i % 97 == 0 { 3.0 } else { 1.0 };
            let c = r.characterize.as_mut().unwrap();
            c.hostname = format!("node-{i:04}");
            c.started_unix += i as u64;
            for m in &mut c.metrics {
                if let Some(st) = m.stats.as_mut().filter(|_| m.unit == "ticks") {
                    let f = |v: u64| xvmm_results::num::u64_saturating((v as f64 * factor).round());
                    (st.min, st.median, st.p99, st.max) =
                        (f(st.min), f(st.median), f(st.p99), f(st.max));
                    st.mean *= factor;
                }
            }
            let path = dir.join(format!("node-{i:04}.json"));
            std::fs::write(&path, r.to_json_pretty()).unwrap();
            path
        })
        .collect()
}

/// Issue 24: a page of 1000 characterizations (the fleet view) renders in
/// Chromium within [`FLEET_RENDER`], at a bounded DOM and page size; the
/// page of a few files (the control) has no fleet view, and the check
/// tells.
#[test]
fn a_thousand_file_fleet_page_renders_in_under_ten_seconds() {
    chromium();
    let dir = out_dir().join("fleet");
    let _ = std::fs::remove_dir_all(&dir);
    let files = fleet_files(&dir.join("files"), FLEET);
    let page = dir.join("fleet.html");
    let start = Instant::now();
    xvmm_report(&files, &page);
    let report_time = start.elapsed();
    let html = std::fs::read_to_string(&page).unwrap();
    let start = Instant::now();
    let probe = browse(&probed_copy(&page), &["--dump-dom".into()]);
    let render = start.elapsed();
    assert!(probe.console.is_empty(), "console: {:?}", probe.console);
    let result = probe_result(&probe.dom);
    let (elements, dom_bytes) = (
        result["elements"].as_u64().unwrap(),
        result["dom_bytes"].as_u64().unwrap(),
    );
    println!(
        "fleet of {FLEET} files: xvmm report {report_time:.2?}, page {} bytes; chromium {render:.2?} \
         (laid out {:.0} ms after navigation), DOM {elements} elements, {dom_bytes} bytes",
        html.len(),
        result["laid_out_ms"].as_f64().unwrap()
    );
    assert!(render < FLEET_RENDER, "chromium took {render:?}");
    let shown = kinds(&result);
    let boxes = shown.iter().filter(|k| *k == "boxes").count();
    assert!(boxes >= 6, "box charts: {shown:?}");
    for c in result["charts"].as_array().unwrap() {
        let (w, h) = (c["width"].as_f64().unwrap(), c["height"].as_f64().unwrap());
        assert!(w > 200.0 && h > 60.0, "a chart rendered at {w}x{h}: {c}");
        assert!(c["marks"].as_u64().unwrap() > 3, "an empty chart: {c}");
    }
    // Bounded whatever the number of files: no section per file.
    assert!(html.len() < 3 << 20, "page {} bytes", html.len());
    assert!(elements < 60_000, "{elements} elements");
    assert!(
        !html.contains("id=\"file-1\""),
        "a section per file in a fleet page"
    );
    assert!(
        html.contains("of 1000 rows"),
        "the inputs table says it was cut"
    );
    // Real (PVM) files: no emulation caveat.
    assert!(!html.contains("QEMU TCG"), "a TCG note for real files");

    // Control: three of the files, no fleet view, their own sections.
    let few = dir.join("few.html");
    xvmm_report(&files[..3], &few);
    let control = probe_result(&browse(&probed_copy(&few), &["--dump-dom".into()]).dom);
    let control_kinds = kinds(&control);
    for kind in ["boxes", "stacked", "timeline"] {
        assert!(
            !control_kinds.iter().any(|k| k == kind),
            "{control_kinds:?}"
        );
    }
    assert!(
        !control_kinds.is_empty(),
        "the control's own charts are seen"
    );
    assert!(std::fs::read_to_string(&few)
        .unwrap()
        .contains("id=\"file-1\""));
}

#[test]
fn markup_in_a_file_stays_text_in_the_browser() {
    chromium();
    let dir = out_dir().join("hostile");
    std::fs::create_dir_all(&dir).unwrap();
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report/characterize-vm.json");
    let page = dir.join("report.html");
    xvmm_report(&[hostile(&dir, &real)], &page);
    let b = browse(&page, &["--dump-dom".into()]);
    assert!(b.console.is_empty(), "console: {:?}", b.console);
    assert!(
        b.page_requests.is_empty(),
        "the page requested {:?}",
        b.page_requests
    );
    for text in [
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "&lt;img src=x onerror=alert(2)&gt;",
        "&lt;b&gt;hostile&lt;i&gt;.json",
    ] {
        assert!(b.dom.contains(text), "{text} is not text in the DOM");
    }
    for element in ["<script", "<img", "<b>", "<i>"] {
        assert!(!b.dom.contains(element), "{element} became an element");
    }
}

#[test]
fn the_checks_catch_a_page_that_requests_and_logs() {
    chromium();
    let dir = out_dir();
    let bad = dir.join("control.html");
    std::fs::write(
        &bad,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body>\
         <img src=\"http://192.0.2.1/x.png\"><script>console.error('control')</script></body></html>",
    )
    .unwrap();
    let b = browse(&bad, &["--dump-dom".into()]);
    assert!(
        b.console.iter().any(|l| l.contains("control")),
        "console: {:?}",
        b.console
    );
    assert_eq!(b.page_requests, ["http://192.0.2.1/x.png"]);
}
