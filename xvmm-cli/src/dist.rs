//! What a package installs beside the binaries: man pages and shell
//! completions (the `xvmm-dist` binary writes them; deploy/deb/build.sh
//! packages them). xvmm's come from the clap definitions in [`crate::cli`].
//! xperf is a static guest binary with a hand-written parser and no clap, so
//! its pages are read from its usage text (`xperf --help`, which lists every
//! option): a new option shows up in the page without editing it.

use clap::{Arg, ArgAction, Command, CommandFactory};
use clap_complete::Shell;

/// One generated file: its name (`xvmm-kernel-build.1`, `_xvmm`) and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Renders `cmd`'s page and one per subcommand, named as `man` looks them
/// up: `xvmm.1`, `xvmm-kernel.1`, `xvmm-kernel-build.1`.
fn pages(cmd: Command, source: &str) -> Vec<File> {
    let mut cmd = cmd.disable_help_subcommand(true);
    // Gives each subcommand its display name (`xvmm-kernel-build`).
    cmd.build();
    let mut out = Vec::new();
    collect_pages(cmd, source, &mut out);
    out
}

fn collect_pages(cmd: Command, source: &str, out: &mut Vec<File>) {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect_pages(sub.clone(), source, out);
    }
    let man = clap_mangen::Man::new(cmd)
        .source(source)
        .manual("User Commands");
    let mut bytes = Vec::new();
    // Writing to a Vec cannot fail.
    man.render(&mut bytes).expect("rendering to memory");
    out.push(File {
        name: man.get_filename(),
        bytes,
    });
}

/// xvmm's man pages, from the clap definitions.
pub fn xvmm_pages() -> Vec<File> {
    let version = env!("CARGO_PKG_VERSION");
    pages(crate::cli::Cli::command(), &format!("xvmm {version}"))
}

/// xvmm's completion scripts for bash, zsh and fish, named as those shells'
/// vendor directories expect (`xvmm`, `_xvmm`, `xvmm.fish`).
pub fn xvmm_completions() -> Vec<(Shell, File)> {
    [Shell::Bash, Shell::Zsh, Shell::Fish]
        .into_iter()
        .map(|shell| {
            let mut bytes = Vec::new();
            clap_complete::generate(shell, &mut crate::cli::Cli::command(), "xvmm", &mut bytes);
            let name = match shell {
                Shell::Zsh => "_xvmm".to_string(),
                Shell::Fish => "xvmm.fish".to_string(),
                _ => "xvmm".to_string(),
            };
            (shell, File { name, bytes })
        })
        .collect()
}

/// xperf's usage text taken apart: its synopsis forms, description and
/// options (`  --name VALUE  help`, help continued on deeper-indented lines).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Usage {
    pub forms: Vec<String>,
    pub description: String,
    pub options: Vec<UsageOption>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageOption {
    pub short: Option<char>,
    pub long: String,
    pub value: Option<String>,
    pub help: String,
}

impl Usage {
    /// Reads a usage text laid out as xperf's (`xperf::args::USAGE`).
    pub fn parse(text: &str) -> Result<Usage, String> {
        let mut lines = text.lines().peekable();
        let first = lines.next().unwrap_or_default();
        let Some(form) = first.strip_prefix("usage: ") else {
            return Err(format!("usage text starts with {first:?}, not \"usage: \""));
        };
        let mut usage = Usage {
            forms: vec![form.split_whitespace().collect::<Vec<_>>().join(" ")],
            ..Usage::default()
        };
        while let Some(line) = lines.next_if(|l| !l.trim().is_empty()) {
            // Alignment spaces mean nothing once the page is filled.
            let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
            // A new form names the program again; anything else continues one.
            match usage.forms.last_mut() {
                Some(last) if !line.starts_with("xperf") => {
                    last.push(' ');
                    last.push_str(&line);
                }
                _ => usage.forms.push(line),
            }
        }
        let mut paragraphs: Vec<String> = Vec::new();
        let mut current = String::new();
        for line in lines.by_ref() {
            if line.starts_with("  -") {
                usage.options.push(UsageOption::parse(line)?);
            } else if let Some(last) = usage.options.last_mut() {
                if line.trim().is_empty() {
                    continue;
                }
                if !line.starts_with("   ") {
                    return Err(format!("text after the options: {line:?}"));
                }
                if !last.help.is_empty() {
                    last.help.push(' ');
                }
                last.help.push_str(line.trim());
            } else if line.trim().is_empty() {
                if !current.is_empty() {
                    paragraphs.push(std::mem::take(&mut current));
                }
            } else {
                current.push_str(line.trim_end());
                current.push('\n');
            }
        }
        if !current.is_empty() {
            paragraphs.push(current);
        }
        usage.description = paragraphs
            .iter()
            .map(|p| p.trim_end())
            .collect::<Vec<_>>()
            .join("\n\n");
        if usage.options.is_empty() {
            return Err("the usage text lists no options".into());
        }
        Ok(usage)
    }

