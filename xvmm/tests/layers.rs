//! The layer rule of README's Architecture section, checked on the source:
//! a module of the xvmm crate may use only modules of a lower layer (or its
//! own); clap and the terminal belong to the application layer alone; no two
//! files use one another. The checks are functions over a source root, run on
//! `src/` and on planted trees that must fail them.

mod source_tree;

use source_tree::{scan, tree::Crate};
use std::path::{Path, PathBuf};

/// Each top-level module of the xvmm crate and its layer (higher = closer to
/// the user). Keep in step with README "Architecture". The application layer
/// is the xvmm-cli crate; `app` keeps its rank here so that the rule reads
/// the same for a tree that has one (the planted trees below do).
const LAYERS: &[(&str, u32)] = &[
    ("app", 7),
    ("linux", 6),
    ("microguest", 6),
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

fn layer(name: &str) -> Option<u32> {
    LAYERS.iter().find(|l| l.0 == name).map(|l| l.1)
}

/// Every module `lib.rs` declares has a layer and a file of its own (code in
/// `lib.rs` itself has no layer to check against), and no `#[path]` moves a
/// file away from the module its place names.
fn structure_violations(krate: &Crate) -> Vec<String> {
    let mut out = Vec::new();
    let t = &krate.root().tokens;
    let mut depth = 0;
    for i in 0..t.len() {
        match t[i].as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "mod" if depth == 0 && i + 2 < t.len() => {
                let name = &t[i + 1];
                if layer(name).is_none() {
                    out.push(format!("module {name} has no layer in LAYERS"));
                }
                if t[i + 2] == "{" {
                    out.push(format!("module {name} is inline in lib.rs: give it a file"));
                }
            }
            _ => {}
        }
    }
    for file in &krate.files {
        let top = file.module.first().map_or("", |m| m.as_str());
        if !top.is_empty() && layer(top).is_none() {
            out.push(format!(
                "{} is in module {top}, which has no layer",
                file.path.display()
            ));
        }
        if file.tokens.windows(3).any(|w| w == ["#", "[", "path"]) {
            out.push(format!("{} uses #[path]", file.path.display()));
        }
    }
    out
}

/// Paths from a module to one of the same or a higher layer.
fn layer_violations(krate: &Crate) -> Vec<String> {
    let mut out = Vec::new();
    for (f, file) in krate.files.iter().enumerate() {
        let Some(module) = file.module.first() else {
            continue; // lib.rs sits above everything
        };
        let Some(rank) = layer(module) else {
            continue; // structure_violations reports it
        };
        for abs in krate.absolute_paths(f) {
            let Some(target) = krate.top_module(&abs, 0) else {
                continue;
            };
            let file = file.path.display();
            match layer(&target) {
                _ if &target == module => {}
                Some(t) if t < rank => {}
                Some(t) => out.push(format!(
                    "{file} ({module}, layer {rank}) uses {target} (layer {t})"
                )),
                None => out.push(format!("{file} uses unknown crate::{target}")),
            }
        }
    }
    out.dedup();
    out
}

/// Clap, indicatif and the terminal outside the modules in TERMINAL (the
/// crate root included).
fn terminal_violations(krate: &Crate) -> Vec<String> {
    let mut out = Vec::new();
    for file in &krate.files {
        let module = file.module.first().map_or("lib.rs", |m| m.as_str());
        if TERMINAL.contains(&module) {
            continue;
        }
        let mut found = terminal_tokens(&file.tokens);
        for path in &file.refs.paths {
            // `std::io::stdout`, `io::stderr()`, `use std::io::{stdout as o}`
            if let Some(w) = path
                .segs
                .windows(2)
                .find(|w| w[0] == "io" && STD_STREAMS.contains(&w[1].as_str()))
            {
                found.push(format!("io::{}", w[1]));
            }
        }
        found.dedup();
        out.extend(
            found
                .iter()
                .map(|what| format!("{} ({module}) uses {what}", file.path.display())),
        );
    }
    out
}

const STD_STREAMS: &[&str] = &["stdout", "stderr", "stdin"];

/// Terminal access in tokens `t`: clap or indicatif by name, a print macro,
/// a std stream called by its imported name, a raw write to descriptor 1 or
/// 2 (`libc::write(1, …)`), or a standard descriptor's constant.
fn terminal_tokens(t: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let at = |i: usize| t.get(i).map_or("", |s| s.as_str());
    for i in 0..t.len() {
        let method = i > 0 && t[i - 1] == ".";
        let hit = match t[i].as_str() {
            "clap" | "indicatif" | "STDOUT_FILENO" | "STDERR_FILENO" | "STDIN_FILENO" => true,
            "print" | "println" | "eprint" | "eprintln" | "dbg" => at(i + 1) == "!",
            s if STD_STREAMS.contains(&s) => at(i + 1) == "(" && !method,
            "write" | "from_raw_fd" => {
                at(i + 1) == "(" && matches!(at(i + 2), "1" | "2") && !method
            }
            _ => false,
        };
        if hit {
            found.push(t[i..(i + 3).min(t.len())].concat());
        }
    }
    found
}

