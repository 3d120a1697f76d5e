//! `deploy/`: what a fleet runs must be what xperf accepts, unprivileged,
//! from a static binary.
//!
//! - Both Kubernetes manifests (parsed as YAML): a namespace, a priority
//!   class that never preempts, Linux amd64 nodes only; the `xperf`
//!   container's command is the Containerfile's entry point, its arguments
//!   (with `$(NODE_NAME)` expanded as Kubernetes would, from the downward
//!   API) parse with xperf's own parser as a repeating, jittered
//!   `characterize` whose files lie in the shared volume; no privilege, a
//!   memory limit, no CPU limit. The DaemonSet writes a hostPath; the
//!   sidecar variant writes an emptyDir its node_exporter reads, with no
//!   hostPath and no root. Run as written (paths moved to a temporary
//!   directory, the periods shortened), the command writes both files and
//!   writes them again, records the node's name, and on SIGTERM removes its
//!   `.prom` and exits 0 (the control: SIGKILL leaves it).
//! - The Containerfile copies the static xperf that `build-image.sh` and
//!   `build_static` make, and that file is static (a dynamic one is refused
//!   by the same check).
//! - The systemd units: the service's ExecStart parses the same way,
//!   `systemd-analyze verify` accepts both units (a misspelt key is
//!   refused), and `systemd-analyze security` rates the service's exposure
//!   at most 3.5 (the same unit without its hardening lines: above).
//! - The Prometheus rules load (`promtool check rules`), their tests pass
//!   (`promtool test rules`) and fail against a wrong threshold; every alert
//!   has a runbook URL whose anchor is a heading of docs/fleet.md; the
//!   PrometheusRule holds the same groups as the plain file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xperf::args::{self, Command as Xperf};
use xperf::characterize::Options;
use yaml_rust2::{Yaml, YamlLoader};

/// The most exposure `systemd-analyze security` may give the service.
const MAX_EXPOSURE: f64 = 3.5;
/// Where the alerts' runbook URLs point until the operator sets the base.
const RUNBOOK_BASE: &str = "https://runbooks.example.com/xperf#";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn deploy() -> PathBuf {
    root().join("deploy")
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

fn yaml_docs(rel: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("deploy/{rel}: {e}"))
}

/// The one document of `kind` among `docs`.
fn one<'a>(docs: &'a [Yaml], kind: &str) -> &'a Yaml {
    let found: Vec<&Yaml> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

/// The container named `name` of a pod spec.
fn container<'a>(pod: &'a Yaml, name: &str) -> &'a Yaml {
    pod["containers"]
        .as_vec()
        .expect("containers")
        .iter()
        .find(|c| c["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no container named {name}"))
}

/// A container's arguments as the kubelet passes them: `$(VAR)` replaced by
/// `values[VAR]` for each VAR the container declares (an undeclared one
/// stays as written, and fails here).
fn expanded_args(c: &Yaml, values: &BTreeMap<&str, &str>) -> Vec<String> {
    let declared: Vec<&str> = c["env"]
        .as_vec()
        .map(|env| env.iter().filter_map(|e| e["name"].as_str()).collect())
        .unwrap_or_default();
    let args: Vec<String> = strings(&c["args"])
        .into_iter()
        .map(|mut a| {
            for name in &declared {
                if let Some(v) = values.get(name) {
                    a = a.replace(&format!("$({name})"), v);
                }
            }
            a
        })
        .collect();
    assert!(
        args.iter().all(|a| !a.contains("$(")),
        "an argument names an undeclared variable: {args:?}"
    );
    args
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

/// The volume a container mounts at `dir`, and the pod's definition of it.
fn volume_at<'a>(pod: &'a Yaml, c: &Yaml, dir: &Path) -> &'a Yaml {
    let mount = c["volumeMounts"]
        .as_vec()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["mountPath"].as_str().map(Path::new) == Some(dir))
        .unwrap_or_else(|| panic!("nothing mounted at {}", dir.display()));
    pod["volumes"]
        .as_vec()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume")
}

