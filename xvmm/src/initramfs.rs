//! Writing initramfs images: the "newc" cpio format the kernel unpacks
//! (Documentation/driver-api/early-userspace/buffer-format.rst).
//!
//! [`Archive`] is a pure in-memory builder; `xvmm initramfs` writes one.

use crate::{Error, Result};
use std::collections::BTreeMap;

const MAGIC: &[u8] = b"070701";
const TRAILER: &str = "TRAILER!!!";
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// One archive member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    File { data: Vec<u8>, mode: u32 },
    Dir { mode: u32 },
    Symlink { target: String },
    CharDev { major: u32, minor: u32, mode: u32 },
}

/// An initramfs being assembled: paths (without a leading `/`) to nodes.
/// Parent directories are implied by the paths and added when written.
#[derive(Clone, Debug, Default)]
pub struct Archive {
    nodes: BTreeMap<String, Node>,
}

/// Normalises a guest path: strips leading `/`, rejects empty paths, `.`,
/// `..`, empty components and NUL bytes (the kernel would refuse or misplace
/// them).
pub fn normalise(path: &str) -> Result<String> {
    let trimmed = path.trim_start_matches('/');
    if trimmed.is_empty() {
        return Err(Error::Usage(format!(
            "initramfs path {path:?} names no file"
        )));
    }
    if trimmed.contains('\0') {
        return Err(Error::Usage(format!(
            "initramfs path {path:?} contains NUL"
        )));
    }
    let trimmed = trimmed.trim_end_matches('/');
    if trimmed
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(Error::Usage(format!(
            "initramfs path {path:?} has an empty, '.' or '..' component"
        )));
    }
    if trimmed.split('/').next() == Some(TRAILER) {
        // The kernel stops unpacking at the first entry of that name: the
        // file itself, or the directory implied above a deeper path.
        return Err(Error::Usage(format!(
            "initramfs path {path:?} starts with the cpio end marker {TRAILER}: the kernel would ignore every entry after it"
        )));
    }
    Ok(trimmed.to_string())
}

/// Two entries where one would have to be a file and a directory. Paths are
/// anyone's bytes: shown escaped, like `normalise`'s.
fn clash_error(path: &str, other: &str) -> Error {
    let shown = |p: &str| xvmm_host::escape::visible(p).into_owned();
    let both = if other.len() < path.len() {
        other
    } else {
        path
    };
    Error::Usage(format!(
        "initramfs entries /{} and /{} clash: /{} would have to be a file and a directory",
        shown(path),
        shown(other),
        shown(both)
    ))
}

impl Archive {
    pub fn new() -> Archive {
        Archive::default()
    }

    /// Adds a node; a later add of the same path replaces the earlier one.
    /// A path below something that is not a directory, or a non-directory
    /// where other paths need a directory, is refused: the kernel could not
    /// unpack such an archive.
    pub fn add(&mut self, path: &str, node: Node) -> Result<&mut Archive> {
        if let Node::File { data, .. } = &node {
            if u32::try_from(data.len()).is_err() {
                return Err(Error::Usage(format!(
                    "initramfs file {path} is larger than 4 GiB (cpio newc limit)"
                )));
            }
        }
        let path = normalise(path)?;
        self.check_fits(&path, &node)?;
        self.nodes.insert(path, node);
        Ok(self)
    }

    /// Refuses `path` when one of its ancestors is a non-directory, or when
    /// `node` is not a directory and other entries lie below `path`.
    fn check_fits(&self, path: &str, node: &Node) -> Result<()> {
        let clash = |other: &str| Err(clash_error(path, other));
        let mut end = 0;
        while let Some(i) = path[end..].find('/') {
            end += i;
            let ancestor = &path[..end];
            if matches!(self.nodes.get(ancestor), Some(n) if !matches!(n, Node::Dir { .. })) {
                return clash(ancestor);
            }
            end += 1;
        }
        if !matches!(node, Node::Dir { .. }) {
            let below = format!("{path}/");
            if let Some((other, _)) = self.nodes.range(below.clone()..).next() {
                if other.starts_with(&below) {
                    return clash(other);
                }
            }
        }
        Ok(())
    }