/// Every violation of the rule in the library under `src`.
fn violations(src: &Path) -> Vec<String> {
    let krate = Crate::load(src);
    [
        structure_violations(&krate),
        layer_violations(&krate),
        terminal_violations(&krate),
        krate.cycles(),
    ]
    .concat()
}

fn assert_none(what: &str, found: Vec<String>) {
    assert!(found.is_empty(), "{what}:\n{}", found.join("\n"));
}

#[test]
fn every_module_has_a_layer() {
    assert_none(
        "modules without a layer",
        structure_violations(&Crate::load(&src())),
    );
}

#[test]
fn no_module_uses_one_above_it_or_beside_it() {
    assert_none("layer violations", layer_violations(&Crate::load(&src())));
}

#[test]
fn only_the_application_layer_knows_clap_and_the_terminal() {
    assert_none(
        "outside the app layer",
        terminal_violations(&Crate::load(&src())),
    );
}

#[test]
fn no_two_files_use_one_another() {
    assert_none("file cycles", Crate::load(&src()).cycles());
}

/// The library crates beside xvmm (Cargo keeps the direction between
/// crates; within each, files and the terminal are checked here). Adding
/// xvmm-results found a journal <-> mounts <-> namespace cycle and a
/// stderr write in its panic hook, both since removed.
fn sibling_libraries() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    ["xvmm-report", "xvmm-kernel", "xvmm-results", "xvmm-host"]
        .iter()
        .map(|c| root.join(c).join("src"))
        .collect()
}

#[test]
fn the_application_crate_has_no_two_files_using_one_another() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../xvmm-cli/src");
    let krate = Crate::load(&src);
    assert!(krate.files.len() > 10, "{}: too few files", src.display());
    assert_none("xvmm-cli file cycles", krate.cycles());
}

#[test]
fn the_library_crates_never_print_and_no_two_files_use_one_another() {
    for src in sibling_libraries() {
        let krate = Crate::load(&src);
        assert!(krate.files.len() > 3, "{}: too few files", src.display());
        let what = src.display().to_string();
        assert_none(
            &what,
            [terminal_violations(&krate), krate.cycles()].concat(),
        );
    }
}

#[test]
fn the_scanner_sees_grouped_nested_and_aliased_paths() {
    let t = scan::tokens(
        "use crate::{layout, Error, vcpu::{Vcpu, exits as e}};\nlet x = crate::boot::plan();",
    );
    let refs = scan::refs(&t);
    let paths: Vec<String> = refs.paths.iter().map(|p| p.segs.join("::")).collect();
    assert_eq!(
        paths,
        [
            "crate::boot::plan",
            "crate::layout",
            "crate::Error",
            "crate::vcpu::Vcpu",
            "crate::vcpu::exits"
        ]
    );
    assert_eq!(refs.uses[3].name.as_deref(), Some("e"));
    let hidden =
        "// crate::app::x\n/* crate::app */ fn f() { \"crate::app\"; 'c'; r#\"crate::app\"#; }";
    assert!(scan::refs(&scan::tokens(hidden)).paths.is_empty());
}

// Planted trees: a small clean library, then one escape route each; the
// checks must report every one of them.

/// A library that passes every check (it names each kind of allowed use).
const BASE: &[(&str, &str)] = &[
    (
        "lib.rs",
        "pub mod app;\npub mod error;\npub mod vcpu;\npub use error::{Error, Result};\n",
    ),
    (
        "app/mod.rs",
        "pub mod cli;\nuse crate::vcpu::run;\npub fn main() { println!(\"{}\", run()); }\n",
    ),
    (
        "app/cli.rs",
        "use clap::Parser;\n#[derive(Parser)]\npub struct Cli;\n",
    ),
    (
        "error.rs",
        "pub struct Error;\npub type Result<T> = std::result::Result<T, Error>;\n",
    ),
    (
        "vcpu/mod.rs",
        "pub mod exits;\npub mod watchdog;\nuse crate::Result;\n\
         pub fn run() -> u32 { exits::count() + watchdog::tick() }\n\
         #[cfg(test)]\nmod tests {\n    use crate::app;\n    fn f() { println!(); }\n}\n",
    ),
    (
        "vcpu/exits.rs",
        "use super::watchdog::tick;\npub fn count() -> u32 { tick() }\n",
    ),
    ("vcpu/watchdog.rs", "pub fn tick() -> u32 { 1 }\n"),
];

