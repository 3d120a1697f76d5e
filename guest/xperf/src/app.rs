//! The xperf command: parse, measure, print, deliver the report.

use crate::args::{self, Command, USAGE};
use crate::channel;
use crate::error::Result;
use crate::measure::{self, Config};
use crate::table;
use std::path::PathBuf;

/// Where the JSON report goes when there is no VMM channel and no `--json`.
pub const DEFAULT_JSON: &str = "xperf.json";

/// Runs xperf with the arguments after the program name.
pub fn run(argv: Vec<String>, pid1: bool) -> Result<()> {
    if pid1 {
        for warning in crate::init::mount_pseudo_filesystems()? {
            eprintln!("xperf: warning: {warning}");
        }
    }
    let opts = match args::parse(argv)? {
        Command::Help => {
            println!("{USAGE}");
            return Ok(());
        }
        Command::Version => {
            println!("xperf {}", env!("CARGO_PKG_VERSION"));
            return Ok(());
        }
        Command::Run(opts) => opts,
    };
    let region = channel::results_region_from_proc()?;
    let config = Config {
        samples: opts.samples,
        warmup: opts.warmup,
        null_samples: opts.null_samples,
        cpu: opts.cpu,
        raw: opts.raw,
        vmm_channel: region.is_some(),
    };
    let report = measure::run(&config)?;
    print!("{}", table::render(&report));
    let json = report.to_json_pretty();
    let file = opts
        .json
        .or_else(|| region.is_none().then(|| PathBuf::from(DEFAULT_JSON)));
    match file {
        // "-": the JSON follows the table on stdout (e.g. a serial console).
        Some(path) if path.as_os_str() == "-" => println!("{json}"),
        Some(path) => {
            channel::write_file_atomic(&path, &json)?;
            println!("report written to {}", path.display());
        }
        None => {}
    }
    if let Some(region) = region {
        channel::send_to_vmm(region, &json)?;
        println!(
            "report ({} bytes) sent to the VMM at {:#x}",
            json.len(),
            region.gpa
        );
    }
    Ok(())
}
