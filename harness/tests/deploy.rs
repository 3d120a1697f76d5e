//! `deploy/`: what a fleet runs must be what xperf accepts, unprivileged,
//! from a static binary.
//!
//! - The DaemonSet (parsed as YAML): its command is the Containerfile's
//!   entry point, its arguments parse with xperf's own parser as a repeating
//!   `characterize` whose files lie in the hostPath volume, its container
//!   asks for no privilege and no CPU limit; run as written (paths moved to
//!   a temporary directory, the period shortened), it writes both files and
//!   writes them again.
//! - The Containerfile copies the static xperf that `build-image.sh` and
//!   `build_static` make, and that file is static (a dynamic one is refused
//!   by the same check).
//! - The systemd units: the service's ExecStart parses the same way and
//!   `systemd-analyze verify` accepts both units.
//! - The Prometheus rules load (`promtool check rules`), their tests pass
//!   (`promtool test rules`), and a test that expects the wrong alert fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xperf::args::{self, Command as Xperf};
use xperf::characterize::Options;
use yaml_rust2::{Yaml, YamlLoader};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(deploy().join(rel)).unwrap_or_else(|e| panic!("deploy/{rel}: {e}"))
}

fn strings(y: &Yaml) -> Vec<String> {
    y.as_vec()
        .unwrap_or_else(|| panic!("not a list: {y:?}"))
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("not a string: {v:?}"))
                .to_string()
        })
        .collect()
}

fn daemonset() -> Yaml {
    let docs = YamlLoader::load_from_str(&read("kubernetes/xperf-daemonset.yaml")).unwrap();
    assert_eq!(docs.len(), 1);
    docs.into_iter().next().unwrap()
}

/// The characterize options of an argument list, by xperf's own parser.
fn characterize(argv: &[String]) -> Options {
    match args::parse(argv.iter().cloned()) {
        Ok(Xperf::Characterize(o)) => o,
        Ok(_) => panic!("{argv:?} is not xperf characterize"),
        Err(e) => panic!("xperf refuses {argv:?}: {e}"),
    }
}

/// `["/xperf"]` from the Containerfile's exec-form ENTRYPOINT.
fn entrypoint(containerfile: &str) -> Vec<String> {
    let line = containerfile
        .lines()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .expect("an ENTRYPOINT");
    serde_json::from_str(line).expect("exec form: a JSON array")
}

/// Whether the image's last stage starts from nothing, and what it copies.
fn image_copy(containerfile: &str) -> (String, PathBuf, String) {
    let from = containerfile
        .lines()
        .filter_map(|l| l.strip_prefix("FROM "))
        .next_back()
        .expect("a FROM")
        .to_string();
    let copy = containerfile
        .lines()
        .find_map(|l| l.strip_prefix("COPY "))
        .expect("a COPY");
    let (src, dst) = copy.split_once(' ').unwrap();
    (from, PathBuf::from(src), dst.to_string())
}

#[test]
fn the_daemonset_runs_an_accepted_characterize_without_privileges() {
    let ds = daemonset();
    assert_eq!(ds["apiVersion"].as_str(), Some("apps/v1"));
    assert_eq!(ds["kind"].as_str(), Some("DaemonSet"));
    let pod = &ds["spec"]["template"]["spec"];
    for host in ["hostPID", "hostNetwork", "hostIPC"] {
        assert!(pod[host].as_bool() != Some(true), "{host}");
    }
    let containers = pod["containers"].as_vec().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(strings(&c["command"]), entrypoint(&read("Containerfile")));
    let opts = characterize(&strings(&c["args"]));
    let every = opts.every.expect("a DaemonSet container repeats (--every)");
    assert!(every >= Duration::from_secs(60), "{every:?}");
    // Both files in the hostPath volume, the metrics as *.prom (what the
    // textfile collector reads), the JSON not.
    let mount = c["volumeMounts"].as_vec().unwrap()[0].clone();
    let volume = pod["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume")
        .clone();
    assert!(volume["hostPath"]["path"].as_str().is_some());
    let dir = Path::new(mount["mountPath"].as_str().unwrap());
    let prom = opts.openmetrics.expect("--openmetrics");
    let json = opts.json.expect("--json");
    assert_eq!((prom.parent(), json.parent()), (Some(dir), Some(dir)));
    assert_eq!(prom.extension().unwrap(), "prom");
    assert_ne!(json.extension().unwrap(), "prom");
    // No privilege, and no CPU limit (throttling would show as slow crossings).
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert!(
        sc["capabilities"]["add"].is_badvalue(),
        "capabilities added"
    );
    assert!(c["resources"]["limits"]["cpu"].is_badvalue(), "a CPU limit");
}

#[test]
fn the_image_holds_the_static_xperf() {
    let containerfile = read("Containerfile");
    let (from, src, dst) = image_copy(&containerfile);
    assert_eq!(from, "scratch");
    assert_eq!(entrypoint(&containerfile), [dst]);
    // The file the COPY names is the one build_static (and build-image.sh)
    // writes.
    let built = xvmm_harness::build::build_static(&["xperf"])
        .unwrap()
        .join("xperf");
    let root = deploy().join("..");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let copied = target.join(src.strip_prefix("target").unwrap());
    assert_eq!(
        std::fs::canonicalize(&copied).unwrap(),
        std::fs::canonicalize(&built).unwrap()
    );
    let is_static =
        |p: &Path| xvmm::linux::builtin::elf_is_static(&std::fs::read(p).unwrap()).unwrap();
    assert!(is_static(&copied), "{} is not static", copied.display());
    // The control: the same check refuses the test's own, dynamic, binary.
    assert!(!is_static(&std::env::current_exe().unwrap()));
    assert!(read("build-image.sh").contains("-f deploy/Containerfile"));
}

