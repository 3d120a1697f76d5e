//! The book (`docs/`, built by mdBook from `book.toml`) is checked like code:
//!
//! - `mdbook build` succeeds and prints no `WARN` or `ERROR` line;
//! - every page in `docs/` is in `SUMMARY.md`, and every internal link
//!   (`page.md`, `page.md#anchor`, `#anchor`, an image or a file beside the
//!   pages) resolves: anchors are read from the HTML mdBook wrote, so they are
//!   the ids it really generates;
//! - every repository path the book names exists (the rule is on
//!   [`repository_paths`]);
//! - every `xvmm ...` or `xperf ...` command in a code block uses only long
//!   flags that the binary's `--help` for that subcommand lists, so a renamed
//!   flag fails here rather than in a reader's shell.
//!
//! Each check collects every problem, names the page and the offending link,
//! path or flag, and fails once at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo().join("target"), PathBuf::from)
}

/// The book's source folder (`src` in book.toml).
fn docs() -> PathBuf {
    repo().join("docs")
}

/// Fails the test with every problem found, one a line.
fn assert_none(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{what}: {} problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------
// Markdown, as far as these checks need it: code blocks (fenced or indented)
// apart from prose; in prose, code spans and link targets.

/// A run of a page's text: prose (a paragraph-like run of lines, so that a
/// code span or link broken across lines is still one) or a code block.
struct Block {
    /// 1-based line of the block's first line, for messages.
    line: usize,
    code: bool,
    text: String,
}

/// Where a list item's content starts, if `line` opens one (`- `, `* `,
/// `1. `).
fn list_content_indent(line: &str) -> Option<usize> {
    let indent = line.len() - line.trim_start().len();
    let rest = &line[indent..];
    if rest.starts_with("- ") || rest.starts_with("* ") || rest.starts_with("+ ") {
        return Some(indent + 2);
    }
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && rest[digits..].starts_with(". ") {
        return Some(indent + digits + 2);
    }
    None
}

/// The runs of a page's text, in order (see [`Block`]).
fn blocks(text: &str) -> Vec<Block> {
    let mut splitter = BlockSplitter {
        blank_before: true,
        ..BlockSplitter::default()
    };
    for (i, line) in text.lines().enumerate() {
        splitter.line(i + 1, line);
    }
    splitter.finish()
}

/// What [`blocks`] knows as it reads a page line by line: the runs done and
/// the one (prose, fenced or indented code) still open.
#[derive(Default)]
struct BlockSplitter {
    out: Vec<Block>,
    prose: Option<Block>,
    /// The open fence's marker (```` ``` ````, `~~~`, ...) and its block.
    fence: Option<(String, Block)>,
    indented: Option<Block>,
    /// The content indent of the list the text is in: indented code inside a
    /// list item starts 4 columns past it.
    list: Option<usize>,
    blank_before: bool,
}

impl BlockSplitter {
    /// Takes line `n` (1-based) into the run it belongs to.
    fn line(&mut self, n: usize, line: &str) {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        if self.continue_fence(line, trimmed) {
            return;
        }
        let code_indent = self.list.unwrap_or(0) + 4;
        if self.continue_indented(line, indent, code_indent) {
            return;
        }
        if line.trim().is_empty() {
            self.out.extend(self.prose.take());
            self.blank_before = true;
            return;
        }
        if self.open_fence(n, trimmed) {
            return;
        }
        if self.blank_before && indent >= code_indent && self.prose.is_none() {
            self.indented = Some(Block {
                line: n,
                code: true,
                text: format!("{}\n", &line[code_indent..]),
            });
            return;
        }
        self.track_list(line, indent);
        self.push_prose(n, line, trimmed);
    }

    /// Inside a fenced block: the line closes it or joins it (true either
    /// way); false when no fence is open.
    fn continue_fence(&mut self, line: &str, trimmed: &str) -> bool {
        let Some((marker, mut block)) = self.fence.take() else {
            return false;
        };
        if trimmed.starts_with(marker.as_str()) && trimmed.trim_end() == marker.as_str() {
            self.out.push(block);
        } else {
            block.text.push_str(line);
            block.text.push('\n');
            self.fence = Some((marker, block));
        }
        true
    }

    /// Inside an indented block: a blank or indented enough line joins it
    /// (true); any other line ends it and is read on (false).
    fn continue_indented(&mut self, line: &str, indent: usize, code_indent: usize) -> bool {
        let Some(mut block) = self.indented.take() else {
            return false;
        };
        if line.trim().is_empty() || indent >= code_indent {
            block.text.push_str(line.get(code_indent..).unwrap_or(""));
            block.text.push('\n');
            self.indented = Some(block);
            return true;
        }
        self.out.push(block);
        self.blank_before = true;
        false
    }

    /// A ```` ``` ```` or `~~~` line ends the prose and opens a fenced block
    /// (true); false for any other line.
    fn open_fence(&mut self, n: usize, trimmed: &str) -> bool {
        if !(trimmed.starts_with("```") || trimmed.starts_with("~~~")) {
            return false;
        }
        self.out.extend(self.prose.take());
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        let block = Block {
            line: n + 1,
            code: true,
            text: String::new(),
        };
        self.fence = Some((marker, block));
        true
    }

    /// A list item sets the list's content indent; a line after a blank one
    /// that starts left of it leaves the list.
    fn track_list(&mut self, line: &str, indent: usize) {
        if let Some(content) = list_content_indent(line) {
            self.list = Some(content);
        } else if self.blank_before && indent < self.list.unwrap_or(0) {
            self.list = None;
        }
    }

    /// Adds a line of prose to the open run, or to a new one.
    fn push_prose(&mut self, n: usize, line: &str, trimmed: &str) {
        if trimmed.starts_with('#')
            || trimmed.starts_with('|')
            || list_content_indent(line).is_some()
        {
            // A heading, a table row or a new list item starts a new run, so
            // that a line number points near what it names.
            self.out.extend(self.prose.take());
        }
        let block = self.prose.get_or_insert_with(|| Block {
            line: n,
            code: false,
            text: String::new(),
        });
        block.text.push_str(line);
        block.text.push('\n');
        self.blank_before = false;
    }

    /// The runs, with any still open at the end of the page.
    fn finish(mut self) -> Vec<Block> {
        self.out.extend(self.prose);
        self.out.extend(self.indented);
        self.out.extend(self.fence.map(|(_, b)| b));
        self.out
    }
}

/// The code spans of a run of prose, and the prose with them taken out.
fn code_spans(text: &str) -> (Vec<String>, String) {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut rest = String::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            rest.push_str(&text[i..i + 2]);
            i += 2;
            continue;
        }
        if bytes[i] != b'`' {
            let ch = text[i..].chars().next().unwrap();
            rest.push(ch);
            i += ch.len_utf8();
            continue;
        }
        let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
        let open_end = i + run;
        // The closing run has exactly as many backticks.
        let mut j = open_end;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let r = bytes[j..].iter().take_while(|&&b| b == b'`').count();
                if r == run {
                    close = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                spans.push(text[open_end..j].replace('\n', " ").trim().to_string());
                rest.push(' ');
                i = j + run;
            }
            None => {
                rest.push_str(&text[i..open_end]);
                i = open_end;
            }
        }
    }
    (spans, rest)
}

