//! Bounds on what a result file may hold, applied while it is parsed.
//!
//! Result files and a guest's results are untrusted, and every row a
//! report names is copied again by the comparison and the tables: a file
//! of 80,000 crossings made `xvmm compare` allocate 290 MB at once, a 4 MB
//! crossing name was copied into every row. Real reports hold a few dozen
//! named rows with names of a few words, so the bounds sit far above them
//! and far below trouble. A list is refused at its element past the bound,
//! before the rest of it is read.

use serde::de::{Deserialize, Deserializer, Error, SeqAccess, Visitor};
use std::marker::PhantomData;

/// Most crossings, VM exits or probes one report may hold (xperf writes 3
/// crossings, the microguest about a dozen, `xperf probes` a few dozen).
pub const MAX_ROWS: usize = 1024;
/// Longest name of a crossing, exit or probe mode, in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// The elements of a list, refused past [`MAX_ROWS`] (`what` names them).
fn bounded_list<'de, D, T>(d: D, what: &'static str) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Bounded<T> {
        what: &'static str,
        element: PhantomData<T>,
    }
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Bounded<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_ROWS} {}", self.what)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element()? {
                if items.len() == MAX_ROWS {
                    return Err(A::Error::custom(format!(
                        "more than {MAX_ROWS} {} in one report",
                        self.what
                    )));
                }
                items.push(item);
            }
            Ok(items)
        }
    }
    d.deserialize_seq(Bounded {
        what,
        element: PhantomData,
    })
}

/// A name, refused past [`MAX_NAME_BYTES`].
fn bounded_name<'de, D: Deserializer<'de>>(d: D, what: &str) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    if name.len() > MAX_NAME_BYTES {
        return Err(D::Error::custom(format!(
            "a {what} of {} bytes, more than the {MAX_NAME_BYTES} accepted",
            name.len()
        )));
    }
    Ok(name)
}

pub(crate) fn crossings<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    bounded_list(d, "crossings")
}

pub(crate) fn exits<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    bounded_list(d, "VM exits")
}

pub(crate) fn probes<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    bounded_list(d, "probes")
}

pub(crate) fn crossing_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    bounded_name(d, "crossing name")
}

pub(crate) fn exit_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    bounded_name(d, "VM exit name")
}

pub(crate) fn probe_mode<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    bounded_name(d, "probe mode")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{fixtures, Environment, Report};

    fn with_rows(rows: usize, name: impl Fn(usize) -> String) -> Report {
        let mut r = fixtures::report(Environment::LinuxVm, 1);
        let template = r.crossings[0].clone();
        r.crossings = (0..rows)
            .map(|i| crate::Crossing {
                name: name(i),
                ..template.clone()
            })
            .collect();
        r
    }

    fn refusal(r: &Report) -> String {
        let err = Report::from_json(&r.to_json_pretty())
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\n'), "{err}");
        err
    }

    /// Issue 20, item 8: 80,000 crossings made `xvmm compare` allocate
    /// 290 MB; a 4 MB name was copied into every row of every table.
    #[test]
    fn rows_and_names_past_the_bounds_are_refused_while_parsing() {
        let at = with_rows(MAX_ROWS, |i| format!("c{i:0>255}"));
        assert_eq!(at.crossings[0].name.len(), MAX_NAME_BYTES);
        assert_eq!(Report::from_json(&at.to_json_pretty()).unwrap(), at);

        let err = refusal(&with_rows(MAX_ROWS + 1, |i| format!("c{i}")));
        assert!(
            err.contains("more than 1024 crossings in one report"),
            "{err}"
        );
        let err = refusal(&with_rows(1, |_| "x".repeat(4 << 20)));
        assert!(
            err.contains("a crossing name of 4194304 bytes, more than the 256 accepted"),
            "{err}"
        );

        let mut r = fixtures::report(Environment::LinuxVm, 1);
        let exit = crate::ExitTiming {
            name: "cpuid".into(),
            ..serde_json::from_str(&exit_json()).unwrap()
        };
        r.exits = vec![exit.clone(); MAX_ROWS + 1];
        assert!(refusal(&r).contains("more than 1024 VM exits"));
        r.exits = vec![crate::ExitTiming {
            name: "e".repeat(MAX_NAME_BYTES + 1),
            ..exit
        }];
        assert!(refusal(&r).contains("a VM exit name of 257 bytes"));
    }

    fn exit_json() -> String {
        r#"{"name": "x", "status": {"kind": "measured"}, "samples_requested": 1,
            "samples_valid": 1, "round_trip": null}"#
            .into()
    }
}
