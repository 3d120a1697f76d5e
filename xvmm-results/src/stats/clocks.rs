//! One unit for the figures of two files: each side's TSC ticks as they
//! are when both files give one rate, else nanoseconds over each side's
//! own rate, so that no difference subtracts ticks of two clocks. Shared
//! by the crossings' comparison (`compare.rs`) and the workloads'
//! (`workload_compare.rs`).

use crate::num;
use serde::{Deserialize, Serialize};

/// The unit of every difference of a comparison.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum DiffUnit {
    /// TSC ticks: the files give one rate (within 0.1 %), or one gives none.
    #[default]
    Ticks,
    /// Nanoseconds: the rates differ; each side's ticks over its own rate.
    Ns,
}

impl DiffUnit {
    pub fn name(self) -> &'static str {
        match self {
            DiffUnit::Ticks => "ticks",
            DiffUnit::Ns => "ns",
        }
    }
}

/// What one tick of each side is in the comparison's unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Clocks {
    pub(crate) unit: DiffUnit,
    pub(crate) vm: f64,
    pub(crate) bare: f64,
}

impl Clocks {
    /// Ticks as measured when the two rates are within 0.1 % (one clock,
    /// measured twice) or a file does not know its rate; else ns.
    pub(crate) fn of(vm_khz: u64, bare_khz: u64) -> Clocks {
        let one_rate = (vm_khz.abs_diff(bare_khz) as f64) <= 0.001 * bare_khz as f64;
        if vm_khz == 0 || bare_khz == 0 || one_rate {
            return Clocks {
                unit: DiffUnit::Ticks,
                vm: 1.0,
                bare: 1.0,
            };
        }
        Clocks {
            unit: DiffUnit::Ns,
            vm: 1e6 / vm_khz as f64,
            bare: 1e6 / bare_khz as f64,
        }
    }

    /// VM minus bare metal; whole ticks, or ns rounded to whole ones.
    pub(crate) fn diff(self, vm: Option<u64>, bare: Option<u64>) -> Option<i64> {
        let (v, b) = (vm?, bare?);
        match self.unit {
            DiffUnit::Ticks => i64::try_from(v).ok()?.checked_sub(i64::try_from(b).ok()?),
            DiffUnit::Ns => Some(num::i64_saturating(
                (v as f64 * self.vm - b as f64 * self.bare).round(),
            )),
        }
    }

    /// VM over bare metal, of the unit.
    pub(crate) fn ratio(self, vm: Option<u64>, bare: Option<u64>) -> Option<f64> {
        let (v, b) = (vm?, bare?);
        (b > 0).then(|| v as f64 / b as f64 * (self.vm / self.bare))
    }
}
