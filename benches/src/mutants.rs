//! Mutation testing of the measurement core with cargo-mutants: which
//! files, how the outcomes are read back and tallied, and which missed
//! mutants README lists as equivalent (a change no test can see because the
//! behaviour does not change). The bench (`src/bin/mutants.rs`) runs it;
//! `tests/mutants_equivalents.rs` checks that every listed equivalent still
//! exists in the code.

use serde_json::Value;
use std::collections::BTreeMap;

/// One file of the measurement core and the package whose tests judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreFile {
    pub path: &'static str,
    pub package: &'static str,
    /// Every viable mutant must be caught or listed as equivalent (100 %);
    /// the other core files must reach [`CORE_TARGET`].
    pub strict: bool,
}

/// The fraction of viable mutants the core's tests must catch.
pub const CORE_TARGET: f64 = 0.90;

const fn core(path: &'static str, package: &'static str, strict: bool) -> CoreFile {
    CoreFile {
        path,
        package,
        strict,
    }
}

/// The measurement core: what turns stamps and trace events into figures.
pub const CORE: &[CoreFile] = &[
    core("xvmm-results/src/stats/mod.rs", "xvmm-results", false),
    core("xvmm-results/src/stats/quantum.rs", "xvmm-results", false),
    core("xvmm-results/src/stats/correction.rs", "xvmm-results", true),
    core("xvmm-results/src/stats/timeline.rs", "xvmm-results", true),
    core(
        "xvmm-results/src/stats/attribution.rs",
        "xvmm-results",
        true,
    ),
    core("xvmm-results/src/stats/compare.rs", "xvmm-results", true),
    core(
        "xvmm-results/src/host/tracefs_raw.rs",
        "xvmm-results",
        false,
    ),
    core(
        "xvmm-results/src/schema/characterize.rs",
        "xvmm-results",
        false,
    ),
    core("xvmm/src/linux/join.rs", "xvmm", false),
    core("xvmm/src/host_trace/*.rs", "xvmm", false),
    core("xvmm/src/microguest/verify.rs", "xvmm", false),
    core("guest/xperf/src/characterize/*.rs", "xperf", false),
];

/// What cargo-mutants concluded about one mutant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Caught,
    Missed,
    Unviable,
    Timeout,
}

/// One mutant: its file, cargo-mutants' description without the line and
/// column (they move with every edit), the position where it was made
/// (`line:col`, to tell one run's mutant from the same one run again), and
/// the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutant {
    pub file: String,
    pub description: String,
    pub position: String,
    pub outcome: Outcome,
}

impl Mutant {
    /// `file: description`, the form README's list of equivalents uses.
    pub fn key(&self) -> String {
        format!("{}: {}", self.file, self.description)
    }
}

/// Reads cargo-mutants' `mutants.out/outcomes.json`. The baseline and any
/// scenario that is not a mutant are skipped.
pub fn parse_outcomes(json: &str) -> Result<Vec<Mutant>, String> {
    let root: Value = serde_json::from_str(json).map_err(|e| format!("outcomes.json: {e}"))?;
    let outcomes = root
        .get("outcomes")
        .and_then(Value::as_array)
        .ok_or("outcomes.json: no \"outcomes\" list")?;
    let mut mutants = Vec::new();
    for o in outcomes {
        let Some(m) = o.get("scenario").and_then(|s| s.get("Mutant")) else {
            continue;
        };
        let summary = o.get("summary").and_then(Value::as_str).unwrap_or("");
        let outcome = match summary {
            "CaughtMutant" => Outcome::Caught,
            "MissedMutant" => Outcome::Missed,
            "Unviable" => Outcome::Unviable,
            "Timeout" => Outcome::Timeout,
            other => return Err(format!("outcomes.json: unknown summary {other:?}")),
        };
        let file = m
            .get("file")
            .and_then(Value::as_str)
            .ok_or("outcomes.json: a mutant without a file")?;
        let (position, description) = describe(m)?;
        mutants.push(Mutant {
            file: file.to_string(),
            description,
            position,
            outcome,
        });
    }
    Ok(mutants)
}