/// Link and image targets in prose (code spans already taken out): inline
/// `[text](target "title")` and reference definitions `[label]: target`.
fn link_targets(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut search = prose;
    while let Some(at) = search.find("](") {
        let after = &search[at + 2..];
        let after = after.trim_start();
        let target = if let Some(inner) = after.strip_prefix('<') {
            inner.split('>').next().unwrap_or("")
        } else {
            // Up to the closing parenthesis or the title; balanced parentheses
            // inside the target stay in it.
            let mut depth = 0;
            let mut end = after.len();
            for (k, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = k;
                        break;
                    }
                    ')' => depth -= 1,
                    c if c.is_whitespace() => {
                        end = k;
                        break;
                    }
                    _ => {}
                }
            }
            &after[..end]
        };
        out.push(target.to_string());
        search = &search[at + 2..];
    }
    for line in prose.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('[') {
            if let Some((label, target)) = rest.split_once("]:") {
                if !label.is_empty() && !label.contains(']') {
                    if let Some(target) = target.split_whitespace().next() {
                        out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
                    }
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The book's pages.

struct Page {
    /// Relative to docs/, with `/` separators.
    name: String,
    text: String,
}

/// The `.md` files SUMMARY.md links, in order.
fn summary_pages() -> Vec<String> {
    let summary = std::fs::read_to_string(docs().join("SUMMARY.md")).expect("docs/SUMMARY.md");
    let mut pages = Vec::new();
    for block in blocks(&summary).iter().filter(|b| !b.code) {
        let (_, prose) = code_spans(&block.text);
        for target in link_targets(&prose) {
            if !target.is_empty() && !pages.contains(&target) {
                pages.push(target);
            }
        }
    }
    pages
}

fn pages() -> Vec<Page> {
    let mut names = summary_pages();
    names.push("SUMMARY.md".into());
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(docs().join(&name))
                .unwrap_or_else(|e| panic!("SUMMARY.md names docs/{name}: {e}"));
            Page { name, text }
        })
        .collect()
}

/// Every `.md` file under docs/, relative to it.
fn markdown_files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            let rel = path.strip_prefix(docs()).unwrap();
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// `a/b/../c` -> `a/c`; None when it climbs out of the root.
fn normalise(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

// ---------------------------------------------------------------------------
// (a) mdbook build.

fn mdbook() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("mdbook"))
            .find(|p| p.is_file())
    });
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    on_path
        .or_else(|| {
            cargo_home
                .map(|h| h.join("bin/mdbook"))
                .filter(|p| p.is_file())
        })
        .expect(
            "mdbook is not installed (harness/setup.sh installs it: \
             cargo install mdbook --locked --version 0.4.52)",
        )
}

