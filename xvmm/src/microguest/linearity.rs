//! `xvmm linearity`: the stamps' self-check in the microguest, for the user
//! pair (CPL3) and the kernel pair (CPL0). Each pair's cost is decided as a
//! run decides it (null pair and short sweep, [`sweep::decide`]), then held
//! against a longer, independent sweep and the chain's own cost per imul
//! (timed at the same CPL, long chains of 2^14 and 2^15, before and after
//! the sweep), with the negative controls of
//! [`xvmm_results::linearity::check_with_controls`]. Under PVM, which
//! emulates every CPL0 instruction, the kernel pair is not checked: its
//! sweep would time the emulator.

use super::guest::{chain_param, KernelStamps, Kind};
use super::machine::{self, MachineConfig, Phase, PhaseEnd, Vms};
use super::platform::{cpl0_emulated, Platform};
use super::session::chain_phases;
use super::session::{fenced_kernel_stamps_refused, tsc_quantum};
use super::stamps::{aligned_intervals, two_stamp_samples};
use crate::vcpu::RunControl;
use crate::{Error, Result};
use std::time::Duration;
use xvmm_results::linearity::{
    check_with_controls, ChainCost, CHAIN_COST_LENGTH, INTERCEPT_PHASES, LONG_PHASE,
};
pub use xvmm_results::linearity::{Linearity, Pair, PairLinearity};
use xvmm_results::sweep::{self, StampSweep, SweepFit};
use xvmm_results::Stats;

/// How much the check measures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearityOptions {
    /// Rounds of the run's own decision (null pair and short sweep).
    pub rounds: u32,
    /// Samples of each decision phase.
    pub decision_samples: u64,
    /// Samples of each phase of the independent sweep.
    pub check_samples: u64,
    /// Pairs of chains timed for the chain's cost, before and after.
    pub chain_samples: u64,
    pub warmup: u64,
    /// For each VM phase.
    pub timeout: Duration,
}

impl Default for LinearityOptions {
    fn default() -> LinearityOptions {
        LinearityOptions {
            rounds: 3,
            decision_samples: 4000,
            check_samples: 8000,
            chain_samples: 201,
            warmup: 500,
            timeout: Duration::from_secs(120),
        }
    }
}

/// The pair's null kind and chain kind.
fn kinds(pair: Pair) -> (Kind, Kind) {
    match pair {
        Pair::User => (Kind::Null, Kind::Imul),
        Pair::Kernel => (Kind::KernelNull, Kind::KernelImul),
    }
}

/// Checks both pairs on this machine, the controls sized by the guest
/// TSC's quantum (measured first, as a run measures it).
pub fn check_linearity(opts: &LinearityOptions) -> Result<Linearity> {
    let platform = Platform::probe();
    let rc = RunControl::new(opts.timeout)?;
    let quantum = tsc_quantum(&Vms::fresh(), &rc, &MachineConfig::default())?
        .ok_or_else(|| Error::Guest("the guest TSC's quantum could not be measured".into()))?;
    let mut out = Linearity {
        platform: format!("{:?} {:?}", platform.vendor, platform.hypervisor),
        quantum,
        pairs: Vec::new(),
        not_checked: Vec::new(),
    };
    out.pairs.push(check_pair(
        &rc,
        &MachineConfig::default(),
        Pair::User,
        opts,
        quantum,
    )?);
    if cpl0_emulated(platform.hypervisor) == Some(true) {
        out.not_checked.push((
            Pair::Kernel,
            "CPL0 is emulated instruction by instruction here (PVM): a sweep at CPL0 \
             would time the emulator, not the stamps"
                .into(),
        ));
        return Ok(out);
    }
    let cfg = MachineConfig {
        kernel_stamps: kernel_stamps_that_run(&rc)?,
        ..MachineConfig::default()
    };
    out.pairs
        .push(check_pair(&rc, &cfg, Pair::Kernel, opts, quantum)?);
    Ok(out)
}

