//! The cache key of a kernel build: a SHA-256 over every input that can
//! change the resulting images. Pure, so it can be unit-tested.

use sha2::{Digest, Sha256};

/// Bump when the build recipe (commands, config steps) changes in a way the
/// other inputs do not capture, so stale cache entries are not reused.
pub const RECIPE_VERSION: u32 = 1;

/// Everything a kernel build depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInputs {
    /// Identity of the source: tarball path+size+mtime, or tree path+version.
    pub source: String,
    /// Kconfig fragments in merge order: (file name, content).
    pub fragments: Vec<(String, Vec<u8>)>,
    /// Patches in apply order: (file name, content). Empty when unpatched.
    pub patches: Vec<(String, Vec<u8>)>,
    /// "guest" or "host".
    pub flavour: String,
    /// The make invocations, without the job count (it does not change output).
    pub make_command: Vec<String>,
    /// Compiler identity (`gcc --version` first line).
    pub toolchain: String,
}

impl KeyInputs {
    /// Hex SHA-256 of the inputs. Each field is tagged and length-prefixed so
    /// that moving bytes from one field to the next changes the key.
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        let mut put = |tag: &str, bytes: &[u8]| {
            h.update(tag.as_bytes());
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        put("recipe", &RECIPE_VERSION.to_le_bytes());
        put("source", self.source.as_bytes());
        for (name, content) in &self.fragments {
            put("fragment-name", name.as_bytes());
            put("fragment", content);
        }
        for (name, content) in &self.patches {
            put("patch-name", name.as_bytes());
            put("patch", content);
        }
        put("flavour", self.flavour.as_bytes());
        for arg in &self.make_command {
            put("make-arg", arg.as_bytes());
        }
        put("toolchain", self.toolchain.as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> KeyInputs {
        KeyInputs {
            source: "tarball:/usr/src/linux-source-6.12.tar.xz:151931384:1731588960".into(),
            fragments: vec![("guest.config".into(), b"CONFIG_PVH=y\n".to_vec())],
            patches: vec![],
            flavour: "guest".into(),
            make_command: vec!["ARCH=x86_64".into(), "vmlinux".into(), "bzImage".into()],
            toolchain: "gcc (Debian 12.2.0-14) 12.2.0".into(),
        }
    }

    #[test]
    fn stable_for_equal_inputs() {
        assert_eq!(base().key(), base().key());
        assert_eq!(base().key().len(), 64);
        assert!(base().key().chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn changes_when_any_input_changes() {
        let k = base().key();
        let mut variants = Vec::new();
        let mut v = base();
        v.source.push('1');
        variants.push(v);
        let mut v = base();
        v.fragments[0].1.push(b'#');
        variants.push(v);
        let mut v = base();
        v.fragments[0].0 = "other.config".into();
        variants.push(v);
        let mut v = base();
        v.fragments
            .push(("xperf.config".into(), b"CONFIG_X=y\n".to_vec()));
        variants.push(v);
        let mut v = base();
        v.patches.push(("0001-x.patch".into(), b"diff".to_vec()));
        variants.push(v);
        let mut v = base();
        v.flavour = "host".into();
        variants.push(v);
        let mut v = base();
        v.make_command.push("V=1".into());
        variants.push(v);
        let mut v = base();
        v.toolchain = "gcc 13".into();
        variants.push(v);
        let mut keys: Vec<String> = variants.iter().map(KeyInputs::key).collect();
        assert!(keys.iter().all(|x| *x != k));
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), variants.len(), "two different inputs collided");
    }

    #[test]
    fn field_boundaries_matter() {
        let mut a = base();
        a.make_command = vec!["ab".into(), "c".into()];
        let mut b = base();
        b.make_command = vec!["a".into(), "bc".into()];
        assert_ne!(a.key(), b.key());
    }

    #[test]
    fn patch_order_matters() {
        let mut a = base();
        a.patches = vec![
            ("0001.patch".into(), b"one".to_vec()),
            ("0002.patch".into(), b"two".to_vec()),
        ];
        let mut b = a.clone();
        b.patches.reverse();
        assert_ne!(a.key(), b.key());
    }
}
