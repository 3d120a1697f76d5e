//! `/init` for L2 boot tests: print [`xvmm_init::MARKER`], then act on
//! `xvmm.init=` (see [`xvmm_init::action::Action`]). With `xvmm.dmesg` on the
//! command line it first prints the kernel log, each line prefixed
//! `XVMM-DMESG: `.

use xvmm_guest::{channel, sys};
use xvmm_init::action::Action;
use xvmm_results::channel::PORT_EXIT;

fn main() {
    for (fs, dir) in [("devtmpfs", "/dev"), ("proc", "/proc"), ("sysfs", "/sys")] {
        if let Err(e) = sys::mount(fs, dir) {
            sys::console_line(&format!("XVMM-INIT: warning: {e}"));
        }
    }
    // The marker carries the guest's uptime, so that benchmarks can split
    // time-to-marker into the kernel's own boot and what came before it
    // (one line: the run may be stopped as soon as the marker shows up).
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let uptime = uptime.split_whitespace().next().unwrap_or("?");
    sys::console_line(&format!(
        "{} {}{uptime}",
        xvmm_init::MARKER,
        xvmm_init::UPTIME_KEY
    ));
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let action = match Action::from_cmdline(&cmdline) {
        Ok(a) => a,
        Err(e) => {
            sys::console_line(&format!("XVMM-INIT: {e}; hanging"));
            sys::park();
        }
    };
    if cmdline.split_whitespace().any(|w| w == "xvmm.dmesg") {
        match sys::kernel_log() {
            Ok(log) => log
                .lines()
                .for_each(|l| sys::console_line(&format!("XVMM-DMESG: {l}"))),
            Err(e) => sys::console_line(&format!("XVMM-INIT: warning: {e}")),
        }
    }
    sys::console_line(&format!("XVMM-INIT: action {action:?}"));
    let failure = match action {
        Action::Exit(code) => match channel::exit_vm(code) {
            // A VMM that honours the port never lets us get here.
            Ok(()) => format!("exit port {PORT_EXIT:#x} ignored by the VMM"),
            Err(e) => e.to_string(),
        },
        Action::Reboot => sys::reboot(libc::RB_AUTOBOOT).to_string(),
        Action::Poweroff => sys::reboot(libc::RB_POWER_OFF).to_string(),
        Action::Hang => sys::park(),
    };
    sys::console_line(&format!("XVMM-INIT: {failure}; hanging"));
    sys::park();
}
