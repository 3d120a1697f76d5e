//! Mutation testing of the measurement core with cargo-mutants: which
//! files, how the outcomes are read back and tallied, the figures' table in
//! `docs/mutants.md`, and which missed mutants it lists as equivalent (a
//! change no test can see because the behaviour does not change). The bench
//! (`src/bin/mutants.rs`) runs it; `tests/mutants_doc.rs` checks that every
//! row counts what cargo-mutants generates today and every listed
//! equivalent still exists in the code.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// One file (or `dir/*.rs`, every file directly in `dir`) of the
/// measurement core and the package whose tests judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreFile {
    pub path: &'static str,
    pub package: &'static str,
}

/// Every viable mutant of the core must be caught or listed as equivalent.
pub const TARGET: f64 = 1.0;

const fn core(path: &'static str, package: &'static str) -> CoreFile {
    CoreFile { path, package }
}

/// The measurement core: what turns stamps and trace events into figures,
/// and what parses what a guest or the kernel hands over.
pub const CORE: &[CoreFile] = &[
    core("xvmm-results/src/stats/*.rs", "xvmm-results"),
    core("xvmm-host/src/tracefs_raw.rs", "xvmm-host"),
    core("xvmm-host/src/tracefs_pipes.rs", "xvmm-host"),
    core("xvmm-results/src/schema/characterize.rs", "xvmm-results"),
    core("xvmm/src/linux/join.rs", "xvmm"),
    core("xvmm/src/host_trace/*.rs", "xvmm"),
    core("xvmm/src/microguest/verify.rs", "xvmm"),
    core("guest/xperf/src/measure.rs", "xperf"),
    core("guest/xperf/src/probes/parse.rs", "xperf"),
    core("guest/xperf/src/workload/decode.rs", "xperf"),
    core("guest/xperf/src/tracefs_text.rs", "xperf"),
    core("guest/xperf/src/characterize/*.rs", "xperf"),
    core("guest/xperf/src/interrupt_path/*.rs", "xperf"),
    core("xvmm-host/src/cpu_list.rs", "xvmm-host"),
    core("xvmm-results/src/schema/ipi.rs", "xvmm-results"),
    core("xvmm/src/microguest/stamps.rs", "xvmm"),
];

/// Where the method, the figures and the equivalent mutants are written.
pub const DOC: &str = "docs/mutants.md";

/// Every core file under `repo`, globs expanded, sorted, with its package.
pub fn core_files(repo: &Path) -> Result<Vec<(String, &'static str)>, String> {
    let mut files = Vec::new();
    for c in CORE {
        match c.path.strip_suffix("*.rs") {
            Some(dir) => {
                let entries =
                    std::fs::read_dir(repo.join(dir)).map_err(|e| format!("{dir}: {e}"))?;
                let mut names: Vec<String> = entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".rs"))
                    .collect();
                names.sort();
                files.extend(names.into_iter().map(|n| (format!("{dir}{n}"), c.package)));
            }
            None => files.push((c.path.to_string(), c.package)),
        }
    }
    Ok(files)
}

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

    /// `file:line:col: description`, as `cargo mutants --list` prints it.
    pub fn name(&self) -> String {
        format!("{}:{}: {}", self.file, self.position, self.description)
    }
}

/// The runs' outcomes of mutants `cargo mutants --list` still generates
/// (`listed`), and how many were left out: a file changed since its run
/// moves or drops mutants, and an outcome of code that is gone must not
/// count for today's.
pub fn generated_today(
    runs: Vec<Vec<Mutant>>,
    listed: &std::collections::BTreeSet<String>,
) -> (Vec<Vec<Mutant>>, usize) {
    let mut stale = 0;
    let runs = runs
        .into_iter()
        .map(|run| {
            run.into_iter()
                .filter(|m| {
                    let today = listed.contains(&m.name());
                    stale += usize::from(!today);
                    today
                })
                .collect()
        })
        .collect();
    (runs, stale)
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

/// Per file, the mutants an earlier run missed and a later one caught (or
/// timed out): misses that new tests then killed.
pub fn caught_on_rerun(runs: &[Vec<Mutant>]) -> BTreeMap<String, usize> {
    let mut first_missed: BTreeMap<(String, String, String), bool> = BTreeMap::new();
    let mut last: BTreeMap<(String, String, String), Outcome> = BTreeMap::new();
    for m in runs.iter().flatten() {
        let key = (m.file.clone(), m.position.clone(), m.description.clone());
        *first_missed.entry(key.clone()).or_default() |= m.outcome == Outcome::Missed;
        last.insert(key, m.outcome);
    }
    let mut out = BTreeMap::new();
    for (key, outcome) in last {
        if first_missed[&key] && matches!(outcome, Outcome::Caught | Outcome::Timeout) {
            *out.entry(key.0).or_default() += 1;
        }
    }
    out
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
    /// Missed mutants [`DOC`] lists as equivalent.
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

/// Missed mutants that [`DOC`] does not explain.
pub fn unexplained<'a>(mutants: &'a [Mutant], equivalents: &[Equivalent]) -> Vec<&'a Mutant> {
    mutants
        .iter()
        .filter(|m| m.outcome == Outcome::Missed)
        .filter(|m| !equivalents.iter().any(|e| e.key == m.key()))
        .collect()
}