/// Builds the book into a folder of its own under target/ and returns it.
fn build_book() -> PathBuf {
    let dest = target_dir().join("book-test");
    let out = Command::new(mdbook())
        .arg("build")
        .arg("--dest-dir")
        .arg(&dest)
        .arg(repo())
        .output()
        .expect("running mdbook");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let complaints: Vec<String> = text
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .map(str::to_string)
        .collect();
    assert!(out.status.success(), "mdbook build failed:\n{text}");
    assert_none("mdbook build printed warnings or errors", &complaints);
    dest
}

/// The ids of a built page's headings: the anchors mdBook made.
fn heading_ids(html: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for level in 1..=6 {
        let open = format!("<h{level} id=\"");
        let mut rest = html;
        while let Some(at) = rest.find(&open) {
            rest = &rest[at + open.len()..];
            if let Some(end) = rest.find('"') {
                ids.insert(rest[..end].to_string());
            }
        }
    }
    ids
}

// ---------------------------------------------------------------------------
// (b) internal links.

fn check_links(pages: &[Page], built: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let in_book: BTreeSet<&str> = pages.iter().map(|p| p.name.as_str()).collect();
    let mut ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for page in pages.iter().filter(|p| p.name != "SUMMARY.md") {
        let html = built.join(page.name.replace(".md", ".html"));
        let html =
            std::fs::read_to_string(&html).unwrap_or_else(|e| panic!("{}: {e}", html.display()));
        ids.insert(page.name.clone(), heading_ids(&html));
    }
    let mut files = Vec::new();
    markdown_files(&docs(), &mut files);
    for file in files {
        if !in_book.contains(file.as_str()) {
            problems.push(format!(
                "docs/{file}: not in SUMMARY.md (mdBook would leave it out)"
            ));
        }
    }
    for page in pages {
        let dir = page.name.rsplit_once('/').map_or("", |(d, _)| d);
        for block in blocks(&page.text).iter().filter(|b| !b.code) {
            let (_, prose) = code_spans(&block.text);
            for target in link_targets(&prose) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let at = format!("docs/{}:{}: link `{target}`", page.name, block.line);
                let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let resolved = if path.is_empty() {
                    Some(page.name.clone())
                } else {
                    normalise(&format!("{dir}/{path}"))
                };
                let Some(resolved) = resolved else {
                    problems.push(format!(
                        "{at}: leads out of the book (name a repository file in backticks)"
                    ));
                    continue;
                };
                if resolved.ends_with(".md") {
                    let Some(page_ids) = ids.get(&resolved) else {
                        problems.push(format!(
                            "{at}: docs/{resolved} is not a page of the book (SUMMARY.md)"
                        ));
                        continue;
                    };
                    if !anchor.is_empty() && !page_ids.contains(anchor) {
                        problems.push(format!(
                            "{at}: no heading with id `{anchor}` in docs/{resolved}"
                        ));
                    }
                } else if !docs().join(&resolved).exists() {
                    problems.push(format!("{at}: docs/{resolved} does not exist"));
                }
            }
        }
    }
    problems
}

