//! What the ratios between result files divide. A tick of a 3 GHz TSC is
//! not a tick of a 2 GHz one: 3000 and 2000 ticks are the same microsecond.
//! Files whose TSC rates agree (within [`SAME_RATE`]) are compared in ticks,
//! as measured, with no calibration in between; the ratio of ticks is then
//! the ratio of nanoseconds. Otherwise every tick-valued median is turned
//! into nanoseconds with its own file's `tsc_khz` before dividing.

use xvmm_results::{Metric, Report};

/// Largest relative difference of two TSC rates still taken as one rate: a
/// machine's calibrations differ by a few kHz in 2.4 GHz, and 0.1 % moves a
/// ratio by less than its last shown digit.
pub const SAME_RATE: f64 = 0.001;

/// The unit ratios are taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ticks,
    Nanoseconds,
}

/// The unit, and each file's TSC rate (kHz, 0 when the file has none).
#[derive(Debug, Clone, PartialEq)]
pub struct Basis {
    pub unit: Unit,
    khz: Vec<u64>,
}

/// Whether a metric's unit counts TSC ticks ("ticks", "ticks/128 pauses").
fn in_ticks(unit: &str) -> bool {
    unit == "ticks" || unit.starts_with("ticks/")
}

fn same_rate(a: u64, b: u64) -> bool {
    a > 0 && b > 0 && (a.abs_diff(b) as f64) <= SAME_RATE * a.min(b) as f64
}

impl Basis {
    /// Ticks when every file's rate is known and agrees with the first's.
    pub fn of(reports: &[&Report]) -> Basis {
        let khz: Vec<u64> = reports.iter().map(|r| r.host.tsc_khz).collect();
        let one_rate = khz
            .iter()
            .all(|&k| khz.first().is_some_and(|&f| same_rate(f, k)));
        Basis {
            unit: if one_rate {
                Unit::Ticks
            } else {
                Unit::Nanoseconds
            },
            khz,
        }
    }

    /// Column `col`'s median of `m` in the compared unit; `Err` says why not.
    fn value(&self, col: usize, m: &Metric) -> Result<f64, String> {
        let median = m.measured().ok_or("not measured")?.median as f64;
        if self.unit == Unit::Ticks || !in_ticks(&m.unit) {
            return Ok(median);
        }
        match self.khz.get(col).copied().unwrap_or(0) {
            0 => Err("no TSC rate in this file: its ticks cannot be put in nanoseconds".into()),
            khz => Ok(median * 1e6 / khz as f64),
        }
    }

    /// `m` (column `col`) over `base` (column 0): `Ok(None)` when there is
    /// nothing to compare, `Err` with the reason when the two cannot be.
    pub fn ratio(
        &self,
        base: Option<&Metric>,
        col: usize,
        m: Option<&Metric>,
    ) -> Result<Option<f64>, String> {
        let (Some(base), Some(m)) = (base, m) else {
            return Ok(None);
        };
        if base.measured().is_none() || m.measured().is_none() {
            return Ok(None);
        }
        if base.unit != m.unit {
            return Err(format!("units differ: {} and {}", base.unit, m.unit));
        }
        let b = self.value(0, base)?;
        let v = self.value(col, m)?;
        Ok((b > 0.0).then(|| v / b))
    }

    /// The sentence that says on the page what the ratios divide.
    pub fn describe(&self) -> String {
        match self.unit {
            Unit::Ticks => format!(
                "Timings are ratios of TSC ticks: every file has the same TSC rate ({} kHz, within {} %).",
                self.khz.first().copied().unwrap_or(0),
                SAME_RATE * 100.0
            ),
            Unit::Nanoseconds => {
                let rates: Vec<String> = self
                    .khz
                    .iter()
                    .map(|&k| {
                        if k == 0 {
                            "unknown".to_string()
                        } else {
                            format!("{k} kHz")
                        }
                    })
                    .collect();
                format!(
                    "Timings are ratios of nanoseconds: the files' TSC rates differ ({}), so each \
                     file's ticks are divided by its own rate first.",
                    rates.join(", ")
                )
            }
        }
    }
}
