//! A Kubernetes container as an OCI runtime bundle, run by `crun`: what a
//! node's kubelet and container runtime would make of a manifest, without a
//! cluster or a registry.
//!
//! - [`Image`]: a Containerfile interpreted (`FROM scratch`, `COPY`,
//!   `ENTRYPOINT`, `CMD`, `ENV`, `USER`, `WORKDIR`, `LABEL`; anything else is
//!   refused by name) and its root file system built.
//! - [`config`]: the OCI `config.json` of one container of a pod spec (the
//!   manifest as JSON, as the API server holds it). Every field of the
//!   container, of its security context and of the pod that this module does
//!   not know is refused, so that a manifest cannot grow a setting the test
//!   silently leaves out.
//! - [`seccomp_from_profile`]: a Docker-format seccomp profile (CRI-O's
//!   `RuntimeDefault` is containers-common's `seccomp.json`) turned into the
//!   OCI form for the container's capabilities.
//! - [`Bundle`] and [`Container`]: the bundle on disk and `crun run` on it,
//!   both removed when dropped.
//!
//! Two things a real node has are left out because this sandbox refuses
//! them: `rlimits` (no `setrlimit`) and `linux.resources` (crun runs with
//! `--cgroup-manager=disabled`), so memory limits are not enforced here.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub type Result<T> = std::result::Result<T, String>;

/// Where Debian's golang-github-containers-common puts the profile that
/// CRI-O and Podman apply as the runtime default.
pub const RUNTIME_DEFAULT_SECCOMP: &str = "/usr/share/containers/seccomp.json";

/// The PATH that buildah and docker write into the config of an image that
/// sets none (`FROM scratch`).
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What a Containerfile makes: files copied into an empty root and the
/// image's config.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Image {
    /// (source in the build context, absolute destination) of each COPY.
    pub copies: Vec<(String, String)>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    /// USER, numeric only: a scratch image has no /etc/passwd to look in.
    pub user: Option<(u32, Option<u32>)>,
    pub workdir: Option<String>,
}

/// The instructions [`Image::from_containerfile`] knows.
const INSTRUCTIONS: &str = "FROM scratch, COPY, ENTRYPOINT, CMD, ENV, USER, WORKDIR, LABEL";

/// Logical lines of a Containerfile: comments and blank lines dropped, `\`
/// continuations joined, each with its first line number.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if pending.is_none() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        match line.strip_suffix('\\') {
            Some(part) => {
                joined.push_str(part);
                joined.push(' ');
                pending = Some((start, joined));
            }
            None => {
                joined.push_str(line);
                out.push((start, joined));
            }
        }
    }
    out.extend(pending);
    out
}

/// An exec-form (JSON array) argument list; the shell form would need a
/// /bin/sh that a scratch image lacks.
fn exec_form(what: &str, rest: &str) -> Result<Vec<String>> {
    serde_json::from_str(rest)
        .map_err(|_| format!("{what} {rest}: only the exec form [\"...\"] is known"))
}

impl Image {
    /// Interprets `text`; any instruction outside `INSTRUCTIONS` is an
    /// error naming it and its line.
    pub fn from_containerfile(text: &str) -> Result<Image> {
        let mut image = Image::default();
        let mut from = false;
        for (n, line) in logical_lines(text) {
            let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
            let rest = rest.trim();
            let at = |e: String| format!("Containerfile line {n}: {e}");
            if !from && !word.eq_ignore_ascii_case("FROM") {
                return Err(at(format!("{word} before FROM")));
            }
            match word.to_ascii_uppercase().as_str() {
                "FROM" if rest == "scratch" && !from => from = true,
                "FROM" => {
                    return Err(at(format!(
                        "FROM {rest}: only one stage FROM scratch is known (no image store here)"
                    )))
                }
                "COPY" => image.copy(rest).map_err(at)?,
                "ENTRYPOINT" => image.entrypoint = exec_form(word, rest).map_err(at)?,
                "CMD" => image.cmd = exec_form(word, rest).map_err(at)?,
                "ENV" => image.set_env(rest).map_err(at)?,
                "USER" => image.user = Some(numeric_user(rest).map_err(at)?),
                "WORKDIR" if rest.starts_with('/') => image.workdir = Some(rest.to_string()),
                // Metadata only: nothing in the container changes.
                "LABEL" => {}
                _ => {
                    return Err(at(format!(
                        "{word} is not an instruction this test knows ({INSTRUCTIONS}): \
                         teach harness/src/oci.rs what it does"
                    )))
                }
            }
        }
        if !from {
            return Err("Containerfile: no FROM".into());
        }
        Ok(image)
    }