/// README.md's links, relative to the repository root: each file exists,
/// and an anchor into a book page is one of its headings.
fn check_readme_links(text: &str, built: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for block in blocks(text).iter().filter(|b| !b.code) {
        let (_, prose) = code_spans(&block.text);
        for target in link_targets(&prose) {
            if target.is_empty() || target.contains("://") || target.starts_with('#') {
                continue;
            }
            let at = format!("README.md:{}: link `{target}`", block.line);
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let Some(path) = normalise(path) else {
                problems.push(format!("{at}: leads out of the repository"));
                continue;
            };
            if !repo().join(&path).exists() {
                problems.push(format!("{at}: {path} does not exist"));
                continue;
            }
            if let (Some(page), false) = (path.strip_prefix("docs/"), anchor.is_empty()) {
                let html = built.join(page.replace(".md", ".html"));
                let ids = heading_ids(&std::fs::read_to_string(html).unwrap_or_default());
                if !ids.contains(anchor) {
                    problems.push(format!("{at}: no heading with id `{anchor}` in {path}"));
                }
            }
        }
    }
    problems
}

// ---------------------------------------------------------------------------
// (c) repository paths.

/// Every file the repository holds (tracked, or new and not ignored) and
/// every folder above one, relative to its root.
fn repository_entries() -> BTreeSet<String> {
    let out = Command::new("git")
        .args([
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "-z",
        ])
        .current_dir(repo())
        .output()
        .expect("running git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    let mut entries = BTreeSet::new();
    for file in out.stdout.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let file = String::from_utf8_lossy(file).to_string();
        // A file deleted in the work tree but not yet in the index is gone.
        if !repo().join(&file).exists() {
            continue;
        }
        let mut prefix = String::new();
        for part in file.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            entries.insert(prefix.clone());
        }
    }
    entries
}

/// Folders the tools write into a checkout, ignored by git, which the book
/// may name: the fuzz bench's corpus and crash artefacts.
const GENERATED: &[&str] = &["fuzz/corpus", "fuzz/artifacts"];

/// `a/{b,c}.rs` -> `a/b.rs`, `a/c.rs` (one level of braces).
fn expand_braces(word: &str) -> Vec<String> {
    match (word.find('{'), word.find('}')) {
        (Some(open), Some(close)) if open < close => word[open + 1..close]
            .split(',')
            .map(|alt| format!("{}{alt}{}", &word[..open], &word[close + 1..]))
            .collect(),
        _ => vec![word.to_string()],
    }
}