/// `Key=value` of a systemd unit's `[section]`.
fn unit_value(unit: &str, section: &str, key: &str) -> Option<String> {
    let mut inside = false;
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
        } else if inside {
            if let Some(v) = line.strip_prefix(&format!("{key}=")) {
                return Some(v.to_string());
            }
        }
    }
    None
}

#[test]
fn the_systemd_units_run_the_same_command_and_verify() {
    let service = read("systemd/xperf-characterize.service");
    let timer = read("systemd/xperf-characterize.timer");
    let exec = unit_value(&service, "Service", "ExecStart").expect("ExecStart");
    let argv: Vec<String> = exec.split_whitespace().map(str::to_string).collect();
    assert_eq!(Path::new(&argv[0]).file_name().unwrap(), "xperf");
    let opts = characterize(&argv[1..]);
    assert!(
        opts.every.is_none(),
        "a oneshot service under a timer runs once"
    );
    let prom = opts.openmetrics.expect("--openmetrics");
    let writable = unit_value(&service, "Service", "ReadWritePaths").unwrap();
    assert_eq!(prom.parent(), Some(Path::new(&writable)));
    assert_eq!(
        unit_value(&service, "Service", "Type").as_deref(),
        Some("oneshot")
    );
    assert!(unit_value(&timer, "Timer", "OnUnitActiveSec").is_some());
    // systemd's own reading, with ExecStart pointing at a real static xperf.
    let dir = std::env::temp_dir().join(format!("xvmm-deploy-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let xperf = xvmm_harness::build::build_static(&["xperf"])
        .unwrap()
        .join("xperf");
    let service = service.replace(&argv[0], xperf.to_str().unwrap());
    std::fs::write(dir.join("xperf-characterize.service"), service).unwrap();
    std::fs::write(dir.join("xperf-characterize.timer"), &timer).unwrap();
    let verify = |unit: &str| {
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(dir.join(unit))
            .output()
            .expect("systemd-analyze (Debian's systemd package) runs")
    };
    for unit in ["xperf-characterize.service", "xperf-characterize.timer"] {
        let out = verify(unit);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !err.contains(&dir.display().to_string()),
            "{unit}: {err}"
        );
    }
    // The control: a unit with a misspelt key is refused.
    std::fs::write(dir.join("bad.service"), "[Service]\nExecStrat=/bin/true\n").unwrap();
    let out = verify("bad.service");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("ExecStrat"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_daemonsets_command_writes_its_files_and_writes_them_again() {
    let ds = daemonset();
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    let mount = c["volumeMounts"][0]["mountPath"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = std::env::temp_dir().join(format!("xvmm-deploy-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // As written, but in a temporary directory, quicker and smaller.
    let mut argv: Vec<String> = strings(&c["args"])
        .into_iter()
        .map(|a| a.replace(&mount, dir.to_str().unwrap()))
        .collect();
    let at = |argv: &[String], flag: &str| argv.iter().position(|a| a == flag).unwrap() + 1;
    let i = at(&argv, "--every");
    argv[i] = "2s".into();
    let i = at(&argv, "--samples");
    argv[i] = "300".into();
    let opts = characterize(&argv);
    let prom = opts.openmetrics.unwrap();
    let xperf = xvmm_harness::build::build_static(&["xperf"])
        .unwrap()
        .join("xperf");
    let mut child = Command::new(&xperf)
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut writes = Vec::new();
    while writes.len() < 2 && started.elapsed() < Duration::from_secs(60) {
        if let Ok(meta) = std::fs::metadata(&prom) {
            use std::os::unix::fs::MetadataExt;
            // Every write is a new file renamed over the old: a new inode.
            if writes.last() != Some(&meta.ino()) {
                writes.push(meta.ino());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        writes.len(),
        2,
        "the file was not written twice in 60 s: {err}"
    );
    assert!(std::fs::read_to_string(&prom).unwrap().ends_with("# EOF\n"));
    assert!(opts.json.unwrap().is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_alert_rules_load_and_their_tests_fail_when_wrong() {
    let rules = deploy().join("prometheus");
    let promtool = |args: &[&str], dir: &Path| {
        Command::new("promtool")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("promtool (Debian's prometheus package) runs")
    };
    let out = promtool(&["check", "rules", "xperf-rules.yml"], &rules);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = promtool(&["test", "rules", "xperf-rules.test.yml"], &rules);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The control: the same tests against a threshold ten times higher (no
    // cpuid alert would fire) must fail.
    let dir = std::env::temp_dir().join(format!("xvmm-deploy-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(rules.join("xperf-rules.yml")).unwrap();
    assert!(text.contains("> 2e-6"));
    std::fs::write(
        dir.join("xperf-rules.yml"),
        text.replace("> 2e-6", "> 2e-5"),
    )
    .unwrap();
    std::fs::copy(
        rules.join("xperf-rules.test.yml"),
        dir.join("xperf-rules.test.yml"),
    )
    .unwrap();
    let out = promtool(&["test", "rules", "xperf-rules.test.yml"], &dir);
    assert!(
        !out.status.success(),
        "a wrong threshold passes the rule tests"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