/// Fenced kernel stamps where this hypervisor runs them at CPL0, else
/// plain RDTSC (as a run decides, [`fenced_kernel_stamps_refused`]).
fn kernel_stamps_that_run(rc: &RunControl) -> Result<KernelStamps> {
    Ok(
        match fenced_kernel_stamps_refused(&Vms::fresh(), rc, &MachineConfig::default())? {
            None => KernelStamps::Fenced,
            Some(_) => KernelStamps::Plain,
        },
    )
}

fn check_pair(
    rc: &RunControl,
    cfg: &MachineConfig,
    pair: Pair,
    opts: &LinearityOptions,
    quantum: f64,
) -> Result<PairLinearity> {
    let decided = pair_decision(rc, cfg, pair, opts, Some(quantum))?;
    let (_, chain) = kinds(pair);
    let mut all = INTERCEPT_PHASES.to_vec();
    all.push(LONG_PHASE);
    let chain_before = chain_cost(rc, cfg, chain, opts)?;
    let phases = chain_phases(
        &Vms::fresh(),
        rc,
        cfg,
        chain,
        &all,
        opts.warmup,
        opts.check_samples,
    )?;
    let chain_after = chain_cost(rc, cfg, chain, opts)?;
    let check = check_with_controls(&phases, &decided, quantum, (chain_before, chain_after))
        .map_err(|e| Error::Guest(format!("{pair:?} pair's sweep: {e}")))?;
    let (open, close) = match pair {
        Pair::User => (xvmm_host::stamp_open!(), xvmm_host::stamp_close!()),
        Pair::Kernel => cfg.kernel_stamps.text(),
    };
    Ok(PairLinearity {
        pair,
        stamps: format!("{open} / {close}").replace('\n', "; "),
        decided,
        chain_before,
        chain_after,
        phases,
        check,
    })
}

/// The pair's cost as a run decides it: `opts.rounds` rounds of its null
/// pair and the run's sweep ([`sweep::run_phases`]), then [`sweep::decide`].
pub fn pair_decision(
    rc: &RunControl,
    cfg: &MachineConfig,
    pair: Pair,
    opts: &LinearityOptions,
    quantum: Option<f64>,
) -> Result<StampSweep> {
    let (null_kind, chain) = kinds(pair);
    let (mut null, mut phases) = (Vec::new(), Vec::new());
    for round in 0..opts.rounds.max(1) {
        let phase = Phase {
            kind: null_kind,
            warmup: opts.warmup,
            samples: opts.decision_samples,
            param: 0,
        };
        match machine::run_phase(rc, cfg, &phase)?.0 {
            PhaseEnd::Done { stamps, .. } => null.extend(two_stamp_samples(&stamps).intervals),
            other => return Err(Error::Guest(format!("the {pair:?} pair: {other:?}"))),
        }
        phases.extend(chain_phases(
            &Vms::fresh(),
            rc,
            cfg,
            chain,
            &sweep::run_phases(round),
            opts.warmup,
            opts.decision_samples,
        )?);
    }
    let fit = SweepFit::new(phases, quantum)
        .ok_or_else(|| Error::Guest(format!("the {pair:?} pair's sweep gave no usable phase")))?;
    Ok(sweep::decide(
        Stats::from_samples(&null).median,
        fit,
        quantum,
    ))
}

/// One imul's cost at the chain kind's CPL: chains of [`CHAIN_COST_LENGTH`]
/// and twice that, interleaved in one VM phase.
fn chain_cost(
    rc: &RunControl,
    cfg: &MachineConfig,
    chain: Kind,
    opts: &LinearityOptions,
) -> Result<ChainCost> {
    let phase = Phase {
        kind: chain,
        warmup: 10,
        samples: 2 * opts.chain_samples.max(1),
        param: chain_param(CHAIN_COST_LENGTH, 2),
    };
    match machine::run_phase(rc, cfg, &phase)?.0 {
        PhaseEnd::Done { stamps, .. } => {
            Ok(ChainCost::from_interleaved(&aligned_intervals(&stamps)))
        }
        other => Err(Error::Guest(format!("the chain's cost: {other:?}"))),
    }
}
