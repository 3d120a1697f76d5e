//! `docs/mutants.md` holds the mutation-testing figures of the measurement
//! core and the missed mutants it lists as equivalent. Neither may go stale:
//! each row's mutant count must be what `cargo mutants --list` generates for
//! its file today (a changed file changes its mutants, and the row then
//! describes code that is gone), every core file must have a row, and every
//! listed equivalent must still be a mutant cargo-mutants generates.
//! `cargo mutants --list` only parses the code: no build, a second a file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use xvmm_benches::mutants::{
    core_files, listed_keys, parse_equivalents, parse_table, DOC, EQUIVALENTS_HEADING,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `cargo mutants --list --file F`'s lines.
fn list(repo: &Path, file: &str) -> String {
    let out = Command::new("cargo")
        .current_dir(repo)
        .args(["mutants", "--list", "--file", file])
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo mutants --list failed (cargo-mutants: harness/setup.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_row_counts_what_cargo_mutants_generates_today() {
    let repo = repo();
    let doc = std::fs::read_to_string(repo.join(DOC)).unwrap();
    let rows = parse_table(&doc).unwrap_or_else(|e| panic!("{DOC}: {e}"));
    let mut stale = Vec::new();
    for row in &rows {
        let generated = list(&repo, &row.file)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count();
        if generated != row.listed {
            stale.push(format!(
                "{}: the table says {} mutants, cargo mutants --list gives {generated}",
                row.file, row.listed
            ));
        }
    }
    assert!(stale.is_empty(), "{DOC} is stale:\n{}", stale.join("\n"));
    let covered: BTreeSet<&str> = rows.iter().map(|r| r.file.as_str()).collect();
    let missing: Vec<String> = core_files(&repo)
        .unwrap()
        .into_iter()
        .map(|(f, _)| f)
        .filter(|f| !covered.contains(f.as_str()))
        .collect();
    assert!(missing.is_empty(), "core files without a row: {missing:?}");
}

#[test]
fn every_listed_equivalent_mutant_still_exists() {
    let repo = repo();
    let doc = std::fs::read_to_string(repo.join(DOC)).unwrap();
    assert!(
        doc.contains(EQUIVALENTS_HEADING),
        "{DOC} has no {EQUIVALENTS_HEADING:?} section"
    );
    let equivalents = parse_equivalents(&doc);
    let files: BTreeSet<&str> = equivalents
        .iter()
        .map(|e| e.key.split_once(": ").map_or(e.key.as_str(), |(f, _)| f))
        .collect();
    let mut generated = BTreeSet::new();
    for f in files {
        generated.extend(listed_keys(&list(&repo, f)));
    }
    let stale: Vec<&str> = equivalents
        .iter()
        .filter(|e| !generated.contains(&e.key))
        .map(|e| e.key.as_str())
        .collect();
    assert!(
        stale.is_empty(),
        "listed as equivalent but no longer generated: {stale:#?}"
    );
    for e in &equivalents {
        assert!(!e.reason.is_empty(), "{}: no reason given", e.key);
    }
}
