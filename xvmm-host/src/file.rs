//! Writing result files so that a reader, a crash or a hostile directory never
//! sees or causes half of one.
//!
//! An output is chosen ([`Output::prepare`]) before anything is measured, so
//! that a destination that cannot be written is found in a second, not after
//! the measurement; it is written once at the end ([`Output::commit`]).
//!
//! A regular file is replaced atomically: the bytes go to an unnamed file in
//! the same directory (`O_TMPFILE`; a `kill -9` leaves nothing behind), which
//! is fsynced, given a name no one can have planted (`O_EXCL` semantics: the
//! name is new, nothing is followed) and renamed over the destination, which
//! keeps its permission bits. Where the file system has no `O_TMPFILE`, a
//! named temporary is created with `O_CREAT | O_EXCL | O_NOFOLLOW` instead and
//! removed if the write fails.
//!
//! A device or FIFO (`/dev/stdout`, `/dev/null`, a shell's `>(jq .)`) is
//! written in place: renaming over it would destroy it. It is opened once,
//! at prepare, and that descriptor is what commit writes: the path is not
//! looked up again after the measurement, when something else may have been
//! put there. A FIFO is opened without blocking, so one that nothing reads
//! is an error at once rather than a hang. A symbolic link is followed only
//! to a regular file in the link's own directory (or to a device or FIFO);
//! a dangling link, or one that leads out of its directory, is refused
//! rather than replaced.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

/// A destination checked and opened before measuring.
#[derive(Debug)]
pub enum Output {
    /// A regular file (existing or new), replaced atomically at commit.
    File(AtomicFile),
    /// A device or FIFO, opened at prepare and written in place at commit.
    Special(File),
}

impl Output {
    /// Checks `path` and prepares to write it. Fails now, with the reason, when
    /// it could not be written later: a missing or unwritable directory, a
    /// directory at `path`, a dangling symbolic link or one that leads out of
    /// its directory.
    pub fn prepare(path: &Path) -> io::Result<Output> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Ok(Output::File(AtomicFile::create(path, None)?))
            }
            Err(e) => Err(e),
            Ok(meta) if meta.file_type().is_symlink() => Output::through_link(path),
            Ok(meta) if meta.is_dir() => Err(invalid("is a directory")),
            Ok(meta) if meta.is_file() => Ok(Output::File(AtomicFile::create(
                path,
                Some(meta.permissions().mode()),
            )?)),
            Ok(meta) => Output::special(path, &meta),
        }
    }

    fn through_link(link: &Path) -> io::Result<Output> {
        // stat, not canonicalize, first: `/dev/stdout` leads to
        // `/proc/self/fd/1`, whose target (`pipe:[123]`) only the kernel can
        // follow.
        let meta = std::fs::metadata(link).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                invalid("is a dangling symbolic link (its target does not exist)")
            }
            _ => e,
        })?;
        if meta.is_dir() {
            return Err(invalid("is a symbolic link to a directory"));
        }
        if !meta.is_file() {
            return Output::special(link, &meta);
        }
        let target = std::fs::canonicalize(link)?;
        let link_dir = std::fs::canonicalize(parent_of(link))?;
        if target.parent() != Some(link_dir.as_path()) {
            return Err(invalid(&format!(
                "is a symbolic link out of its directory (to {}): refusing to follow it",
                target.display()
            )));
        }
        Ok(Output::File(AtomicFile::create(
            &target,
            Some(meta.permissions().mode()),
        )?))
    }

    /// Opens the device or FIFO `path` (`meta`: what it was when looked at)
    /// for the whole run. Non-blocking, so that a FIFO nobody reads fails
    /// now (ENXIO); blocking again once open, so that a slow reader gets
    /// all of the JSON.
    fn special(path: &Path, meta: &std::fs::Metadata) -> io::Result<Output> {
        use std::os::unix::fs::FileTypeExt;
        let kind = meta.file_type();
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENXIO) if kind.is_fifo() => {
                    invalid("is a FIFO that nothing reads (start its reader first)")
                }
                Some(libc::ENXIO) if kind.is_socket() => {
                    invalid("is a socket, which cannot be written as a file")
                }
                _ => e,
            })?;
        // What was opened is what was looked at: a device or FIFO, not a
        // regular file swapped in meanwhile (that is never written in place).
        if file.metadata()?.is_file() {
            return Err(invalid("changed while it was being opened"));
        }
        let fd = file.as_raw_fd();
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
        let cleared = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        if !cleared {
            return Err(io::Error::last_os_error());
        }
        Ok(Output::Special(file))
    }

    /// Writes `bytes` and makes them the destination's content.
    pub fn commit(self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Output::File(f) => f.commit(bytes),
            Output::Special(mut file) => file.write_all(bytes),
        }
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| invalid("contains a NUL byte"))
}