    fn copy(&mut self, rest: &str) -> Result<()> {
        let words: Vec<String> = if rest.starts_with('[') {
            exec_form("COPY", rest)?
        } else {
            rest.split_whitespace().map(str::to_string).collect()
        };
        if let Some(flag) = words.iter().find(|w| w.starts_with("--")) {
            return Err(format!("COPY {flag}: no COPY option is known"));
        }
        let Some((dst, sources)) = words.split_last().filter(|(_, s)| !s.is_empty()) else {
            return Err(format!("COPY {rest}: needs a source and a destination"));
        };
        if !dst.starts_with('/') || (sources.len() > 1 && !dst.ends_with('/')) {
            return Err(format!(
                "COPY {rest}: give an absolute destination (a directory/ for several sources)"
            ));
        }
        for src in sources {
            if src.contains(['*', '?', '[']) {
                return Err(format!("COPY {src}: wildcards are not known"));
            }
            let to = match dst.strip_suffix('/') {
                Some(dir) => format!("{dir}/{}", src.rsplit('/').next().unwrap_or(src)),
                None => dst.clone(),
            };
            self.copies.push((src.clone(), to));
        }
        Ok(())
    }

    fn set_env(&mut self, rest: &str) -> Result<()> {
        if rest.contains(['"', '\'', '$']) {
            return Err(format!(
                "ENV {rest}: quotes and substitutions are not known"
            ));
        }
        let pairs: Vec<(String, String)> = match rest.split_once(char::is_whitespace) {
            Some((k, v)) if !k.contains('=') => vec![(k.to_string(), v.trim().to_string())],
            _ => rest
                .split_whitespace()
                .map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .ok_or_else(|| format!("ENV {kv}: not KEY=VALUE"))
                })
                .collect::<Result<_>>()?,
        };
        for (k, v) in pairs {
            self.env.retain(|(old, _)| *old != k);
            self.env.push((k, v));
        }
        Ok(())
    }

    /// Builds the root file system in `rootfs` (which must not exist):
    /// every COPY source, found by `source`, with its permission bits, owned
    /// by root as a build leaves it.
    pub fn build_rootfs(&self, rootfs: &Path, source: impl Fn(&str) -> PathBuf) -> Result<()> {
        let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        std::fs::create_dir(rootfs).map_err(|e| io(rootfs, e))?;
        for (src, dst) in &self.copies {
            let from = source(src);
            if !from.is_file() {
                return Err(format!("COPY {src}: {} is not a file", from.display()));
            }
            let to = rootfs.join(dst.trim_start_matches('/'));
            if let Some(dir) = to.parent() {
                std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
            }
            std::fs::copy(&from, &to).map_err(|e| io(&to, e))?;
        }
        if let Some(dir) = &self.workdir {
            let dir = rootfs.join(dir.trim_start_matches('/'));
            std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        }
        Ok(())
    }
}

fn numeric_user(text: &str) -> Result<(u32, Option<u32>)> {
    let number = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| format!("USER {text}: only numeric uid[:gid] is known"))
    };
    match text.split_once(':') {
        Some((u, g)) => Ok((number(u)?, Some(number(g)?))),
        None => Ok((number(text)?, None)),
    }
}

/// What the API server and kubelet fill in for one pod on one node: the
/// downward API's values and the pod's hostname.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub node_name: String,
    pub pod_name: String,
    pub namespace: String,
    pub pod_ip: String,
    pub host_ip: String,
}

impl PodFacts {
    /// Test values for a pod of the workload `doc` on the node `node_name`.
    pub fn for_workload(doc: &Value, node_name: &str) -> PodFacts {
        let name = doc["metadata"]["name"].as_str().unwrap_or("pod");
        PodFacts {
            node_name: node_name.to_string(),
            // A DaemonSet's pods are its name and a generated suffix.
            pod_name: format!("{name}-t35t1"),
            namespace: doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            pod_ip: "10.244.0.7".into(),
            host_ip: "192.0.2.10".into(),
        }
    }

