//! The layer rule of README's Architecture section, checked on the source:
//! a module of the xvmm crate may use only modules of a lower layer (or its
//! own); clap and the terminal belong to the application layer alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module of the xvmm crate and its layer (higher = closer to
/// the user). Keep in step with README "Architecture".
const LAYERS: &[(&str, u32)] = &[
    ("app", 7),
    ("linux", 6),
    ("microguest", 6),
    ("kernel", 5),
    ("report", 5),
    ("vcpu", 4),
    ("host_trace", 4),
    ("vm", 3),
    ("host_fault", 3),
    ("devices", 3),
    ("boot", 3),
    ("initramfs", 3),
    ("arch", 2),
    ("layout", 1),
    ("elf", 1),
    ("affinity", 1),
    ("progress", 1),
    ("error", 0),
];

/// Modules that may print or read the terminal (everything else returns
/// values and never prints).
const TERMINAL: &[&str] = &["app"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to ("" for lib.rs and main.rs).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    match first.strip_suffix(".rs") {
        Some("lib" | "main") => String::new(),
        Some(stem) => stem.to_string(),
        None => first.into_owned(),
    }
}

/// The code of a file without comments and without its `#[cfg(test)]` tail
/// (tests may use anything).
fn code_of(text: &str) -> String {
    let body = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Top-level modules a piece of code names through `crate::`.
fn uses_of(code: &str) -> Vec<String> {
    let mut used = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            used.extend(inner.split(',').map(|p| ident(p.trim()).to_string()));
        } else {
            used.push(ident(rest).to_string());
        }
    }
    used.into_iter()
        .filter(|u| !u.is_empty() && u != "self")
        // The crate root re-exports the error type.
        .map(|u| {
            if u == "Error" || u == "Result" {
                "error".into()
            } else {
                u
            }
        })
        .collect()
}

#[test]
fn every_module_has_a_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let layers: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    for line in lib.lines() {
        if let Some(name) = line.trim().strip_prefix("pub mod ") {
            let name = name.trim_end_matches(';');
            assert!(
                layers.contains_key(name),
                "module {name} has no layer in LAYERS"
            );
        }
    }
}

#[test]
fn no_module_uses_one_above_it_or_beside_it() {
    let layers: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let module = module_of(file);
        let Some(&rank) = layers.get(module.as_str()) else {
            continue; // lib.rs and main.rs sit above everything
        };
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for target in uses_of(&code) {
            if target == module {
                continue;
            }
            match layers.get(target.as_str()) {
                Some(&t) if t < rank => {}
                Some(&t) => violations.push(format!(
                    "{} ({module}, layer {rank}) uses {target} (layer {t})",
                    file.display()
                )),
                None => violations.push(format!("{} uses unknown crate::{target}", file.display())),
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layer violations:\n{}",
        violations.join("\n")
    );
}

#[test]
fn only_the_application_layer_knows_clap_and_the_terminal() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let module = module_of(file);
        if module.is_empty() || TERMINAL.contains(&module.as_str()) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for needle in [
            "clap",
            "println!",
            "eprintln!",
            "print!",
            "eprint!",
            "std::io::stdout",
            "std::io::stderr",
            "indicatif",
        ] {
            if code.contains(needle) {
                violations.push(format!("{} ({module}) uses {needle}", file.display()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "outside the app layer:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_checker_sees_grouped_and_nested_paths() {
    let code = "use crate::{layout, Error, vcpu::Vcpu};\nlet x = crate::boot::plan();";
    assert_eq!(uses_of(code), ["layout", "error", "vcpu", "boot"]);
    assert_eq!(
        uses_of(&code_of("// crate::app::x\nfn f() {}")),
        Vec::<String>::new()
    );
}