/// The violations in BASE with `changes` (whole files) written over it.
fn planted(tag: &str, changes: &[(&str, &str)]) -> Vec<String> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("layers-{tag}"));
    let _ = std::fs::remove_dir_all(&root);
    for (rel, text) in BASE.iter().chain(changes) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let found = violations(&root);
    std::fs::remove_dir_all(&root).unwrap();
    found
}

/// Plants each of `files` (one at a time, at `rel`) and asserts that a
/// violation mentioning `expect` is reported.
fn assert_each_reported(tag: &str, rel: &str, files: &[&str], expect: &str) {
    for (i, text) in files.iter().enumerate() {
        let found = planted(&format!("{tag}-{i}"), &[(rel, text)]);
        assert!(
            found.iter().any(|v| v.contains(expect)),
            "planted {rel}:\n{text}\nnot reported as {expect:?}; found: {found:#?}"
        );
    }
}

#[test]
fn planted_base_tree_is_clean() {
    assert_none("the planted base", planted("base", &[]));
}

#[test]
fn planted_super_paths_that_climb_out_of_the_module_are_reported() {
    let files = [
        "use super::super::app::cli::Cli;\npub fn count() -> u32 { 1 }\n",
        "use super::{super::app, watchdog};\npub fn count() -> u32 { 1 }\n",
        "pub fn count() -> u32 { super::super::app::main(); 1 }\n",
        "pub mod inner { pub fn f() { super::super::super::app::main() } }\npub fn count() -> u32 { 1 }\n",
    ];
    assert_each_reported("super", "vcpu/exits.rs", &files, "uses app");
}

#[test]
fn planted_aliases_of_the_crate_are_reported() {
    let files = [
        "use crate as c;\npub fn count() -> u32 { c::app::main(); 1 }\n",
        "use crate::{self as c};\npub fn count() -> u32 { c::app::main(); 1 }\n",
        "extern crate self as me;\npub fn count() -> u32 { me::app::main(); 1 }\n",
        "use super::super as up;\npub fn count() -> u32 { up::app::main(); 1 }\n",
        "use self::super::super::app as a;\npub fn count() -> u32 { 1 }\n",
    ];
    assert_each_reported("alias", "vcpu/exits.rs", &files, "uses app");
}

#[test]
fn planted_code_after_a_test_module_is_checked() {
    let module = "pub mod exits;\npub mod watchdog;\n\
                  #[cfg(test)]\nmod tests {\n    use crate::app;\n}\n";
    let late_use = format!("{module}pub fn run() -> u32 {{ crate::app::main(); 1 }}\n");
    let late_print = format!("{module}pub fn run() -> u32 {{ println!(); 1 }}\n");
    let after_test_fn =
        "#[cfg(test)]\nfn t() {}\npub mod exits;\npub mod watchdog;\nuse crate::app;\n";
    assert_each_reported(
        "late",
        "vcpu/mod.rs",
        &[&late_use, after_test_fn],
        "uses app",
    );
    assert_each_reported("late-print", "vcpu/mod.rs", &[&late_print], "uses println!");
}

#[test]
fn planted_modules_without_a_layer_are_reported() {
    let lib = "pub mod app;\npub mod error;\npub mod vcpu;\n";
    let hidden = [
        format!("{lib}mod sneaky;\n"),
        format!("{lib}pub(crate) mod sneaky;\n"),
        format!("{lib}#[cfg(feature = \"x\")]\nmod sneaky {{}}\n"),
    ];
    let found = |i: usize, text: &str| {
        planted(
            &format!("nolayer-{i}"),
            &[("lib.rs", text), ("sneaky.rs", "")],
        )
    };
    for (i, text) in hidden.iter().enumerate() {
        let found = found(i, text);
        assert!(
            found.iter().any(|v| v.contains("sneaky has no layer")),
            "{text}: {found:#?}"
        );
    }
    let inline = format!("{lib}pub mod error {{ pub fn f() {{ crate::app::main() }} }}\n");
    let found = planted("inline", &[("lib.rs", &inline)]);
    assert!(
        found.iter().any(|v| v.contains("inline in lib.rs")),
        "{found:#?}"
    );
}

