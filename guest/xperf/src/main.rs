//! xperf's entry point; everything lives in the library.

fn main() {
    // `panic = "abort"`: no destructor runs, so the hook undoes what this
    // process changed on the host (probes, instance, sysctl) first.
    xvmm_host::host_state::undo::install_panic_hook(|line| eprintln!("{line}"));
    // PID 1 alone is not a VM's init (a container's PID 1 is a normal
    // program): only the VMM's word on the kernel command line makes one.
    let vm_init = xperf::init::is_vm_init();
    let argv: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let code = match xperf::app::run(argv, vm_init) {
        Ok(()) => 0,
        Err(err) => {
            xperf::sayln!("xperf: {err}");
            err.exit_code()
        }
    };
    if vm_init {
        xperf::init::finish(code);
    }
    std::process::exit(code);
}

// Runs before the standard library's start-up, which would hide a closed
// stdout behind /dev/null (`xvmm_host::stdio`).
xvmm_host::record_stdio_at_start!();
