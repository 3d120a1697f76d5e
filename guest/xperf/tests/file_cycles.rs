//! No two files of xperf use one another (README "Architecture": no arrow
//! runs both ways), with the scanner of xvmm's layer test.

// Shared with xvmm/tests/layers.rs, which uses the parts this test does not.
#[allow(dead_code)]
#[path = "../../../xvmm/tests/source_tree/mod.rs"]
mod source_tree;

use source_tree::tree::Crate;
use std::path::Path;

#[test]
fn no_two_files_use_one_another() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cycles = Crate::load(&src).cycles();
    assert!(cycles.is_empty(), "file cycles:\n{}", cycles.join("\n"));
}
