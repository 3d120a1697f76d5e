//! The subcommands that work on files: `compare`, `show`, `machine` and
//! `initramfs`.

use super::cli::{CompareArgs, InitramfsArgs};
use super::input::{self, MAX_INITRAMFS_FILE_BYTES};
use super::output::{JsonOutput, Stdout};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use xvmm::initramfs::Archive;
use xvmm::{Error, Result};
use xvmm_results::{render, Machine};

/// `xvmm compare VM.json BARE.json [--json FILE]`: the table on stdout (on
/// stderr when the JSON goes to stdout).
pub fn compare(args: &CompareArgs, stdout: &Stdout) -> Result<()> {
    let json = args.json.as_deref().map(JsonOutput::prepare).transpose()?;
    let vm = input::read_report(&args.vm, "VM report")?;
    let bare = input::read_report(&args.bare_metal, "bare-metal report")?;
    let comparison = xvmm_results::compare(&vm, &bare);
    let table = render::comparison_table(&comparison);
    match json {
        Some(out) if out.is_stdout() => {
            super::output::eprint(&table);
            out.deliver(&comparison.to_json_pretty(), stdout)
        }
        Some(out) => {
            let delivered = out.deliver(&comparison.to_json_pretty(), stdout);
            stdout.print(&table);
            delivered
        }
        None => {
            stdout.print(&table);
            Ok(())
        }
    }
}

/// `xvmm show REPORT.json`: the tables of a saved report.
pub fn show(path: &Path, stdout: &Stdout) -> Result<()> {
    let report = input::read_report(path, "report")?;
    stdout.print(&render::report(&report));
    Ok(())
}

/// `xvmm machine [--json FILE|-]`: characterises the machine xvmm runs on.
pub fn machine(json: Option<&Path>, stdout: &Stdout) -> Result<()> {
    let json = json.map(JsonOutput::prepare).transpose()?;
    let machine = Machine::probe();
    match json {
        Some(out) => {
            let text = serde_json::to_string_pretty(&machine)
                .map_err(|e| Error::Io(format!("cannot encode the machine as JSON: {e}")))?;
            out.deliver(&text, stdout)
        }
        None => {
            stdout.print(&render::machine_table(&machine));
            Ok(())
        }
    }
}

/// `xvmm initramfs -o OUT GUEST_PATH=HOST_FILE...`: host permission bits are
/// kept, so an executable stays executable; `/dev/console` is always added.
pub fn initramfs(args: &InitramfsArgs) -> Result<()> {
    let path = &args.output;
    if path == Path::new("-") {
        return Err(Error::Usage(
            "initramfs -o needs a file: the archive is binary".into(),
        ));
    }
    let out = xvmm_host::Output::prepare(path).map_err(|e| Error::io("cannot write", path, e))?;
    let archive = archive_from_specs(&args.entries)?;
    out.commit(&archive.to_bytes())
        .map_err(|e| Error::io("cannot write", path, e))
}

fn archive_from_specs(specs: &[String]) -> Result<Archive> {
    let mut archive = Archive::new();
    archive.console()?;
    for spec in specs {
        let (guest, host) = spec.split_once('=').ok_or_else(|| {
            Error::Usage(format!(
                "initramfs entry {spec:?} is not GUEST_PATH=HOST_FILE"
            ))
        })?;
        let host = Path::new(host);
        let meta = std::fs::metadata(host).map_err(|e| Error::io("reading", host, e))?;
        let mode = meta.permissions().mode();
        if meta.is_dir() {
            archive.dir(guest, mode)?;
            continue;
        }
        let data = input::read_regular(host, MAX_INITRAMFS_FILE_BYTES, "initramfs file")?;
        archive.file(guest, data, mode)?;
    }
    Ok(archive)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_need_an_equals_sign_and_a_regular_file() {
        let err = archive_from_specs(&["/init".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("GUEST_PATH=HOST_FILE"), "{err}");
        let err = archive_from_specs(&["/init=/nonexistent/xvmm".into()])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("io: reading /nonexistent/xvmm"), "{err}");
        let err = archive_from_specs(&["/z=/dev/zero".into()])
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("not a regular file"), "{err}");
    }
}