/// `*` and `?` of a shell glob, within one path component.
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob_match(&pattern[1..], name) || (!name.is_empty() && glob_match(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob_match(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob_match(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// A component that stands for a name rather than being one: `<target>`,
/// `...`, or a word in capitals (`TARGET`, `linux-VERSION`, `FILE.json`).
fn is_placeholder(component: &str) -> bool {
    let capitals = component
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|w| w.len() >= 3 && w.bytes().all(|b| b.is_ascii_uppercase()));
    component.contains('<') || component.contains("...") || component.contains('…') || capitals
}

/// Whether `path` names something in the repository: each component exists
/// under the one before, a glob component matches at least one entry, and a
/// placeholder component ends the check (its folder must exist).
fn path_exists(entries: &BTreeSet<String>, path: &str) -> bool {
    fn walk(entries: &BTreeSet<String>, prefix: &str, rest: &[&str]) -> bool {
        let Some((first, tail)) = rest.split_first() else {
            return true;
        };
        let join = |name: &str| {
            if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            }
        };
        if entries.contains(&join(first)) {
            return walk(entries, &join(first), tail);
        }
        if first.contains('*') || first.contains('?') {
            let children: Vec<String> = entries
                .iter()
                .filter_map(|e| {
                    let child = if prefix.is_empty() {
                        e.as_str()
                    } else {
                        e.strip_prefix(prefix)?.strip_prefix('/')?
                    };
                    (!child.contains('/')).then(|| child.to_string())
                })
                .collect();
            return children
                .iter()
                .filter(|c| glob_match(first.as_bytes(), c.as_bytes()))
                .any(|c| walk(entries, &join(c), tail));
        }
        is_placeholder(first)
    }
    if GENERATED
        .iter()
        .any(|g| path == *g || path.starts_with(&format!("{g}/")))
    {
        return true;
    }
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    walk(entries, "", &parts)
}

/// The repository paths a word names, by this rule: the word (a code span,
/// a word of a code span or code block, or a link target), less a leading
/// `./`, trailing punctuation and anything from a `:` on (`file.rs:12`,
/// `mod.rs::load`), has a `/` and its first component is a top-level file
/// or folder of the repository other than `target` (build output). So
/// `xvmm/src/boot/mod.rs`, `harness/tests/distro.rs` and
/// `patches/linux-VERSION/*.patch` are checked; `asm/macros.S`,
/// `/usr/src/...`, `~/.cache/xvmm` and `target/harness/` are not. A
/// `./script.sh` word is checked as a top-level script (`check_paths`).
fn repository_paths(word: &str, top: &BTreeSet<String>) -> Vec<String> {
    let word = word.trim_matches(|c: char| "\"'()[],;*".contains(c));
    let word = word.strip_prefix("./").unwrap_or(word);
    let word = word.split(':').next().unwrap_or("");
    let word = word.trim_end_matches(['.', ',', ';', ')']);
    let Some((first, _)) = word.split_once('/') else {
        return Vec::new();
    };
    if first == "target" || !top.contains(first) {
        return Vec::new();
    }
    expand_braces(word.trim_end_matches('/'))
}

fn check_paths(pages: &[Page]) -> Vec<String> {
    let entries = repository_entries();
    let top: BTreeSet<String> = entries
        .iter()
        .filter(|e| !e.contains('/'))
        .cloned()
        .collect();
    let mut problems = Vec::new();
    let mut check = |page: &Page, line: usize, word: &str| {
        // `./run.sh`: a script run from the repository root. Other `./name`
        // words (`./xperf` on an instance, `./boot` in a tarball) are not
        // the repository's.
        if let Some(script) = word.strip_prefix("./").filter(|w| !w.contains('/')) {
            let script = script.trim_end_matches(['.', ',', ';', ')']);
            if script.ends_with(".sh") && !entries.contains(script) {
                problems.push(format!(
                    "docs/{}:{line}: `{word}`: no such script in the repository",
                    page.name
                ));
            }
            return;
        }
        for path in repository_paths(word, &top) {
            if !path_exists(&entries, &path) {
                problems.push(format!(
                    "docs/{}:{line}: `{path}`: no such file or folder in the repository",
                    page.name
                ));
            }
        }
    };
    for page in pages {
        for block in blocks(&page.text) {
            if block.code {
                for word in block.text.split_whitespace() {
                    check(page, block.line, word);
                }
                continue;
            }
            let (spans, _) = code_spans(&block.text);
            for span in spans {
                for word in span.split_whitespace() {
                    check(page, block.line, word);
                }
            }
        }
    }
    problems
}

// ---------------------------------------------------------------------------
// (d) command examples against --help.

/// One command of a code block: the program (`xvmm` or `xperf`) and its
/// words, quoted strings, comments and anything after a pipe left out.
struct Example {
    page: String,
    line: usize,
    program: &'static str,
    words: Vec<String>,
}

/// `"..."` and `'...'` taken out (a `--cmdline "... -- probes"` holds the
/// guest's arguments, not the host command's), then a `#` comment.
fn strip_quotes_and_comment(line: &str) -> String {
    let mut out = String::new();
    let mut quote = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' => break,
            None => out.push(c),
        }
    }
    out
}

