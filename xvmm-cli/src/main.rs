//! The xvmm binary: everything lives in the application layer (`xvmm_cli`).

fn main() {
    std::process::exit(xvmm_cli::main());
}

// Runs before the standard library's start-up, which would hide a closed
// stdout behind /dev/null (`xvmm_host::stdio`).
xvmm_host::record_stdio_at_start!();