/// Runs read in order, a later run's outcome replacing an earlier one's
/// for the same mutant (file, position, description): a run of only the
/// mutants missed before, after new tests, then counts for them. Only
/// sound where the code above the tests did not move between the runs.
pub fn merge(runs: Vec<Vec<Mutant>>) -> Vec<Mutant> {
    let mut at: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    let mut out: Vec<Mutant> = Vec::new();
    for m in runs.into_iter().flatten() {
        let key = (m.file.clone(), m.position.clone(), m.description.clone());
        match at.get(&key) {
            Some(&i) => out[i] = m,
            None => {
                at.insert(key, out.len());
                out.push(m);
            }
        }
    }
    out
}

/// cargo-mutants' own wording: its `name` (`file:line:col: description`,
/// as `--list` prints it) split into the position (`line:col`) and the
/// description.
fn describe(m: &Value) -> Result<(String, String), String> {
    let name = m
        .get("name")
        .and_then(Value::as_str)
        .ok_or("outcomes.json: a mutant without a name")?;
    let bad = || format!("outcomes.json: a mutant name without a position: {name:?}");
    let description = listed_keys(name)
        .pop()
        .and_then(|k| k.split_once(": ").map(|(_, d)| d.to_string()))
        .ok_or_else(bad)?;
    let position = name
        .split_once(": ")
        .and_then(|(place, _)| place.split_once(':'))
        .map(|(_, pos)| pos.to_string())
        .ok_or_else(bad)?;
    Ok((position, description))
}

/// Caught, missed, unviable and timed-out mutants of one file.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub caught: usize,
    pub missed: usize,
    pub unviable: usize,
    pub timeout: usize,
    /// Missed mutants README lists as equivalent.
    pub equivalent: usize,
}

impl Tally {
    /// Mutants that built: a timeout counts as caught (the test did not
    /// pass), as cargo-mutants itself counts it.
    pub fn viable(&self) -> usize {
        self.caught + self.missed + self.timeout
    }

    /// Caught (and timed-out) among the viable ones that are not listed as
    /// equivalent; None when there are none.
    pub fn score(&self) -> Option<f64> {
        let judged = self.viable() - self.equivalent;
        (judged > 0).then(|| (self.caught + self.timeout) as f64 / judged as f64)
    }
}

/// Per-file tallies; `equivalents` are `file: description` keys.
pub fn tally(mutants: &[Mutant], equivalents: &[Equivalent]) -> BTreeMap<String, Tally> {
    let mut by_file: BTreeMap<String, Tally> = BTreeMap::new();
    for m in mutants {
        let t = by_file.entry(m.file.clone()).or_default();
        match m.outcome {
            Outcome::Caught => t.caught += 1,
            Outcome::Unviable => t.unviable += 1,
            Outcome::Timeout => t.timeout += 1,
            Outcome::Missed => {
                t.missed += 1;
                if equivalents.iter().any(|e| e.key == m.key()) {
                    t.equivalent += 1;
                }
            }
        }
    }
    by_file
}

/// Missed mutants that README does not explain.
pub fn unexplained<'a>(mutants: &'a [Mutant], equivalents: &[Equivalent]) -> Vec<&'a Mutant> {
    mutants
        .iter()
        .filter(|m| m.outcome == Outcome::Missed)
        .filter(|m| !equivalents.iter().any(|e| e.key == m.key()))
        .collect()
}

/// The target a file is held to.
pub fn target_for(file: &str) -> f64 {
    let strict = CORE.iter().any(|c| c.strict && glob_matches(c.path, file));
    if strict {
        1.0
    } else {
        CORE_TARGET
    }
}