/// What both manifests share: the namespace, the priority class, the
/// nodes, and an `xperf` container that runs an accepted, repeating,
/// jittered characterize without privileges. Returns its arguments.
fn check_manifest(docs: &[Yaml]) -> (Vec<String>, Yaml) {
    let ns = one(docs, "Namespace")["metadata"]["name"].clone();
    let ds = one(docs, "DaemonSet");
    assert_eq!(ds["apiVersion"].as_str(), Some("apps/v1"));
    assert_eq!(ds["metadata"]["namespace"], ns);
    let pod = &ds["spec"]["template"]["spec"];
    let class = one(docs, "PriorityClass");
    assert_eq!(pod["priorityClassName"], class["metadata"]["name"]);
    // A measurement never evicts a workload.
    assert_eq!(class["preemptionPolicy"].as_str(), Some("Never"));
    assert_eq!(
        pod["nodeSelector"]["kubernetes.io/os"].as_str(),
        Some("linux")
    );
    assert_eq!(
        pod["nodeSelector"]["kubernetes.io/arch"].as_str(),
        Some("amd64")
    );
    let grace = pod["terminationGracePeriodSeconds"]
        .as_i64()
        .expect("a grace period");
    assert!((1..=30).contains(&grace), "{grace}");
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(false));
    for host in ["hostPID", "hostNetwork", "hostIPC"] {
        assert!(pod[host].as_bool() != Some(true), "{host}");
    }
    let c = container(pod, "xperf");
    assert_eq!(strings(&c["command"]), entrypoint(&read("Containerfile")));
    let env = c["env"].as_vec().expect("env");
    let node = env
        .iter()
        .find(|e| e["name"].as_str() == Some("NODE_NAME"))
        .expect("NODE_NAME");
    assert_eq!(
        node["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("spec.nodeName")
    );
    let argv = expanded_args(c, &BTreeMap::from([("NODE_NAME", "node-1")]));
    let opts = characterize(&argv);
    let every = opts.every.expect("a DaemonSet container repeats (--every)");
    assert!(every >= Duration::from_secs(60), "{every:?}");
    let jitter = opts.jitter.expect("a fleet's first runs spread (--jitter)");
    assert!(jitter <= every, "{jitter:?}");
    assert_eq!(opts.node_name.as_deref(), Some("node-1"));
    // Both files in one volume, the metrics as *.prom (what the textfile
    // collector reads), the JSON not.
    let prom = opts.openmetrics.expect("--openmetrics");
    let json = opts.json.expect("--json");
    assert_eq!(prom.parent(), json.parent());
    assert_eq!(prom.extension().unwrap(), "prom");
    assert_ne!(json.extension().unwrap(), "prom");
    check_unprivileged(pod, c);
    // A memory limit, and no CPU limit (throttling would show as slow crossings).
    assert!(c["resources"]["limits"]["memory"].as_str().is_some());
    assert!(c["resources"]["requests"]["memory"].as_str().is_some());
    assert!(c["resources"]["limits"]["cpu"].is_badvalue(), "a CPU limit");
    let volume = volume_at(pod, c, prom.parent().unwrap()).clone();
    (strings(&c["args"]), volume)
}

/// No privilege for a container: none asked for, every capability dropped,
/// a read-only root, the runtime's seccomp profile (its own or the pod's).
fn check_unprivileged(pod: &Yaml, c: &Yaml) {
    let sc = &c["securityContext"];
    assert!(sc["privileged"].as_bool() != Some(true));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert!(
        sc["capabilities"]["add"].is_badvalue(),
        "capabilities added"
    );
    let seccomp = match &sc["seccompProfile"]["type"] {
        Yaml::BadValue => &pod["securityContext"]["seccompProfile"]["type"],
        own => own,
    };
    assert_eq!(seccomp.as_str(), Some("RuntimeDefault"));
}

