//! The xvmm binary: everything lives in the library's application layer.

fn main() {
    std::process::exit(xvmm::app::main());
}

/// Runs before the standard library's start-up, which would hide a closed
/// stdout behind /dev/null (`xvmm_results::stdio`).
#[used]
#[link_section = ".init_array"]
static RECORD_STDIO: extern "C" fn() = {
    extern "C" fn record() {
        xvmm_results::stdio::record_at_start();
    }
    record
};