/// `dir/*.rs` matches files directly in `dir`; anything else must be equal.
fn glob_matches(pattern: &str, file: &str) -> bool {
    match pattern.strip_suffix("*.rs") {
        Some(dir) => file
            .strip_prefix(dir)
            .is_some_and(|rest| rest.ends_with(".rs") && !rest.contains('/')),
        None => pattern == file,
    }
}

/// Files whose score is below their target, with the score.
pub fn below_target(tallies: &BTreeMap<String, Tally>) -> Vec<(String, f64, f64)> {
    tallies
        .iter()
        .filter_map(|(f, t)| {
            let score = t.score()?;
            let target = target_for(f);
            (score + 1e-12 < target).then(|| (f.clone(), score, target))
        })
        .collect()
}

/// A missed mutant README explains: `file: description` and why no test can
/// tell it from the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Equivalent {
    pub key: String,
    pub reason: String,
}

/// The heading in README under which equivalent mutants are listed, one per
/// line as ``- `file: description`: reason``.
pub const EQUIVALENTS_HEADING: &str = "#### Equivalent mutants";

/// Reads the list under [`EQUIVALENTS_HEADING`] up to the next heading.
pub fn parse_equivalents(readme: &str) -> Vec<Equivalent> {
    let Some(start) = readme.find(EQUIVALENTS_HEADING) else {
        return Vec::new();
    };
    readme[start + EQUIVALENTS_HEADING.len()..]
        .lines()
        .take_while(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("- `")?;
            let (key, after) = rest.split_once('`')?;
            let reason = after.trim_start_matches(':').trim();
            Some(Equivalent {
                key: key.to_string(),
                reason: reason.to_string(),
            })
        })
        .collect()
}