/// Files whose score is below their target, with the score.
pub fn below_target(tallies: &BTreeMap<String, Tally>) -> Vec<(String, f64, f64)> {
    tallies
        .iter()
        .filter_map(|(f, t)| {
            let score = t.score()?;
            (score + 1e-12 < TARGET).then(|| (f.clone(), score, TARGET))
        })
        .collect()
}

/// A missed mutant [`DOC`] explains: `file: description` and why no test can
/// tell it from the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Equivalent {
    pub key: String,
    pub reason: String,
}

/// The heading in [`DOC`] under which equivalent mutants are listed, one per
/// line as ``- `file: description`: reason``.
pub const EQUIVALENTS_HEADING: &str = "## Equivalent mutants";

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

/// One row of the figures' table in [`DOC`]: what `cargo mutants --list`
/// generates for the file today, and what the runs concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub file: String,
    /// `cargo mutants --list --file F`'s count when the row was written.
    pub listed: usize,
    /// Mutants with an outcome.
    pub run: usize,
    pub unviable: usize,
    /// Caught or timed out, in the end.
    pub caught: usize,
    /// Of those, missed at first and caught after new tests.
    pub caught_on_rerun: usize,
    /// Missed and listed as equivalent.
    pub equivalent: usize,
    /// Missed and not explained.
    pub missed: usize,
}

/// The table's header line.
pub const TABLE_HEADER: &str =
    "| file | mutants | run | unviable | caught | of which on rerun | equivalent | missed | score |";

impl Row {
    /// The row for `file` from its tally.
    pub fn new(file: &str, listed: usize, t: &Tally, caught_on_rerun: usize) -> Row {
        Row {
            file: file.to_string(),
            listed,
            run: t.viable() + t.unviable,
            unviable: t.unviable,
            caught: t.caught + t.timeout,
            caught_on_rerun,
            equivalent: t.equivalent,
            missed: t.missed - t.equivalent,
        }
    }

    /// Caught among the viable mutants that are not equivalent.
    pub fn score(&self) -> Option<f64> {
        let judged = self.caught + self.missed;
        (judged > 0).then(|| self.caught as f64 / judged as f64)
    }

    fn score_text(&self) -> String {
        self.score()
            .map_or_else(|| "-".into(), |s| format!("{:.1} %", s * 100.0))
    }

    pub fn markdown(&self) -> String {
        format!(
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.file,
            self.listed,
            self.run,
            self.unviable,
            self.caught,
            self.caught_on_rerun,
            self.equivalent,
            self.missed,
            self.score_text()
        )
    }

    /// A table line back into a row; the score column must be the one the
    /// counts give, and the counts must add up.
    pub fn parse(line: &str) -> Result<Row, String> {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        let [file, rest @ ..] = cells.as_slice() else {
            return Err(format!("not a row: {line:?}"));
        };
        if rest.len() != 8 {
            return Err(format!("{line:?}: 9 columns expected"));
        }
        let n = |i: usize| {
            rest[i]
                .parse::<usize>()
                .map_err(|_| format!("{line:?}: column {} is not a count", i + 2))
        };
        let row = Row {
            file: file.trim_matches('`').to_string(),
            listed: n(0)?,
            run: n(1)?,
            unviable: n(2)?,
            caught: n(3)?,
            caught_on_rerun: n(4)?,
            equivalent: n(5)?,
            missed: n(6)?,
        };
        if row.unviable + row.caught + row.equivalent + row.missed != row.run {
            return Err(format!("{line:?}: the outcomes do not add up to the run"));
        }
        if row.run > row.listed || row.caught_on_rerun > row.caught {
            return Err(format!(
                "{line:?}: more run than generated, or reruns than caught"
            ));
        }
        if rest[7] != row.score_text() {
            return Err(format!("{line:?}: the score is {}", row.score_text()));
        }
        Ok(row)
    }
}

