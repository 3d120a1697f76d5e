//! Host-side VM-exit timing from the `kvm:kvm_exit` / `kvm:kvm_entry` tracepoints.
//!
//! The tracer works in a private tracefs *instance* (`instances/xvmm-<pid>`): the
//! instance has its own ring buffer, clock, event switches and filters, so the
//! host's global tracing state is never modified. Removing the instance is the
//! whole restore; it happens on [`ExitTracer::finish`], on drop (also on the
//! Ctrl-C path, which returns normally through the run loop). tracefs itself
//! comes from [`xvmm_host::host_state`]: mounted there when absent, and the
//! instance recorded in its journal before it is made, so that a killed xvmm's
//! instance is removed by the next start of xvmm or xperf.
//!
//! With the `x86-tsc` trace clock the timestamps are raw host TSC values, so an
//! exit's host-side cost is `kvm_entry.ts - kvm_exit.ts` in TSC ticks.
mod aggregate;
mod parse;
mod raw;
mod recording;
mod session;

pub use aggregate::{
    ExitAggregator, HostCalibration, TraceReader, TraceSummary, MAX_KEPT_EXITS, OTHER_REASONS,
};
pub use parse::{parse_line, AsyncPfEvent, TraceEvent, TraceLines, MAX_TRACE_LINE};
pub use raw::{
    drain_pipe, example_decoder, example_formats, open_cpu_pipes, CpuMerge, PageOutcome,
    RawDecoder, EXAMPLE_HEADER_PAGE,
};
pub use recording::{replay_pages, Recording, Replayed};
pub use session::ExitTracer;
