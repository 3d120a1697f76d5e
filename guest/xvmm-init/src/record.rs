//! Recording a real KVM exit trace inside the nested harness's L1 host, and
//! carrying files out of L1 over its console.
//!
//! L1 has no disk and no network: its serial console is the only way out.
//! [`encode_file`] writes a file as base64 lines behind [`FILE_PREFIX`],
//! closed by an [`END_PREFIX`] line with its length and SHA-256;
//! [`decode_files`] (run by the harness on the host) puts the files back
//! together and refuses any that arrived cut short or changed.
//!
//! [`record_trace`] is what `l1-init --record-trace PROGRAM ARGS...` does:
//! it traces the KVM events xvmm's `--trace` reads (`kvm_exit`,
//! `kvm_entry`, `kvm_pio`, `kvm_write_tsc_offset`) of every VM in L1 into a
//! tracefs instance of its own (x86-tsc clock, the clock xvmm's `--trace`
//! uses), runs the program, then writes the instance's `trace_pipe_raw`
//! pages, the page header and the events' formats to stderr as files,
//! laid out as tracefs lays them out, so xvmm's reader loads them as it
//! loads a live instance.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use xvmm_host::file::read_in_large_reads;

/// Files as (name, bytes).
pub type Files = Vec<(String, Vec<u8>)>;

/// Starts each line that carries a piece of a file: `XVMM-FILE NAME BASE64`.
pub const FILE_PREFIX: &str = "XVMM-FILE ";
/// Ends a file: `XVMM-FILE-END NAME BYTES SHA256`.
pub const END_PREFIX: &str = "XVMM-FILE-END ";
/// Bytes per line (a multiple of 3, so each line is whole base64).
const CHUNK: usize = 768;

const TRACEFS: &str = "/sys/kernel/tracing";
const INSTANCE: &str = "xvmm-record";
/// Per-CPU buffer: read only after the program ends, so it holds the whole
/// run (a few hundred thousand exits); an overrun is counted, not hidden.
const BUFFER_KB: u32 = 96 * 1024;
/// The events recorded, as tracefs names them under `events/`: those
/// xvmm's `--trace` reads (the port writes name the calibration exits).
pub const EVENTS: [&str; 4] = [
    "kvm/kvm_exit",
    "kvm/kvm_entry",
    "kvm/kvm_pio",
    "kvm/kvm_write_tsc_offset",
];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `bytes` as file `name` (no whitespace in it) through `line`.
pub fn encode_file(name: &str, bytes: &[u8], mut line: impl FnMut(String)) {
    for chunk in bytes.chunks(CHUNK) {
        line(format!("{FILE_PREFIX}{name} {}", STANDARD.encode(chunk)));
    }
    line(format!(
        "{END_PREFIX}{name} {} {}",
        bytes.len(),
        hex(&Sha256::digest(bytes))
    ));
}

/// The files carried by `lines` (other lines, and anything before a
/// prefix, are ignored), in the order they ended. An error names the first
/// file that is incomplete, corrupt, or never ended.
pub fn decode_files<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<Files, String> {
    let mut open: Files = Vec::new();
    let mut done = Vec::new();
    for l in lines {
        if let Some(i) = l.find(END_PREFIX) {
            let mut words = l[i + END_PREFIX.len()..].split_whitespace();
            let (Some(name), Some(len), Some(sum)) = (words.next(), words.next(), words.next())
            else {
                return Err(format!("a malformed end line: {l:?}"));
            };
            let at = open.iter().position(|(n, _)| n == name);
            let bytes = at.map(|i| open.remove(i).1).unwrap_or_default();
            if len.parse::<usize>().ok() != Some(bytes.len()) {
                return Err(format!(
                    "{name}: {} bytes arrived, {len} were sent",
                    bytes.len()
                ));
            }
            if hex(&Sha256::digest(&bytes)) != sum {
                return Err(format!("{name}: its SHA-256 differs from the one sent"));
            }
            done.push((name.to_string(), bytes));
        } else if let Some(i) = l.find(FILE_PREFIX) {
            let rest = &l[i + FILE_PREFIX.len()..];
            let (name, data) = rest
                .split_once(' ')
                .ok_or_else(|| format!("a file line without data: {l:?}"))?;
            let data = STANDARD
                .decode(data.trim_end())
                .map_err(|e| format!("{name}: a line is not base64: {e}"))?;
            match open.iter_mut().find(|(n, _)| n == name) {
                Some((_, bytes)) => bytes.extend_from_slice(&data),
                None => open.push((name.to_string(), data)),
            }
        }
    }
    match open.first() {
        Some((name, _)) => Err(format!("{name}: never ended (the output was cut short)")),
        None => Ok(done),
    }
}

/// A tracefs file's text ([`read_in_large_reads`]: tracefs files must be
/// read in one large read).
fn read_whole(path: &Path) -> Result<Vec<u8>, String> {
    fs::File::open(path)
        .and_then(read_in_large_reads)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("writing {value:?} to {}: {e}", path.display()))
}

/// Reads a non-blocking `trace_pipe_raw` until it is empty.
fn drain(path: &Path) -> Result<Vec<u8>, String> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .and_then(read_in_large_reads)
        .map_err(|e| format!("reading {}: {e}", path.display()))
}

/// The CPUs of an instance, in order.
fn cpus(instance: &Path) -> Result<Vec<u32>, String> {
    let dir = instance.join("per_cpu");
    let mut cpus: Vec<u32> = fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
        .collect();
    cpus.sort_unstable();
    Ok(cpus)
}