#[test]
fn planted_terminal_output_below_the_app_layer_is_reported() {
    let cases = [
        ("std::io::stdout().flush().ok();", "io::stdout"),
        ("let _ = std::io::stderr();", "io::stderr"),
        ("use std::io; let _ = io::stdout();", "io::stdout"),
        ("use std::io::{stdout as out}; let _ = out();", "io::stdout"),
        ("use std::io::stdout; let _ = stdout();", "stdout("),
        ("print!(\"x\");", "print!"),
        ("println!(\"x\");", "println!"),
        ("eprintln!(\"x\");", "eprintln!"),
        ("std::eprint! { \"x\" };", "eprint!"),
        ("unsafe { libc::write(1, p, n) };", "write(1"),
        ("unsafe { libc::write(2, p, n) };", "write(2"),
        ("use libc::write; unsafe { write(1, p, n) };", "write(1"),
        (
            "unsafe { libc::write(libc::STDERR_FILENO, p, n) };",
            "STDERR_FILENO",
        ),
    ];
    for (i, (code, expect)) in cases.iter().enumerate() {
        let text = format!("pub fn count() -> u32 {{ {code} 1 }}\n");
        assert_each_reported(&format!("terminal-{i}"), "vcpu/exits.rs", &[&text], expect);
    }
    // A method named like them is not the terminal (`Command::stdout`, an
    // eventfd's `write(1)`).
    let methods = "pub fn count() -> u32 { cmd.stdout(x); fd.write(1); 1 }\n";
    assert_none("methods", planted("methods", &[("vcpu/exits.rs", methods)]));
}

#[test]
fn planted_file_cycles_are_reported() {
    let back = [
        "use super::exits::count;\npub fn tick() -> u32 { 1 }\n",
        "use super::{exits, exits::count};\npub fn tick() -> u32 { 1 }\n",
        "pub fn tick() -> u32 { super::exits::count() }\n",
        "pub fn tick() -> u32 { crate::vcpu::exits::count() }\n",
        "pub fn tick() -> u32 { self::super::exits::count() }\n",
        "use super::*;\npub fn tick() -> u32 { exits::count() }\n",
    ];
    let expect = "vcpu::exits <-> vcpu::watchdog";
    assert_each_reported("cycle", "vcpu/watchdog.rs", &back, expect);
    // Through a re-export in mod.rs: `super::count` is exits.rs's item.
    let module = "pub mod exits;\npub mod watchdog;\npub use exits::count;\n";
    let tick = "pub fn tick() -> u32 { super::count() }\n";
    let found = planted(
        "cycle-reexport",
        &[("vcpu/mod.rs", module), ("vcpu/watchdog.rs", tick)],
    );
    assert!(found.iter().any(|v| v.contains(expect)), "{found:#?}");
}

/// One crate of docs/DESIGN.md's "Crates" drawing: its row (0 at the top)
/// and the workspace crates its entry names after "uses".
#[derive(Debug)]
struct DrawnCrate {
    name: String,
    row: usize,
    uses: Vec<String>,
}

/// The "### Crates" drawing of `design`: entries start at a four-space
/// indent with the crate's name and its folder in parentheses, rows are
/// separated by a line holding "▼". Names after "uses" are kept when they
/// are one of `known`.
fn drawn_crates(design: &str, known: &[String]) -> Vec<DrawnCrate> {
    let section = design
        .split("### Crates")
        .nth(1)
        .and_then(|s| s.split("\n### ").next())
        .unwrap_or("");
    let mut out: Vec<(DrawnCrate, String)> = Vec::new();
    let mut row = 0;
    for line in section.lines() {
        if line.contains('▼') {
            row += 1;
            continue;
        }
        let Some(body) = line.strip_prefix("    ") else {
            continue;
        };
        let mut words = body.split_whitespace();
        let name = words.next().unwrap_or("");
        let then_folder = words.next().is_some_and(|w| w.starts_with('('));
        if !body.starts_with(' ') && then_folder {
            let entry = DrawnCrate {
                name: name.to_string(),
                row,
                uses: Vec::new(),
            };
            out.push((entry, String::new()));
        }
        if let Some((_, text)) = out.last_mut() {
            text.push_str(body);
            text.push(' ');
        }
    }
    out.into_iter()
        .map(|(mut c, text)| {
            let after = text.split_once("uses ").map_or("", |(_, a)| a);
            c.uses = after
                .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '-' || ch == '_'))
                .filter(|w| known.iter().any(|k| k == w))
                .map(str::to_string)
                .collect();
            c.uses.sort();
            c.uses.dedup();
            c
        })
        .collect()
}