/// The program a command line starts with, after a `$ ` prompt, `sudo`,
/// `VAR=value` assignments and `ssh HOST`: `xvmm`, `xperf`, or a path
/// ending in `/xvmm` or `/xperf`.
fn command_start(words: &[&str]) -> Option<(&'static str, usize)> {
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if w == "$" || w == "sudo" || (w.contains('=') && !w.starts_with('-')) {
            i += 1;
        } else if w == "ssh" {
            i += 2;
        } else {
            break;
        }
    }
    let program = *words.get(i)?;
    let name = program.rsplit('/').next().unwrap_or(program);
    match name {
        "xvmm" => Some(("xvmm", i + 1)),
        "xperf" => Some(("xperf", i + 1)),
        _ => None,
    }
}

fn examples(pages: &[Page]) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    for page in pages {
        for block in blocks(&page.text).into_iter().filter(|b| b.code) {
            // The command the next line may continue: after a backslash, or
            // a synopsis going on in lines of `[--option ...]`.
            let mut open: Option<usize> = None;
            let mut backslash = false;
            for (k, raw) in block.text.lines().enumerate() {
                let line = strip_quotes_and_comment(raw);
                // Only a pipe with spaces around it ends the command:
                // `[--json FILE|-]` is one option.
                let line = line.split(" | ").next().unwrap_or("");
                let line = line.split(" && ").next().unwrap_or("").trim_end();
                let ends_in_backslash = line.ends_with('\\');
                let words: Vec<&str> = line.trim_end_matches('\\').split_whitespace().collect();
                let synopsis = words.first().is_some_and(|w| w.starts_with("[-"));
                if let Some(i) = open.filter(|_| backslash || synopsis) {
                    out[i].words.extend(words.iter().map(|w| w.to_string()));
                } else if let Some((program, at)) = command_start(&words) {
                    out.push(Example {
                        page: page.name.clone(),
                        line: block.line + k,
                        program,
                        words: words[at..].iter().map(|w| w.to_string()).collect(),
                    });
                    open = Some(out.len() - 1);
                } else {
                    open = None;
                }
                backslash = ends_in_backslash;
            }
        }
    }
    out
}