    pub fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) -> Result<&mut Archive> {
        self.add(path, Node::File { data, mode })
    }

    pub fn dir(&mut self, path: &str, mode: u32) -> Result<&mut Archive> {
        self.add(path, Node::Dir { mode })
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> Result<&mut Archive> {
        self.add(
            path,
            Node::Symlink {
                target: target.to_string(),
            },
        )
    }

    /// `/dev/console` (char 5:1): the kernel opens it as init's stdin/stdout
    /// before /init runs, and devtmpfs is not mounted on an initramfs.
    pub fn console(&mut self) -> Result<&mut Archive> {
        self.add(
            "dev/console",
            Node::CharDev {
                major: 5,
                minor: 1,
                mode: 0o600,
            },
        )
    }

    /// The archive as newc cpio bytes: implied directories first (parents
    /// always sort before their children), then the trailer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut all: BTreeMap<&str, Node> = BTreeMap::new();
        for path in self.nodes.keys() {
            let mut end = 0;
            while let Some(i) = path[end..].find('/') {
                end += i;
                all.entry(&path[..end]).or_insert(Node::Dir { mode: 0o755 });
                end += 1;
            }
        }
        for (path, node) in &self.nodes {
            all.insert(path, node.clone());
        }
        let mut out = Vec::new();
        for (ino, (path, node)) in (1u32..).zip(&all) {
            let (mode, nlink, data, rdev): (u32, u32, &[u8], (u32, u32)) = match node {
                Node::File { data, mode } => (S_IFREG | (mode & 0o7777), 1, data, (0, 0)),
                Node::Dir { mode } => (S_IFDIR | (mode & 0o7777), 2, &[], (0, 0)),
                Node::Symlink { target } => (S_IFLNK | 0o777, 1, target.as_bytes(), (0, 0)),
                Node::CharDev { major, minor, mode } => {
                    (S_IFCHR | (mode & 0o7777), 1, &[], (*major, *minor))
                }
            };
            write_entry(&mut out, ino, mode, nlink, rdev, path, data);
        }
        write_entry(&mut out, 0, 0, 1, (0, 0), TRAILER, &[]);
        out
    }

    /// This archive, then a second one holding only the regular file
    /// `path` of `size` bytes, laid out so that the file's data starts a
    /// whole number of `align` bytes from the start: it can then be mapped
    /// from its own file into guest memory instead of copied. Returns the
    /// bytes before the data (this archive, NUL padding, which the kernel
    /// skips between archives, and the file's header) and after it (its
    /// padding and the second archive's trailer). `align` is a power of two.
    pub fn around_file(
        &self,
        path: &str,
        size: u64,
        mode: u32,
        align: usize,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let name = normalise(path)?;
        if self.nodes.contains_key(&name) || name.contains('/') {
            return Err(Error::Initrd(format!(
                "{path}: the mapped file must be new and at the top"
            )));
        }
        let len =
            u32::try_from(size).map_err(|_| Error::Initrd(format!("{path}: 4 GiB or more")))?;
        let mut header = Vec::new();
        // An inode number of its own (with nlink 1 the kernel links nothing).
        let ino = u32::try_from(self.nodes.len()).unwrap_or(u32::MAX - 1) + 1000;
        write_header(
            &mut header,
            ino,
            S_IFREG | (mode & 0o7777),
            1,
            (0, 0),
            &name,
            len,
        );
        let mut before = self.to_bytes();
        let data_at = (before.len() + header.len()).next_multiple_of(align);
        before.resize(data_at - header.len(), 0);
        before.extend_from_slice(&header);
        // The trailer's own padding counts from its start, 4-byte aligned.
        let mut trailer = Vec::new();
        write_entry(&mut trailer, 0, 0, 1, (0, 0), TRAILER, &[]);
        let mut after = vec![0u8; xvmm_results::num::usize_from(size.next_multiple_of(4) - size)];
        after.extend_from_slice(&trailer);
        Ok((before, after))
    }
}