/// The rows of the table that starts with [`TABLE_HEADER`] in `doc`.
pub fn parse_table(doc: &str) -> Result<Vec<Row>, String> {
    let start = doc
        .find(TABLE_HEADER)
        .ok_or_else(|| format!("no table headed {TABLE_HEADER:?}"))?;
    doc[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(Row::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_of_mutants_no_longer_generated_are_left_out() {
        let m = |position: &str, outcome| Mutant {
            file: "a.rs".into(),
            description: "replace + with -".into(),
            position: position.into(),
            outcome,
        };
        let runs = vec![
            vec![m("10:5", Outcome::Missed), m("12:5", Outcome::Caught)],
            vec![m("10:5", Outcome::Caught), m("11:5", Outcome::Missed)],
        ];
        let listed = ["a.rs:10:5: replace + with -", "a.rs:13:5: replace + with -"]
            .map(String::from)
            .into_iter()
            .collect();
        let (today, stale) = generated_today(runs, &listed);
        assert_eq!(stale, 2);
        assert_eq!(today[0], vec![m("10:5", Outcome::Missed)]);
        assert_eq!(today[1], vec![m("10:5", Outcome::Caught)]);
    }

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
    fn a_core_file_with_one_unexplained_miss_is_below_target() {
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
    fn the_core_is_every_file_of_its_directories_and_the_files_named() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let files = core_files(&repo).unwrap();
        let has = |f: &str| files.iter().any(|(p, _)| p == f);
        for f in [
            "xvmm-results/src/stats/linearity.rs",
            "xvmm-results/src/stats/bootstrap.rs",
            "xvmm-results/src/stats/sweep.rs",
            "xvmm/src/host_trace/raw.rs",
            "xvmm/src/host_trace/aggregate.rs",
            "guest/xperf/src/probes/parse.rs",
            "guest/xperf/src/characterize/refclock.rs",
        ] {
            assert!(has(f), "{f} is not in the core: {files:?}");
        }
        assert!(!has("xvmm/src/host_trace/"), "a directory is no file");
        assert!(files
            .iter()
            .all(|(p, _)| p.ends_with(".rs") && repo.join(p).is_file()));
    }

    #[test]
    fn a_row_is_read_back_as_written_and_must_add_up() {
        let t = Tally {
            caught: 10,
            missed: 2,
            unviable: 3,
            timeout: 1,
            equivalent: 1,
        };
        let row = Row::new(T, 20, &t, 4);
        assert_eq!((row.run, row.caught, row.missed), (16, 11, 1));
        let line = row.markdown();
        assert_eq!(
            line,
            format!("| `{T}` | 20 | 16 | 3 | 11 | 4 | 1 | 1 | 91.7 % |")
        );
        assert_eq!(Row::parse(&line).unwrap(), row);
        let doc = format!("# M\n\n{TABLE_HEADER}\n|---|\n{line}\n\nAfter.\n| not | a row |\n");
        assert_eq!(parse_table(&doc).unwrap(), vec![row.clone()]);
        // A count that does not add up, a stale score, a short row.
        let bad_sum = line.replace("| 3 | 11 |", "| 2 | 11 |");
        assert!(Row::parse(&bad_sum).unwrap_err().contains("add up"));
        let bad_score = line.replace("91.7 %", "100.0 %");
        assert!(Row::parse(&bad_score).unwrap_err().contains("91.7"));
        assert!(Row::parse("| `a.rs` | 1 | 1 |").is_err());
        let too_many = line.replace("| 20 | 16 |", "| 15 | 16 |");
        assert!(Row::parse(&too_many).is_err());
        assert!(parse_table("no table").is_err());
    }

    #[test]
    fn a_miss_caught_on_a_later_run_is_counted_once_per_file() {
        let at = |pos: &str, outcome| Mutant {
            position: pos.into(),
            ..mutant(T, "replace > with >= in f", outcome)
        };
        let runs = vec![
            vec![
                at("1:1", Outcome::Missed),
                at("2:1", Outcome::Missed),
                at("3:1", Outcome::Caught),
            ],
            vec![at("1:1", Outcome::Caught), at("2:1", Outcome::Missed)],
            vec![at("2:1", Outcome::Timeout)],
        ];
        assert_eq!(caught_on_rerun(&runs)[T], 2);
        assert!(caught_on_rerun(&runs[..1]).is_empty());
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
        let readme = "## X\n- `a.rs: not this`: no\n## Equivalent mutants\n\nText.\n\n- `a.rs: replace < with <= in f`: ties never reach it\n- `b.rs: replace f -> u64 with 1`: f is 1 on every input\n### Next\n- `c.rs: nor this`: no\n";
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