/// The subcommands a help text lists: clap's `Commands:` section, or
/// usage lines of the form `PROGRAM SUBCOMMAND ...` (xperf's own parser).
fn subcommands(help: &str, command: &[String]) -> BTreeSet<String> {
    let mut subs = BTreeSet::new();
    let mut in_commands = false;
    let prefix = format!("{} ", command.join(" "));
    for line in help.lines() {
        if line.trim_end() == "Commands:" {
            in_commands = true;
            continue;
        }
        if in_commands {
            if line.starts_with(' ') {
                if let Some(w) = line.split_whitespace().next() {
                    subs.insert(w.to_string());
                }
                continue;
            }
            in_commands = false;
        }
        let t = line.trim_start();
        let t = t
            .strip_prefix("usage: ")
            .or_else(|| t.strip_prefix("Usage: "))
            .unwrap_or(t);
        if let Some(rest) = t.strip_prefix(&prefix) {
            if let Some(w) = rest.split_whitespace().next() {
                if w.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') {
                    subs.insert(w.to_string());
                }
            }
        }
    }
    subs
}

/// The long flags in a run of words: `--name` up to the first character
/// that cannot be in one (`[--json`, `--cpu=3`, `--rounds]`).
fn long_flags(words: &[String]) -> Vec<String> {
    let mut flags = Vec::new();
    for w in words {
        let mut rest = w.as_str();
        while let Some(at) = rest.find("--") {
            let after = &rest[at + 2..];
            let len = after
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-')
                .count();
            // `--` alone ends options; `---` is not a flag.
            if len > 0 && after.as_bytes()[0].is_ascii_alphanumeric() {
                flags.push(format!("--{}", &after[..len]));
            }
            rest = &after[len..];
        }
    }
    flags
}

/// Whether `help` lists `flag` as an option (not as the start of a longer
/// one).
fn help_lists(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(at, _)| {
        help[at + flag.len()..]
            .bytes()
            .next()
            .is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'-'))
    })
}

/// Builds xvmm and xperf as the other tests of the workspace use them
/// (dev profile, target/debug) and returns where they are.
fn binaries() -> BTreeMap<&'static str, PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-q", "-p", "xvmm-cli", "-p", "xperf"])
        .current_dir(repo())
        .status()
        .expect("running cargo build");
    assert!(status.success(), "cargo build -p xvmm-cli -p xperf failed");
    let dir = target_dir().join("debug");
    BTreeMap::from([("xvmm", dir.join("xvmm")), ("xperf", dir.join("xperf"))])
}

fn check_examples(pages: &[Page]) -> Vec<String> {
    let bins = binaries();
    let mut helps: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut help_of = |command: &[String]| -> String {
        helps
            .entry(command.to_vec())
            .or_insert_with(|| {
                let out = Command::new(&bins[command[0].as_str()])
                    .args(&command[1..])
                    .arg("--help")
                    .output()
                    .expect("running --help");
                assert!(
                    out.status.success(),
                    "`{} --help` failed: {}",
                    command.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )
            })
            .clone()
    };
    let mut problems = Vec::new();
    let all = examples(pages);
    assert!(
        all.len() >= 20,
        "only {} xvmm/xperf command examples found in the book: the parser lost them",
        all.len()
    );
    for example in all {
        // The subcommand: as many leading words as the help texts name.
        let mut command = vec![example.program.to_string()];
        let mut at = 0;
        while let Some(word) = example.words.get(at) {
            if subcommands(&help_of(&command), &command).contains(word) {
                command.push(word.clone());
                at += 1;
            } else {
                break;
            }
        }
        let help = help_of(&command);
        for flag in long_flags(&example.words) {
            if !help_lists(&help, &flag) {
                problems.push(format!(
                    "docs/{}:{}: `{}` uses {flag}, which `{} --help` does not list",
                    example.page,
                    example.line,
                    example.words.join(" "),
                    command.join(" ")
                ));
            }
        }
    }
    problems
}

// ---------------------------------------------------------------------------

#[test]
fn the_book_builds_and_its_links_paths_and_flags_hold() {
    let built = build_book();
    let pages = pages();
    let mut problems = check_links(&pages, &built);
    problems.extend(check_paths(&pages));
    // README.md is the book's front door: its paths hold too.
    let readme = Page {
        name: "../README.md".into(),
        text: std::fs::read_to_string(repo().join("README.md")).unwrap(),
    };
    problems.extend(check_paths(std::slice::from_ref(&readme)));
    problems.extend(check_readme_links(&readme.text, &built));
    let mut with_readme = pages;
    with_readme.push(readme);
    problems.extend(check_examples(&with_readme));
    assert_none("the book", &problems);
}