/// The events dropped on one CPU's buffer (its `stats` file's `overrun:`).
fn overrun(stats: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix("overrun:")?.trim().parse().ok())
        .unwrap_or(0)
}

/// A tracefs instance removed on every way out.
struct Instance(PathBuf);

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = fs::write(self.0.join("tracing_on"), "0");
        for e in EVENTS {
            let _ = fs::write(self.0.join("events").join(e).join("enable"), "0");
        }
        let _ = fs::remove_dir(&self.0);
    }
}

fn start_instance() -> Result<Instance, String> {
    let root = Path::new(TRACEFS);
    let path = root.join("instances").join(INSTANCE);
    // A recorder killed at its step's timeout left its instance: the
    // harness's own name, so taken back (its events off first, as the
    // drop does).
    if path.is_dir() {
        drop(Instance(path.clone()));
    }
    fs::create_dir(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    let instance = Instance(path);
    let i = &instance.0;
    write(&i.join("tracing_on"), "0")?;
    write(&i.join("trace_clock"), "x86-tsc")?;
    write(&i.join("buffer_size_kb"), &BUFFER_KB.to_string())?;
    for e in EVENTS {
        write(&i.join("events").join(e).join("enable"), "1")?;
    }
    write(&i.join("tracing_on"), "1")?;
    Ok(instance)
}

/// The recorded files, as (name, bytes): tracefs's layout under `events/`,
/// then `cpuN.raw` per CPU; and the events the buffers dropped.
fn collect(instance: &Instance) -> Result<(Files, u64), String> {
    let root = Path::new(TRACEFS);
    let mut files = Vec::new();
    for name in ["header_page", "header_event"] {
        let bytes = read_whole(&root.join("events").join(name))?;
        files.push((format!("events/{name}"), bytes));
    }
    for e in EVENTS {
        let bytes = read_whole(&root.join("events").join(e).join("format"))?;
        files.push((format!("events/{e}/format"), bytes));
    }
    let mut lost = 0;
    for cpu in cpus(&instance.0)? {
        let dir = instance.0.join(format!("per_cpu/cpu{cpu}"));
        files.push((format!("cpu{cpu}.raw"), drain(&dir.join("trace_pipe_raw"))?));
        lost += fs::read_to_string(dir.join("stats")).map_or(0, |s| overrun(&s));
    }
    Ok((files, lost))
}

/// `l1-init --record-trace PROGRAM ARGS...`: runs the program with every
/// KVM exit of L1 traced, then writes the recording to stderr (see the
/// module's docs) with a summary line. The program's stdout and stderr are
/// its own. Returns the exit status: the program's, or 1 when recording
/// failed.
pub fn record_trace(argv: &[String]) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        eprintln!("XVMM-RECORD: no program to run");
        return 1;
    };
    let instance = match start_instance() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("XVMM-RECORD: {e}");
            return 1;
        }
    };
    let status = match Command::new(program).args(args).status() {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => {
            eprintln!("XVMM-RECORD: running {program}: {e}");
            return 1;
        }
    };
    let _ = fs::write(instance.0.join("tracing_on"), "0");
    match collect(&instance) {
        Ok((files, lost)) => {
            let bytes: usize = files.iter().map(|(_, b)| b.len()).sum();
            for (name, data) in &files {
                encode_file(name, data, |l| eprintln!("{l}"));
            }
            eprintln!(
                "XVMM-RECORD: {} files, {bytes} bytes, {lost} events lost",
                files.len()
            );
            status
        }
        Err(e) => {
            eprintln!("XVMM-RECORD: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(files: &[(&str, &[u8])]) -> Vec<String> {
        let mut out = vec!["a console line".to_string()];
        for (name, bytes) in files {
            encode_file(name, bytes, |l| out.push(format!("XVMM-ERR vm| {l}")));
        }
        out
    }

    #[test]
    fn files_come_back_as_they_were_sent() {
        let big: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sent: [(&str, &[u8]); 3] = [("cpu0.raw", &big), ("empty", b""), ("events/a", b"ab")];
        let got = decode_files(lines(&sent).iter().map(String::as_str)).unwrap();
        let want: Vec<(String, Vec<u8>)> = sent
            .iter()
            .map(|(n, b)| (n.to_string(), b.to_vec()))
            .collect();
        assert_eq!(got, want);
        assert!(
            lines(&sent)
                .iter()
                .filter(|l| l.contains(FILE_PREFIX))
                .count()
                > 10_000 / CHUNK
        );
    }

    #[test]
    fn a_lost_changed_or_unended_file_is_refused() {
        let big = vec![5u8; 3 * CHUNK];
        let ok = lines(&[("f", &big)]);
        let mut lost = ok.clone();
        lost.remove(2);
        assert!(decode_files(lost.iter().map(String::as_str))
            .unwrap_err()
            .contains("bytes arrived"));
        let mut changed = ok.clone();
        changed[1] = format!("{FILE_PREFIX}f {}", STANDARD.encode(vec![6u8; CHUNK]));
        assert!(decode_files(changed.iter().map(String::as_str))
            .unwrap_err()
            .contains("SHA-256"));
        let unended = &ok[..ok.len() - 1];
        assert!(decode_files(unended.iter().map(String::as_str))
            .unwrap_err()
            .contains("never ended"));
        let mut garbled = ok.clone();
        garbled[1].push('!');
        assert!(decode_files(garbled.iter().map(String::as_str)).is_err());
    }

    #[test]
    fn overruns_are_read_from_the_stats_file() {
        let stats = "entries: 5\noverrun: 17\ncommit overrun: 0\n";
        assert_eq!(overrun(stats), 17);
        assert_eq!(overrun("entries: 5\n"), 0);
    }
}
