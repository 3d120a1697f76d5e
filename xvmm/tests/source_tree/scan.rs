//! A small scanner over Rust source text (no parser dependency): tokens
//! without comments and literals, test code removed, and the paths a file
//! names (`use` trees expanded, paths in code, inline modules tracked).

/// Tokens of `text`: identifiers and numbers, `::`, and single punctuation
/// characters. Comments vanish and every string or char literal becomes
/// `""`, so neither can hide or fake a path.
pub fn tokens(text: &str) -> Vec<String> {
    let s: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c.is_whitespace() {
            i += 1;
        } else if s[i..].starts_with(&['/', '/']) {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if s[i..].starts_with(&['/', '*']) {
            i = block_comment_end(&s, i);
        } else if let Some(end) = string_end(&s, i) {
            out.push("\"\"".to_string());
            i = end;
        } else if c == '\'' {
            i = quote_end(&s, i, &mut out);
        } else if is_word(c) {
            let start = i;
            while i < s.len() && is_word(s[i]) {
                i += 1;
            }
            out.push(s[start..i].iter().collect());
        } else if s[i..].starts_with(&[':', ':']) {
            out.push("::".to_string());
            i += 2;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Past the (possibly nested) block comment that opens at `i`.
fn block_comment_end(s: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < s.len() {
        if s[i..].starts_with(&['/', '*']) {
            depth += 1;
            i += 2;
        } else if s[i..].starts_with(&['*', '/']) {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// Past the string literal (`"…"`, `b"…"`, `r#"…"#`, `c"…"`) that opens at
/// `i`, if one does.
fn string_end(s: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if matches!(s.get(j), Some('b' | 'c')) {
        j += 1;
    }
    let raw = s.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let hashes = s[j..].iter().take_while(|&&c| c == '#').count();
    j += hashes;
    if s.get(j) != Some(&'"') || (hashes > 0 && !raw) {
        return None;
    }
    j += 1;
    while j < s.len() {
        if !raw && s[j] == '\\' {
            j += 2;
        } else if s[j] == '"' && s[j + 1..].iter().take_while(|&&c| c == '#').count() >= hashes {
            return Some(j + 1 + hashes);
        } else {
            j += 1;
        }
    }
    Some(j)
}

/// Past a char literal at `i` (pushed as `""`), or past the quote of a
/// lifetime or label.
fn quote_end(s: &[char], i: usize, out: &mut Vec<String>) -> usize {
    if s.get(i + 1) == Some(&'\\') {
        let close = (i + 3..s.len()).find(|&j| s[j] == '\'').unwrap_or(s.len());
        out.push("\"\"".to_string());
        close + 1
    } else if s.get(i + 2) == Some(&'\'') {
        out.push("\"\"".to_string());
        i + 3
    } else {
        i + 1
    }
}

/// `tokens` without test code: each item under `#[cfg(test)]` (a test
/// module, function or `use`) is dropped, and scanning goes on after it, so
/// code that follows a test module is still checked.
pub fn without_tests(t: &[String]) -> Vec<String> {
    const CFG_TEST: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t.len() - i >= CFG_TEST.len() && CFG_TEST.iter().zip(&t[i..]).all(|(a, b)| a == b) {
            i = item_end(t, i + CFG_TEST.len());
        } else {
            out.push(t[i].clone());
            i += 1;
        }
    }
    out
}

/// Past the item that starts at `i` (with any further attributes): its `;`
/// or its closing brace, whichever ends it at its own level.
fn item_end(t: &[String], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < t.len() {
        match t[i].as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" => depth -= 1,
            // The enclosing block ends: the attribute had no item.
            "}" if depth == 0 => return i,
            "}" => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            ";" if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// A path a file names, as written, with the inline modules it sits in.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub scope: Vec<String>,
    pub segs: Vec<String>,
}

/// A name a `use` (or `extern crate … as`) brings in: `name` is `None` for
/// a glob import. `public`: a `pub use`, which other modules see too.
#[derive(Debug, Clone, PartialEq)]
pub struct Use {
    pub scope: Vec<String>,
    pub path: Vec<String>,
    pub name: Option<String>,
    pub public: bool,
}

/// The paths and imports in tokens `t`.
#[derive(Debug, Default)]
pub struct Refs {
    pub paths: Vec<Path>,
    pub uses: Vec<Use>,
}

pub fn refs(t: &[String]) -> Refs {
    let mut refs = Refs::default();
    // Inline modules open here: (name, brace depth outside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < t.len() {
        let scope: Vec<String> = inline.iter().map(|m| m.0.clone()).collect();
        match t[i].as_str() {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline.last().is_some_and(|m| m.1 == depth) {
                    inline.pop();
                }
            }
            "mod" if at(t, i + 2) == "{" => inline.push((t[i + 1].clone(), depth)),
            "use" => {
                let first = refs.uses.len();
                let public = is_pub(t, i);
                i = use_tree(t, i + 1, Vec::new(), &scope, &mut refs.uses);
                refs.uses[first..]
                    .iter_mut()
                    .for_each(|u| u.public = public);
                continue;
            }
            "extern" if at(t, i + 1) == "crate" => {
                let name = if at(t, i + 3) == "as" {
                    at(t, i + 4)
                } else {
                    at(t, i + 2)
                };
                let path = vec![at(t, i + 2).to_string()];
                let path = if path[0] == "self" {
                    vec!["crate".into()]
                } else {
                    path
                };
                refs.uses.push(Use {
                    scope,
                    path,
                    name: Some(name.to_string()),
                    public: is_pub(t, i),
                });
            }
            w if starts_path(t, i) => {
                let mut segs = vec![w.to_string()];
                while at(t, i + 1) == "::" && at(t, i + 2).starts_with(is_word) {
                    segs.push(t[i + 2].clone());
                    i += 2;
                }
                refs.paths.push(Path { scope, segs });
            }
            _ => {}
        }
        i += 1;
    }
    for u in &refs.uses {
        refs.paths.push(Path {
            scope: u.scope.clone(),
            segs: u.path.clone(),
        });
    }
    refs
}

fn at(t: &[String], i: usize) -> &str {
    t.get(i).map_or("", |s| s.as_str())
}

/// Whether the item keyword at `i` is `pub` or `pub(…)`.
fn is_pub(t: &[String], i: usize) -> bool {
    let before = |n: usize| i.checked_sub(n).map_or("", |j| t[j].as_str());
    before(1) == "pub"
        || (before(1) == ")" && (3..=5).any(|n| before(n) == "pub" && before(n - 1) == "("))
}

/// Whether a path in code starts at `i` (`a::b`, not a method's turbofish
/// `.parse::<T>` nor the middle of a longer path).
fn starts_path(t: &[String], i: usize) -> bool {
    t[i].starts_with(is_word)
        && at(t, i + 1) == "::"
        && !matches!(i.checked_sub(1).map(|p| t[p].as_str()), Some("::" | "."))
}

/// Expands the `use` tree at `i` (after `prefix`) into `out`; returns the
/// index past it.
fn use_tree(
    t: &[String],
    mut i: usize,
    prefix: Vec<String>,
    scope: &[String],
    out: &mut Vec<Use>,
) -> usize {
    let mut path = prefix;
    if at(t, i) == "::" {
        i += 1; // a leading `::` names an external crate, as a plain name does
    }
    loop {
        match at(t, i) {
            "{" => {
                i += 1;
                while !matches!(at(t, i), "}" | "") {
                    i = use_tree(t, i, path.clone(), scope, out);
                    if at(t, i) == "," {
                        i += 1;
                    }
                }
                return end_of_use(t, i + 1);
            }
            "*" => {
                out.push(Use {
                    scope: scope.to_vec(),
                    path,
                    name: None,
                    public: false,
                });
                return end_of_use(t, i + 1);
            }
            w if w.starts_with(is_word) => {
                // `b::{self}` names `b` itself; a leading `self::` is a path.
                if w != "self" || path.is_empty() || at(t, i + 1) == "::" {
                    path.push(w.to_string());
                }
                i += 1;
                if at(t, i) == "::" {
                    i += 1;
                    continue;
                }
                let mut name = path.last().cloned();
                if at(t, i) == "as" {
                    name = Some(at(t, i + 1).to_string());
                    i += 2;
                }
                out.push(Use {
                    scope: scope.to_vec(),
                    path,
                    name,
                    public: false,
                });
                return end_of_use(t, i);
            }
            _ => return end_of_use(t, i),
        }
    }
}

/// Past the `;` that ends a `use`, if `i` is at one.
fn end_of_use(t: &[String], i: usize) -> usize {
    if at(t, i) == ";" {
        i + 1
    } else {
        i
    }
}
