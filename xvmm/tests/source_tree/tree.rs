//! A crate's source tree as modules and files: what each path a file names
//! resolves to, and the graph of which file uses which (shared by xvmm's
//! layer test and xperf's file-cycle test).

use super::scan::{self, Refs};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One file of the library crate (the binary's `main.rs` is not one).
pub struct SourceFile {
    pub path: PathBuf,
    /// Its module path from the crate root (`[]` for `lib.rs`).
    pub module: Vec<String>,
    /// Its tokens without test code.
    pub tokens: Vec<String>,
    pub refs: Refs,
}

pub struct Crate {
    pub files: Vec<SourceFile>,
    /// Module path -> index in `files`, for modules that are files.
    modules: BTreeMap<Vec<String>, usize>,
}

/// How deep `use` chains and re-exports are followed (a cycle of imports
/// is an error in Rust; this only stops a malformed tree).
const MAX_DEPTH: u32 = 8;

impl Crate {
    /// The library under `src` (a source root with `lib.rs`).
    pub fn load(src: &Path) -> Crate {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        paths.sort();
        let mut files = Vec::new();
        for path in paths {
            let rel = path.strip_prefix(src).unwrap().to_path_buf();
            if rel == Path::new("main.rs") {
                continue; // the binary: a crate of its own, above the library
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let tokens = scan::without_tests(&scan::tokens(&text));
            let refs = scan::refs(&tokens);
            files.push(SourceFile {
                module: module_path(&rel),
                path,
                tokens,
                refs,
            });
        }
        let modules = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        Crate { files, modules }
    }

    /// The file of the crate root.
    pub fn root(&self) -> &SourceFile {
        &self.files[self.modules[&Vec::new()]]
    }

    /// The top-level module an absolute path lands in, through the crate
    /// root's re-exports (`crate::Error` is `error`'s); `None` for the root.
    pub fn top_module(&self, abs: &[String], depth: u32) -> Option<String> {
        let top = abs.first()?;
        if self.is_module(std::slice::from_ref(top)) || depth > MAX_DEPTH {
            return Some(top.clone());
        }
        let root = self.modules[&Vec::new()];
        let export = self.files[root]
            .refs
            .uses
            .iter()
            .find(|u| u.scope.is_empty() && u.name.as_ref() == Some(top));
        match export.and_then(|u| self.absolute(root, &[], &u.path, 0)) {
            Some(to) if !to.is_empty() => {
                self.top_module(&[to, abs[1..].to_vec()].concat(), depth + 1)
            }
            _ => Some(top.clone()), // another crate's item, or an unknown name
        }
    }

    pub fn is_module(&self, module: &[String]) -> bool {
        self.modules.contains_key(module)
    }

    /// Every path file `f` names, made absolute (from the crate root); paths
    /// into other crates are left out.
    pub fn absolute_paths(&self, f: usize) -> Vec<Vec<String>> {
        let file = &self.files[f];
        (file.refs.paths.iter())
            .filter_map(|p| {
                self.absolute(f, &[&file.module[..], &p.scope[..]].concat(), &p.segs, 0)
            })
            .collect()
    }

    /// `segs`, written in module `scope` of file `f`, from the crate root.
    fn absolute(
        &self,
        f: usize,
        scope: &[String],
        segs: &[String],
        depth: u32,
    ) -> Option<Vec<String>> {
        let head = segs.first()?;
        let (mut base, rest) = match head.as_str() {
            "crate" => (Vec::new(), &segs[1..]),
            "self" | "super" => {
                let n = segs
                    .iter()
                    .take_while(|s| *s == "self" || *s == "super")
                    .count();
                let climbs = segs[..n].iter().filter(|s| *s == "super").count();
                (
                    scope[..scope.len().saturating_sub(climbs)].to_vec(),
                    &segs[n..],
                )
            }
            _ => (self.named(f, scope, head, depth)?, &segs[1..]),
        };
        base.extend_from_slice(rest);
        Some(base)
    }

    /// What a plain name at the head of a path means in `scope` of file
    /// `f`: a child module, a name a `use` brought in (an alias such as
    /// `use crate as c` included), or a module a glob import reaches.
    fn named(&self, f: usize, scope: &[String], name: &str, depth: u32) -> Option<Vec<String>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let child = [scope, &[name.to_string()]].concat();
        if self.is_module(&child) {
            return Some(child);
        }
        let file = &self.files[f];
        let in_scope = |u: &&scan::Use| [&file.module[..], &u.scope[..]].concat();
        let uses = file.refs.uses.iter();
        if let Some(u) = uses.clone().find(|u| u.name.as_deref() == Some(name)) {
            return self.absolute(f, &in_scope(&u), &u.path, depth + 1);
        }
        uses.filter(|u| u.name.is_none())
            .filter_map(|u| self.absolute(f, &in_scope(&u), &u.path, depth + 1))
            .map(|glob| [glob, vec![name.to_string()]].concat())
            .find(|m| self.is_module(m))
    }

    /// The file an absolute path named in file `from` lands in: the deepest
    /// module that is a file, then on through that file's `use` of the next
    /// name (one `from` can see), so an item re-exported by a parent is
    /// charged to the file that defines it.
    pub fn file_of(&self, from: usize, abs: &[String], depth: u32) -> Option<usize> {
        let n = (0..=abs.len()).rev().find(|&n| self.is_module(&abs[..n]))?;
        let f = self.modules[&abs[..n]];
        let Some(next) = abs.get(n) else {
            return Some(f);
        };
        let file = &self.files[f];
        let export = file
            .refs
            .uses
            .iter()
            .find(|u| u.scope.is_empty() && u.name.as_ref() == Some(next));
        // A private `use` is seen by the module and those below it alone.
        let seen = |u: &scan::Use| u.public || self.files[from].module.starts_with(&file.module);
        match export.filter(|u| seen(u)) {
            Some(u) if depth < MAX_DEPTH => {
                let to = self.absolute(f, &file.module, &u.path, 0);
                let via = to.map(|to| [to, abs[n + 1..].to_vec()].concat());
                Some(
                    via.and_then(|via| self.file_of(from, &via, depth + 1))
                        .unwrap_or(f),
                )
            }
            _ => Some(f),
        }
    }

    /// File -> files it uses, leaving out a file's own ancestors and
    /// descendants (a `mod.rs` declares its children, which use its items).
    pub fn file_graph(&self) -> Vec<BTreeSet<usize>> {
        let mut graph = vec![BTreeSet::new(); self.files.len()];
        for (f, edges) in graph.iter_mut().enumerate() {
            let me = &self.files[f].module;
            for abs in self.absolute_paths(f) {
                let Some(to) = self.file_of(f, &abs, 0) else {
                    continue;
                };
                let them = &self.files[to].module;
                if !me.starts_with(them) && !them.starts_with(me) {
                    edges.insert(to);
                }
            }
        }
        graph
    }

    /// Each group of files that use one another in a cycle, as one line.
    pub fn cycles(&self) -> Vec<String> {
        let graph = self.file_graph();
        let reach: Vec<BTreeSet<usize>> = (0..graph.len()).map(|f| reachable(&graph, f)).collect();
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for f in 0..graph.len() {
            let group: Vec<usize> = reach[f]
                .iter()
                .copied()
                .filter(|&g| reach[g].contains(&f))
                .collect();
            if group.len() > 1 && seen.insert(group.clone()) {
                let names: Vec<String> = group.iter().map(|&g| self.name(g)).collect();
                out.push(format!(
                    "files that use one another: {}",
                    names.join(" <-> ")
                ));
            }
        }
        out
    }

    /// A file's module path as `a::b` (the crate root as `lib.rs`).
    pub fn name(&self, f: usize) -> String {
        match self.files[f].module.join("::") {
            s if s.is_empty() => "lib.rs".into(),
            s => s,
        }
    }
}

/// The files reachable from `from` (itself included).
fn reachable(graph: &[BTreeSet<usize>], from: usize) -> BTreeSet<usize> {
    let mut seen = BTreeSet::from([from]);
    let mut todo = vec![from];
    while let Some(f) = todo.pop() {
        for &g in &graph[f] {
            if seen.insert(g) {
                todo.push(g);
            }
        }
    }
    seen
}

/// Every `.rs` file under `dir`, at any depth.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a/b.rs` and `a/b/mod.rs` are module `a::b`; `lib.rs` is the root.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.strip_suffix(".rs").unwrap_or(&last);
    if !(stem == "mod" || (parts.is_empty() && stem == "lib")) {
        parts.push(stem.to_string());
    }
    parts
}
