//! `xvmm --kernel ... --async-pf both --host-fault-delay D`: the same
//! measurement booted twice, async page faults offered then not, and the two
//! printed side by side with their difference.

use super::cli::RunArgs;
use super::linux::{boot, config, deliver, kernel, Outputs};
use super::output::{self, JsonOutput, Stdout};
use std::path::{Path, PathBuf};
use xvmm::linux;
use xvmm::vcpu::StopSignals;
use xvmm::{Error, Result};
use xvmm_results::{async_pf, render};

/// Where each run's report goes: `X.on.json` and `X.off.json` for `--json X`.
pub fn side_path(json: &Path, side: &str) -> PathBuf {
    let mut name = json.as_os_str().to_owned();
    name.push(format!(".{side}.json"));
    name.into()
}

/// The options `both` cannot take, checked before anything boots (clap
/// checks what it requires: --kernel and --host-fault-delay).
fn check(args: &RunArgs) -> Result<()> {
    if args.initrd.is_some() {
        return Err(Error::Usage(
            "--async-pf both compares the built-in xperf's pf-host-miss and cannot use --initrd"
                .into(),
        ));
    }
    if args.json.as_deref() == Some(Path::new("-")) {
        return Err(Error::Usage(
            "--async-pf both writes two reports and cannot send them to stdout (--json -)".into(),
        ));
    }
    if args.baseline.is_some() {
        return Err(Error::Usage(
            "--async-pf both compares its two runs; --baseline applies to one run".into(),
        ));
    }
    if args.openmetrics.is_some() {
        return Err(Error::Usage(
            "--async-pf both writes two reports whose series would collide in one textfile \
             directory; --openmetrics applies to one run"
                .into(),
        ));
    }
    Ok(())
}

/// Both runs' outputs, opened before the first boot: only their own files
/// (`check` refused `--baseline`, so there is no comparison to write).
fn side_outputs(args: &RunArgs) -> Result<[Outputs; 2]> {
    let side = |side| -> Result<Outputs> {
        Ok(Outputs {
            json: args
                .json
                .as_deref()
                .map(|p| JsonOutput::prepare(&side_path(p, side)))
                .transpose()?,
            comparison: None,
            baseline: None,
            metrics: None,
        })
    };
    Ok([side("on")?, side("off")?])
}

/// Boots with async PF offered, then without; delivers both reports (each
/// carrying the comparison) and prints the side-by-side table.
pub fn run_both(args: &RunArgs, stdout: &Stdout) -> Result<()> {
    let kernel = kernel(args)?;
    check(args)?;
    // The two files first: their errors do not depend on the kernel or xperf.
    let [on_out, off_out] = side_outputs(args)?;
    let on = linux::prepare(config(args, kernel, true)?)?;
    let off = linux::prepare(config(args, kernel, false)?)?;
    let _signals = StopSignals::install()?;
    let mut first = boot(on, &on_out, args, stdout)?;
    // A failed or interrupted first run ends here, with what it measured.
    if let Some(why) = first.end_error() {
        output::eprint(&format!(
            "xvmm: the async-pf-on run failed ({why}); the off run was not booted\n"
        ));
        let delivered = deliver(first.report.take(), on_out, args, stdout);
        return first.verdict(delivered, args);
    }
    let mut second = match boot(off, &off_out, args, stdout) {
        Ok(second) => second,
        Err(e) => {
            // The first run's results are delivered all the same.
            let delivered = deliver(first.report.take(), on_out, args, stdout);
            first.verdict(delivered, args)?;
            return Err(e);
        }
    };
    let compared = match (&first.report, &second.report) {
        (Some(a), Some(b)) => async_pf::compare_on_off(a, b),
        _ => None,
    };
    for report in [first.report.as_mut(), second.report.as_mut()]
        .into_iter()
        .flatten()
    {
        if let Some(a) = report.async_pf.as_mut() {
            a.on_off.clone_from(&compared);
        }
    }
    let delivered_on = deliver(first.report.take(), on_out, args, stdout);
    let delivered_off = deliver(second.report.take(), off_out, args, stdout);
    if !args.quiet {
        match &compared {
            Some(c) => stdout.print(&format!("\n{}", render::on_off_table(c))),
            None => {
                output::eprint("xvmm: no pf-host-miss figures from both runs: nothing to compare\n")
            }
        }
    }
    first.verdict(delivered_on, args)?;
    second.verdict(delivered_off, args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn run_args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["xvmm", "--kernel", "k", "--async-pf", "both"];
        argv.extend_from_slice(extra);
        super::super::cli::Cli::try_parse_from(argv).unwrap().run
    }

    #[test]
    fn both_needs_the_built_in_xperf_and_a_file() {
        assert!(check(&run_args(&["--host-fault-delay", "200us"])).is_ok());
        for (bad, says) in [
            (
                &["--host-fault-delay", "1ms", "--initrd", "i"][..],
                "--initrd",
            ),
            (&["--host-fault-delay", "1ms", "--json", "-"], "stdout"),
            (
                &["--host-fault-delay", "1ms", "--baseline", "b.json"],
                "--baseline",
            ),
        ] {
            let err = check(&run_args(bad)).unwrap_err();
            assert!(
                matches!(err, Error::Usage(_)) && err.to_string().contains(says),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn each_run_has_its_own_file() {
        assert_eq!(
            side_path(Path::new("out/r.json"), "on"),
            Path::new("out/r.json.on.json")
        );
        assert_eq!(side_path(Path::new("r"), "off"), Path::new("r.off.json"));
    }
}
