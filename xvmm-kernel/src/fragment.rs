//! Kconfig fragments: parsing `CONFIG_X=v` / `# CONFIG_X is not set` lines and
//! checking that every option a fragment asks for survived into the final
//! `.config` (Kconfig silently drops options whose dependencies are unmet).

use std::collections::BTreeMap;

/// What a fragment asks for one option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// `CONFIG_X=value` (value as written, e.g. `y`, `m`, `"str"`, `0x10`).
    Value(String),
    /// `# CONFIG_X is not set` or `CONFIG_X=n`.
    Unset,
}

/// One requested option and where it came from (for the error message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requested {
    pub name: String,
    pub wanted: Wanted,
    pub origin: String,
}

/// Parses a fragment or a full `.config`: name -> value, in file order for
/// fragments. Comments other than "is not set" and blank lines are ignored.
pub fn parse(text: &str) -> Vec<(String, Wanted)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("# ") {
            if let Some(name) = rest.strip_suffix(" is not set") {
                if name.starts_with("CONFIG_") && !name.contains(' ') {
                    out.push((name.to_string(), Wanted::Unset));
                }
            }
            continue;
        }
        if !line.starts_with("CONFIG_") {
            continue;
        }
        if let Some((name, value)) = line.split_once('=') {
            let wanted = if value == "n" {
                Wanted::Unset
            } else {
                Wanted::Value(value.to_string())
            };
            out.push((name.to_string(), wanted));
        }
    }
    out
}

/// Collects the requests of several fragments; a later fragment overrides an
/// earlier one for the same option, as merge_config.sh does.
pub fn requests(fragments: &[(String, String)]) -> Vec<Requested> {
    let mut by_name: BTreeMap<String, Requested> = BTreeMap::new();
    for (origin, text) in fragments {
        for (name, wanted) in parse(text) {
            by_name.insert(
                name.clone(),
                Requested {
                    name,
                    wanted,
                    origin: origin.clone(),
                },
            );
        }
    }
    by_name.into_values().collect()
}

/// Returns one description per requested option the final config does not
/// honour, e.g. `CONFIG_PVH=y (guest.config; final: not set)`.
pub fn unmet(requested: &[Requested], final_config: &str) -> Vec<String> {
    let actual: BTreeMap<String, Wanted> = parse(final_config).into_iter().collect();
    let mut problems = Vec::new();
    for req in requested {
        let got = actual.get(&req.name).cloned().unwrap_or(Wanted::Unset);
        if got == req.wanted {
            continue;
        }
        let show = |w: &Wanted| match w {
            Wanted::Value(v) => v.clone(),
            Wanted::Unset => "not set".to_string(),
        };
        problems.push(format!(
            "{}={} ({}; final: {})",
            req.name,
            show(&req.wanted),
            req.origin,
            show(&got)
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_values_unset_and_ignores_comments() {
        let text = "# a comment\nCONFIG_A=y\n\n# CONFIG_B is not set\nCONFIG_C=\"x y\"\nCONFIG_D=n\nnoise\n";
        assert_eq!(
            parse(text),
            vec![
                ("CONFIG_A".to_string(), Wanted::Value("y".into())),
                ("CONFIG_B".to_string(), Wanted::Unset),
                ("CONFIG_C".to_string(), Wanted::Value("\"x y\"".into())),
                ("CONFIG_D".to_string(), Wanted::Unset),
            ]
        );
    }

    #[test]
    fn later_fragment_overrides_earlier() {
        let reqs = requests(&[
            ("a.config".into(), "CONFIG_X=y\nCONFIG_Y=y\n".into()),
            ("b.config".into(), "# CONFIG_X is not set\n".into()),
        ]);
        let x = reqs.iter().find(|r| r.name == "CONFIG_X").cloned();
        assert_eq!(
            x,
            Some(Requested {
                name: "CONFIG_X".into(),
                wanted: Wanted::Unset,
                origin: "b.config".into()
            })
        );
        assert_eq!(reqs.len(), 2);
    }

    #[test]
    fn reports_dropped_and_changed_options_only() {
        let reqs = requests(&[(
            "guest.config".into(),
            "CONFIG_A=y\nCONFIG_B=y\n# CONFIG_C is not set\nCONFIG_D=y\nCONFIG_E=64\n".into(),
        )]);
        let final_config = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=y\nCONFIG_E=32\n";
        assert_eq!(
            unmet(&reqs, final_config),
            vec![
                "CONFIG_B=y (guest.config; final: not set)".to_string(),
                "CONFIG_C=not set (guest.config; final: y)".to_string(),
                "CONFIG_D=y (guest.config; final: not set)".to_string(),
                "CONFIG_E=64 (guest.config; final: 32)".to_string(),
            ]
        );
    }

    #[test]
    fn unset_request_is_met_by_absence() {
        let reqs = requests(&[("f".into(), "# CONFIG_Z is not set\n".into())]);
        assert!(unmet(&reqs, "CONFIG_A=y\n").is_empty());
    }
}