    /// The subcommands the synopsis names (`xperf probes [OPTIONS]`: probes).
    pub fn subcommands(&self, program: &str) -> Vec<String> {
        self.forms
            .iter()
            .filter_map(|f| f.strip_prefix(program)?.split_whitespace().next())
            .filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .filter(|w| !w.starts_with('-'))
            .map(str::to_string)
            .fold(Vec::new(), |mut v, w| {
                if !v.contains(&w) {
                    v.push(w);
                }
                v
            })
    }

    /// The first sentence of the description (the page's one-line summary).
    fn summary(&self) -> String {
        let text = self.description.replace('\n', " ");
        let end = [". ", ": "]
            .iter()
            .filter_map(|sep| text.find(sep))
            .min()
            .unwrap_or(text.len());
        text[..end].trim_end_matches('.').to_string()
    }

    /// The usage as a clap command, for clap_mangen to render; `name` is
    /// the page's (`xperf-probes`), `bin` what the synopsis starts with.
    pub fn command(&self, name: &str, bin: &str, version: &str) -> Command {
        let mut cmd = Command::new(name.to_string())
            .bin_name(bin.to_string())
            .version(version.to_string())
            .about(self.summary())
            .long_about(self.description.clone())
            .override_usage(self.forms.join("\n"))
            .disable_help_flag(true)
            .disable_version_flag(true);
        for opt in &self.options {
            let mut arg = Arg::new(opt.long.clone())
                .long(opt.long.clone())
                .help(opt.help.clone());
            if let Some(short) = opt.short {
                arg = arg.short(short);
            }
            arg = match &opt.value {
                Some(value) => arg.value_name(value.clone()).action(ArgAction::Set),
                None => arg.action(ArgAction::SetTrue),
            };
            cmd = cmd.arg(arg);
        }
        cmd
    }
}

impl UsageOption {
    /// `  -h, --help  this text`, `  --samples N  samples per ...`,
    /// `  --openmetrics FILE` (its help on the lines below).
    fn parse(line: &str) -> Result<UsageOption, String> {
        let line = line.trim();
        let (spec, help) = match line.find("  ") {
            Some(i) => (&line[..i], line[i..].trim()),
            None => (line, ""),
        };
        let mut opt = UsageOption {
            short: None,
            long: String::new(),
            value: None,
            help: help.to_string(),
        };
        for part in spec.split(", ") {
            let (flag, value) = match part.split_once(' ') {
                Some((f, v)) => (f, Some(v.to_string())),
                None => (part, None),
            };
            if let Some(long) = flag.strip_prefix("--") {
                opt.long = long.to_string();
                opt.value = value;
            } else if let Some(short) = flag.strip_prefix('-') {
                let mut chars = short.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => opt.short = Some(c),
                    _ => return Err(format!("option {line:?}: bad short flag {flag:?}")),
                }
            }
        }
        if opt.long.is_empty() {
            return Err(format!("option {line:?} has no long form"));
        }
        // "this text" reads oddly in a page that is not the usage text.
        if opt.long == "help" {
            opt.help = "print the usage text and exit".into();
        }
        Ok(opt)
    }
}

