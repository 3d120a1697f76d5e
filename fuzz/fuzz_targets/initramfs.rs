//! The initramfs writer (`initramfs::Archive`, what `xvmm initramfs` and the
//! built-in xperf initramfs use), checked against an independent newc reader
//! (the `cpio` crate) and an independent model of what the kernel unpacks:
//! every add the model accepts is accepted, and the archive unpacks to
//! exactly the model, parents before children, nothing after the trailer.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::io::Read;
use xvmm::initramfs::{Archive, Node};
use xvmm_fuzz::assert_one_line;

/// Path components worth combining: names, the kernel's end marker, and
/// components the writer must refuse.
const PARTS: [&str; 10] = [
    "a",
    "b",
    "dev",
    "console",
    "TRAILER!!!",
    "init",
    ".",
    "..",
    "",
    "x y",
];

#[derive(Arbitrary, Debug)]
enum PathSpec {
    Raw(String),
    Parts(Vec<u8>),
}

impl PathSpec {
    fn text(&self) -> String {
        match self {
            PathSpec::Raw(s) => s.clone(),
            PathSpec::Parts(p) => p.iter().fold(String::new(), |mut s, &i| {
                s.push('/');
                s.push_str(PARTS[usize::from(i) % PARTS.len()]);
                s
            }),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    File {
        path: PathSpec,
        data: Vec<u8>,
        mode: u32,
    },
    Dir {
        path: PathSpec,
        mode: u32,
    },
    Symlink {
        path: PathSpec,
        target: String,
    },
    Console,
}

const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// The name the kernel would create for `path`, or `None` when it names no
/// file or holds a component the kernel would refuse or misplace.
fn model_name(path: &str) -> Option<String> {
    let name = path.trim_start_matches('/').trim_end_matches('/');
    let ok = !name.is_empty()
        && !name.contains('\0')
        && name.split('/').next() != Some("TRAILER!!!")
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    ok.then(|| name.to_string())
}

/// Whether `node` at `name` fits the model: no ancestor is a non-directory,
/// and a non-directory has nothing below it.
fn fits(model: &BTreeMap<String, Node>, name: &str, node: &Node) -> bool {
    let ancestors_ok = name.match_indices('/').all(|(i, _)| {
        model
            .get(&name[..i])
            .is_none_or(|n| matches!(n, Node::Dir { .. }))
    });
    let below = format!("{name}/");
    let nothing_below =
        matches!(node, Node::Dir { .. }) || !model.keys().any(|k| k.starts_with(&below));
    ancestors_ok && nothing_below
}

/// One unpacked entry: (name, mode, rdev, data).
type Entry = (String, u32, (u32, u32), Vec<u8>);

/// Every entry before the trailer.
fn unpack(bytes: &[u8]) -> Vec<Entry> {
    assert_eq!(bytes.len() % 4, 0);
    let mut rest = bytes;
    let mut entries = Vec::new();
    loop {
        let mut reader = cpio::NewcReader::new(rest).expect("a newc entry");
        let e = reader.entry();
        let (name, mode, rdev) = (
            e.name().to_string(),
            e.mode(),
            (e.rdev_major(), e.rdev_minor()),
        );
        let trailer = e.is_trailer();
        let mut data = Vec::new();
        reader.read_to_end(&mut data).unwrap();
        rest = reader.finish().expect("the entry's data and padding");
        if trailer {
            assert!(rest.is_empty(), "{} bytes after the trailer", rest.len());
            return entries;
        }
        entries.push((name, mode, rdev, data));
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut archive = Archive::new();
    let mut model: BTreeMap<String, Node> = BTreeMap::new();
    for op in ops {
        let (path, node) = match op {
            Op::File { path, data, mode } => (path.text(), Node::File { data, mode }),
            Op::Dir { path, mode } => (path.text(), Node::Dir { mode }),
            Op::Symlink { path, target } => (path.text(), Node::Symlink { target }),
            Op::Console => (
                "/dev/console".into(),
                Node::CharDev {
                    major: 5,
                    minor: 1,
                    mode: 0o600,
                },
            ),
        };
        let accepted = archive.add(&path, node.clone());
        let expected = model_name(&path).filter(|n| fits(&model, n, &node));
        match (accepted, expected) {
            (Ok(_), Some(name)) => {
                model.insert(name, node);
            }
            (Err(e), None) => assert_one_line(&e.to_string(), "add"),
            (Ok(_), None) => panic!("{path:?} accepted, the kernel could not unpack it"),
            (Err(e), Some(_)) => panic!("{path:?} refused: {e}"),
        }
    }
    let entries = unpack(&archive.to_bytes());
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for (name, mode, rdev, data) in &entries {
        if let Some((parent, _)) = name.rsplit_once('/') {
            assert_eq!(
                seen.get(parent).map(|m| m & S_IFMT),
                Some(S_IFDIR),
                "{name} before its directory"
            );
        }
        assert!(seen.insert(name, *mode).is_none(), "{name} twice");
        let expected = match model.get(name) {
            Some(Node::File { data, mode }) => (S_IFREG | mode & 0o7777, (0, 0), data.clone()),
            Some(Node::Dir { mode }) => (S_IFDIR | mode & 0o7777, (0, 0), Vec::new()),
            Some(Node::Symlink { target }) => {
                (S_IFLNK | 0o777, (0, 0), target.clone().into_bytes())
            }
            Some(Node::CharDev { major, minor, mode }) => {
                (S_IFCHR | mode & 0o7777, (*major, *minor), Vec::new())
            }
            None => {
                // Only the directories the model's paths imply.
                let implied = format!("{name}/");
                assert!(
                    model.keys().any(|k| k.starts_with(&implied)),
                    "{name} from nowhere"
                );
                (S_IFDIR | 0o755, (0, 0), Vec::new())
            }
        };
        assert_eq!(
            (*mode, *rdev, data),
            (expected.0, expected.1, &expected.2),
            "{name}"
        );
    }
    for name in model.keys() {
        assert!(
            seen.contains_key(name.as_str()),
            "{name} missing from the archive"
        );
    }
});
