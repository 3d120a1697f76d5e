use clap::Parser;

fn main() {
    let cli = xvmm::cli::Cli::parse();
    if let Err(err) = xvmm::run(cli) {
        eprintln!("xvmm: {err}");
        std::process::exit(err.exit_code());
    }
}