// The checkers' own rules, on small inputs.

#[test]
fn code_blocks_spans_and_links_are_told_apart() {
    let text = "Text `harness/setup.sh` and [a](b.md#c).\n\n    xvmm --samples 5\n\n```sh\nxperf --cpu 1\n```\n\n- item\n\n      indented in a list\n";
    let bs = blocks(text);
    let code: Vec<&str> = bs
        .iter()
        .filter(|b| b.code)
        .map(|b| b.text.trim_end())
        .collect();
    assert_eq!(
        code,
        ["xvmm --samples 5", "xperf --cpu 1", "indented in a list"]
    );
    let (spans, prose) = code_spans(&bs[0].text);
    assert_eq!(spans, ["harness/setup.sh"]);
    assert_eq!(link_targets(&prose), ["b.md#c"]);
    // A span broken across lines is one span.
    assert_eq!(code_spans("`xvmm\nlinearity`").0, ["xvmm linearity"]);
}

#[test]
fn paths_follow_the_rule() {
    let entries: BTreeSet<String> = [
        "xvmm",
        "xvmm/src",
        "xvmm/src/a.rs",
        "xvmm/src/b.rs",
        "patches",
        "patches/linux-6.1",
        "patches/linux-6.1/0001.patch",
        "run.sh",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let top: BTreeSet<String> = ["xvmm", "patches", "run.sh"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        repository_paths("xvmm/src/{a,b}.rs", &top),
        ["xvmm/src/a.rs", "xvmm/src/b.rs"]
    );
    assert!(repository_paths("asm/macros.S", &top).is_empty());
    assert!(repository_paths("target/harness/x.log", &top).is_empty());
    assert_eq!(
        repository_paths("xvmm/src/a.rs::load", &top),
        ["xvmm/src/a.rs"]
    );
    assert!(path_exists(&entries, "xvmm/src/a.rs"));
    assert!(!path_exists(&entries, "xvmm/src/c.rs"));
    assert!(path_exists(&entries, "patches/linux-VERSION/*.patch"));
    assert!(path_exists(&entries, "patches/linux-6.1/*.patch"));
    assert!(!path_exists(&entries, "patches/linux-6.1/*.diff"));
    assert!(!path_exists(&entries, "patchez/linux-VERSION"));
}

#[test]
fn commands_and_their_flags_are_found() {
    let page = Page {
        name: "t.md".into(),
        text: "```sh\nsudo ./target/release/xvmm --kernel bz \\\n    --trace --cmdline \"a -- --not-mine\" # --comment\nxvmm kernel build [--flavour guest|host]\n                  [--patched]\nssh host ./xperf characterize --json - | jq --sort-keys\ncargo build -p xperf --release\n```\n".into(),
    };
    let found = examples(std::slice::from_ref(&page));
    let flags: Vec<Vec<String>> = found.iter().map(|e| long_flags(&e.words)).collect();
    assert_eq!(
        flags,
        [
            vec!["--kernel", "--trace", "--cmdline"],
            vec!["--flavour", "--patched"],
            vec!["--json"],
        ]
    );
    assert!(help_lists("  --json FILE  x", "--json"));
    assert!(!help_lists("  --json-lines FILE", "--json"));
    let clap = "Commands:\n  kernel  Build\n  report  Render\n\nOptions:\n";
    assert_eq!(subcommands(clap, &["xvmm".into()]).len(), 2);
    let own = "usage: xperf [--samples N]\n       xperf characterize [--cpu N]\n       xperf probes [OPTIONS]\n";
    assert_eq!(
        subcommands(own, &["xperf".into()]),
        BTreeSet::from(["characterize".to_string(), "probes".to_string()])
    );
}