    /// A `fieldRef.fieldPath` of the downward API.
    fn field(&self, pod: &Value, path: &str) -> Result<String> {
        Ok(match path {
            "spec.nodeName" => self.node_name.clone(),
            "metadata.name" => self.pod_name.clone(),
            "metadata.namespace" => self.namespace.clone(),
            "status.podIP" => self.pod_ip.clone(),
            "status.hostIP" => self.host_ip.clone(),
            "spec.serviceAccountName" => pod["serviceAccountName"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            other => return Err(format!("fieldRef {other}: not a field this test knows")),
        })
    }
}

/// The pod spec of a workload document (a Pod's `spec`, or a controller's
/// `spec.template.spec`) and its container called `name`, if it has one.
pub fn pod_container<'a>(doc: &'a Value, name: &str) -> Option<(&'a Value, &'a Value)> {
    let pod = if doc["kind"] == "Pod" {
        &doc["spec"]
    } else {
        &doc["spec"]["template"]["spec"]
    };
    let container = pod["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)?;
    Some((pod, container))
}

/// Fails on a key of the object `v` outside `known`, naming `what`.
fn known_fields(v: &Value, what: &str, known: &[&str]) -> Result<()> {
    let Some(map) = v.as_object() else {
        return if v.is_null() {
            Ok(())
        } else {
            Err(format!("{what}: not an object"))
        };
    };
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "{what}.{k}: a field this test does not model; teach harness/src/oci.rs \
             what it changes in the container (known: {})",
            known.join(", ")
        )),
        None => Ok(()),
    }
}

/// The container's fields, each handled or without effect on the process.
const CONTAINER_FIELDS: &[&str] = &[
    "name",
    "command",
    "args",
    "env",
    "workingDir",
    "securityContext",
    "volumeMounts",
    // Without effect here: the image is the Containerfile's, nothing is
    // pulled, linux.resources is refused by this sandbox, ports and probes
    // are the pod network's and kubelet's, not the runtime's.
    "image",
    "imagePullPolicy",
    "resources",
    "ports",
    "readinessProbe",
    "livenessProbe",
    "startupProbe",
    "terminationMessagePath",
    "terminationMessagePolicy",
];

const CONTAINER_SECURITY: &[&str] = &[
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "privileged",
    "allowPrivilegeEscalation",
    "readOnlyRootFilesystem",
    "capabilities",
    "seccompProfile",
];

const POD_FIELDS: &[&str] = &[
    "containers",
    "volumes",
    "securityContext",
    "terminationGracePeriodSeconds",
    "hostPID",
    "hostIPC",
    "hostNetwork",
    "shareProcessNamespace",
    "automountServiceAccountToken",
    // Scheduling and service discovery: where the pod runs, not what its
    // container sees (enableServiceLinks: false leaves only the master
    // service's variables, which [`config`] adds).
    "priorityClassName",
    "nodeSelector",
    "tolerations",
    "affinity",
    "enableServiceLinks",
    "serviceAccountName",
    "dnsPolicy",
    "restartPolicy",
];

const POD_SECURITY: &[&str] = &[
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "fsGroup",
    "supplementalGroups",
    "seccompProfile",
];

/// Refuses what this module does not model anywhere in the pod and the
/// container, and the settings that would make a different container
/// (privileged, host namespaces, a shared PID namespace, a token mount).
fn check_modelled(pod: &Value, c: &Value) -> Result<()> {
    known_fields(pod, "pod", POD_FIELDS)?;
    known_fields(&pod["securityContext"], "pod securityContext", POD_SECURITY)?;
    known_fields(c, "container", CONTAINER_FIELDS)?;
    let sc = &c["securityContext"];
    known_fields(sc, "securityContext", CONTAINER_SECURITY)?;
    known_fields(&sc["capabilities"], "capabilities", &["add", "drop"])?;
    for host in ["hostPID", "hostIPC", "hostNetwork", "shareProcessNamespace"] {
        if pod[host] == true {
            return Err(format!(
                "pod {host}: true is not modelled (xperf would not be PID 1 of its own namespaces)"
            ));
        }
    }
    if pod["automountServiceAccountToken"] != false {
        return Err(
            "pod automountServiceAccountToken: only false is modelled (no token mount)".into(),
        );
    }
    if sc["privileged"] == true {
        return Err("securityContext.privileged: a privileged container is not modelled".into());
    }
    Ok(())
}

/// `key` of the container's security context, else of the pod's.
fn security<'a>(pod: &'a Value, c: &'a Value, key: &str) -> &'a Value {
    match &c["securityContext"][key] {
        Value::Null => &pod["securityContext"][key],
        v => v,
    }
}