/// A regular file being replaced: the open directory, the final name and the
/// temporary file the bytes go to first.
#[derive(Debug)]
pub struct AtomicFile {
    dir: File,
    name: OsString,
    tmp: File,
    /// The temporary's name when it has one (no O_TMPFILE support).
    tmp_name: Option<OsString>,
    /// Permission bits of the file being replaced.
    mode: Option<u32>,
}

/// A name for the temporary that nobody else picks: pid, time and a counter.
fn temporary_name(name: &OsStr) -> OsString {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(
        ".xvmm-{}-{nanos:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    tmp
}

fn open_dir(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
}

/// Whether `e` says that the file system (or kernel) has no `O_TMPFILE`.
fn no_tmpfile(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
    )
}

/// Gives the unnamed (`O_TMPFILE`) file `tmp` the name `name` in `dir`.
/// `linkat` creates a new name and fails if it exists: nothing planted
/// there is followed or replaced.
fn link_at(tmp: &File, dir: &File, name: &OsStr) -> io::Result<()> {
    let source = CString::new(format!("/proc/self/fd/{}", tmp.as_raw_fd()))
        .map_err(|_| invalid("descriptor path"))?;
    let dest = cstring(name)?;
    // SAFETY: valid descriptors and NUL-terminated paths.
    let ret = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            source.as_ptr(),
            dir.as_raw_fd(),
            dest.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `openat(dir, name, flags, 0o666)`: the umask decides the final bits of a new file.
fn open_at(dir: &File, name: &OsStr, flags: libc::c_int) -> io::Result<File> {
    let c = cstring(name)?;
    // SAFETY: a valid directory descriptor and NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags, 0o666 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

impl AtomicFile {
    fn create(path: &Path, mode: Option<u32>) -> io::Result<AtomicFile> {
        AtomicFile::create_in(path, mode, true)
    }

    /// `unnamed`: try O_TMPFILE first (false only to test the fallback).
    fn create_in(path: &Path, mode: Option<u32>, unnamed: bool) -> io::Result<AtomicFile> {
        let name = path
            .file_name()
            .ok_or_else(|| invalid("names no file"))?
            .to_owned();
        let dir = open_dir(parent_of(path))?;
        let flags = libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC;
        let tried = if unnamed {
            open_at(&dir, OsStr::new("."), flags)
        } else {
            Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
        };
        let (tmp, tmp_name) = match tried {
            Ok(tmp) => (tmp, None),
            // No O_TMPFILE on this file system: a fresh name, never followed.
            Err(e) if no_tmpfile(&e) => {
                let tmp_name = temporary_name(&name);
                let flags = libc::O_WRONLY
                    | libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_NOFOLLOW
                    | libc::O_CLOEXEC;
                (open_at(&dir, &tmp_name, flags)?, Some(tmp_name))
            }
            Err(e) => return Err(e),
        };
        Ok(AtomicFile {
            dir,
            name,
            tmp,
            tmp_name,
            mode,
        })
    }

    fn commit(mut self, bytes: &[u8]) -> io::Result<()> {
        self.tmp.write_all(bytes)?;
        if let Some(mode) = self.mode {
            self.tmp
                .set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
        }
        self.tmp.sync_all()?;
        let tmp_name = match self.tmp_name.take() {
            Some(n) => n,
            None => self.link_unnamed()?,
        };
        let renamed = self.rename(&tmp_name);
        if renamed.is_err() {
            let _ = self.unlink(&tmp_name);
        }
        renamed?;
        // The rename is durable once the directory is.
        let _ = self.dir.sync_all();
        Ok(())
    }

    /// Gives the O_TMPFILE file a fresh name in its directory.
    fn link_unnamed(&self) -> io::Result<OsString> {
        let tmp_name = temporary_name(&self.name);
        link_at(&self.tmp, &self.dir, &tmp_name)?;
        Ok(tmp_name)
    }

    fn rename(&self, tmp_name: &OsStr) -> io::Result<()> {
        let (from, to) = (cstring(tmp_name)?, cstring(&self.name)?);
        let fd = self.dir.as_raw_fd();
        // SAFETY: valid directory descriptor and NUL-terminated names.
        if unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn unlink(&self, name: &OsStr) -> io::Result<()> {
        let c = cstring(name)?;
        // SAFETY: valid directory descriptor and NUL-terminated name.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Not committed (or failed before linking): leave no named temporary.
        if let Some(name) = self.tmp_name.take() {
            let _ = self.unlink(&name);
        }
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Everything `reader` gives until its end or, when it was opened
/// non-blocking, until it has nothing more, in reads of 64 KiB. tracefs
/// makes a file's text afresh for each read from offset 0: a small first
/// read (the 32-byte probe `read_to_end` makes of a file whose size reads
/// 0, as tracefs files do) gets that much and nothing after it.
pub fn read_in_large_reads(mut reader: impl io::Read) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 1 << 16];
    let mut all = Vec::new();
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(all),
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(all),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Opens `path` for reading if it is a regular file of at most `limit`
/// bytes (not a FIFO, a device such as `/dev/zero`, or a directory):
/// the file and its length then.
pub fn open_bounded(path: &Path, limit: u64) -> io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid("not a regular file"));
    }
    if meta.len() > limit {
        return Err(invalid(&format!(
            "{} is more than the {} accepted here",
            mib(meta.len()),
            mib(limit)
        )));
    }
    Ok((file, meta.len()))
}

/// The whole of `path`, which must be a regular file of at most `limit`
/// bytes: `/dev/zero`, a FIFO or a 50 GB file give an error at once instead
/// of a hang or an out-of-memory kill. Opened non-blocking, so that opening a
/// FIFO cannot stall either.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let (mut file, len) = open_bounded(path, limit)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // take(): a file that grows while it is read cannot pass the limit either.
    (&mut file).take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(invalid(&format!(
            "grew past the {} accepted here",
            mib(limit)
        )));
    }
    Ok(bytes)
}