/// xperf's pages: `xperf.1` from `main`, its usage text, and one page per
/// subcommand it names (`xperf-probes.1`), from that subcommand's usage
/// text, which `sub_usage` returns (`xperf probes --help`).
pub fn xperf_pages(
    main: &str,
    version: &str,
    mut sub_usage: impl FnMut(&str) -> Result<String, String>,
) -> Result<Vec<File>, String> {
    let usage = Usage::parse(main).map_err(|e| format!("xperf --help: {e}"))?;
    let mut cmd = usage.command("xperf", "xperf", version);
    for name in usage.subcommands("xperf") {
        let text = sub_usage(&name)?;
        let sub = Usage::parse(&text).map_err(|e| format!("xperf {name} --help: {e}"))?;
        cmd = cmd.subcommand(sub.command(&name, &format!("xperf {name}"), version));
    }
    Ok(pages(cmd, &format!("xperf {version}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: &File) -> String {
        String::from_utf8(f.bytes.clone()).unwrap()
    }

    fn find<'a>(files: &'a [File], name: &str) -> &'a File {
        files
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", names(files)))
    }

    fn names(files: &[File]) -> Vec<&str> {
        files.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn xvmm_has_a_page_per_subcommand() {
        let files = xvmm_pages();
        let mut expected = vec!["xvmm.1".to_string()];
        let cmd = crate::cli::Cli::command();
        for sub in cmd.get_subcommands() {
            expected.push(format!("xvmm-{}.1", sub.get_name()));
            for subsub in sub.get_subcommands() {
                expected.push(format!("xvmm-{}-{}.1", sub.get_name(), subsub.get_name()));
            }
        }
        let mut got: Vec<String> = files.iter().map(|f| f.name.clone()).collect();
        expected.sort();
        got.sort();
        assert_eq!(got, expected);
        assert!(!got.contains(&"xvmm-help.1".to_string()));
        let page = text(find(&files, "xvmm-kernel-build.1"));
        assert!(page.starts_with(".ie \\n(.g .ds Aq"), "{page}");
        assert!(page.contains("\\-\\-flavour"), "{page}");
        assert!(text(find(&files, "xvmm.1")).contains("\\-\\-kernel"));
    }

    #[test]
    fn completions_for_three_shells() {
        let files = xvmm_completions();
        let by = |s: Shell| text(&files.iter().find(|(sh, _)| *sh == s).unwrap().1);
        assert!(by(Shell::Bash).contains("complete -F _xvmm"));
        assert!(by(Shell::Zsh).starts_with("#compdef xvmm"));
        assert!(by(Shell::Fish).contains("complete -c xvmm"));
        let names: Vec<_> = files.iter().map(|(_, f)| f.name.as_str()).collect();
        assert_eq!(names, ["xvmm", "_xvmm", "xvmm.fish"]);
    }

    /// Every option of each real xperf usage text reaches its page.
    #[test]
    fn xperf_pages_hold_every_option_of_its_usage_texts() {
        let subs = |name: &str| match name {
            "characterize" => Ok(xperf::characterize::options::USAGE.to_string()),
            "probes" => Ok(xperf::probes::args::USAGE.to_string()),
            "workload" => Ok(xperf::workload::args::USAGE.to_string()),
            other => Err(format!("unknown {other}")),
        };
        let files = xperf_pages(xperf::args::USAGE, "9.9.9", subs).unwrap();
        let mut got = names(&files);
        got.sort_unstable();
        assert_eq!(
            got,
            [
                "xperf-characterize.1",
                "xperf-probes.1",
                "xperf-workload.1",
                "xperf.1"
            ]
        );
        for (page, usage) in [
            ("xperf.1", xperf::args::USAGE),
            ("xperf-characterize.1", xperf::characterize::options::USAGE),
            ("xperf-probes.1", xperf::probes::args::USAGE),
            ("xperf-workload.1", xperf::workload::args::USAGE),
        ] {
            let roff = text(find(&files, page));
            let parsed = Usage::parse(usage).unwrap();
            // Every line starting with an option in the text is one.
            let listed = usage.lines().filter(|l| l.starts_with("  -")).count();
            assert_eq!(parsed.options.len(), listed, "{page}");
            for opt in &parsed.options {
                let flag = format!("\\-\\-{}", opt.long.replace('-', "\\-"));
                assert!(roff.contains(&flag), "{page} lacks {flag}:\n{roff}");
            }
            assert!(roff.contains("9.9.9"), "{page}");
        }
        let main = text(find(&files, "xperf.1"));
        assert!(main.contains("xperf\\-probes(1)") || main.contains("xperf\\-probes"));
        assert!(
            main.contains("Measures user\\->kernel\\->user crossings"),
            "{main}"
        );
    }

    #[test]
    fn usage_text_is_taken_apart() {
        let u = Usage::parse(
            "usage: xperf [--a N]\n       xperf sub [OPTIONS]   (see)\n              [--b]\n\n\
             First line. More\nof it.\n\nSecond.\n\n  --a N   the a\n          continued\n  \
             --long-one FILE\n          below\n  -h, --help   this text",
        )
        .unwrap();
        assert_eq!(
            u.forms,
            ["xperf [--a N]", "xperf sub [OPTIONS] (see) [--b]"]
        );
        assert_eq!(u.description, "First line. More\nof it.\n\nSecond.");
        assert_eq!(u.summary(), "First line");
        assert_eq!(u.subcommands("xperf"), ["sub"]);
        let longs: Vec<_> = u.options.iter().map(|o| o.long.as_str()).collect();
        assert_eq!(longs, ["a", "long-one", "help"]);
        assert_eq!(u.options[0].help, "the a continued");
        assert_eq!(u.options[1].value.as_deref(), Some("FILE"));
        assert_eq!(u.options[1].help, "below");
        assert_eq!(u.options[2].short, Some('h'));
        for bad in ["xperf [--a]\n\n  --a  x", "usage: xperf\n\nNo options."] {
            assert!(Usage::parse(bad).is_err(), "{bad}");
        }
    }
}
