//! What only the host knows, added to a guest's report: the host's KVM module
//! (the guest sees none), a note with the host's own characterisation, and
//! the traced exits. The guest's own view stays in `host` and `machine`.

use crate::host_trace::TraceSummary;
use xvmm_results::render::or_unknown;
use xvmm_results::{Machine, Report};

/// Adds the host's view to `report`; nothing the guest said is replaced.
pub fn add_host_view(report: &mut Report, host: &Machine, trace: Option<&TraceSummary>) {
    if report.host.kvm_module.is_empty() {
        report.host.kvm_module = host.kvm_module.clone();
    }
    report.notes.push(host_note(host));
    if let Some(t) = trace {
        report.host_exits = t.exits.clone();
        report.notes.push(format!(
            "host exits traced with kvm:kvm_exit/kvm_entry on the vCPU threads: {} unpaired events, {} lost to buffer overruns; read from {}",
            t.unpaired,
            t.lost,
            t.reader.describe()
        ));
    }
}

/// One line describing the VMM's host.
fn host_note(m: &Machine) -> String {
    format!(
        "VMM host: {} ({}), {} logical CPUs, TSC {} kHz ({}), kernel {}, KVM module {}, halt_poll_ns {}, clocksource {}",
        or_unknown(&m.cpu_model),
        or_unknown(&m.cpu_signature),
        m.logical_cpus,
        m.tsc_khz,
        or_unknown(&m.tsc_khz_source),
        or_unknown(&m.kernel_release),
        or_unknown(&m.kvm_module),
        m.kvm_params
            .get("halt_poll_ns")
            .map_or("unknown", String::as_str),
        or_unknown(&m.clocksource),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use xvmm_results::{Environment, HostExit, Method, Stats};

    #[test]
    fn host_view_and_traced_exits_are_added_not_replaced() {
        let mut report = Report::new(
            "xperf test".into(),
            Environment::LinuxVm,
            Default::default(),
            Method::standard(0, 3),
        );
        report.host.kvm_module = "guest says".into();
        let host = Machine {
            cpu_model: "Host CPU".into(),
            kvm_module: "kvm_amd".into(),
            ..Default::default()
        };
        let trace = TraceSummary {
            exits: vec![HostExit {
                reason: "io".into(),
                exit_to_entry: Stats::from_samples(&[10, 20, 30]),
            }],
            unpaired: 2,
            lost: 0,
            ..Default::default()
        };
        add_host_view(&mut report, &host, Some(&trace));
        assert_eq!(report.host.kvm_module, "guest says");
        assert!(
            report.notes[0].starts_with("VMM host: Host CPU (unknown)"),
            "{:?}",
            report.notes
        );
        assert!(report.notes[1].contains("2 unpaired events, 0 lost"));
        assert_eq!(report.host_exits, trace.exits);
        let mut empty = report.clone();
        empty.host.kvm_module.clear();
        add_host_view(&mut empty, &host, None);
        assert_eq!(empty.host.kvm_module, "kvm_amd");
    }
}