/// Prepares and writes `path` in one go (see [`Output`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    Output::prepare(path)?.commit(bytes)
}

/// How many fresh names a fallback tries in one directory: names are
/// predictable, so someone may have taken a few.
const FALLBACK_NAMES: usize = 16;

/// Saves `bytes` that could not reach their destination, so that a
/// measurement is never lost, and returns where they went: a new file
/// `<prefix>-<time>-<pid>.json` in the current directory, else in a fresh
/// private directory (`mkdtemp`, mode 0700) under the temporary directory.
///
/// The fallback runs when something already failed, in directories others
/// may write to (`/tmp`, a shared working directory), so it never follows a
/// symbolic link and never replaces or removes anything it did not create:
/// a name that exists is skipped for the next one.
pub fn save_fallback(prefix: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let stem = format!("{prefix}-{secs}-{}", std::process::id());
    save_fallback_in(Path::new("."), &std::env::temp_dir(), prefix, &stem, bytes)
}

fn save_fallback_in(
    here: &Path,
    tmp: &Path,
    prefix: &str,
    stem: &str,
    bytes: &[u8],
) -> io::Result<PathBuf> {
    let in_here = open_dir(here).and_then(|dir| create_fresh(&dir, stem, bytes));
    let here_failed = match in_here {
        Ok(name) => {
            let dir = std::path::absolute(here).unwrap_or_else(|_| here.to_path_buf());
            return Ok(dir.join(name));
        }
        Err(e) => e,
    };
    save_in_private_dir(tmp, prefix, stem, bytes).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "{}: {here_failed}; a private directory in {}: {e}",
                here.display(),
                tmp.display()
            ),
        )
    })
}

