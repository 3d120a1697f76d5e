//! `xvmm linearity`: the stamps' self-check, delivered, then its verdict as
//! the exit status.

use super::cli::LinearityArgs;
use super::output::{JsonOutput, Stdout};
use std::time::Duration;
use xvmm::microguest::linearity::{check_linearity, LinearityOptions};
use xvmm::vcpu::StopSignals;
use xvmm::{Error, Result};
use xvmm_results::linearity::Outcome;

/// The options a command line asks for: `samples` for the independent
/// sweep, half that for each decision phase.
fn options(args: &LinearityArgs) -> LinearityOptions {
    LinearityOptions {
        check_samples: args.samples,
        decision_samples: (args.samples / 2).max(100),
        rounds: args.rounds,
        timeout: Duration::from_secs(args.timeout),
        ..LinearityOptions::default()
    }
}

/// Checks, writes the JSON or prints the table, then fails (exit 1) unless
/// the check holds: a stdout that lost the table is said first (the JSON,
/// where asked for, has the verdict), then a check that does not hold or
/// cannot tell.
pub fn run(args: &LinearityArgs, stdout: &Stdout) -> Result<()> {
    let json = args.json.as_deref().map(JsonOutput::prepare).transpose()?;
    let _signals = StopSignals::install()?;
    let result = check_linearity(&options(args))?;
    let to_stdout = json.as_ref().is_some_and(JsonOutput::is_stdout);
    if !to_stdout {
        stdout.print(&xvmm_results::render::linearity_table(&result));
    }
    if let Some(out) = json {
        let text = serde_json::to_string_pretty(&result)
            .map_err(|e| Error::Io(format!("cannot encode the result as JSON: {e}")))?;
        out.deliver(&text, stdout)?;
    }
    stdout.outcome()?;
    match result.outcome() {
        Outcome::Holds => Ok(()),
        Outcome::CannotTell => Err(Error::Check(
            "the stamps' linearity self-check cannot tell: a correction one TSC quantum off \
             passes it too (the sweeps do not resolve a quantum; the table says which pair)"
                .into(),
        )),
        Outcome::DoesNotHold => Err(Error::Check(
            "the stamps' linearity self-check does not hold (the table and the JSON say where)"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::cli::{Cli, Command};
    use super::*;
    use clap::Parser;

    fn parse(extra: &[&str]) -> std::result::Result<LinearityArgs, clap::Error> {
        let mut argv = vec!["xvmm", "linearity"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv)?.command {
            Some(Command::Linearity(a)) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn samples_split_between_decision_and_check_and_bad_values_are_refused() {
        let o =
            options(&parse(&["--samples", "1000", "--timeout", "30", "--rounds", "6"]).unwrap());
        assert_eq!(
            (o.check_samples, o.decision_samples, o.rounds),
            (1000, 500, 6)
        );
        assert_eq!(o.timeout, Duration::from_secs(30));
        let d = options(&parse(&[]).unwrap());
        assert_eq!((d.check_samples, d.rounds), (8000, 3));
        for bad in [
            &["--samples", "10"][..],
            &["--timeout", "0"],
            &["--rounds", "0"],
            &["--kernel", "x"],
            &["--trace"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