#[test]
fn the_daemonset_runs_an_accepted_characterize_without_privileges() {
    let docs = yaml_docs("kubernetes/xperf-daemonset.yaml");
    let (_, volume) = check_manifest(&docs);
    assert!(volume["hostPath"]["path"].as_str().is_some());
}

#[test]
fn the_sidecar_variant_shares_an_empty_dir_without_host_paths_or_root() {
    let docs = yaml_docs("kubernetes/xperf-sidecar.yaml");
    let (args, volume) = check_manifest(&docs);
    // The same command as the DaemonSet's, so the figures compare.
    let (daemonset_args, _) = check_manifest(&yaml_docs("kubernetes/xperf-daemonset.yaml"));
    assert_eq!(args, daemonset_args);
    assert!(volume["emptyDir"].as_hash().is_some(), "{volume:?}");
    let ds = one(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    for v in pod["volumes"].as_vec().unwrap() {
        assert!(v["hostPath"].is_badvalue(), "a hostPath: {v:?}");
    }
    let psc = &pod["securityContext"];
    assert_eq!(psc["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(psc["runAsUser"].as_i64(), Some(65534));
    assert_eq!(psc["runAsGroup"].as_i64(), Some(65534));
    assert_eq!(psc["fsGroup"].as_i64(), Some(65534));
    // node_exporter reads the directory xperf writes, through its own mount.
    let exporter = container(pod, "node-exporter");
    check_unprivileged(pod, exporter);
    for c in pod["containers"].as_vec().unwrap() {
        assert!(c["securityContext"]["runAsUser"].as_i64() != Some(0));
    }
    let flag = strings(&exporter["args"])
        .into_iter()
        .find_map(|a| {
            a.strip_prefix("--collector.textfile.directory=")
                .map(str::to_string)
        })
        .expect("--collector.textfile.directory");
    let theirs = volume_at(pod, exporter, Path::new(&flag));
    assert_eq!(theirs["name"], volume["name"]);
    assert_eq!(
        one(&docs, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
            .as_str(),
        Some("restricted")
    );
    // The PodMonitor scrapes these pods, by a port they have, as their node.
    let monitors = yaml_docs("kubernetes/xperf-podmonitor.yaml");
    let monitor = one(&monitors, "PodMonitor");
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_hash()
        .unwrap()
    {
        assert_eq!(&labels[k.as_str().unwrap()], v);
    }
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    let ports = exporter["ports"].as_vec().unwrap();
    assert!(ports.iter().any(|p| p["name"] == endpoint["port"]));
    let relabel = &endpoint["relabelings"][0];
    assert_eq!(relabel["targetLabel"].as_str(), Some("instance"));
}

#[test]
fn the_kustomization_lists_files_that_exist() {
    let docs = yaml_docs("kubernetes/kustomization.yaml");
    for file in strings(&docs[0]["resources"]) {
        assert!(deploy().join("kubernetes").join(&file).is_file(), "{file}");
    }
    let image = &docs[0]["images"][0]["name"];
    let ds = one(&yaml_docs("kubernetes/xperf-daemonset.yaml"), "DaemonSet").clone();
    let c = container(&ds["spec"]["template"]["spec"], "xperf");
    let named = c["image"].as_str().unwrap();
    assert!(named.starts_with(image.as_str().unwrap()), "{named}");
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
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
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

fn systemd_analyze(args: &[&str], unit: &Path) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .arg(unit)
        .output()
        .expect("systemd-analyze runs (Debian's systemd package, which harness/setup.sh expects on the machine)")
}

/// The overall exposure `systemd-analyze security` gives a unit file.
fn exposure(unit: &Path) -> f64 {
    let out = systemd_analyze(&["security", "--offline=yes", "--no-pager"], unit);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| {
            panic!(
                "no exposure: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let figure = line.rsplit_once(": ").unwrap().1;
    figure.split_whitespace().next().unwrap().parse().unwrap()
}

/// A scratch directory for one test, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xvmm-deploy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    assert!(unit_value(&service, "Service", "TimeoutStartSec").is_some());
    assert!(unit_value(&timer, "Timer", "OnUnitActiveSec").is_some());
    // systemd's own reading, with ExecStart pointing at a real static xperf.
    let dir = scratch("units");
    let xperf = xvmm_harness::build::build_static(&["xperf"])
        .unwrap()
        .join("xperf");
    let service = service.replace(&argv[0], xperf.to_str().unwrap());
    std::fs::write(dir.join("xperf-characterize.service"), service).unwrap();
    std::fs::write(dir.join("xperf-characterize.timer"), &timer).unwrap();
    let verify = |unit: &str| systemd_analyze(&["verify", "--man=no"], &dir.join(unit));
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
fn the_service_is_hardened_below_the_exposure_bound() {
    let service = read("systemd/xperf-characterize.service");
    let figure = exposure(&deploy().join("systemd/xperf-characterize.service"));
    println!("systemd-analyze security: exposure {figure}");
    assert!(figure <= MAX_EXPOSURE, "exposure {figure} > {MAX_EXPOSURE}");
    // The control: the same service with only what runs it (no hardening
    // line) is rated above the bound, so the bound measures the hardening.
    let keep = ["Type=", "ExecStart=", "TimeoutStartSec=", "ReadWritePaths="];
    let mut inside = false;
    let bare: String = service
        .lines()
        .filter(|l| {
            if l.starts_with('[') {
                inside = *l == "[Service]";
                return true;
            }
            !inside || l.starts_with('#') || keep.iter().any(|k| l.starts_with(k))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = scratch("security");
    let unit = dir.join("xperf-characterize.service");
    std::fs::write(&unit, bare).unwrap();
    let control = exposure(&unit);
    println!("without hardening: exposure {control}");
    assert!(control > MAX_EXPOSURE, "unhardened exposure {control}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Kills `child` with `signal` and returns how it ended.
fn signal(child: &mut Child, signal: libc::c_int) -> std::process::ExitStatus {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child, which is not reaped yet.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    child.wait().unwrap()
}

/// Waits until `prom` has been written `times` times (each a new inode).
fn writes(prom: &Path, times: usize, within: Duration) -> usize {
    use std::os::unix::fs::MetadataExt;
    let started = Instant::now();
    let mut seen = Vec::new();
    while seen.len() < times && started.elapsed() < within {
        if let Ok(meta) = std::fs::metadata(prom) {
            // Every write is a new file renamed over the old.
            if seen.last() != Some(&meta.ino()) {
                seen.push(meta.ino());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    seen.len()
}

#[test]
fn the_daemonsets_command_writes_its_files_again_and_removes_them_on_sigterm() {
    let docs = yaml_docs("kubernetes/xperf-daemonset.yaml");
    let c = container(
        &one(&docs, "DaemonSet")["spec"]["template"]["spec"],
        "xperf",
    )
    .clone();
    let mount = c["volumeMounts"][0]["mountPath"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = scratch("run");
    // As written, but in a temporary directory, quicker and smaller.
    let mut argv: Vec<String> = expanded_args(&c, &BTreeMap::from([("NODE_NAME", "node-test-1")]))
        .into_iter()
        .map(|a| a.replace(&mount, dir.to_str().unwrap()))
        .collect();
    let at = |argv: &[String], flag: &str| argv.iter().position(|a| a == flag).unwrap() + 1;
    for (flag, value) in [("--every", "2s"), ("--jitter", "1s"), ("--samples", "300")] {
        let i = at(&argv, flag);
        argv[i] = value.into();
    }
    let opts = characterize(&argv);
    let (prom, json) = (opts.openmetrics.unwrap(), opts.json.unwrap());
    let xperf = xvmm_harness::build::build_static(&["xperf"])
        .unwrap()
        .join("xperf");
    let spawn = || {
        Command::new(&xperf)
            .args(&argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut child = spawn();
    let written = writes(&prom, 2, Duration::from_secs(60));
    assert!(std::fs::read_to_string(&prom).unwrap().ends_with("# EOF\n"));
    let status = signal(&mut child, libc::SIGTERM);
    assert_eq!(written, 2, "the file was not written twice in 60 s");
    assert!(status.success(), "SIGTERM: {status:?}");
    assert!(!prom.exists(), "SIGTERM left {}", prom.display());
    let report = xvmm_results::Report::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report.characterize.unwrap().node_name, "node-test-1");
    // The control: SIGKILL, which xperf cannot see, leaves the file.
    let mut child = spawn();
    assert_eq!(writes(&prom, 1, Duration::from_secs(60)), 1);
    let status = signal(&mut child, libc::SIGKILL);
    assert!(!status.success());
    assert!(prom.exists(), "the file went without a SIGTERM");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn promtool(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs (harness/setup.sh: Debian's prometheus package)")
}

/// GitHub's anchors of a Markdown file's headings.
fn anchors(markdown: &str) -> Vec<String> {
    markdown
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| {
            h.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[test]
fn the_alert_rules_load_and_their_tests_fail_when_wrong() {
    let rules = deploy().join("prometheus");
    let out = promtool(&["check", "rules", "xperf-rules.yml"], &rules);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let started = Instant::now();
    let out = promtool(&["test", "rules", "xperf-rules.test.yml"], &rules);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    println!("promtool test rules: {:?}", started.elapsed());
    // The control: the same tests against a threshold ten times higher (no
    // exit alert would fire) must fail.
    let dir = scratch("rules");
    let text = std::fs::read_to_string(rules.join("xperf-rules.yml")).unwrap();
    let threshold = "> 1.5 * instance:xperf_exit_duration_seconds:median_7d";
    assert!(text.contains(threshold));
    let wrong = text.replace(
        threshold,
        "> 15 * instance:xperf_exit_duration_seconds:median_7d",
    );
    std::fs::write(dir.join("xperf-rules.yml"), wrong).unwrap();
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

#[test]
fn every_alert_has_a_runbook_and_the_prometheusrule_holds_the_same_groups() {
    let plain = yaml_docs("prometheus/xperf-rules.yml").remove(0);
    let groups = &plain["groups"];
    let fleet = std::fs::read_to_string(root().join("docs/fleet.md")).expect("docs/fleet.md");
    let headings = anchors(&fleet);
    let mut alerts = 0;
    for rule in groups
        .as_vec()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_vec().unwrap())
    {
        let Some(name) = rule["alert"].as_str() else {
            continue;
        };
        alerts += 1;
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no runbook_url"));
        let anchor = url
            .strip_prefix(RUNBOOK_BASE)
            .unwrap_or_else(|| panic!("{name}: {url} is not under {RUNBOOK_BASE}"));
        assert_eq!(anchor, name.to_lowercase());
        assert!(
            headings.iter().any(|h| h == anchor),
            "docs/fleet.md has no #{anchor}"
        );
    }
    assert!(alerts >= 4, "{alerts} alerts");
    // The control of the anchor check: a name fleet.md has no heading for.
    assert!(!headings.iter().any(|h| h == "xperfnosuchalert"));
    let operator = yaml_docs("prometheus/xperf-prometheusrule.yaml").remove(0);
    assert_eq!(
        operator["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(operator["kind"].as_str(), Some("PrometheusRule"));
    assert!(
        &operator["spec"]["groups"] == groups,
        "deploy/prometheus/xperf-prometheusrule.yaml's spec.groups differ from xperf-rules.yml's groups"
    );
}
