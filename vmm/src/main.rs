//! The xvmm binary: everything lives in the library's application layer.

fn main() {
    std::process::exit(xvmm::app::main());
}
