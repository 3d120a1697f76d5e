//! A run's async page fault figures in the HTML/Markdown report: the
//! counts (the text renderer's block), and with `--async-pf both` the two
//! runs side by side with a chart of the spinner's work per touch.

use xvmm_results::async_pf::{OnOff, OnOffSide};
use xvmm_results::document::{Bar, BarChart};
use xvmm_results::document::{Block, Cell, Chart, Row, Table};
use xvmm_results::render::async_pf_lines;
use xvmm_results::Report;

fn side_row(name: &str, s: &OnOffSide) -> Vec<Cell> {
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    vec![
        name.into(),
        s.touch_median.to_string().into(),
        format!("{}-{}", s.touch_ci.0, s.touch_ci.1).into(),
        s.spinner_mean
            .map_or("-".into(), |m| format!("{m:.0}"))
            .into(),
        opt(s.async_pf_received).into(),
        opt(s.not_present).into(),
    ]
}

fn on_off_blocks(c: &OnOff, blocks: &mut Vec<Block>) {
    blocks.push(Block::Table(Table {
        header: [
            "pf-host-miss",
            "touch median",
            "95% CI",
            "spinner/touch",
            "guest async #PF",
            "host not_present",
        ]
        .iter()
        .map(|h| h.to_string())
        .collect(),
        rows: vec![
            side_row("async PF on", &c.on),
            side_row("async PF off", &c.off),
            vec![
                "on - off".into(),
                format!("{:+}", c.touch_difference).into(),
                format!(
                    "{:+}..{:+}",
                    c.touch_difference_ci.0, c.touch_difference_ci.1
                )
                .into(),
                c.spinner_difference
                    .map_or("-".into(), |d| format!("{d:+.0}"))
                    .into(),
                "".into(),
                "".into(),
            ],
        ]
        .into_iter()
        .map(Row::Cells)
        .collect(),
        numeric: true,
    }));
    let bar = |label: &str, s: &OnOffSide| Bar {
        label: label.into(),
        series: 0,
        from: None,
        to: s.spinner_mean.unwrap_or(0.0),
        mark: s.spinner_median.map(|m| m as f64),
        whisker: None,
    };
    blocks.push(Block::Chart(Chart::Bars(BarChart {
        caption: "Guest work while the host fetched the page: spinner iterations per touch, \
                  mean (bar) and median (dot)"
            .into(),
        unit: "iterations".into(),
        series: vec![],
        bars: vec![bar("async PF on", &c.on), bar("async PF off", &c.off)],
        reference: None,
        omitted: 0,
    })));
}

/// Adds the async page fault blocks when the report has them.
pub fn async_pf_blocks(r: &Report, blocks: &mut Vec<Block>) {
    let Some(a) = &r.async_pf else {
        return;
    };
    blocks.push(Block::Subheading("Async page faults".into()));
    blocks.push(Block::Paragraph(async_pf_lines(a)));
    if let Some(c) = &a.on_off {
        on_off_blocks(c, blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::async_pf::AsyncPf;
    use xvmm_results::{Environment, Method};

    #[test]
    fn both_runs_get_a_table_and_a_chart_one_run_only_its_counts() {
        let side = |median, spin| OnOffSide {
            touch_median: median,
            touch_ci: (median - 5, median + 5),
            touch_mean: median as f64,
            spinner_median: Some(spin),
            spinner_mean: Some(spin as f64),
            async_pf_received: Some(1),
            not_present: Some(1),
        };
        let mut r = Report::new(
            "xperf".into(),
            Environment::LinuxVm,
            Default::default(),
            Method::standard(0, 1),
        );
        let mut blocks = Vec::new();
        async_pf_blocks(&r, &mut blocks);
        assert!(blocks.is_empty(), "no section without async PF figures");
        r.async_pf = Some(AsyncPf::default());
        async_pf_blocks(&r, &mut blocks);
        assert_eq!(blocks.len(), 2);
        r.async_pf.as_mut().unwrap().on_off = Some(OnOff {
            on: side(100, 900),
            off: side(90, 0),
            touch_difference: 10,
            touch_difference_ci: (0, 20),
            spinner_difference: Some(900.0),
        });
        blocks.clear();
        async_pf_blocks(&r, &mut blocks);
        let Some(Block::Table(t)) = blocks.get(2) else {
            panic!("no table: {blocks:?}");
        };
        assert_eq!(t.cell_rows()[2][1].text, "+10");
        let Some(Block::Chart(Chart::Bars(chart))) = blocks.get(3) else {
            panic!("no chart: {blocks:?}");
        };
        assert_eq!((chart.bars[0].to, chart.bars[1].to), (900.0, 0.0));
    }
}