/// Each workspace crate's workspace dependencies (every kind) and its
/// source folder, from `cargo metadata`.
fn workspace_crates() -> Vec<(String, Vec<String>, PathBuf)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: Vec<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    packages
        .iter()
        .map(|p| {
            let mut deps: Vec<String> = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.iter().any(|n| n == d))
                .map(str::to_string)
                .collect();
            deps.sort();
            deps.dedup();
            let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap_or(""));
            let src = manifest.with_file_name("src");
            (p["name"].as_str().unwrap_or("").to_string(), deps, src)
        })
        .collect()
}

/// What differs between the drawing and the crates: a crate not drawn, a
/// dependency not named (or named and absent), a use of a crate in the same
/// row or above.
fn crate_graph_violations(
    drawn: &[DrawnCrate],
    actual: &[(String, Vec<String>, PathBuf)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, deps, _) in actual {
        let Some(d) = drawn.iter().find(|d| &d.name == name) else {
            out.push(format!("{name} is not in DESIGN.md's crate drawing"));
            continue;
        };
        if &d.uses != deps {
            out.push(format!(
                "{name}: DESIGN.md says it uses {:?}, Cargo.toml has {deps:?}",
                d.uses
            ));
        }
        for dep in deps {
            let below = drawn.iter().find(|x| &x.name == dep).map(|x| x.row > d.row);
            if below != Some(true) {
                out.push(format!("{name} uses {dep}, which is not in a row below it"));
            }
        }
    }
    out
}

fn rust_lines(dir: &Path) -> usize {
    let mut files = Vec::new();
    source_tree::tree::rust_files(dir, &mut files);
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).map_or(0, |t| t.lines().count()))
        .sum()
}

fn design_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/DESIGN.md");
    std::fs::read_to_string(&path).expect("docs/DESIGN.md")
}

#[test]
fn the_crate_graph_is_the_one_drawn_here() {
    let actual = workspace_crates();
    let names: Vec<String> = actual.iter().map(|a| a.0.clone()).collect();
    assert!(names.len() >= 11, "{names:?}");
    let drawn = drawn_crates(&design_text(), &names);
    assert_none("crate graph", crate_graph_violations(&drawn, &actual));
    // One home per concern, none holding everything: no crate over a
    // quarter of the workspace's code (src/ of each crate).
    let sizes: Vec<(String, usize)> = actual
        .iter()
        .map(|(n, _, src)| (n.clone(), rust_lines(src)))
        .collect();
    let total: usize = sizes.iter().map(|s| s.1).sum();
    for (name, lines) in &sizes {
        println!(
            "{name}: {lines} lines ({:.1} %)",
            100.0 * *lines as f64 / total as f64
        );
        assert!(
            *lines * 4 <= total,
            "{name} holds {lines} of the workspace's {total} lines: more than a quarter"
        );
    }
}

/// The check above on drawings that are wrong: an edge Cargo has and the
/// drawing lacks, one the drawing names and Cargo lacks, a crate left out,
/// and a use of a crate drawn in a row above.
#[test]
fn planted_crate_drawings_that_differ_from_cargo_are_reported() {
    let actual = workspace_crates();
    let names: Vec<String> = actual.iter().map(|a| a.0.clone()).collect();
    let design = design_text();
    let check = |text: &str| crate_graph_violations(&drawn_crates(text, &names), &actual);
    assert!(check(&design).is_empty());
    let missing_edge = design.replace(
        "host_trace, host_fault; uses xvmm-results, xvmm-host",
        "host_trace, host_fault; uses xvmm-results",
    );
    assert_ne!(missing_edge, design, "the planted text is in DESIGN.md");
    assert!(check(&missing_edge)
        .iter()
        .any(|v| v.starts_with("xvmm: DESIGN.md says")));
    let extra_edge = design.replace(
        "host_trace, host_fault; uses xvmm-results, xvmm-host",
        "host_trace, host_fault; uses xvmm-results, xvmm-host, xvmm-kernel",
    );
    assert!(check(&extra_edge)
        .iter()
        .any(|v| v.starts_with("xvmm: DESIGN.md says")));
    let left_out = design.replace(
        "    xvmm-guest    (guest/xvmm-guest/)",
        "    (guest/xvmm-guest/)",
    );
    assert!(check(&left_out)
        .iter()
        .any(|v| v == "xvmm-guest is not in DESIGN.md's crate drawing"));
    // xvmm-host drawn above xvmm-results, which uses it.
    let upward = design.replacen("          ▼\n    xvmm-host", "    xvmm-host", 1);
    assert_ne!(upward, design);
    assert!(check(&upward)
        .iter()
        .any(|v| v == "xvmm-results uses xvmm-host, which is not in a row below it"));
}