/// One header + name + data, each of name and data padded to 4 bytes.
#[allow(
    clippy::cast_possible_truncation,
    reason = "sizes fit the u32 fields: Archive::add rejects files of 4 GiB and more, names and symlink targets are paths"
)]
fn write_entry(
    out: &mut Vec<u8>,
    ino: u32,
    mode: u32,
    nlink: u32,
    rdev: (u32, u32),
    name: &str,
    data: &[u8],
) {
    write_header(out, ino, mode, nlink, rdev, name, data.len() as u32);
    out.extend_from_slice(data);
    pad4(out);
}

/// One header + name, padded to 4 bytes, for `size` bytes of data.
#[allow(
    clippy::cast_possible_truncation,
    reason = "names are paths, far shorter than 4 GiB"
)]
fn write_header(
    out: &mut Vec<u8>,
    ino: u32,
    mode: u32,
    nlink: u32,
    rdev: (u32, u32),
    name: &str,
    size: u32,
) {
    out.extend_from_slice(MAGIC);
    let fields = [
        ino,
        mode,
        0, // uid
        0, // gid
        nlink,
        0, // mtime: fixed, so images are reproducible
        size,
        0, // devmajor
        0, // devminor
        rdev.0,
        rdev.1,
        name.len() as u32 + 1, // namesize counts the NUL
        0,                     // check (only for the "070702" format)
    ];
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::Path;

    /// (name, mode, nlink, rdev, data) of one parsed entry.
    type Parsed = (String, u32, u32, (u32, u32), Vec<u8>);

    /// Parses newc bytes back, checking the fixed fields and the padding.
    fn parse(bytes: &[u8]) -> Vec<Parsed> {
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            assert_eq!(at % 4, 0, "entry not 4-byte aligned");
            assert_eq!(&bytes[at..at + 6], MAGIC);
            let field = |i: usize| {
                let s = std::str::from_utf8(&bytes[at + 6 + 8 * i..at + 14 + 8 * i]).unwrap();
                u32::from_str_radix(s, 16).unwrap()
            };
            let (mode, nlink, size, namesize) = (field(1), field(4), field(6), field(11));
            let rdev = (field(9), field(10));
            assert_eq!((field(2), field(3), field(5), field(12)), (0, 0, 0, 0));
            let name_start = at + 110;
            let name = &bytes[name_start..name_start + namesize as usize - 1];
            assert_eq!(bytes[name_start + namesize as usize - 1], 0);
            let data_start = (name_start + namesize as usize).next_multiple_of(4);
            assert!(bytes[name_start + namesize as usize..data_start]
                .iter()
                .all(|&b| b == 0));
            let data = bytes[data_start..data_start + size as usize].to_vec();
            let name = String::from_utf8(name.to_vec()).unwrap();
            at = (data_start + size as usize).next_multiple_of(4);
            let done = name == TRAILER;
            out.push((name, mode, nlink, rdev, data));
            if done {
                assert_eq!(at, bytes.len(), "bytes after the trailer");
                return out;
            }
        }
    }

    /// The archives of `bytes` as the kernel reads them: each from a `0`
    /// at a 4-byte boundary, NULs between them skipped.
    fn parse_concatenated(bytes: &[u8]) -> Vec<Vec<Parsed>> {
        let mut archives = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            if bytes[at] == 0 {
                at += 1;
                continue;
            }
            assert_eq!(at % 4, 0, "an archive off a 4-byte boundary");
            let len = archive_len(&bytes[at..]);
            archives.push(parse(&bytes[at..at + len]));
            at += len;
        }
        archives
    }

    /// How long the archive at the start of `bytes` is, trailer included.
    fn archive_len(bytes: &[u8]) -> usize {
        let end = bytes
            .windows(TRAILER.len())
            .position(|w| w == TRAILER.as_bytes())
            .unwrap();
        (end + TRAILER.len() + 1).next_multiple_of(4)
    }

    #[test]
    fn a_file_can_be_laid_out_for_mapping() {
        let mut a = Archive::new();
        a.console().unwrap();
        for size in [0u64, 1, 4095, 4096, 10_001] {
            let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8 + 1).collect();
            let (before, after) = a.around_file("/init", size, 0o755, 4096).unwrap();
            assert_eq!(before.len() % 4096, 0, "size {size}");
            let whole = [before.as_slice(), &data, &after].concat();
            let archives = parse_concatenated(&whole);
            assert_eq!(archives.len(), 2);
            assert_eq!(archives[0], parse(&a.to_bytes()));
            let init = &archives[1][0];
            assert_eq!(
                (init.0.as_str(), init.1, init.2),
                ("init", S_IFREG | 0o755, 1)
            );
            assert_eq!(init.4, data);
            assert_eq!(archives[1][1].0, TRAILER);
        }
        assert!(a.around_file("/dev/console", 1, 0o755, 4096).is_err());
        assert!(a.around_file("/bin/x", 1, 0o755, 4096).is_err());
        assert!(a.around_file("/init", 1 << 32, 0o755, 4096).is_err());
    }

    #[test]
    fn header_fields_padding_and_trailer() {
        let mut a = Archive::new();
        a.file("/init", b"abcde".to_vec(), 0o755).unwrap();
        let bytes = a.to_bytes();
        assert_eq!(&bytes[..6], b"070701");
        // ino 1, mode 0100755, uid, gid, nlink 1, mtime, size 5.
        assert_eq!(
            &bytes[6..62],
            b"00000001000081ed0000000000000000000000010000000000000005"
        );
        let entries = parse(&bytes);
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[0],
            ("init".into(), 0o100755, 1, (0, 0), b"abcde".to_vec())
        );
        assert_eq!(entries[1].0, TRAILER);
        assert_eq!(bytes.len() % 4, 0);
        // 110 + "init\0" = 115 -> 116; 5 data bytes -> 124; trailer 110 + 11 = 121 -> 124.
        assert_eq!(bytes.len(), 124 + 124);
    }

    #[test]
    fn directories_are_implied_before_their_children() {
        let mut a = Archive::new();
        a.file("l2/kernels/bzImage", vec![1; 3], 0o644).unwrap();
        a.file("l2-x", vec![], 0o644).unwrap();
        a.symlink("bin/sh", "/init").unwrap();
        a.console().unwrap();
        let names: Vec<(String, u32)> = parse(&a.to_bytes())
            .into_iter()
            .map(|e| (e.0, e.1))
            .collect();
        assert_eq!(
            names,
            vec![
                ("bin".into(), 0o040755),
                ("bin/sh".into(), 0o120777),
                ("dev".into(), 0o040755),
                ("dev/console".into(), 0o020600),
                ("l2".into(), 0o040755),
                ("l2-x".into(), 0o100644),
                ("l2/kernels".into(), 0o040755),
                ("l2/kernels/bzImage".into(), 0o100644),
                (TRAILER.into(), 0),
            ]
        );
        let console = parse(&a.to_bytes())
            .into_iter()
            .find(|e| e.0 == "dev/console");
        assert_eq!(console.map(|e| e.3), Some((5, 1)));
    }

    #[test]
    fn explicit_directory_mode_wins_over_implied() {
        let mut a = Archive::new();
        a.file("tmp/x", vec![], 0o644).unwrap();
        a.dir("tmp", 0o1777).unwrap();
        let tmp = parse(&a.to_bytes()).into_iter().find(|e| e.0 == "tmp");
        assert_eq!(tmp.map(|e| (e.1, e.2)), Some((0o041777, 2)));
    }

    #[test]
    fn rejects_bad_paths() {
        for bad in ["", "/", "a/../b", "./a", "a//b", "a\0b"] {
            assert!(normalise(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(normalise("/a/b/").unwrap(), "a/b");
    }

    /// Found by fuzzing (fuzz/fuzz_targets/initramfs.rs): the paths in a
    /// clash error were shown raw, control characters included.
    #[test]
    fn clashing_paths_are_shown_escaped() {
        let mut a = Archive::new();
        a.file("/a\u{4}", vec![1], 0o644).unwrap();
        let err = a.file("/a\u{4}/b", vec![2], 0o644).unwrap_err().to_string();
        assert!(err.contains("entries /a\\x04/b and /a\\x04 clash"), "{err}");
        assert!(!err.chars().any(char::is_control), "{err}");
    }

    /// Found by fuzzing (fuzz/fuzz_targets/initramfs.rs): a file called
    /// `/TRAILER!!!`, or the directory implied by `/TRAILER!!!/x`, was
    /// written as an ordinary entry, and the kernel (and any cpio reader)
    /// stopped there, silently dropping every later entry.
    #[test]
    fn the_end_marker_is_not_a_file_name() {
        let mut a = Archive::new();
        for bad in ["/TRAILER!!!", "/TRAILER!!!/TRAILER!!!", "TRAILER!!!/x/"] {
            let err = a.file(bad, vec![1], 0o644).unwrap_err().to_string();
            assert!(err.contains("cpio end marker"), "{err}");
        }
        assert!(a.dir("/TRAILER!!!", 0o755).is_err());
        a.file("/init", vec![2], 0o755).unwrap();
        // Below the root the name is harmless: the entry is "d/TRAILER!!!".
        a.file("/d/TRAILER!!!", vec![3], 0o644).unwrap();
        let names: Vec<String> = parse(&a.to_bytes()).into_iter().map(|e| e.0).collect();
        assert_eq!(names, ["d", "d/TRAILER!!!", "init", TRAILER]);
    }

    #[test]
    fn a_file_cannot_also_be_a_directory() {
        let mut a = Archive::new();
        a.file("/a", vec![1], 0o644).unwrap();
        let err = a.file("/a/b", vec![2], 0o644).unwrap_err().to_string();
        assert!(err.contains("/a/b and /a clash"), "{err}");
        let mut b = Archive::new();
        b.file("/x/y/z", vec![1], 0o644).unwrap();
        let err = b.file("/x", vec![2], 0o644).unwrap_err().to_string();
        assert!(err.contains("/x and /x/y/z clash"), "{err}");
        let err = b.symlink("/x/y", "/init").unwrap_err().to_string();
        assert!(err.contains("clash"), "{err}");
        // Directories, and replacing a file by a file, are fine.
        b.dir("/x", 0o755).unwrap();
        b.file("/x/y/z", vec![3], 0o600).unwrap();
        let names: Vec<String> = parse(&b.to_bytes()).into_iter().map(|e| e.0).collect();
        assert_eq!(names, ["x", "x/y", "x/y/z", TRAILER]);
    }

    #[test]
    fn cpio_tool_lists_what_we_wrote() {
        if !Path::new("/usr/bin/cpio").exists() && !Path::new("/bin/cpio").exists() {
            let why = "cpio(1) not installed (harness/setup.sh installs it): no cross-check";
            eprintln!("{}", xvmm_host::skip::record(why));
            return;
        }
        let mut a = Archive::new();
        a.file("/init", b"#!/bin/sh\n".to_vec(), 0o755).unwrap();
        a.file("/etc/plan", b"step a\n".to_vec(), 0o644).unwrap();
        a.console().unwrap();
        let file = std::env::temp_dir().join(format!("xvmm-cpio-{}.cpio", std::process::id()));
        fs::write(&file, a.to_bytes()).unwrap();
        let out = std::process::Command::new("cpio")
            .args(["-t", "--quiet", "-F"])
            .arg(&file)
            .output()
            .unwrap();
        fs::remove_file(&file).unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "dev\ndev/console\netc\netc/plan\ninit\n"
        );
    }
}