/// The `file: description` keys of `cargo mutants --list` output
/// (`file:line:col: description` per line).
pub fn listed_keys(list: &str) -> Vec<String> {
    list.lines()
        .filter_map(|l| {
            let (file, rest) = l.split_once(':')?;
            let (_line, rest) = rest.split_once(':')?;
            let (_col, description) = rest.split_once(": ")?;
            Some(format!("{file}: {description}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutant(file: &str, d: &str, outcome: Outcome) -> Mutant {
        Mutant {
            file: file.into(),
            description: d.into(),
            position: "1:1".into(),
            outcome,
        }
    }

    const T: &str = "xvmm-results/src/stats/timeline.rs";
    const S: &str = "xvmm-results/src/stats/mod.rs";

    #[test]
    fn a_strict_file_with_one_unexplained_miss_is_below_target() {
        let ms = vec![
            mutant(T, "replace + with -", Outcome::Caught),
            mutant(T, "replace < with <=", Outcome::Missed),
        ];
        let below = below_target(&tally(&ms, &[]));
        assert_eq!(below, vec![(T.to_string(), 0.5, 1.0)]);
        let eq = vec![Equivalent {
            key: format!("{T}: replace < with <="),
            reason: "ties cannot occur".into(),
        }];
        assert!(below_target(&tally(&ms, &eq)).is_empty());
        assert!(unexplained(&ms, &eq).is_empty());
        assert_eq!(unexplained(&ms, &[]).len(), 1);
    }

    #[test]
    fn a_core_file_passes_at_ninety_percent_and_not_below() {
        let mut ms: Vec<Mutant> = (0..9)
            .map(|i| mutant(S, &format!("m{i}"), Outcome::Caught))
            .collect();
        ms.push(mutant(S, "m9", Outcome::Missed));
        ms.push(mutant(S, "u", Outcome::Unviable));
        let t = tally(&ms, &[]);
        assert_eq!(t[S].viable(), 10);
        assert!(below_target(&t).is_empty(), "9 of 10 meets 90 %");
        ms.push(mutant(S, "m10", Outcome::Missed));
        assert_eq!(below_target(&tally(&ms, &[])).len(), 1, "9 of 11 does not");
    }

    #[test]
    fn timeouts_count_as_caught_and_unviable_ones_not_at_all() {
        let ms = vec![
            mutant(S, "a", Outcome::Timeout),
            mutant(S, "b", Outcome::Unviable),
            mutant(S, "c", Outcome::Missed),
        ];
        let t = tally(&ms, &[]);
        assert_eq!(t[S].score(), Some(0.5));
    }

    #[test]
    fn globbed_core_files_take_their_pattern_s_target() {
        assert_eq!(target_for("xvmm-results/src/stats/compare.rs"), 1.0);
        assert_eq!(
            target_for("guest/xperf/src/characterize/skew.rs"),
            CORE_TARGET
        );
        assert!(!glob_matches(
            "guest/xperf/src/characterize/*.rs",
            "guest/xperf/src/characterize/a/b.rs"
        ));
    }

    #[test]
    fn outcomes_json_is_read_as_cargo_mutants_writes_it() {
        let json = r#"{"outcomes":[
          {"scenario":"Baseline","summary":"Success"},
          {"scenario":{"Mutant":{"package":"xvmm-results","file":"xvmm-results/src/stats/mod.rs",
            "name":"xvmm-results/src/stats/mod.rs:61:5: replace percentile -> u64 with 0",
            "replacement":"0","genre":"FnValue"}},"summary":"CaughtMutant"},
          {"scenario":{"Mutant":{"package":"xvmm-results","file":"xvmm-results/src/stats/mod.rs",
            "name":"xvmm-results/src/stats/mod.rs:40:12: replace > with >= in Stats::from_samples",
            "replacement":">=","genre":"BinaryOperator"}},"summary":"MissedMutant"}
        ]}"#;
        let ms = parse_outcomes(json).unwrap();
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].description, "replace percentile -> u64 with 0");
        assert_eq!(
            (ms[0].position.as_str(), ms[1].position.as_str()),
            ("61:5", "40:12")
        );
        assert_eq!(ms[0].outcome, Outcome::Caught);
        assert_eq!(
            ms[1].key(),
            "xvmm-results/src/stats/mod.rs: replace > with >= in Stats::from_samples"
        );
        assert!(parse_outcomes(r#"{"outcomes":[{"scenario":{"Mutant":{"file":"x","name":"x:1:1: y"}},"summary":"Weird"}]}"#).is_err());
    }

    /// A later run's outcome replaces an earlier one's for the same mutant
    /// at the same place; the same description elsewhere is another mutant.
    #[test]
    fn a_rerun_replaces_the_outcome_of_the_same_mutant_only() {
        let at = |pos: &str, outcome| Mutant {
            position: pos.into(),
            ..mutant(T, "replace > with >= in f", outcome)
        };
        let first = vec![at("3:1", Outcome::Missed), at("9:1", Outcome::Missed)];
        let rerun = vec![at("3:1", Outcome::Caught)];
        let merged = merge(vec![first, rerun]);
        assert_eq!(merged.len(), 2);
        assert_eq!(
            merged.iter().map(|m| m.outcome).collect::<Vec<_>>(),
            [Outcome::Caught, Outcome::Missed]
        );
    }

    #[test]
    fn equivalents_are_read_from_their_readme_section_only() {
        let readme = "## X\n- `a.rs: not this`: no\n#### Equivalent mutants\n\nText.\n\n- `a.rs: replace < with <= in f`: ties never reach it\n- `b.rs: replace f -> u64 with 1`: f is 1 on every input\n### Next\n- `c.rs: nor this`: no\n";
        let eq = parse_equivalents(readme);
        assert_eq!(eq.len(), 2);
        assert_eq!(eq[0].key, "a.rs: replace < with <= in f");
        assert_eq!(eq[1].reason, "f is 1 on every input");
    }

    #[test]
    fn list_output_becomes_keys_without_line_and_column() {
        let list = "xvmm-results/src/stats/quantum.rs:39:68: replace > with == in clusters\n";
        assert_eq!(
            listed_keys(list),
            vec!["xvmm-results/src/stats/quantum.rs: replace > with == in clusters"]
        );
    }
}
