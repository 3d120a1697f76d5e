//! README lists missed mutants that are equivalent (no test can tell them
//! from the original). Each must still be a mutant cargo-mutants generates
//! today: a listed mutant whose code changed or went away is a stale excuse,
//! and the figures beside it no longer describe the code.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use xvmm_benches::mutants::{listed_keys, parse_equivalents, EQUIVALENTS_HEADING};

#[test]
fn every_listed_equivalent_mutant_still_exists() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    assert!(
        readme.contains(EQUIVALENTS_HEADING),
        "README has no {EQUIVALENTS_HEADING:?} section"
    );
    let equivalents = parse_equivalents(&readme);
    let files: BTreeSet<&str> = equivalents
        .iter()
        .map(|e| e.key.split_once(": ").map_or(e.key.as_str(), |(f, _)| f))
        .collect();
    let mut generated = BTreeSet::new();
    for f in files {
        let out = Command::new("cargo")
            .current_dir(&repo)
            .args(["mutants", "--list", "--file", f])
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "cargo mutants --list failed (cargo-mutants: harness/setup.sh installs it): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        generated.extend(listed_keys(&String::from_utf8_lossy(&out.stdout)));
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
