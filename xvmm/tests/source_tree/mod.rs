//! A crate's source as modules, files and the paths they name: the scanner
//! behind the layer test (`layers.rs`) and xperf's file-cycle test.

pub mod scan;
pub mod tree;