/// kubelet's `$(VAR)` expansion: a defined VAR is replaced, `$$` is `$`,
/// anything else (an undefined VAR included) stays as written.
pub fn expand(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        if let Some(after) = tail.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = tail.strip_prefix('(').and_then(|t| t.split_once(')')) {
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = after;
        } else {
            out.push('$');
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// What kubelet always injects for the `kubernetes` service, even with
/// `enableServiceLinks: false`.
fn master_service_env() -> Vec<(String, String)> {
    [
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
        ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
        ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
        ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
        ("KUBERNETES_PORT_443_TCP_PORT", "443"),
        ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The container's environment as kubelet computes it: the master service,
/// then each `env` entry in order (a `value` expanded against those before
/// it, a `valueFrom.fieldRef` from the downward API).
fn kubelet_env(pod: &Value, c: &Value, facts: &PodFacts) -> Result<Vec<(String, String)>> {
    let mut env = master_service_env();
    for e in c["env"].as_array().map_or(&[][..], Vec::as_slice) {
        let name = e["name"].as_str().ok_or("env entry without a name")?;
        known_fields(e, &format!("env {name}"), &["name", "value", "valueFrom"])?;
        let value = if let Some(v) = e["value"].as_str() {
            expand(v, &env)
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            known_fields(
                &e["valueFrom"],
                &format!("env {name} valueFrom"),
                &["fieldRef"],
            )?;
            facts.field(pod, path)?
        } else if e["valueFrom"].is_null() {
            String::new()
        } else {
            return Err(format!(
                "env {name}: only value and valueFrom.fieldRef are modelled"
            ));
        };
        env.retain(|(k, _)| k != name);
        env.push((name.to_string(), value));
    }
    Ok(env)
}

fn strings(v: &Value, what: &str) -> Result<Option<Vec<String>>> {
    if v.is_null() {
        return Ok(None);
    }
    let list = v.as_array().ok_or(format!("{what}: not a list"))?;
    list.iter()
        .map(|s| {
            s.as_str()
                .map(str::to_string)
                .ok_or(format!("{what}: {s} is not a string"))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// argv as kubelet and the runtime make it: `command` replaces the image's
/// ENTRYPOINT and CMD, `args` replaces CMD; `$(VAR)` expanded in both.
fn process_args(image: &Image, c: &Value, env: &[(String, String)]) -> Result<Vec<String>> {
    let command = strings(&c["command"], "command")?;
    let args = strings(&c["args"], "args")?;
    let argv: Vec<String> = match (command, args) {
        (Some(cmd), args) => cmd.into_iter().chain(args.unwrap_or_default()).collect(),
        (None, Some(args)) => image.entrypoint.iter().cloned().chain(args).collect(),
        (None, None) => image.entrypoint.iter().chain(&image.cmd).cloned().collect(),
    };
    if argv.is_empty() {
        return Err("no command: neither the container nor the image gives one".into());
    }
    Ok(argv.iter().map(|a| expand(a, env)).collect())
}

/// process.user: runAsUser/runAsGroup (container over pod, else the
/// image's USER, else root), fsGroup and supplementalGroups as additional
/// groups beside the primary one (as containerd lists them).
fn process_user(image: &Image, pod: &Value, c: &Value) -> Result<Value> {
    let id = |v: &Value, what: &str| -> Result<Option<u32>> {
        match v {
            Value::Null => Ok(None),
            v => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or(format!("{what}: {v} is not an id")),
        }
    };
    let uid = id(security(pod, c, "runAsUser"), "runAsUser")?
        .or(image.user.map(|u| u.0))
        .unwrap_or(0);
    let gid = id(security(pod, c, "runAsGroup"), "runAsGroup")?
        .or(image.user.and_then(|u| u.1))
        .unwrap_or(0);
    if security(pod, c, "runAsNonRoot") == true && uid == 0 {
        return Err("runAsNonRoot with uid 0: kubelet refuses to start this container".into());
    }
    let mut groups = vec![gid];
    let pod_sc = &pod["securityContext"];
    let extra = pod_sc["supplementalGroups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for g in std::iter::once(&pod_sc["fsGroup"]).chain(&extra) {
        if let Some(g) = id(g, "fsGroup/supplementalGroups")? {
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
    }
    Ok(json!({ "uid": uid, "gid": gid, "additionalGids": groups }))
}

/// containerd's default capability set for a container.
const DEFAULT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// The capability set: the runtime's default, less `drop` (`ALL`: every
/// one), plus `add`.
fn capabilities(c: &Value) -> Result<Vec<String>> {
    let caps = &c["securityContext"]["capabilities"];
    let full = |n: &str| format!("CAP_{}", n.trim_start_matches("CAP_").to_ascii_uppercase());
    let drop = strings(&caps["drop"], "capabilities.drop")?.unwrap_or_default();
    let add = strings(&caps["add"], "capabilities.add")?.unwrap_or_default();
    let mut set: Vec<String> = if drop.iter().any(|d| d == "ALL") {
        Vec::new()
    } else {
        let drop: Vec<String> = drop.iter().map(|d| full(d)).collect();
        DEFAULT_CAPS
            .iter()
            .map(|c| c.to_string())
            .filter(|c| !drop.contains(c))
            .collect()
    };
    for a in add {
        if a == "ALL" {
            return Err("capabilities.add ALL is not modelled".into());
        }
        if !set.contains(&full(&a)) {
            set.push(full(&a));
        }
    }
    Ok(set)
}

/// The kernel release as (major, minor), for a profile's `minKernel`.
fn kernel_release() -> Result<(u32, u32)> {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").map_err(|e| e.to_string())?;
    version(&text).ok_or(format!("kernel release {text:?}"))
}

fn version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Whether one rule of a Docker-format profile applies on amd64 to a
/// container holding `caps` on `kernel`.
fn rule_applies(rule: &Value, caps: &[String], kernel: (u32, u32)) -> Result<bool> {
    let list = |v: &Value| strings(v, "seccomp includes/excludes").map(Option::unwrap_or_default);
    let (inc, exc) = (&rule["includes"], &rule["excludes"]);
    let inc_arches = list(&inc["arches"])?;
    let arch_ok = (inc_arches.is_empty() || inc_arches.iter().any(|a| a == "amd64"))
        && !list(&exc["arches"])?.iter().any(|a| a == "amd64");
    let caps_ok = list(&inc["caps"])?.iter().all(|c| caps.contains(c))
        && !list(&exc["caps"])?.iter().any(|c| caps.contains(c));
    let kernel_ok = match inc["minKernel"].as_str() {
        None => true,
        Some(k) => version(k).ok_or(format!("minKernel {k}"))? <= kernel,
    };
    Ok(arch_ok && caps_ok && kernel_ok)
}

/// A Docker-format seccomp profile (`archMap`, rules with `includes` and
/// `excludes`) as the OCI `linux.seccomp` of an amd64 container holding
/// `caps`, the way containers/common converts it.
pub fn seccomp_from_profile(profile: &Value, caps: &[String]) -> Result<Value> {
    let kernel = kernel_release()?;
    let mut arches = vec![json!("SCMP_ARCH_X86_64")];
    if let Some(map) = profile["archMap"].as_array() {
        if let Some(m) = map.iter().find(|m| m["architecture"] == "SCMP_ARCH_X86_64") {
            arches.extend(
                m["subArchitectures"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            );
        }
    }
    let mut syscalls = Vec::new();
    for rule in profile["syscalls"]
        .as_array()
        .ok_or("seccomp profile: no syscalls")?
    {
        if !rule_applies(rule, caps, kernel)? {
            continue;
        }
        let mut out = json!({ "names": rule["names"], "action": rule["action"] });
        if rule["args"].as_array().is_some_and(|a| !a.is_empty()) {
            out["args"] = rule["args"].clone();
        }
        if !rule["errnoRet"].is_null() {
            out["errnoRet"] = rule["errnoRet"].clone();
        }
        syscalls.push(out);
    }
    let mut oci = json!({
        "defaultAction": profile["defaultAction"],
        "architectures": arches,
        "syscalls": syscalls,
    });
    if !profile["defaultErrnoRet"].is_null() {
        oci["defaultErrnoRet"] = profile["defaultErrnoRet"].clone();
    }
    Ok(oci)
}

/// linux.seccomp for the container's `seccompProfile` (container over pod):
/// RuntimeDefault is [`RUNTIME_DEFAULT_SECCOMP`]; Unconfined, or none (the
/// kubelet's default without `--seccomp-default`), is no filter.
fn seccomp(pod: &Value, c: &Value, caps: &[String]) -> Result<Option<Value>> {
    let profile = security(pod, c, "seccompProfile");
    match profile["type"].as_str() {
        None | Some("Unconfined") => Ok(None),
        Some("RuntimeDefault") => {
            let text = std::fs::read_to_string(RUNTIME_DEFAULT_SECCOMP).map_err(|e| {
                format!(
                    "{RUNTIME_DEFAULT_SECCOMP}: {e}: harness/setup.sh installs Debian's \
                     golang-github-containers-common, which ships it"
                )
            })?;
            let profile: Value = serde_json::from_str(&text)
                .map_err(|e| format!("{RUNTIME_DEFAULT_SECCOMP}: {e}"))?;
            seccomp_from_profile(&profile, caps).map(Some)
        }
        Some(other) => Err(format!("seccompProfile {other}: not modelled")),
    }
}

/// One volume the container mounts: the host directory standing in for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub name: String,
    pub host: PathBuf,
    pub mount_path: String,
    pub read_only: bool,
}

/// Makes, under `dir`, the host side of each volume the container mounts as
/// kubelet would: a hostPath directory (DirectoryOrCreate: root's, 0755),
/// an emptyDir (0777, and with the pod's fsGroup its group, setgid).
pub fn make_volumes(pod: &Value, c: &Value, dir: &Path) -> Result<Vec<Volume>> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let mut out = Vec::new();
    for m in c["volumeMounts"].as_array().map_or(&[][..], Vec::as_slice) {
        known_fields(m, "volumeMount", &["name", "mountPath", "readOnly"])?;
        let name = m["name"].as_str().ok_or("volumeMount without a name")?;
        let volumes = pod["volumes"].as_array().map_or(&[][..], Vec::as_slice);
        let v = volumes
            .iter()
            .find(|v| v["name"] == name)
            .ok_or(format!("volumeMount {name}: no such volume"))?;
        let host = dir.join(format!("volume-{name}"));
        std::fs::create_dir_all(&host).map_err(|e| io(&host, e))?;
        let mode = if !v["hostPath"].is_null() {
            known_fields(&v["hostPath"], "hostPath", &["path", "type"])?;
            match v["hostPath"]["type"].as_str() {
                None | Some("" | "Directory" | "DirectoryOrCreate") => 0o755,
                Some(t) => return Err(format!("hostPath type {t}: not modelled")),
            }
        } else if !v["emptyDir"].is_null() {
            // sizeLimit is an eviction threshold, nothing at mount time.
            known_fields(&v["emptyDir"], "emptyDir", &["sizeLimit"])?;
            empty_dir_owner(pod, &host)?
        } else {
            return Err(format!(
                "volume {name}: only hostPath and emptyDir are modelled"
            ));
        };
        set_mode(&host, mode)?;
        let mount_path = m["mountPath"]
            .as_str()
            .ok_or("volumeMount without mountPath")?;
        out.push(Volume {
            name: name.to_string(),
            host,
            mount_path: mount_path.to_string(),
            read_only: m["readOnly"] == true,
        });
    }
    Ok(out)
}

/// An emptyDir's mode, after giving it the pod's fsGroup (kubelet's
/// SetVolumeOwnership).
fn empty_dir_owner(pod: &Value, host: &Path) -> Result<u32> {
    match pod["securityContext"]["fsGroup"].as_u64() {
        None => Ok(0o777),
        Some(g) => {
            let g = u32::try_from(g).map_err(|_| format!("fsGroup {g}"))?;
            std::os::unix::fs::chown(host, None, Some(g))
                .map_err(|e| format!("{}: {e}", host.display()))?;
            Ok(0o2777)
        }
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The mounts every container gets from the runtime (`crun spec`'s, which
/// are containerd's too), its kubelet files (`files`: name in the bundle,
/// destination, read-only), then its volumes.
fn mounts(bundle: &Path, files: &[(&str, &str, bool)], volumes: &[Volume]) -> Vec<Value> {
    let mut out = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
               "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}),
    ];
    let bind = |source: &Path, destination: &str, ro: bool| {
        json!({"destination": destination, "type": "bind", "source": source,
               "options": ["rbind", "rprivate", if ro { "ro" } else { "rw" }]})
    };
    for (name, destination, ro) in files {
        out.push(bind(&bundle.join(name), destination, *ro));
    }
    for v in volumes {
        out.push(bind(&v.host, &v.mount_path, v.read_only));
    }
    out
}

/// The files kubelet and the CRI bind into every container: (name in the
/// bundle, destination, read-only), and their contents.
fn kubelet_files(facts: &PodFacts) -> Vec<(&'static str, &'static str, bool, String)> {
    vec![
        ("hosts", "/etc/hosts", false, format!(
            "127.0.0.1\tlocalhost\n::1\tlocalhost\n{}\t{}\n", facts.pod_ip, facts.pod_name
        )),
        ("hostname", "/etc/hostname", false, format!("{}\n", facts.pod_name)),
        ("resolv.conf", "/etc/resolv.conf", false,
         "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n".into()),
        ("termination-log", "/dev/termination-log", false, String::new()),
    ]
}

/// containerd's masked and read-only paths for an unprivileged container.
const MASKED: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READ_ONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Everything the config needs that is not in the manifest.
pub struct Inputs<'a> {
    pub image: &'a Image,
    pub facts: &'a PodFacts,
    pub volumes: &'a [Volume],
    /// The bundle directory, where the kubelet files lie.
    pub bundle: &'a Path,
}

/// The OCI config of container `c` of the pod spec `pod`.
pub fn config(pod: &Value, c: &Value, inputs: &Inputs) -> Result<Value> {
    check_modelled(pod, c)?;
    let image = inputs.image;
    let kube_env = kubelet_env(pod, c, inputs.facts)?;
    let args = process_args(image, c, &kube_env)?;
    // The image's env, then HOSTNAME (the CRI's), then kubelet's, later
    // entries winning.
    let mut env: Vec<(String, String)> = image.env.clone();
    if !env.iter().any(|(k, _)| k == "PATH") {
        let (k, v) = DEFAULT_PATH.split_once('=').unwrap_or_default();
        env.insert(0, (k.into(), v.into()));
    }
    env.push(("HOSTNAME".into(), inputs.facts.pod_name.clone()));
    for (k, v) in kube_env {
        env.retain(|(old, _)| *old != k);
        env.push((k, v));
    }
    let caps = capabilities(c)?;
    let cwd = c["workingDir"]
        .as_str()
        .or(image.workdir.as_deref())
        .unwrap_or("/");
    let files: Vec<(&str, &str, bool)> = kubelet_files(inputs.facts)
        .iter()
        .map(|f| (f.0, f.1, f.2))
        .collect();
    // A pod's own namespaces (the network, IPC and UTS ones are shared
    // with its sandbox, which is no different from the container's view).
    let namespaces: Vec<Value> = ["pid", "network", "ipc", "uts", "mount", "cgroup"]
        .iter()
        .map(|t| json!({ "type": t }))
        .collect();
    let mut linux = json!({
        "namespaces": namespaces,
        "maskedPaths": MASKED,
        "readonlyPaths": READ_ONLY,
    });
    if let Some(filter) = seccomp(pod, c, &caps)? {
        linux["seccomp"] = filter;
    }
    Ok(json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": process_user(image, pod, c)?,
            "args": args,
            "env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "cwd": cwd,
            "capabilities": {
                "bounding": caps, "effective": caps, "permitted": caps,
                "inheritable": [], "ambient": [],
            },
            // Kubernetes' default for allowPrivilegeEscalation is true.
            "noNewPrivileges": c["securityContext"]["allowPrivilegeEscalation"] == false,
        },
        "root": { "path": "rootfs", "readonly": c["securityContext"]["readOnlyRootFilesystem"] == true },
        "hostname": inputs.facts.pod_name,
        "mounts": mounts(inputs.bundle, &files, inputs.volumes),
        "linux": linux,
    }))
}

/// An OCI bundle on disk: `rootfs/`, the volumes' host directories, the
/// kubelet files and (after [`Bundle::write`]) `config.json`. Removed,
/// all of it, when dropped.
pub struct Bundle {
    pub dir: PathBuf,
    pub config: Value,
    pub volumes: Vec<Volume>,
}

impl Bundle {
    /// Builds the bundle of container `c` of `pod` in the new directory
    /// `dir`; the config is written by [`Bundle::write`], so that a caller
    /// can change it first.
    pub fn prepare(
        dir: &Path,
        image: &Image,
        source: impl Fn(&str) -> PathBuf,
        pod: &Value,
        c: &Value,
        facts: &PodFacts,
    ) -> Result<Bundle> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut bundle = Bundle {
            dir: dir.to_path_buf(),
            config: Value::Null,
            volumes: Vec::new(),
        };
        image.build_rootfs(&dir.join("rootfs"), source)?;
        bundle.volumes = make_volumes(pod, c, dir)?;
        for (name, _, _, text) in kubelet_files(facts) {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            set_mode(&path, 0o644)?;
        }
        let inputs = Inputs {
            image,
            facts,
            volumes: &bundle.volumes,
            bundle: dir,
        };
        bundle.config = config(pod, c, &inputs)?;
        Ok(bundle)
    }

    pub fn write(&self) -> Result<()> {
        let path = self.dir.join("config.json");
        let text = serde_json::to_string_pretty(&self.config).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The host path of `path` inside the container, if a volume holds it.
    pub fn host_path(&self, path: &str) -> Option<PathBuf> {
        self.volumes.iter().find_map(|v| {
            let rest = path.strip_prefix(v.mount_path.trim_end_matches('/'))?;
            let rest = rest.strip_prefix('/')?;
            Some(v.host.join(rest))
        })
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An executable on PATH, or an error naming the Debian package
/// harness/setup.sh installs for it.
pub fn program(name: &str, package: &str) -> Result<PathBuf> {
    let paths = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(format!(
            "{name} is not installed: harness/setup.sh installs Debian's {package} package"
        ))
}

/// `crun run` of a bundle, as a child process: the container's PID 1 is
/// its child, its exit status is crun's. Dropping it deletes the container
/// (`crun delete -f`), reaps crun and removes crun's state directory.
pub struct Container {
    pub id: String,
    crun: PathBuf,
    state: PathBuf,
    log: PathBuf,
    child: Child,
    status: Option<ExitStatus>,
}

impl Container {
    /// Starts the container of `bundle` (its config written) under a
    /// fresh id. crun runs in a private mount namespace whose
    /// /sys/fs/cgroup is a plain cgroup2 mount, without a cgroup manager
    /// (docs: /work/shared/ENVIRONMENT.md, "Containers here").
    pub fn run(bundle: &Bundle) -> Result<Container> {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let crun = program("crun", "crun")?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("crun runs the container as root here (unshare --mount, cgroup2 mount): run the test as root".into());
        }
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("xvmm-test-{}-{n}", std::process::id());
        let state = PathBuf::from(format!("{}.crun-state", bundle.dir.display()));
        let log = PathBuf::from(format!("{}.log", bundle.dir.display()));
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let script = "umount -R /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup && \
                      exec \"$1\" --cgroup-manager=disabled --root \"$2\" run --bundle \"$3\" \"$4\"";
        let child = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(&crun)
            .arg(&state)
            .arg(&bundle.dir)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("unshare (util-linux) does not start: {e}"))?;
        Ok(Container {
            id,
            crun,
            state,
            log,
            child,
            status: None,
        })
    }

    /// crun's stdout for `args`, or an error with its stderr.
    fn crun(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.crun)
            .arg("--cgroup-manager=disabled")
            .arg("--root")
            .arg(&self.state)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("crun: {e}"))?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        Err(format!(
            "crun {}: {} {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }

    /// `crun kill ID SIGNAL`.
    pub fn kill(&self, signal: &str) -> Result<()> {
        self.crun(&["kill", &self.id, signal]).map(drop)
    }

    /// The container's PID 1 as the host sees it (`crun state`).
    pub fn pid(&self) -> Result<u32> {
        let state: Value = serde_json::from_str(&self.crun(&["state", &self.id])?)
            .map_err(|e| format!("crun state: {e}"))?;
        state["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p != 0)
            .ok_or(format!("crun state: no pid in {state}"))
    }

    /// The exit status, once crun has exited (with the container's status).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits up to `bound` for the exit status.
    pub fn wait(&mut self, bound: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < bound {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.exited()
    }

    /// The last `lines` lines the container and crun wrote.
    pub fn output_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.crun(&["delete", "-f", &self.id]);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.state);
        let _ = std::fs::remove_file(&self.log);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_is_kubelets() {
        let env = vec![("A".to_string(), "x".to_string()), ("B".into(), "y".into())];
        assert_eq!(expand("$(A)-$(B)", &env), "x-y");
        assert_eq!(expand("$$(A) $(C) $A $", &env), "$(A) $(C) $A $");
        assert_eq!(expand("$(A", &env), "$(A");
    }

    #[test]
    fn the_containerfile_interpreter_refuses_what_it_does_not_know() {
        let ok = "# c\nFROM scratch\nCOPY a/b /x\nENV K=v\nUSER 7:8\nENTRYPOINT [\"/x\"]\n";
        let image = Image::from_containerfile(ok).unwrap();
        assert_eq!(image.copies, [("a/b".to_string(), "/x".to_string())]);
        assert_eq!(
            (image.entrypoint, image.user),
            (vec!["/x".to_string()], Some((7, Some(8))))
        );
        for (bad, word) in [
            ("FROM scratch\nRUN true\n", "RUN is not an instruction"),
            ("FROM debian\n", "FROM debian"),
            ("FROM scratch\nENTRYPOINT /x\n", "exec form"),
            ("FROM scratch\nCOPY --chown=1 a /x\n", "--chown"),
        ] {
            let e = Image::from_containerfile(bad).unwrap_err();
            assert!(e.contains(word), "{bad:?}: {e}");
        }
    }

    #[test]
    fn seccomp_rules_follow_capabilities_and_arch() {
        let profile = json!({
            "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
            "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
            "syscalls": [
                {"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {}, "excludes": {}},
                {"names": ["chroot"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_CHROOT"]}},
                {"names": ["chroot"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
                 "excludes": {"caps": ["CAP_SYS_CHROOT"]}},
                {"names": ["s390_x"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["s390x"]}},
                {"names": ["future"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "99.0"}},
            ]
        });
        let none = seccomp_from_profile(&profile, &[]).unwrap();
        let names = |v: &Value| -> Vec<String> {
            v["syscalls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    format!(
                        "{}:{}",
                        r["names"][0].as_str().unwrap(),
                        r["action"].as_str().unwrap()
                    )
                })
                .collect()
        };
        assert_eq!(
            names(&none),
            ["read:SCMP_ACT_ALLOW", "chroot:SCMP_ACT_ERRNO"]
        );
        assert_eq!(
            none["architectures"],
            json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"])
        );
        assert_eq!(none["defaultErrnoRet"], 38);
        let chroot = seccomp_from_profile(&profile, &["CAP_SYS_CHROOT".into()]).unwrap();
        assert_eq!(
            names(&chroot),
            ["read:SCMP_ACT_ALLOW", "chroot:SCMP_ACT_ALLOW"]
        );
    }
}
