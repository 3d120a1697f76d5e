//! `xvmm linearity`: each stamp pair's self-check and its controls.

use crate::document::Table;
use crate::linearity::{Linearity, Outcome, PairLinearity};
use std::fmt::Write as _;
use xvmm_host::escape::visible;

fn pair_row(p: &PairLinearity) -> Vec<String> {
    let refused = p.check.controls.len() - p.check.passed_controls().count();
    let (intercept, ratio, residual, slope) = match &p.check.verdict {
        Ok(v) => (
            format!("{:.1} +-{:.1}", v.intercept, v.tolerance),
            format!("{:.3}", v.ratio),
            format!("{:.2} %", 100.0 * v.worst_residual),
            format!("{:.4} +-{:.4}", v.slope, v.slope_error),
        ),
        Err(_) => ("-".into(), "-".into(), "-".into(), "-".into()),
    };
    let chain = chain_cell(p);
    vec![
        format!("{:?}", p.pair).to_lowercase(),
        p.decided.correction.to_string(),
        intercept,
        slope,
        chain,
        ratio,
        residual,
        format!("{refused}/{}", p.check.controls.len()),
        p.check.outcome().describe().into(),
    ]
}

/// The chain's own cost per imul, before and after the sweep, pooled.
fn chain_cell(p: &PairLinearity) -> String {
    let c = crate::linearity::ChainCost::pooled(p.chain_before, p.chain_after);
    format!("{:.4} +-{:.4}", c.ticks_per_imul, c.standard_error)
}

/// Why a pair does not hold: the check's own failure, or each control it
/// let through.
fn pair_notes(p: &PairLinearity) -> Vec<String> {
    let mut notes = vec![format!(
        "stamps {}; correction {}",
        visible(&p.stamps),
        visible(&p.decided.reason)
    )];
    if let Err(e) = &p.check.verdict {
        notes.push(format!("the right correction fails: {}", visible(e)));
    }
    for c in p.check.passed_controls() {
        notes.push(format!(
            "control {} (correction {}, chain {:.4}) PASSED: the check cannot tell it from the right one",
            visible(&c.what),
            c.correction,
            c.chain.ticks_per_imul
        ));
    }
    notes
}

/// The self-check as a table, a line per stamp pair, then what was not
/// checked and the verdict.
pub fn linearity_table(l: &Linearity) -> String {
    let mut out = format!(
        "Stamp linearity self-check ({}), TSC quantum {:.2} ticks; ticks throughout\n",
        visible(&l.platform),
        l.quantum
    );
    let mut t = Table::new(&[
        "pair",
        "correction",
        "long-sweep intercept",
        "slope/imul",
        "chain cost/imul",
        "4096/2048",
        "worst residual",
        "controls refused",
        "verdict",
    ]);
    for p in &l.pairs {
        t.row(pair_row(p));
        for n in pair_notes(p) {
            t.note(n);
        }
    }
    out.push_str(&t.render());
    for (pair, why) in &l.not_checked {
        let _ = writeln!(
            out,
            "{} pair not checked: {}",
            format!("{pair:?}").to_lowercase(),
            visible(why)
        );
    }
    let _ = writeln!(
        out,
        "{}",
        match l.outcome() {
            Outcome::Holds => "The stamps are linear and every control was refused.",
            Outcome::CannotTell => {
                "The self-check CANNOT TELL the right correction from one a quantum off (or the \
                 chain's cost from one 5 % off): a control passed (see above)."
            }
            Outcome::DoesNotHold => "The self-check DOES NOT HOLD (see above).",
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linearity::tests::{all_phases, CHAIN};
    use crate::linearity::{check_with_controls, Pair};

    fn pair(q: f64) -> PairLinearity {
        let (phases, decided) = all_phases(61, 73, q);
        let check = check_with_controls(&phases, &decided, q, (CHAIN, CHAIN)).unwrap();
        PairLinearity {
            pair: Pair::Kernel,
            stamps: "lfence; rdtsc\x1b[2J".into(),
            decided,
            chain_before: CHAIN,
            chain_after: CHAIN,
            phases,
            check,
        }
    }

    #[test]
    fn a_holding_check_says_so_and_a_control_let_through_is_named() {
        let mut l = Linearity {
            platform: "Amd KvmAmd".into(),
            quantum: 24.5,
            pairs: vec![pair(24.5)],
            not_checked: vec![(Pair::User, "because".into())],
        };
        let text = linearity_table(&l);
        assert!(text.contains("6/6") && text.contains("holds"), "{text}");
        assert!(text.contains("every control was refused"), "{text}");
        assert!(text.contains("user pair not checked: because"), "{text}");
        assert!(!text.contains('\x1b'), "{text}");
        l.pairs[0].check.controls[3].refused = None;
        let text = linearity_table(&l);
        assert!(
            text.contains("5/6") && text.contains("CANNOT TELL"),
            "{text}"
        );
        assert!(text.contains("PASSED: the check cannot tell"), "{text}");
        assert!(!text.contains("every control was refused"), "{text}");
        assert!(!text.contains("DOES NOT HOLD"), "{text}");
        l.pairs[0].check.verdict = Err("off the line".into());
        let text = linearity_table(&l);
        assert!(text.contains("DOES NOT HOLD"), "{text}");
    }
}