/// The names a fallback tries: `STEM.json`, then `STEM-1.json`...
fn fallback_names(stem: &str) -> impl Iterator<Item = OsString> + '_ {
    (0..FALLBACK_NAMES).map(move |i| match i {
        0 => format!("{stem}.json").into(),
        i => format!("{stem}-{i}.json").into(),
    })
}

/// Writes `bytes` to a new file in `dir` under the first free fallback name
/// and returns that name. The bytes go to an unnamed file first, which gets
/// its name only once complete (`linkat` never replaces, never follows), so
/// a failure leaves nothing to clean up.
fn create_fresh(dir: &File, stem: &str, bytes: &[u8]) -> io::Result<OsString> {
    let flags = libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC;
    let mut tmp = match open_at(dir, OsStr::new("."), flags) {
        Ok(tmp) => tmp,
        Err(e) if no_tmpfile(&e) => return create_named(dir, stem, bytes),
        Err(e) => return Err(e),
    };
    tmp.write_all(bytes)?;
    tmp.sync_all()?;
    let mut last = io::Error::from_raw_os_error(libc::EEXIST);
    for name in fallback_names(stem) {
        match link_at(&tmp, dir, &name) {
            Ok(()) => {
                let _ = dir.sync_all();
                return Ok(name);
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// [`create_fresh`] where the file system has no `O_TMPFILE`: a new name
/// (`O_EXCL | O_NOFOLLOW`), removed again if the write fails, and only
/// while it is still the file made here.
fn create_named(dir: &File, stem: &str, bytes: &[u8]) -> io::Result<OsString> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let mut last = io::Error::from_raw_os_error(libc::EEXIST);
    for name in fallback_names(stem) {
        let mut file = match open_at(dir, &name, flags) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                last = e;
                continue;
            }
            Err(e) => return Err(e),
        };
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        if let Err(e) = written {
            unlink_if_same(dir, &name, &file);
            return Err(e);
        }
        return Ok(name);
    }
    Err(last)
}

/// Removes `name` from `dir` if it still is `file`.
fn unlink_if_same(dir: &File, name: &OsStr, file: &File) {
    use std::os::unix::fs::MetadataExt;
    let (Ok(ours), Ok(c)) = (file.metadata(), cstring(name)) else {
        return;
    };
    // SAFETY: an all-zero stat is valid; fstatat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid directory descriptor, NUL-terminated name, a stat to fill.
    let found = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if found == 0 && st.st_dev == ours.dev() && st.st_ino == ours.ino() {
        // SAFETY: as above.
        unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
    }
}

/// The fallback's last resort: a directory no one else can have prepared
/// (`mkdtemp`: new, mode 0700), removed again if the file cannot be written.
fn save_in_private_dir(tmp: &Path, prefix: &str, stem: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let template = cstring(tmp.join(format!("{prefix}-XXXXXX")).as_os_str())?;
    let mut buf = template.into_bytes_with_nul();
    // SAFETY: a writable NUL-terminated template ending in XXXXXX.
    if unsafe { libc::mkdtemp(buf.as_mut_ptr().cast()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    buf.pop();
    let dir_path = PathBuf::from(OsString::from_vec(buf));
    let made = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&dir_path)
        .and_then(|dir| create_fresh(&dir, stem, bytes));
    match made {
        Ok(name) => Ok(dir_path.join(name)),
        Err(e) => {
            let _ = std::fs::remove_dir(&dir_path);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader giving scripted results, then ends of file.
    struct Script(Vec<io::Result<Vec<u8>>>);

    impl io::Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            let bytes = self.0.remove(0)?;
            buf[..bytes.len()].copy_from_slice(&bytes);
            Ok(bytes.len())
        }
    }

    #[test]
    fn large_reads_go_on_past_interruptions_and_stop_when_nothing_is_left() {
        let interrupted = || Err(io::Error::from(io::ErrorKind::Interrupted));
        let would_block = || Err(io::Error::from(io::ErrorKind::WouldBlock));
        let script = Script(vec![Ok(b"ab".to_vec()), interrupted(), Ok(b"c".to_vec())]);
        assert_eq!(read_in_large_reads(script).unwrap(), b"abc");
        let script = Script(vec![Ok(b"ab".to_vec()), would_block(), Ok(b"c".to_vec())]);
        assert_eq!(read_in_large_reads(script).unwrap(), b"ab");
        let failing = Script(vec![Ok(b"ab".to_vec()), Err(io::Error::other("x"))]);
        assert!(read_in_large_reads(failing).is_err());
    }

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xvmm-file-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = scratch("atomic");
        let path = dir.join("out.json");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert_eq!(entries(&dir), ["out.json"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_prepared_but_abandoned_output_leaves_nothing() {
        let dir = scratch("abandon");
        let out = Output::prepare(&dir.join("out.json")).unwrap();
        drop(out);
        assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    const KILLED_CHILD: &str = "XVMM_FILE_KILLED_CHILD";

    /// Issue 16, defect 3: a `kill -9` while the output was open (the whole
    /// measurement, between prepare and commit) left the old writer's
    /// `.NAME.tmp.PID` behind. Run in a fresh copy of this test binary that
    /// prepares the output over an existing file and kills itself.
    #[test]
    fn a_kill_9_between_prepare_and_commit_leaves_nothing() {
        if let Some(dir) = std::env::var_os(KILLED_CHILD) {
            let out = Output::prepare(&Path::new(&dir).join("out.json")).unwrap();
            // SAFETY: raise sends a signal to this process only.
            unsafe { libc::raise(libc::SIGKILL) };
            drop(out);
            unreachable!("SIGKILL returned");
        }
        let dir = scratch("killed");
        std::fs::write(dir.join("out.json"), b"old").unwrap();
        let name = module_path!().split_once("::").unwrap().1;
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &format!("{name}::a_kill_9_between_prepare_and_commit_leaves_nothing"),
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env(KILLED_CHILD, &dir)
            .output()
            .unwrap()
            .status;
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        assert_eq!(entries(&dir), ["out.json"]);
        assert_eq!(std::fs::read(dir.join("out.json")).unwrap(), b"old");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_named_fallback_replaces_and_cleans_up_too() {
        let dir = scratch("named");
        let path = dir.join("out.json");
        std::fs::write(&path, b"old").unwrap();
        let f = AtomicFile::create_in(&path, Some(0o640), false).unwrap();
        assert_eq!(entries(&dir).len(), 2, "the named temporary exists");
        f.commit(b"new").unwrap();
        assert_eq!(entries(&dir), ["out.json"]);
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        drop(AtomicFile::create_in(&path, None, false).unwrap());
        assert_eq!(entries(&dir), ["out.json"], "abandoned temporary removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_mode_of_an_existing_file_is_kept() {
        let dir = scratch("mode");
        let path = dir.join("secret.json");
        std::fs::write(&path, b"old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomically(&path, b"new").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn mkfifo(path: &Path) {
        let made = std::process::Command::new("mkfifo").arg(path).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    }

    /// The read end, opened without waiting for a writer.
    fn fifo_reader(path: &Path) -> File {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .unwrap()
    }

    /// Everything the FIFO's writers wrote, to its end. Blocking: another
    /// test thread's fork may hold a copy of the writer's descriptor until
    /// its exec, and a non-blocking read would then fail with EAGAIN
    /// instead of waiting for the end (seen once in the suite).
    fn read_fifo_to_end(reader: &mut File) -> Vec<u8> {
        use std::io::Read;
        let fd = reader.as_raw_fd();
        // SAFETY: F_GETFL/F_SETFL on a descriptor this test owns.
        let cleared = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        assert!(cleared, "F_SETFL: {}", io::Error::last_os_error());
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        got
    }

    #[test]
    fn a_fifo_is_written_in_place_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let dir = scratch("fifo");
        let fifo = dir.join("pipe");
        mkfifo(&fifo);
        let mut reader = fifo_reader(&fifo);
        write_atomically(&fifo, b"through the pipe").unwrap();
        assert_eq!(read_fifo_to_end(&mut reader), b"through the pipe");
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "the FIFO was replaced by {kind:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 20, items 5 and 8: a device or FIFO output was looked up again
    /// by path after the measurement (so whatever had been put at the path
    /// by then was written, through a link too), and a FIFO that nothing
    /// reads made the writer wait for ever.
    #[test]
    fn a_fifo_is_opened_once_before_measuring() {
        let dir = scratch("fifo-once");
        let fifo = dir.join("pipe");
        mkfifo(&fifo);
        let start = std::time::Instant::now();
        let err = Output::prepare(&fifo).unwrap_err();
        assert_eq!(
            err.to_string(),
            "is a FIFO that nothing reads (start its reader first)"
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(2));

        let mut reader = fifo_reader(&fifo);
        let out = Output::prepare(&fifo).unwrap();
        // While "measuring", the FIFO is swapped for a link to a victim.
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::fs::remove_file(&fifo).unwrap();
        std::os::unix::fs::symlink("victim", &fifo).unwrap();
        out.commit(b"results").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(read_fifo_to_end(&mut reader), b"results");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `/dev/stdout` into a pipe leads, through `/proc/self/fd/1`, to
    /// `pipe:[N]`, which is no path: it was refused as a dangling link.
    #[test]
    fn a_link_to_a_pipe_only_the_kernel_can_follow_is_written() {
        use std::io::Read;
        let (mut read_end, write_end) = std::io::pipe().unwrap();
        let link = PathBuf::from(format!("/proc/self/fd/{}", write_end.as_raw_fd()));
        let out = Output::prepare(&link).unwrap();
        drop(write_end);
        out.commit(b"piped").unwrap();
        let mut got = Vec::new();
        read_end.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"piped");
    }

    #[test]
    fn a_symlink_in_the_same_directory_keeps_pointing_at_its_replaced_target() {
        let dir = scratch("link");
        let target = dir.join("target.json");
        let link = dir.join("link.json");
        std::fs::write(&target, b"old").unwrap();
        std::os::unix::fs::symlink("target.json", &link).unwrap();
        write_atomically(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_out_of_the_directory_or_dangling_is_refused() {
        let dir = scratch("outlink");
        let outside = scratch("outlink-target");
        let victim = outside.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = dir.join("out.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = Output::prepare(&link).unwrap_err();
        assert!(err.to_string().contains("out of its directory"), "{err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");

        let dangling = dir.join("dangling.json");
        std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
        let err = Output::prepare(&dangling).unwrap_err();
        assert!(err.to_string().contains("dangling"), "{err}");
        assert!(std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink());
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn a_planted_symlink_at_a_temporary_name_is_not_followed() {
        // The old writer used `.NAME.tmp.PID` with File::create, which follows
        // a link planted there. Plant links at every name the old scheme and
        // a guess of the new one could use: none may be written through.
        let dir = scratch("plant");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let planted = dir.join(format!(".out.json.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        write_atomically(&dir.join("out.json"), b"results").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(dir.join("out.json")).unwrap(), b"results");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn destinations_that_cannot_be_written_fail_at_prepare() {
        let dir = scratch("bad");
        let missing = Output::prepare(&dir.join("missing/out.json")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let is_dir = Output::prepare(&dir).unwrap_err();
        assert!(is_dir.to_string().contains("is a directory"), "{is_dir}");
        let err = Output::prepare(Path::new("/")).unwrap_err();
        assert!(err.to_string().contains("directory"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bounded_reads_refuse_devices_fifos_and_huge_files_at_once() {
        for p in ["/dev/zero", "/dev/null", "/"] {
            let err = read_bounded(Path::new(p), 1 << 20).unwrap_err();
            assert_eq!(err.to_string(), "not a regular file", "{p}");
        }
        let dir = scratch("bounded");
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        let start = std::time::Instant::now();
        let err = read_bounded(&fifo, 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file");
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
        let big = dir.join("big");
        File::create(&big).unwrap().set_len(10 << 30).unwrap(); // sparse
        let err = read_bounded(&big, 256 << 20).unwrap_err();
        assert_eq!(
            err.to_string(),
            "10240.0 MiB is more than the 256.0 MiB accepted here"
        );
        std::fs::write(&big, b"ok").unwrap();
        assert_eq!(read_bounded(&big, 2).unwrap(), b"ok");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 20, item 5: xperf's fallback went through `write_atomically`,
    /// which follows a link to a regular file in its directory, so a link
    /// planted at the predictable `/tmp/xperf-results-<pid>.json` made a root
    /// xperf replace another user's file; xvmm's removed a file planted at
    /// its name. Every name tried here is taken by a link to a victim or by
    /// someone's file: the fallback must leave them all alone.
    #[test]
    fn a_fallback_never_follows_removes_or_replaces_what_is_planted() {
        let here = scratch("fallback-here");
        let tmp = scratch("fallback-tmp");
        let victim = here.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let names: Vec<OsString> = fallback_names("x-1-2").collect();
        std::fs::write(here.join(&names[0]), b"someone's").unwrap();
        std::os::unix::fs::symlink("victim", here.join(&names[1])).unwrap();
        std::os::unix::fs::symlink(here.join("nowhere"), here.join(&names[2])).unwrap();
        let saved = save_fallback_in(&here, &tmp, "x", "x-1-2", b"results").unwrap();
        assert_eq!(saved, here.join(&names[3]));
        assert_eq!(std::fs::read(&saved).unwrap(), b"results");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(here.join(&names[0])).unwrap(), b"someone's");
        assert!(
            !here.join("nowhere").exists(),
            "a dangling link was followed"
        );

        // Without O_TMPFILE: the same, through O_EXCL | O_NOFOLLOW names.
        let dir = open_dir(&here).unwrap();
        let name = create_named(&dir, "x-1-2", b"again").unwrap();
        assert_eq!(name, names[4]);
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(here.join(&names[0])).unwrap(), b"someone's");
        std::fs::remove_dir_all(&here).unwrap();
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// Where the working directory takes nothing, the fallback is a fresh
    /// private directory: a link planted at the old fixed name in the
    /// temporary directory is not followed.
    #[test]
    fn a_fallback_elsewhere_goes_to_a_fresh_private_directory() {
        let tmp = scratch("fallback-private");
        let victim = tmp.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink("victim", tmp.join("x-1-2.json")).unwrap();
        // Nothing can be created in /proc, not even by root.
        let saved = save_fallback_in(Path::new("/proc"), &tmp, "x", "x-1-2", b"results").unwrap();
        assert_eq!(std::fs::read(&saved).unwrap(), b"results");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let private = saved.parent().unwrap();
        assert_eq!(private.parent(), Some(tmp.as_path()));
        let mode = std::fs::symlink_metadata(private)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o700, "{mode:o}");
        assert_eq!(entries(private), ["x-1-2.json"]);

        // Nowhere to go: one error naming both places, nothing left behind.
        let err = save_fallback_in(Path::new("/proc"), Path::new("/proc"), "x", "s", b"r")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("/proc: ") && err.contains("a private directory in /proc"));
        assert!(!err.contains('\n'), "{err}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_failed_fallback_removes_only_its_own_file() {
        // /dev/full's ENOSPC cannot be had in a directory; a read-only
        // descriptor's write fails alike, after the name was made.
        let here = scratch("fallback-fail");
        let dir = open_dir(&here).unwrap();
        let name = OsString::from("x.json");
        let file = open_at(&dir, &name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL).unwrap();
        drop(file);
        let file = File::open(here.join(&name)).unwrap();
        std::fs::rename(here.join(&name), here.join("moved")).unwrap();
        std::fs::write(here.join(&name), b"someone's").unwrap();
        unlink_if_same(&dir, &name, &file);
        assert_eq!(std::fs::read(here.join(&name)).unwrap(), b"someone's");
        let moved = File::open(here.join("moved")).unwrap();
        unlink_if_same(&dir, OsStr::new("moved"), &moved);
        assert_eq!(entries(&here), ["x.json"]);
        std::fs::remove_dir_all(&here).unwrap();
    }

    #[test]
    fn a_full_device_fails_at_commit() {
        let out = Output::prepare(Path::new("/dev/full")).unwrap();
        let err = out.commit(b"x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    }
}
